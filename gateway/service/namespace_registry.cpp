// Namespace lookup and token check for RPCs; see namespace_registry.hpp.
#include "service/namespace_registry.hpp"

namespace skein {

void NamespaceRegistry::add(std::shared_ptr<NamespaceFs> ns) {
  std::lock_guard lock(mu_);
  namespaces_[ns->name()] = std::move(ns);
}

std::shared_ptr<NamespaceFs> NamespaceRegistry::authorize(grpc::ServerContext* ctx,
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
