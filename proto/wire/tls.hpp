// TLS of the gRPC connections between the gateway and its clients (mounts, skeinctl, tests), set
// up alike on both sides: certificates and keys from PEM files, read again every `reload` seconds
// so that they can be rotated without a restart, and checked first with clear messages (a bad
// file would otherwise only show as failed handshakes).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>

namespace skein::wire {

// A client's TLS settings: the CA that signed the gateway's certificate, optionally the client's
// own certificate and key (mutual TLS), and the name to expect in the gateway's certificate when
// it is not the host the client dials. `insecure` is plaintext and needs no files.
struct ClientTls {
  bool insecure = false;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  unsigned reload_s = 60;
};

// Why the PEM files cannot serve as a certificate and its private key (unreadable, not PEM, key
// not matching, expired; the key file readable by group or others); nullopt when they can.
std::optional<std::string> identity_files_problem(const std::string& cert_file,
                                                  const std::string& key_file);
// Why `ca_file` holds no usable CA certificate; nullopt when it does.
std::optional<std::string> ca_file_problem(const std::string& ca_file);

// What is wrong with `tls`'s files (missing CA file, unreadable or mismatched certificate and key,
// a key readable by others), or nullopt. Creates no gRPC object, so it is safe before a fork.
std::optional<std::string> client_tls_problem(const ClientTls& tls);

// Channel credentials for `tls`, or null with `error` saying what is wrong with its files.
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ClientTls& tls,
                                                              std::string& error);
// Adds what `tls` needs to a channel's arguments (the expected server name).
void add_channel_arguments(const ClientTls& tls, grpc::ChannelArguments& args);

// A channel to `target` with `tls`, default arguments otherwise; null with `error` on bad files.
std::shared_ptr<grpc::Channel> secure_channel(const std::string& target, const ClientTls& tls,
                                              std::string& error);

// The client TLS settings from the environment: SKEIN_CA_FILE, SKEIN_CLIENT_CERT,
// SKEIN_CLIENT_KEY, SKEIN_TLS_SERVER_NAME, SKEIN_INSECURE=1 (for tools and tests).
ClientTls client_tls_from_env();

}  // namespace skein::wire
