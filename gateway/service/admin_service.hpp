// gRPC adapter for the Admin service (proto/skein/v1/admin.proto), which skeinctl drives: each
// RPC checks the admin token (`x-skein-admin-token` metadata), calls Gateway and turns the result
// or its AdminError into one reply or one gRPC status with a clear message.
#pragma once

#include <string>

#include "gateway.hpp"
#include "skein/v1/admin.grpc.pb.h"

namespace skein {

class AdminService final : public v1::Admin::Service {
 public:
  // `token` empty: admin is disabled (no admin_token_file) and every call is refused.
  AdminService(Gateway& gateway, std::string token) : gateway_(gateway), token_(std::move(token)) {}

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

 private:
  // OK when the call carries the admin token; UNAUTHENTICATED otherwise.
  grpc::Status authorize(grpc::ServerContext* ctx) const;

  Gateway& gateway_;
  const std::string token_;
};

}  // namespace skein
