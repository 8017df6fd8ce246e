// gRPC adapter for the Admin service (proto/skein/v1/admin.proto), which skeinctl drives: each
// RPC checks the admin token (`x-skein-admin-token` metadata), calls Gateway and turns the result
// or its AdminError into one reply or one gRPC status with a clear message.
#pragma once

#include <string>
#include <vector>

#include "auth/client_roles.hpp"
#include "auth/refusal_log.hpp"
#include "auth/token_digest.hpp"
#include "gateway.hpp"
#include "jobs/job_namespaces.hpp"
#include "jobs/stage_engine.hpp"
#include "skein/v1/admin.grpc.pb.h"

namespace skein {

class AdminService final : public v1::Admin::Service {
 public:
  // `tokens` are the admin token file's (read_token_file; two while one is rotated); none,
  // admin is disabled (no admin_token_file) and every call is refused. With mutual TLS
  // (`roles`), a call also needs a certificate listed in admin_clients.
  AdminService(Gateway& gateway, const std::vector<std::string>& tokens, ClientRoles roles = {})
      : gateway_(gateway),
        enabled_(!tokens.empty()),
        tokens_(TokenSet::of_all(tokens)),
        roles_(std::move(roles)) {}

  grpc::Status ListBackends(grpc::ServerContext*, const v1::ListBackendsRequest*,
                            v1::ListBackendsReply*) override;
  grpc::Status AddBackend(grpc::ServerContext*, const v1::AddBackendRequest*,
                          v1::AddBackendReply*) override;
  grpc::Status RemoveBackend(grpc::ServerContext*, const v1::RemoveBackendRequest*,
                             v1::RemoveBackendReply*) override;
  grpc::Status DrainBackend(grpc::ServerContext*, const v1::DrainBackendRequest*,
                            v1::DrainBackendReply*) override;
  grpc::Status ListNamespaces(grpc::ServerContext*, const v1::ListNamespacesRequest*,
                              v1::ListNamespacesReply*) override;
  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest*, v1::HealthReply*) override;
  grpc::Status CreateJobNamespace(grpc::ServerContext*, const v1::CreateJobNamespaceRequest*,
                                  v1::CreateJobNamespaceReply*) override;
  grpc::Status DestroyJobNamespace(grpc::ServerContext*, const v1::DestroyJobNamespaceRequest*,
                                   v1::DestroyJobNamespaceReply*) override;
  grpc::Status NamespaceUsage(grpc::ServerContext*, const v1::NamespaceUsageRequest*,
                              v1::NamespaceUsageReply*) override;
  grpc::Status RenewJobNamespace(grpc::ServerContext*, const v1::RenewJobNamespaceRequest*,
                                 v1::NamespaceUsageReply*) override;
  grpc::Status StartStage(grpc::ServerContext*, const v1::StageRequest*,
                          v1::StageOperation*) override;
  grpc::Status StageStatus(grpc::ServerContext*, const v1::StageOperationRequest*,
                           v1::StageOperation*) override;
  grpc::Status CancelStage(grpc::ServerContext*, const v1::StageOperationRequest*,
                           v1::StageOperation*) override;
  grpc::Status ListStages(grpc::ServerContext*, const v1::ListStagesRequest*,
                          v1::ListStagesReply*) override;

  // Job namespaces and their staging (null: the gateway has no [jobs]). Set before serving.
  void set_jobs(JobNamespaces* jobs, StageEngine* stages) {
    jobs_ = jobs;
    stages_ = stages;
  }

 private:
  // OK when the call carries the admin token (and, with mutual TLS, an admin certificate);
  // UNAUTHENTICATED or PERMISSION_DENIED otherwise.
  grpc::Status authorize(grpc::ServerContext* ctx) const;

  // OK when job namespaces are configured; FAILED_PRECONDITION otherwise.
  grpc::Status jobs_configured() const;
  void fill_job(const JobRecord& r, v1::JobNamespaceInfo* out) const;
  // A StageRequest to a StageSpec; INVALID_ARGUMENT for a missing direction.
  static grpc::Status stage_spec(const v1::StageRequest& req, StageSpec& out);
  static void fill_stage(const StageReport& r, v1::StageOperation* out);

  Gateway& gateway_;
  JobNamespaces* jobs_ = nullptr;
  StageEngine* stages_ = nullptr;
  const bool enabled_;
  const TokenSet tokens_;
  const ClientRoles roles_;
  RefusalLog refusals_{"an Admin call"};
};

}  // namespace skein
