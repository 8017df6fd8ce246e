// skeinctl's link to a gateway's Admin service: the channel, the admin token sent with every call
// (`x-skein-admin-token`), a deadline on every call, and what a failed call means for the exit
// code: usage errors, connection errors and refused requests each have their own.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "skein/v1/admin.grpc.pb.h"
#include "wire/tls.hpp"

namespace skein::ctl {

// skeinctl's exit codes (docs/skeinctl.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 2,       // bad command line, bad argument, unusable token file
  kExitConnection = 3,  // the gateway could not be reached, or did not answer in time
  kExitRefused = 4,     // the gateway answered and refused (bad token, bad input, not found...)
};

// A mistake on the command line found before anything is sent; exits with kExitUsage.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Checks that `address` is HOST:PORT; throws UsageError.
void check_gateway_address(const std::string& address);

// The token in `path` (surrounding whitespace dropped); throws UsageError naming the file and the
// problem when it is missing, unreadable, empty or readable by group or others.
std::string read_admin_token(const std::string& path);

class AdminSession {
 public:
  static constexpr std::chrono::seconds kDeadline{5};
  // For calls that change something on the storage servers (a job namespace's directories, a
  // backend's first connection, a copy's start): slow servers make them slower than a listing.
  static constexpr std::chrono::seconds kChangeDeadline{30};

  // Throws UsageError when the TLS files are not usable.
  AdminSession(const std::string& address, std::string token, const wire::ClientTls& tls);
  const std::string& address() const { return address_; }

  // Calls one Admin RPC with the token and the deadline.
  template <typename Request, typename Reply>
  grpc::Status call(grpc::Status (v1::Admin::Stub::*rpc)(grpc::ClientContext*, const Request&,
                                                         Reply*),
                    const Request& request, Reply* reply,
                    std::chrono::milliseconds deadline = kDeadline) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-skein-admin-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    return (stub_.get()->*rpc)(&ctx, request, reply);
  }

 private:
  std::string address_;
  std::string token_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

// kExitConnection for UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED (a gateway that stops ends
// the calls under way), kExitRefused for every other failure.
int exit_code_of(const grpc::Status& status);
// "NOT_FOUND", "UNAUTHENTICATED", ...
const char* status_code_name(grpc::StatusCode code);

}  // namespace skein::ctl
