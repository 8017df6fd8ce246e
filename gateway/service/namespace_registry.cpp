// Namespace lookup and token check for RPCs; see namespace_registry.hpp.
#include "service/namespace_registry.hpp"

namespace skein {

void NamespaceRegistry::add(std::shared_ptr<NamespaceFs> ns) {
  std::lock_guard lock(mu_);
  namespaces_[ns->name()] = std::move(ns);
}

void NamespaceRegistry::remove(const std::string& name) {
  std::lock_guard lock(mu_);
  namespaces_.erase(name);
}

std::shared_ptr<NamespaceFs> NamespaceRegistry::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = namespaces_.find(name);
  return it == namespaces_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<NamespaceFs>> NamespaceRegistry::all() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<NamespaceFs>> out;
  for (auto& [_, ns] : namespaces_) out.push_back(ns);
  return out;
}

grpc::Status NamespaceRegistry::denied() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "access denied: unknown namespace, or a missing or wrong credential");
}

std::shared_ptr<NamespaceFs> NamespaceRegistry::authorize(const grpc::ServerContextBase* ctx,
                                                          const std::string& name,
                                                          grpc::Status& status) const {
  std::shared_ptr<NamespaceFs> ns;
  {
    std::lock_guard lock(mu_);
    auto it = namespaces_.find(name);
    if (it != namespaces_.end()) ns = it->second;
  }
  std::string_view token;
  auto& md = ctx->client_metadata();
  auto it = md.find("x-skein-token");
  if (it != md.end()) token = std::string_view(it->second.data(), it->second.size());
  // Compare even for an unknown namespace, so that it answers in the same time.
  bool granted = ns ? ns->credential_ok(token) : nobody_.matches(token);
  granted = granted && ns && roles_.allows(*ctx, ClientRole::node);
  if (!granted) {
    refusals_.note(ctx->peer(), ClientRoles::common_name(*ctx));
    status = denied();
    return nullptr;
  }
  return ns;
}

}  // namespace skein
