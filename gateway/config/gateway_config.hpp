// The gateway's configuration: a TOML file naming the listen address, the storage backends and the
// namespaces built from them. Loading checks everything it can before the gateway starts, and a
// mistake is reported as "FILE:LINE: problem".
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "auth/client_roles.hpp"
#include "backend/backend_config.hpp"
#include "namespace/branch.hpp"

namespace skein {

// One branch of a mount: a backend by name and its mode ("name", "name=RO", "name=NC").
struct BranchConfig {
  std::string backend;
  BranchMode mode = BranchMode::read_write;
};

enum class LayoutKind { union_of_branches, striped };

// A virtual subtree of a namespace and the backends behind it, in priority order.
struct MountConfig {
  std::string path;
  std::vector<BranchConfig> branches;
  LayoutKind layout = LayoutKind::union_of_branches;
  uint64_t stripe_size = 1 << 20;  // striped layout only
};

struct NamespaceConfig {
  std::string name;
  std::string token_file;  // the namespace's token (mode 0600); every namespace has one
  std::string create_policy = "ff";
  std::vector<MountConfig> mounts;
};

// gRPC over TLS ([gateway.tls]): the gateway's certificate and key, and with `client_ca_file`
// mutual TLS, every client presenting a certificate signed by that CA, mapped to roles.
struct TlsConfig {
  std::string cert_file;
  std::string key_file;        // mode 0600
  std::string client_ca_file;  // empty: no client certificates (tokens alone decide)
  std::string crl_dir;         // revoked client certificates (OpenSSL hashed CRL directory)
  std::vector<CertificatePattern> node_clients = {{CertificatePattern::Field::common_name, "*"}};
  std::vector<CertificatePattern> admin_clients;
  int reload_interval_s = 60;  // how often the files are read again (rotation)
};

// A pool of backends that job namespaces are made on ([[jobs.pool]]): each job gets a directory
// "job-<id>" below each backend's root. Pool backends serve no static namespace.
struct PoolConfig {
  std::string name;
  std::vector<std::string> backends;
  uint64_t stripe_size = 1 << 20;
};

// Job namespaces ([jobs]); absent: the gateway makes none.
struct JobsConfig {
  std::string database;  // SQLite file: namespaces, credential digests, usage, pending removals
  std::string default_pool;
  std::vector<PoolConfig> pools;
  uint64_t default_quota_inodes = 1000000;
  std::chrono::seconds default_lifetime{24 * 3600};
  std::chrono::seconds max_lifetime{30 * 24 * 3600};
  bool allow_root_owner = false;
  // A directory on a pool's backend that no job namespace claims is removed after this long.
  std::chrono::seconds orphan_grace{3600};
  // Staging: files (or chunks of a large one) one operation copies at once, and operations that
  // copy at once (the others wait, queued).
  unsigned stage_threads = 16;
  unsigned stage_max_running = 4;
  const PoolConfig* pool(const std::string& name) const {
    for (auto& p : pools)
      if (p.name == name) return &p;
    return nullptr;
  }
};

struct GatewayConfig {
  std::string source;  // the file it came from
  std::string listen = "127.0.0.1:7070";
  // Plaintext gRPC: only when `insecure = true` is written out; otherwise `tls` is required.
  bool insecure = false;
  std::optional<TlsConfig> tls;
  // AddBackend may only name identity and known_hosts files below this directory (empty: it may
  // name none, so backends cannot be added at runtime).
  std::string backend_files_dir;
  std::string log_level = "info";
  std::chrono::milliseconds timeout{15000};
  // File holding the admin token (mode 0600); empty: the Admin service refuses every call.
  std::string admin_token_file;
  // Coherence: how long a mount has to acknowledge an invalidation before it loses its lease; how
  // often cached paths are revalidated against the servers; how many paths per namespace the
  // gateway tracks; whether it runs inotifywait on servers that have it.
  std::chrono::milliseconds lease_timeout{1000};
  std::chrono::milliseconds revalidate_interval{1000};
  size_t revalidate_batch = 1000;  // paths per namespace per round: caps the polling load
  size_t interest_limit = 200000;
  bool remote_watch = true;
  // How long a mount's Watch stream may be gone before the files it left open are released.
  std::chrono::milliseconds orphan_timeout{600000};
  // Files each namespace may hold open at the gateway (NamespaceFs: past it EMFILE).
  size_t max_open_files = 16384;
  std::vector<BackendConfig> backends;
  std::vector<NamespaceConfig> namespaces;
  std::optional<JobsConfig> jobs;
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses and checks a configuration file. Throws ConfigError with "FILE:LINE: problem".
GatewayConfig load_gateway_config(const std::string& path);
// Same, from text (for tests); `source` names it in messages.
GatewayConfig parse_gateway_config(std::string_view text, const std::string& source);

// Warnings for striped mounts whose backends reach the same files as another mount does (the
// same host and port, as written, and one root at or below the other): each such pair once. Two
// backends of one striped mount in the same directory are an error of the file instead.
std::vector<std::string> shared_root_warnings(const GatewayConfig& cfg);

// Why a backend `b` that a static namespace would serve may not be added: it reaches the files of
// a job pool's backend (the same server, and one root is the other's or lies below it), so that
// namespace would show every job's directory. Empty when it reaches none.
std::string pool_files_reached_by(const GatewayConfig& cfg, const BackendConfig& b);

}  // namespace skein
