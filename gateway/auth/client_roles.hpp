// With mutual TLS, what a client certificate may do: the config maps certificates to roles by
// their subject's common name or a subject alternative name, with shell wildcards:
//   node_clients  = ["CN=node-*", "SAN=*.compute.example.org"]   # may mount (with a token)
//   admin_clients = ["CN=skein-admin"]                              # may call the Admin service
// Without mutual TLS there are no certificates and tokens alone decide.
#pragma once

#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <vector>

namespace skein {

enum class ClientRole { node, admin };

// One pattern: "CN=GLOB" or "SAN=GLOB".
struct CertificatePattern {
  enum class Field { common_name, subject_alt_name } field;
  std::string glob;
  // Parses "CN=..." or "SAN=..."; nullopt for anything else.
  static std::optional<CertificatePattern> parse(const std::string& text);
  std::string text() const;
};

class ClientRoles {
 public:
  // No mutual TLS: every caller passes (tokens decide).
  ClientRoles() = default;
  ClientRoles(std::vector<CertificatePattern> node, std::vector<CertificatePattern> admin)
      : mutual_tls_(true), node_(std::move(node)), admin_(std::move(admin)) {}

  bool mutual_tls() const { return mutual_tls_; }
  // True when the caller's certificate holds `role` (an admin certificate holds node too), or
  // when there is no mutual TLS.
  bool allows(const grpc::ServerContextBase& ctx, ClientRole role) const;
  // The certificate's common name, for logs ("" without one).
  static std::string common_name(const grpc::ServerContextBase& ctx);

 private:
  bool any_match(const grpc::AuthContext& auth, const std::vector<CertificatePattern>& ps) const;
  bool mutual_tls_ = false;
  std::vector<CertificatePattern> node_, admin_;
};

}  // namespace skein
