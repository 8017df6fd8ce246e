// Admin channel, token file and exit codes; see admin_session.hpp.
#include "admin_session.hpp"

#include "skein/address.hpp"
#include "skein/credential_file.hpp"

namespace skein::ctl {

void check_gateway_address(const std::string& address) {
  const auto port = port_of_address(address);
  if (!port || *port == 0)  // a gateway listens on a port of its own
    throw UsageError("gateway address '" + address + "' must be HOST:PORT, e.g. 127.0.0.1:7070");
}

std::string read_admin_token(const std::string& path) {
  try {
    return read_client_token(path, "the admin token file");
  } catch (const CredentialError& e) {
    throw UsageError(e.what());
  }
}

namespace {
std::unique_ptr<v1::Admin::Stub> admin_stub(const std::string& address,
                                            const wire::ClientTls& tls) {
  std::string error;
  auto channel = wire::secure_channel(address, tls, error);
  if (!channel) throw UsageError(error);
  return v1::Admin::NewStub(channel);
}
}  // namespace

AdminSession::AdminSession(const std::string& address, std::string token,
                           const wire::ClientTls& tls)
    : address_(address), token_(std::move(token)), stub_(admin_stub(address, tls)) {}

int exit_code_of(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED:  // the gateway ended the call: it is stopping
      return kExitConnection;
    default:
      return kExitRefused;
  }
}

const char* status_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // namespace skein::ctl
