// The gateway's side of gRPC's TLS: its certificate and key, and with mutual TLS the CA that
// client certificates must be signed by (and a CRL directory of revoked ones), from [gateway.tls].
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "auth/client_roles.hpp"
#include "config/gateway_config.hpp"

namespace skein {

// Credentials for the listening port: TLS from `cfg.tls`, or plaintext when the config says
// `insecure = true`. Null with `error` when the files are not usable.
std::shared_ptr<grpc::ServerCredentials> server_credentials(const GatewayConfig& cfg,
                                                            std::string& error);

// The roles client certificates map to: none without mutual TLS.
ClientRoles client_roles(const GatewayConfig& cfg);

}  // namespace skein
