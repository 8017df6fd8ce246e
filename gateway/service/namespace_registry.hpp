// The namespaces a gateway serves, by name, and the check every RPC makes: that the namespace
// exists and that the caller's token (the `x-skein-token` metadata entry) grants it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "auth/client_roles.hpp"
#include "auth/refusal_log.hpp"
#include "auth/token_digest.hpp"
#include "namespace/namespace_fs.hpp"

namespace skein {

class NamespaceRegistry {
 public:
  // With mutual TLS, callers must also hold a node (or admin) certificate. Set before serving.
  void set_client_roles(ClientRoles roles) { roles_ = std::move(roles); }
  const ClientRoles& client_roles() const { return roles_; }

  void add(std::shared_ptr<NamespaceFs> ns);
  // Takes a namespace out of service: calls naming it are refused from now on (as for any unknown
  // name); calls already past the check finish.
  void remove(const std::string& name);
  // The namespace `name` if it exists, the context's token is its credential and the caller's
  // certificate (with mutual TLS) is a node's; otherwise sets `status` to UNAUTHENTICATED and
  // returns null. An unknown namespace, a missing and a wrong token get the very same status, in
  // the same time, so that a caller cannot learn which namespaces exist.
  std::shared_ptr<NamespaceFs> authorize(const grpc::ServerContextBase* ctx,
                                         const std::string& name, grpc::Status& status) const;
  // The status every refused call gets.
  static grpc::Status denied();
  // The namespace `name`, or null; for the gateway's own use, no token involved.
  std::shared_ptr<NamespaceFs> find(const std::string& name) const;
  std::vector<std::shared_ptr<NamespaceFs>> all() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<NamespaceFs>> namespaces_;
  ClientRoles roles_;
  const TokenDigest nobody_ = TokenDigest::unmatchable();
  RefusalLog refusals_{"a call (unknown namespace, or a missing or wrong credential)"};
};

}  // namespace skein
