// The gateway's state and its runtime changes; see gateway.hpp.
#include "gateway.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "sftp/connection.hpp"
#include "skein/credential_file.hpp"
#include "skein/path.hpp"
#include "skein/version.hpp"

namespace skein {
namespace {

using Kind = AdminError::Kind;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string where(const std::string& ns, const std::string& path) { return ns + ":" + path; }

std::string address(const BackendConfig& b) {
  return b.endpoint.user + "@" + b.endpoint.host + ":" + std::to_string(b.endpoint.port) + ":" +
         b.root;
}

bool has_control_or_space(std::string_view s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) <= ' ' || c == 0x7f; });
}

// Whether `file`, with every symlink resolved, lies below the directory `dir`.
bool file_is_below(const std::string& file, const std::string& dir) {
  char* f = ::realpath(file.c_str(), nullptr);
  char* d = ::realpath(dir.c_str(), nullptr);
  bool below = false;
  if (f && d) {
    std::string fs(f), ds(d);
    if (ds.back() != '/') ds += '/';
    below = fs.size() > ds.size() && fs.compare(0, ds.size(), ds) == 0;
  }
  free(f);
  free(d);
  return below;
}

NamespaceConfig* find_namespace(GatewayConfig& cfg, const std::string& name) {
  for (auto& n : cfg.namespaces)
    if (n.name == name) return &n;
  return nullptr;
}

}  // namespace

std::vector<std::string> read_token_file(const std::string& path, const std::string& what) {
  try {
    return read_token_lines(path, what);
  } catch (const CredentialError& e) {
    throw ConfigError(e.what());
  }
}

Gateway::Gateway(GatewayConfig cfg) : config_(std::move(cfg)) {
  for (auto& b : config_.backends) backends_[b.name] = std::make_shared<SftpBackend>(b);
  for (auto& n : config_.namespaces) {
    auto tokens =
        TokenSet::of_all(read_token_file(n.token_file, "token_file of namespace " + n.name));
    auto fs = std::make_shared<NamespaceFs>(n.name, tokens, build_mount_table(n, backends_),
                                            config_.max_open_files);
    namespaces_[n.name] = fs;
    registry_.add(std::move(fs));
  }
}

void Gateway::connect_backends() {
  BackendMap backends;
  {
    std::lock_guard lock(mu_);
    backends = backends_;
  }
  for (auto& [name, b] : backends) {
    if (b->connection(0)) spdlog::info("backend {}: connected to {}", name, address(b->config()));
  }
}

GatewayConfig Gateway::config() const {
  std::lock_guard lock(mu_);
  return config_;
}

std::chrono::seconds Gateway::uptime() const {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() -
                                                          started_);
}

const char* Gateway::version() { return skein::version(); }

std::vector<Gateway::BackendView> Gateway::backends() const {
  std::lock_guard lock(mu_);
  std::vector<BackendView> out;
  for (auto& [name, b] : backends_) {
    BackendView v{b, {}};
    for (auto& n : config_.namespaces)
      for (auto& m : n.mounts)
        for (auto& br : m.branches)
          if (br.backend == name) v.mounts.push_back(where(n.name, m.path));
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<Gateway::NamespaceView> Gateway::namespaces() const {
  std::lock_guard lock(mu_);
  std::vector<NamespaceView> out;
  for (auto& n : config_.namespaces) {
    auto& fs = namespaces_.at(n.name);
    out.push_back({n, fs->table(), fs->open_files(), fs->bytes_read(), fs->bytes_written()});
  }
  std::sort(out.begin(), out.end(), [](const NamespaceView& a, const NamespaceView& b) {
    return a.config.name < b.config.name;
  });
  return out;
}

void Gateway::check_backend_config(BackendConfig& b, std::chrono::milliseconds timeout,
                                   const std::string& files_dir) {
  auto bad = [](const std::string& what) { throw AdminError(Kind::invalid_argument, what); };
  if (files_dir.empty())
    throw AdminError(Kind::failed_precondition,
                     "adding backends at runtime is off on this gateway: set backend_files_dir in "
                     "its [gateway] section to the directory of the identity and known_hosts files "
                     "that such backends may use");
  if (b.name.empty()) bad("the backend needs a name");
  if (b.name.find_first_of("/=") != std::string::npos || has_control_or_space(b.name))
    bad("backend name '" + b.name + "' may not contain '/', '=', spaces or control characters");
  auto& ep = b.endpoint;
  if (ep.host.empty()) bad("backend '" + b.name + "' needs a host");
  if (has_control_or_space(ep.host)) bad("host '" + ep.host + "' may not contain spaces");
  if (ep.port == 0) ep.port = 22;
  if (ep.port < 1 || ep.port > 65535)
    bad("port of backend '" + b.name + "' must be between 1 and 65535, not " +
        std::to_string(ep.port));
  if (ep.user.empty()) bad("backend '" + b.name + "' needs a user");
  if (has_control_or_space(ep.user)) bad("user '" + ep.user + "' may not contain spaces");
  struct File {
    const char* key;
    std::string* path;
    bool required;
  };
  for (auto [key, file, required] : {File{"identity file", &ep.identity_file, true},
                                     File{"known_hosts file", &ep.known_hosts, true},
                                     File{"certificate file", &ep.certificate_file, false},
                                     File{"ssh_config file", &ep.ssh_config, false}}) {
    if (file->empty()) {
      if (required) bad("backend '" + b.name + "' needs a " + key);
      continue;
    }
    if (file->front() != '/')
      bad(std::string(key) + " '" + *file + "' must be an absolute path on the gateway's machine");
    struct stat st {};
    if (::stat(file->c_str(), &st) != 0 || access(file->c_str(), R_OK) != 0)
      bad("the gateway cannot read the " + std::string(key) + " " + *file + ": " +
          std::strerror(errno));
    if (!S_ISREG(st.st_mode)) bad(std::string(key) + " " + *file + " is not a regular file");
    if (!file_is_below(*file, files_dir))
      bad(std::string(key) + " " + *file + " is not below " + files_dir +
          " (backend_files_dir in the gateway's [gateway] section): runtime backends may only use "
          "the identity, certificate, known_hosts and ssh_config files kept there");
  }
  if (auto problem = sftp::private_key_problem(ep.identity_file)) bad(*problem);
  if (auto problem = sftp::endpoint_problem(ep)) bad("backend '" + b.name + "': " + *problem);
  ep.agent_socket.clear();                     // runtime backends log in with their identity file
  auto root = normalize_virtual_path(b.root);  // nothing for a relative path
  if (!root) bad("root '" + b.root + "' of backend '" + b.name + "' must be an absolute path");
  b.root = *root;
  if (b.connections == 0) b.connections = 4;
  if (b.connections < 1 || b.connections > 64)
    bad("connections of backend '" + b.name + "' must be between 1 and 64, not " +
        std::to_string(b.connections));
  ep.timeout = timeout;
}

void Gateway::check_reachable(const BackendConfig& b) {
  // A short login timeout: the admin's call has a deadline of its own.
  sftp::Endpoint ep = b.endpoint;
  ep.timeout = std::min(ep.timeout, std::chrono::milliseconds(3000));
  std::string error;
  auto conn = sftp::Connection::connect(ep, error);
  auto refuse = [&](const std::string& why) {
    throw AdminError(Kind::failed_precondition, "backend '" + b.name + "' not added: " + why);
  };
  if (!conn)
    refuse(error + " (to add a server that is down for now, skip the connection check: " +
           "skeinctl backends add --no-check)");
  auto attrs =
      SftpBackend::attrs_of(conn->call(sftp::PacketWriter(sftp::FXP_STAT).str(b.root).take()));
  if (!attrs) refuse("root " + b.root + " on " + ep.host + ": " + std::strerror(attrs.error()));
  if (!S_ISDIR(attrs->permissions))
    refuse("root " + b.root + " on " + ep.host + " is not a directory");
}

std::map<std::string, std::shared_ptr<const MountTable>> Gateway::build_tables(
    const GatewayConfig& cfg, const BackendMap& backends,
    const std::vector<std::string>& names) const {
  std::map<std::string, std::shared_ptr<const MountTable>> out;
  for (auto& n : cfg.namespaces) {
    if (std::find(names.begin(), names.end(), n.name) == names.end()) continue;
    try {
      out[n.name] = build_mount_table(n, backends);
    } catch (const ConfigError& e) {
      throw AdminError(Kind::failed_precondition, e.what());
    }
  }
  return out;
}

Gateway::AddedBackend Gateway::add_backend(AddBackendRequest req) {
  auto& b = req.backend;
  {
    auto cfg = config();
    check_backend_config(b, cfg.timeout, cfg.backend_files_dir);
  }
  auto path = normalize_virtual_path(req.mount_path);
  if (!path)
    throw AdminError(Kind::invalid_argument,
                     "mount path '" + req.mount_path + "' must be an absolute path without '..'");
  req.mount_path = *path;
  // Answer the obvious refusals before the (slow) connection check; they are checked again below.
  auto check_state = [&] {
    if (backends_.count(b.name))
      throw AdminError(Kind::already_exists, "there is already a backend '" + b.name + "'");
    if (!namespaces_.count(req.ns))
      throw AdminError(Kind::not_found, "no namespace '" + req.ns + "'");
    if (auto why = pool_files_reached_by(config_, b); !why.empty())
      throw AdminError(Kind::failed_precondition, why);
  };
  {
    std::lock_guard lock(mu_);
    check_state();
  }
  if (req.check_connection) check_reachable(b);

  // Admin changes one at a time, so that the hook below sees them in their order; it runs
  // without mu_ (it may wait for a removed backend's watcher to end).
  std::lock_guard change(change_mu_);
  std::unique_lock lock(mu_);
  check_state();
  GatewayConfig next = config_;
  NamespaceConfig& ns = *find_namespace(next, req.ns);
  AddedBackend out;
  out.mount_path = req.mount_path;
  auto mount = std::find_if(ns.mounts.begin(), ns.mounts.end(),
                            [&](const MountConfig& m) { return m.path == req.mount_path; });
  if (mount == ns.mounts.end()) {
    out.new_mount = true;
    MountConfig m;
    m.path = req.mount_path;
    m.branches.push_back({b.name, req.mode});
    ns.mounts.push_back(std::move(m));
  } else {
    if (mount->layout == LayoutKind::striped)
      throw AdminError(Kind::failed_precondition,
                       "mount " + where(req.ns, req.mount_path) +
                           " is striped: adding a backend would move every stripe");
    mount->branches.push_back({b.name, req.mode});
  }
  next.backends.push_back(b);
  BackendMap next_backends = backends_;
  out.backend = std::make_shared<SftpBackend>(b);
  next_backends[b.name] = out.backend;
  auto tables = build_tables(next, next_backends, {req.ns});

  config_ = std::move(next);
  backends_ = std::move(next_backends);
  namespaces_.at(req.ns)->set_table(tables.at(req.ns));
  const BackendMap now = backends_;
  lock.unlock();
  if (tables_changed_) tables_changed_(req.ns, now);
  if (auto place = tables.at(req.ns)->place(req.mount_path))
    out.layout = place->mount->layout->describe();
  spdlog::info("admin: added backend {} ({}) to {}{}: {}", b.name, address(b),
               where(req.ns, req.mount_path), out.new_mount ? " as a new mount" : "", out.layout);
  return out;
}

std::shared_ptr<SftpBackend> Gateway::backend(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = backends_.find(name);
  return it == backends_.end() ? nullptr : it->second;
}

Gateway::RemovedBackend Gateway::remove_backend(const std::string& name) {
  std::lock_guard change(change_mu_);
  std::unique_lock lock(mu_);
  if (!backends_.count(name)) throw AdminError(Kind::not_found, "no backend '" + name + "'");
  if (config_.jobs)
    for (auto& pool : config_.jobs->pools)
      for (auto& b : pool.backends)
        if (b == name)
          throw AdminError(Kind::failed_precondition,
                           "backend '" + name + "' is in job pool '" + pool.name +
                               "': job namespaces keep their files on it; take it out of [jobs] "
                               "in the configuration instead");
  GatewayConfig next = config_;
  RemovedBackend out;
  std::vector<std::string> touched;
  for (auto& ns : next.namespaces) {
    bool uses = false;
    for (auto& m : ns.mounts) {
      auto it = std::find_if(m.branches.begin(), m.branches.end(),
                             [&](const BranchConfig& br) { return br.backend == name; });
      if (it == m.branches.end()) continue;
      if (m.layout == LayoutKind::striped)
        throw AdminError(Kind::failed_precondition,
                         "backend '" + name + "' holds stripes of mount " + where(ns.name, m.path) +
                             ": removing it would lose part of every file there");
      uses = true;
      m.branches.erase(it);
      (m.branches.empty() ? out.dropped_mounts : out.left_mounts).push_back(where(ns.name, m.path));
    }
    if (!uses) continue;
    std::erase_if(ns.mounts, [](const MountConfig& m) { return m.branches.empty(); });
    if (ns.mounts.empty())
      throw AdminError(Kind::failed_precondition,
                       "backend '" + name + "' is the last backend of namespace '" + ns.name +
                           "': removing it would leave the namespace empty; add another "
                           "backend to it first");
    touched.push_back(ns.name);
  }
  std::erase_if(next.backends, [&](const BackendConfig& b) { return b.name == name; });
  BackendMap next_backends = backends_;
  next_backends.erase(name);
  auto tables = build_tables(next, next_backends, touched);

  config_ = std::move(next);
  backends_ = std::move(next_backends);
  for (auto& [ns, table] : tables) namespaces_.at(ns)->set_table(table);
  const BackendMap now = backends_;
  lock.unlock();
  if (tables_changed_)
    for (auto& [ns, table] : tables) tables_changed_(ns, now);
  spdlog::info("admin: removed backend {}; mounts dropped: [{}]; still served: [{}]", name,
               join(out.dropped_mounts), join(out.left_mounts));
  return out;
}

std::shared_ptr<SftpBackend> Gateway::drain_backend(const std::string& name, bool drain) {
  std::lock_guard lock(mu_);
  auto it = backends_.find(name);
  if (it == backends_.end()) throw AdminError(Kind::not_found, "no backend '" + name + "'");
  if (it->second->draining() != drain) {
    it->second->set_draining(drain);
    spdlog::info("admin: backend {} {}", name,
                 drain ? "is draining: it takes no new files" : "takes new files again");
  }
  return it->second;
}

}  // namespace skein
