// TLS set-up of gRPC connections; see tls.hpp.
#include "wire/tls.hpp"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <cstdlib>

#include "skein/credential_file.hpp"

namespace skein::wire {
namespace {

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  if (!e) return "not PEM";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

File open_file(const std::string& path, std::string& error) {
  File f(std::fopen(path.c_str(), "r"));
  if (!f) error = path + ": cannot read it";
  return f;
}

// The first certificate in `path`, or null with `error`.
X509* read_certificate(const std::string& path, const std::string& what, std::string& error) {
  auto f = open_file(path, error);
  if (!f) {
    error = what + " " + error;
    return nullptr;
  }
  X509* cert = PEM_read_X509(f.get(), nullptr, nullptr, nullptr);
  if (!cert) error = what + " " + path + " holds no PEM certificate (" + openssl_error() + ")";
  return cert;
}

std::optional<std::string> expiry_problem(X509* cert, const std::string& what,
                                          const std::string& path) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0)
    return what + " " + path + " has expired";
  if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0)
    return what + " " + path + " is not valid yet";
  return std::nullopt;
}

}  // namespace

std::optional<std::string> identity_files_problem(const std::string& cert_file,
                                                  const std::string& key_file) {
  if (auto p = private_file_problem(key_file, "TLS key file")) return p;
  std::string error;
  X509* cert = read_certificate(cert_file, "TLS certificate file", error);
  if (!cert) return error;
  std::unique_ptr<X509, decltype(&X509_free)> cert_owner(cert, X509_free);
  if (auto p = expiry_problem(cert, "TLS certificate", cert_file)) return p;
  auto f = open_file(key_file, error);
  if (!f) return "TLS key file " + error;
  EVP_PKEY* key = PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr);
  if (!key)
    return "TLS key file " + key_file + " holds no unencrypted PEM private key (" +
           openssl_error() + ")";
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key_owner(key, EVP_PKEY_free);
  if (X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    return "TLS key file " + key_file + " is not the key of the certificate " + cert_file;
  }
  return std::nullopt;
}

std::optional<std::string> ca_file_problem(const std::string& ca_file) {
  std::string error;
  X509* cert = read_certificate(ca_file, "CA file", error);
  if (!cert) return error;
  std::unique_ptr<X509, decltype(&X509_free)> owner(cert, X509_free);
  return expiry_problem(cert, "CA certificate", ca_file);
}

std::optional<std::string> client_tls_problem(const ClientTls& tls) {
  if (tls.insecure) return std::nullopt;
  if (tls.ca_file.empty())
    return "no CA file to check the gateway's certificate with: give one (--ca-file, "
           "SKEIN_CA_FILE), or choose plaintext explicitly (--insecure) for a gateway with "
           "insecure = true";
  if (auto p = ca_file_problem(tls.ca_file)) return p;
  if (tls.cert_file.empty() != tls.key_file.empty())
    return "a client certificate needs its key and a key its certificate (--cert-file with "
           "--key-file)";
  if (!tls.cert_file.empty()) return identity_files_problem(tls.cert_file, tls.key_file);
  return std::nullopt;
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ClientTls& tls,
                                                              std::string& error) {
  if (auto p = client_tls_problem(tls)) {
    error = *p;
    return nullptr;
  }
  if (tls.insecure) return grpc::InsecureChannelCredentials();
  using grpc::experimental::FileWatcherCertificateProvider;
  std::shared_ptr<FileWatcherCertificateProvider> provider;
  if (tls.cert_file.empty()) {
    provider = std::make_shared<FileWatcherCertificateProvider>(tls.ca_file, tls.reload_s);
  } else {
    provider = std::make_shared<FileWatcherCertificateProvider>(tls.key_file, tls.cert_file,
                                                                tls.ca_file, tls.reload_s);
  }
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(provider);
  options.watch_root_certs();
  if (!tls.cert_file.empty()) options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(true);
  auto creds = grpc::experimental::TlsCredentials(options);
  if (!creds) error = "cannot set up TLS with " + tls.ca_file;
  return creds;
}

void add_channel_arguments(const ClientTls& tls, grpc::ChannelArguments& args) {
  if (!tls.insecure && !tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
}

std::shared_ptr<grpc::Channel> secure_channel(const std::string& target, const ClientTls& tls,
                                              std::string& error) {
  auto creds = channel_credentials(tls, error);
  if (!creds) return nullptr;
  grpc::ChannelArguments args;
  add_channel_arguments(tls, args);
  return grpc::CreateCustomChannel(target, creds, args);
}

ClientTls client_tls_from_env() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
  };
  ClientTls tls;
  tls.ca_file = env("SKEIN_CA_FILE");
  tls.cert_file = env("SKEIN_CLIENT_CERT");
  tls.key_file = env("SKEIN_CLIENT_KEY");
  tls.server_name = env("SKEIN_TLS_SERVER_NAME");
  tls.insecure = env("SKEIN_INSECURE") == "1" || env("SKEIN_INSECURE") == "true";
  return tls;
}

}  // namespace skein::wire
