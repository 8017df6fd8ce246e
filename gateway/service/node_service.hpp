// gRPC adapter for the Node service (proto/skein/v1/node.proto): what a compute node asks with its
// node certificate alone. Needs mutual TLS: without client certificates there is nothing to tell a
// node from a user, and every call is refused.
#pragma once

#include "auth/client_roles.hpp"
#include "auth/refusal_log.hpp"
#include "jobs/job_namespaces.hpp"
#include "skein/v1/node.grpc.pb.h"

namespace skein {

class NodeService final : public v1::Node::Service {
 public:
  // `jobs` null: no job namespaces on this gateway.
  NodeService(JobNamespaces* jobs, ClientRoles roles) : jobs_(jobs), roles_(std::move(roles)) {}

  grpc::Status JobMountCredential(grpc::ServerContext*, const v1::JobMountCredentialRequest*,
                                  v1::JobMountCredentialReply*) override;

 private:
  JobNamespaces* jobs_;
  const ClientRoles roles_;
  RefusalLog refusals_{"a Node call (no node certificate)"};
};

}  // namespace skein
