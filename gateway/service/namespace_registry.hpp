// The namespaces a gateway serves, by name, and the check every RPC makes: that the namespace
// exists and that the caller's token (the `x-skein-token` metadata entry) grants it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "namespace/namespace_fs.hpp"

namespace skein {

class NamespaceRegistry {
 public:
  void add(std::shared_ptr<NamespaceFs> ns);
  // The namespace `name` if it exists and the context's token grants it; otherwise sets `status`
  // (NOT_FOUND or UNAUTHENTICATED) and returns null.
  std::shared_ptr<NamespaceFs> authorize(const grpc::ServerContextBase* ctx,
                                         const std::string& name, grpc::Status& status) const;
  // The namespace `name`, or null; for the gateway's own use, no token involved.
  std::shared_ptr<NamespaceFs> find(const std::string& name) const;
  std::vector<std::shared_ptr<NamespaceFs>> all() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<NamespaceFs>> namespaces_;
};

}  // namespace skein
