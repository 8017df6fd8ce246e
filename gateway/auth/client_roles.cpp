// Roles of client certificates; see client_roles.hpp.
#include "auth/client_roles.hpp"

#include <fnmatch.h>
#include <grpc/grpc_security_constants.h>

namespace skein {

std::optional<CertificatePattern> CertificatePattern::parse(const std::string& text) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq + 1 == text.size()) return std::nullopt;
  std::string field = text.substr(0, eq);
  if (field == "CN") return CertificatePattern{Field::common_name, text.substr(eq + 1)};
  if (field == "SAN") return CertificatePattern{Field::subject_alt_name, text.substr(eq + 1)};
  return std::nullopt;
}

std::string CertificatePattern::text() const {
  return (field == Field::common_name ? "CN=" : "SAN=") + glob;
}

bool ClientRoles::any_match(const grpc::AuthContext& auth,
                            const std::vector<CertificatePattern>& ps) const {
  for (const auto& p : ps) {
    const char* property = p.field == CertificatePattern::Field::common_name
                               ? GRPC_X509_CN_PROPERTY_NAME
                               : GRPC_X509_SAN_PROPERTY_NAME;
    for (const auto& value : auth.FindPropertyValues(property)) {
      std::string v(value.data(), value.size());
      if (fnmatch(p.glob.c_str(), v.c_str(), 0) == 0) return true;
    }
  }
  return false;
}

bool ClientRoles::allows(const grpc::ServerContextBase& ctx, ClientRole role) const {
  if (!mutual_tls_) return true;
  auto auth = ctx.auth_context();
  // Only a certificate the TLS handshake verified counts.
  if (!auth || !auth->IsPeerAuthenticated()) return false;
  if (any_match(*auth, admin_)) return true;
  return role == ClientRole::node && any_match(*auth, node_);
}

std::string ClientRoles::common_name(const grpc::ServerContextBase& ctx) {
  auto auth = ctx.auth_context();
  if (!auth) return {};
  auto cn = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  return cn.empty() ? std::string() : std::string(cn[0].data(), cn[0].size());
}

}  // namespace skein
