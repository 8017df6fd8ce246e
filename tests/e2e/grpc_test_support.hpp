// For end-to-end tests that talk gRPC to a cluster's gateway directly, as any client may: the
// cluster's TLS files as a client's settings, and its namespace token.
#pragma once

#include <fstream>
#include <string>

#include "local_cluster.hpp"
#include "wire/tls.hpp"

namespace skein::test {

// TLS as a mount of the cluster has it (the node certificate), or as skeinctl (admin).
inline wire::ClientTls cluster_tls(const LocalCluster& c, bool admin = false) {
  wire::ClientTls tls;
  tls.insecure = c.env("SKEIN_INSECURE") == "1";
  if (tls.insecure) return tls;
  tls.ca_file = c.env("SKEIN_CA_FILE");
  tls.cert_file = c.env(admin ? "SKEIN_ADMIN_CERT" : "SKEIN_NODE_CERT");
  tls.key_file = c.env(admin ? "SKEIN_ADMIN_KEY" : "SKEIN_NODE_KEY");
  return tls;
}

// The first line of a token file.
inline std::string read_token(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return token;
}

}  // namespace skein::test
