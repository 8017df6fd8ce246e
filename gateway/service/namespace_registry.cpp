// Namespace lookup and token check for RPCs; see namespace_registry.hpp.
#include "service/namespace_registry.hpp"

namespace skein {

void NamespaceRegistry::add(std::shared_ptr<NamespaceFs> ns) {
  std::lock_guard lock(mu_);
  namespaces_[ns->name()] = std::move(ns);
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

std::shared_ptr<NamespaceFs> NamespaceRegistry::authorize(const grpc::ServerContextBase* ctx,
                                                          const std::string& name,
                                                          grpc::Status& status) const {
  std::shared_ptr<NamespaceFs> ns;
  {
    std::lock_guard lock(mu_);
    auto it = namespaces_.find(name);
    if (it != namespaces_.end()) ns = it->second;
  }
  if (!ns) {
    status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no namespace '" + name + "'");
    return nullptr;
  }
  std::string token;
  auto& md = ctx->client_metadata();
  auto it = md.find("x-skein-token");
  if (it != md.end()) token.assign(it->second.data(), it->second.size());
  if (!ns->token_ok(token)) {
    status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "missing or wrong token for namespace '" + name + "'");
    return nullptr;
  }
  return ns;
}

}  // namespace skein
