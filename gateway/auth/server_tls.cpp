// Server TLS credentials; see server_tls.hpp.
#include "auth/server_tls.hpp"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <sys/stat.h>

#include "wire/tls.hpp"

namespace skein {

std::shared_ptr<grpc::ServerCredentials> server_credentials(const GatewayConfig& cfg,
                                                            std::string& error) {
  if (!cfg.tls) return grpc::InsecureServerCredentials();
  const TlsConfig& t = *cfg.tls;
  if (auto p = wire::identity_files_problem(t.cert_file, t.key_file)) {
    error = *p;
    return nullptr;
  }
  using grpc::experimental::FileWatcherCertificateProvider;
  std::shared_ptr<FileWatcherCertificateProvider> provider;
  const bool mutual = !t.client_ca_file.empty();
  if (mutual) {
    if (auto p = wire::ca_file_problem(t.client_ca_file)) {
      error = "client_ca_file: " + *p;
      return nullptr;
    }
    provider = std::make_shared<FileWatcherCertificateProvider>(
        t.key_file, t.cert_file, t.client_ca_file, static_cast<unsigned>(t.reload_interval_s));
  } else {
    provider = std::make_shared<FileWatcherCertificateProvider>(
        t.key_file, t.cert_file, static_cast<unsigned>(t.reload_interval_s));
  }
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (mutual) {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    if (!t.crl_dir.empty()) {
      struct stat st {};
      if (::stat(t.crl_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        error = "crl_dir " + t.crl_dir + " is not a directory";
        return nullptr;
      }
      options.set_crl_directory(t.crl_dir);
    }
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

ClientRoles client_roles(const GatewayConfig& cfg) {
  if (!cfg.tls || cfg.tls->client_ca_file.empty()) return {};
  return ClientRoles(cfg.tls->node_clients, cfg.tls->admin_clients);
}

}  // namespace skein
