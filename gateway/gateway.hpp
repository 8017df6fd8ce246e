// The running gateway: the configuration it serves (the desired state), the live Backend objects
// and the namespaces built from them. An admin change edits a copy of the configuration under one
// mutex, checks it, rebuilds the mount tables of the namespaces it touches and swaps them in:
// mounts stay up, operations in flight finish on the table they started with, and backends that
// stay keep their connection pools. Changes live in memory: a restarted gateway serves its file.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/gateway_config.hpp"
#include "namespace/namespace_builder.hpp"
#include "namespace/namespace_fs.hpp"
#include "service/namespace_registry.hpp"

namespace skein {

// Why an admin change was refused. The message says what was wrong; nothing was changed.
class AdminError : public std::runtime_error {
 public:
  enum class Kind { invalid_argument, not_found, already_exists, failed_precondition };
  AdminError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

class Gateway {
 public:
  // Builds backends and namespaces from `cfg` and reads the namespaces' token files; connects
  // nothing yet. Throws ConfigError.
  explicit Gateway(GatewayConfig cfg);

  // Logs in to every backend once, so that a misconfigured server shows in the log at start.
  void connect_backends();

  NamespaceRegistry& registry() { return registry_; }
  // Told of each namespace whose mount table an admin change swapped, with the backends now in
  // use: paths may now lead elsewhere, so mounts must drop what they cached of it. Called after
  // the change, without the lock that guards the tables (it may wait for a removed backend's
  // watcher to end), one change at a time and in their order. Set before serving.
  using TablesChanged = std::function<void(const std::string& ns, const BackendMap& backends)>;
  void on_tables_changed(TablesChanged hook) { tables_changed_ = std::move(hook); }
  // The configuration as it stands now, runtime changes included.
  GatewayConfig config() const;
  std::chrono::seconds uptime() const;
  static const char* version();

  // A backend and where it is used ("NAMESPACE:/mount/path"), for listings.
  struct BackendView {
    std::shared_ptr<SftpBackend> backend;
    std::vector<std::string> mounts;
  };
  std::vector<BackendView> backends() const;  // by name
  // The backend called `name`, or null.
  std::shared_ptr<SftpBackend> backend(const std::string& name) const;

  // A namespace's configuration with the table it serves now (one consistent snapshot).
  struct NamespaceView {
    NamespaceConfig config;
    std::shared_ptr<const MountTable> table;
    size_t open_files = 0;
    uint64_t bytes_read = 0;
    uint64_t bytes_written = 0;
  };
  std::vector<NamespaceView> namespaces() const;  // by name

  struct AddBackendRequest {
    BackendConfig backend;  // endpoint.timeout is the gateway's; a missing port is 22
    std::string ns;
    std::string mount_path;
    BranchMode mode = BranchMode::read_write;
    // Log in and look at the root before adding; refuse when that fails.
    bool check_connection = true;
  };
  struct AddedBackend {
    std::shared_ptr<SftpBackend> backend;
    bool new_mount = false;
    std::string mount_path;  // normalised
    std::string layout;      // the mount's Layout::describe() after the change
  };
  // Adds a backend as the last branch of the mount at `mount_path`, or as a new mount there.
  AddedBackend add_backend(AddBackendRequest request);

  struct RemovedBackend {
    std::vector<std::string> left_mounts;     // "ns:/path" still served by other branches
    std::vector<std::string> dropped_mounts;  // "ns:/path" that had no other backend
  };
  // Takes a backend out of every mount; a mount left without backends disappears. Refused when
  // it would leave a namespace with no mount at all, or take a stripe out of a striped mount.
  // Files open on it keep working until they are closed.
  RemovedBackend remove_backend(const std::string& name);

  // Stops (or restarts) new files going to a backend; existing ones are served as before.
  std::shared_ptr<SftpBackend> drain_backend(const std::string& name, bool drain);

 private:
  // Checks a new backend's settings and fills in defaults; throws AdminError. Its identity and
  // known_hosts files must lie below `files_dir` (the config's backend_files_dir), symlinks
  // resolved: an admin call must not make the gateway read a key it was not meant to use.
  static void check_backend_config(BackendConfig& b, std::chrono::milliseconds timeout,
                                   const std::string& files_dir);
  // Logs in to a new backend and checks that its root is a directory; throws AdminError.
  static void check_reachable(const BackendConfig& b);
  // The mount tables of the namespaces named, built from `cfg` over `backends`.
  std::map<std::string, std::shared_ptr<const MountTable>> build_tables(
      const GatewayConfig& cfg, const BackendMap& backends,
      const std::vector<std::string>& names) const;

  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  NamespaceRegistry registry_;

  std::mutex change_mu_;   // admin changes of backends one at a time, their hook included
  mutable std::mutex mu_;  // guards config_, backends_ and namespaces_
  GatewayConfig config_;
  BackendMap backends_;
  std::map<std::string, std::shared_ptr<NamespaceFs>> namespaces_;
  TablesChanged tables_changed_;
};

// A token file's tokens, one a line (read_token_lines), for TokenSet::of_all; throws ConfigError
// when the file cannot be read, is readable by group or others, holds a token no client could
// send, or holds none (an empty token file must not open a namespace to everyone).
std::vector<std::string> read_token_file(const std::string& path, const std::string& what);

}  // namespace skein
