// skein-mount: mounts one namespace of a skein gateway through FUSE.
// Order matters: the gateway is checked before anything is mounted (a bad address or namespace
// fails the command, leaving no mount behind), and the gRPC channel the mount uses is created only
// after the daemon has forked, because gRPC's threads do not survive a fork.
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cache_fill.hpp"
#include "control_socket.hpp"
#include "file_fetch.hpp"
#include "file_store.hpp"
#include "fuse_ops.hpp"
#include "gateway_client.hpp"
#include "log_file.hpp"
#include "skein/credential_file.hpp"
#include "skein/fatal_signals.hpp"
#include "skein/heap.hpp"
#include "skein/logging.hpp"
#include "wire/transport.hpp"

namespace {

using skein::client::ControlSocket;
using skein::client::GatewayClient;
using skein::client::GatewayOptions;
using skein::client::NamespaceCheck;

constexpr char kProgram[] = "skein-mount";
constexpr std::chrono::milliseconds kMountCheckDeadline{5000};
constexpr unsigned kMaxIdleThreads = 32;
// Each thread may wait up to the gateway timeout; allow enough of them to keep I/O flowing.
constexpr unsigned kMaxThreads = 64;
// How long an unmount waits for the watch and the control socket before aborting the connection.
constexpr std::chrono::seconds kNotificationsStopWithin{5};

struct MountArgs {
  std::string gateway;
  std::string mountpoint;
  std::string ns = "default";
  bool foreground = false;
  std::vector<std::string> options;  // each a -o argument, comma-separated
  std::string token_file;
  std::string job;  // mount this job's namespace, with a credential fetched by the node
  std::optional<uid_t> job_user;  // that job's user, from the credential: may use the socket
  skein::wire::ClientTls tls;
  std::string log_file;
  std::string log_level = "info";
  int timeout_ms = 15000;
  // Data path: the most each file reads ahead and holds of unacknowledged writes (0: off), and
  // the kernel's own read-ahead for the mount (0: leave FUSE's 128 KiB). Both read-aheads, as
  // measured with dd of 1 GiB over one local sshd on 2 cores (MB/s, CPU of every process per MiB):
  // kernel 4 MiB + ours 8 MiB 357, 5.0 ms; kernel 4 MiB alone 330, 4.9 ms; kernel 128 KiB + ours
  // 8 MiB 305-335, 5.4-5.8 ms; kernel 16 MiB + ours 16 MiB 290, 5.9 ms. The kernel's window sends
  // 1 MiB reads and keeps a few in flight for almost nothing; ours adds depth (a remote gateway,
  // a mount that cannot raise the kernel's) and aligned blocks the gateway can collapse.
  unsigned read_ahead_mb = 8;
  unsigned write_behind_mb = 8;
  bool sync_creates = false;
  unsigned kernel_readahead_kb = 4096;
  double cache_ttl = 3600.0;  // entry/attribute lifetime while the Watch stream is healthy
  double safe_ttl = 1.0;      // and while it is not
  // answer lookups of absent names from directories' known names: made (directories this mount
  // made) and auto (also names learnt from listings), both while the servers are watched;
  // always; never
  std::string know_names = "made";
  bool deferred_open = true;   // opens for reading of files known current skip the gateway
  bool dir_read_ahead = true;  // directories whose files are read one after another
  std::string control_dir;     // where the control socket goes; empty: ControlSocket::default_dir()
  // Control commands to a running mount instead of mounting: the mount point to send them to.
  std::string drop_caches;
  std::string status;
};

void fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
}

std::optional<std::string> read_token(const std::string& path) {
  try {
    return skein::read_client_token(path, "token file");
  } catch (const skein::CredentialError& e) {
    fail(e.what());
    return std::nullopt;
  }
}

// The user's words for what the mount-time check found.
std::string describe(const NamespaceCheck& check, const MountArgs& args) {
  using Outcome = NamespaceCheck::Outcome;
  switch (check.outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kUnreachable:
      return "cannot reach gateway " + args.gateway + ": " + check.detail;
    case Outcome::kNoNamespace:
      return "namespace '" + args.ns + "' not found on gateway " + args.gateway + " (" +
             check.detail + ")";
    case Outcome::kDenied:
      return "gateway " + args.gateway + " refused access to namespace '" + args.ns +
             "' (check --namespace, --token-file and, with mutual TLS, --cert-file): " +
             check.detail;
    case Outcome::kFailed:
      break;
  }
  return "gateway " + args.gateway + " cannot serve namespace '" + args.ns + "': " + check.detail;
}

// Asks the gateway, from a child process (no gRPC threads before the fork into a daemon), for a
// mount credential of job `args.job`'s namespace with the node's certificate. The credential comes
// back through a pipe and stays in memory: no token file exists on the node.
std::optional<skein::client::JobCredential> fetch_job_credential(const MountArgs& args) {
  int fds[2];
  if (pipe(fds) != 0) {
    fail(std::string("pipe: ") + std::strerror(errno));
    return std::nullopt;
  }
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    fail(std::string("fork: ") + std::strerror(errno));
    return std::nullopt;
  }
  if (pid == 0) {
    close(fds[0]);
    std::string error;
    auto channel = GatewayClient::connect(args.gateway, args.tls, error);
    std::optional<skein::client::JobCredential> c;
    if (channel)
      c = GatewayClient::job_mount_credential(channel, args.job, kMountCheckDeadline, error);
    if (!c) {
      fail("gateway " + args.gateway + " gave no mount credential for job " + args.job + ": " +
           error);
      std::fflush(nullptr);
      _exit(1);
    }
    std::string line = c->ns + "\n" + c->token + "\n" + std::to_string(c->uid) + "\n" +
                       std::to_string(c->gid) + "\n";
    bool ok = write(fds[1], line.data(), line.size()) == static_cast<ssize_t>(line.size());
    _exit(ok ? 0 : 1);
  }
  close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) return std::nullopt;
  std::istringstream in(got);
  skein::client::JobCredential c;
  std::string uid, gid;
  if (!std::getline(in, c.ns) || !std::getline(in, c.token) || !std::getline(in, uid) ||
      !std::getline(in, gid)) {
    fail("the gateway's answer for job " + args.job + " was cut short");
    return std::nullopt;
  }
  c.uid = static_cast<uint32_t>(std::stoul(uid));
  c.gid = static_cast<uint32_t>(std::stoul(gid));
  return c;
}

// Checks from a child process that the gateway answers for the namespace, so that this process
// starts no gRPC threads before it forks into a daemon. The child prints what went wrong.
bool gateway_serves_namespace(const MountArgs& args, const std::string& token) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    fail(std::string("fork: ") + std::strerror(errno));
    return false;
  }
  if (pid == 0) {
    std::string error;
    auto channel = GatewayClient::connect(args.gateway, args.tls, error);
    if (!channel) {
      fail(error);
      std::fflush(nullptr);
      _exit(1);
    }
    // At least the calls' own deadline: a namespace whose storage server is slow to answer
    // (or to log in to) gets as long at the check as any call would.
    const auto deadline = std::max(kMountCheckDeadline, std::chrono::milliseconds(args.timeout_ms));
    GatewayClient client(channel, GatewayOptions{args.ns, token, deadline});
    NamespaceCheck check = client.check_namespace(deadline);
    if (check.outcome != NamespaceCheck::Outcome::kOk) fail(describe(check, args));
    std::fflush(nullptr);
    _exit(check.outcome == NamespaceCheck::Outcome::kOk ? 0 : 1);  // no gRPC teardown here
  }
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(wstatus)) {
    fail("gateway check died of signal " + std::to_string(WTERMSIG(wstatus)));
    return false;
  }
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

// Options that belong to mount(8) and fstab, not to FUSE; mount helpers pass them along.
bool is_fstab_only(const std::string& opt) {
  return opt.empty() || opt == "_netdev" || opt == "auto" || opt == "noauto" || opt == "nofail" ||
         opt == "user" || opt == "users" || opt == "nouser" || opt == "defaults" ||
         opt.rfind("x-", 0) == 0 || opt.rfind("comment=", 0) == 0;
}

// Escapes a value for FUSE's comma-separated -o parser.
std::string escape_option(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Every -o option on its own (each -o argument is a comma-separated list).
std::vector<std::string> mount_option_items(const MountArgs& args) {
  std::vector<std::string> items;
  for (const std::string& group : args.options) {
    std::stringstream in(group);
    for (std::string opt; std::getline(in, opt, ',');) items.push_back(opt);
  }
  return items;
}

std::string fuse_mount_options(const MountArgs& args) {
  std::string opts = "fsname=" + escape_option("skein:" + args.ns + "@" + args.gateway) +
                     ",subtype=skein,default_permissions,max_read=" + std::to_string(1 << 20);
  for (const std::string& opt : mount_option_items(args)) {
    if (!is_fstab_only(opt)) opts += "," + opt;
  }
  return opts;
}

// Whether the mount serves every user of the machine (-o allow_other).
bool allows_other(const MountArgs& args) {
  const std::vector<std::string> items = mount_option_items(args);
  return std::find(items.begin(), items.end(), "allow_other") != items.end();
}

// A random 64-bit id, in hex: the mount's name at the gateway (x-skein-mount) for its whole life.
std::string new_mount_id() {
  std::random_device random;
  uint64_t id = (uint64_t{random()} << 32) | random();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(id));
  return buf;
}

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", seconds);
  return buf;
}

// The answer to `skein-mount --status`.
std::string status_text(skein::client::MountDaemon& mount, const MountArgs& args,
                        const std::string& mount_id) {
  std::ostringstream out;
  out << "mountpoint: " << args.mountpoint << "\n"
      << "gateway: " << args.gateway << "\n"
      << "namespace: " << args.ns << "\n"
      << "mount id: " << mount_id << "\n";
  skein::client::WatchStream::State watch;
  if (mount.watch) watch = mount.watch->state();
  const auto for_s = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::steady_clock::now() - watch.since)
                         .count();
  if (watch.healthy) {
    out << "watch: healthy (for " << for_s << " s)\n";
  } else {
    out << "watch: safe (" << watch.why << "; for " << for_s << " s)\n";
  }
  out << "lease: " << watch.lease_ms << " ms\n"
      << "subscriptions: " << watch.subscriptions << "\n"
      << "invalidation events: " << watch.events << "\n"
      << "entry ttl: " << seconds_text(mount.cache.current_timeout()) << "\n"
      << "attr ttl: " << seconds_text(mount.cache.current_timeout()) << "\n"
      << "ttl healthy/safe: " << seconds_text(mount.cache.options().cache_ttl) << " / "
      << seconds_text(mount.cache.options().safe_ttl) << "\n"
      << "page cache across opens: " << (mount.cache.healthy() ? "kept if unchanged" : "dropped")
      << "\n"
      << "servers watched: " << (mount.cache.servers_watched() ? "yes" : "no") << "\n"
      << "opens for reading: "
      << (mount.cache.servers_watched() && mount.cache.options().deferred_open
              ? "deferred to the first read when the file is current"
              : "asked of the gateway")
      << "\n";
  const auto ahead = mount.cache.ahead_counts();
  out << "directory read-ahead: " << (mount.cache.options().read_ahead_dirs ? "on" : "off") << "\n"
      << "directories read ahead: " << ahead.dirs << "\n"
      << "names answered from read-ahead: " << ahead.names << "\n"
      << "lookups that waited for a read-ahead listing: " << ahead.waits << "\n"
      << "files read ahead: " << ahead.contents << "\n"
      << "gateway calls: " << mount.gateway->calls_started() << "\n"
      << "inodes: " << mount.inodes.size() << "\n"
      << "open files: " << mount.open_inodes.count() << "\n"
      << "callers' buffers kept mapped: " << mount.caller_buffers.kept() << "\n";
  return out.str();
}

// Serves the control socket's commands.
std::string control_command(skein::client::MountDaemon& mount, const MountArgs& args,
                            const std::string& mount_id, const std::string& command, int fd,
                            const skein::client::ControlPeer& peer) {
  // Users other than root and the mount's own (on a mount with allow_other) get the commands that
  // read or write files for them, judged by their own permissions, and nothing else.
  const bool everyone_may = command == "whoami" || command.rfind("fill ", 0) == 0 ||
                            command.rfind("fill-files ", 0) == 0 ||
                            command.rfind("fetch-files ", 0) == 0 ||
                            command.rfind("store-files ", 0) == 0 || command == "forget-buffer";
  if (!peer.privileged && !everyone_may)
    return "error: permission denied: '" + command.substr(0, command.find(' ')) +
           "' is for root and the mount's own user\n";
  // The caller must be able to reach the mount point itself, as its own path walk would: search
  // permission on every local directory above it.
  if (!peer.privileged) {
    skein::client::PathAccess local(peer, skein::client::local_attrs());
    if (!local.may_reach(args.mountpoint))
      return "error: permission denied: uid " + std::to_string(peer.uid) +
             " may not reach the mount point " + args.mountpoint + "\n";
  }
  if (command == "whoami")
    return "uid " + std::to_string(peer.uid) +
           (peer.privileged ? ": every command\n"
                            : ": whoami, fill fetch, fill read, fill-files fetch, fetch-files "
                              "(files it may read), store-files (in directories it may write), "
                              "forget-buffer\n");
  if (command == "status") return status_text(mount, args, mount_id);
  if (command == "drop-caches") {
    auto dropped = mount.kernel_cache->drop_all();
    spdlog::info("caches dropped on request: {} inodes, {} names", dropped.inodes, dropped.entries);
    return "dropped the kernel caches of " + args.mountpoint + ": attributes and pages of " +
           std::to_string(dropped.inodes) + " inodes, " + std::to_string(dropped.entries) +
           " names\n";
  }
  if (command == "forget-buffer") {
    if (fd < 0)
      return "error: forget-buffer: no buffer (its file descriptor goes with the command, "
             "SCM_RIGHTS)\n";
    return "ok " + std::to_string(mount.caller_buffers.forget(fd)) + "\n";
  }
  if (command.rfind("fill ", 0) == 0)
    return skein::client::cache_fill(mount, command.substr(5), fd, peer);
  if (command.rfind("fill-files ", 0) == 0)
    return skein::client::cache_fill_files(mount, command.substr(11), fd, peer);
  if (command.rfind("fetch-files ", 0) == 0) {
    const skein::client::FileFetchContext context{
        [&mount](const std::string& path) { return mount.inodes.find(path).has_value(); },
        skein::client::mount_attrs(mount),
        [&mount](const std::vector<std::string>& paths, uint32_t max_bytes, bool attrs_of_files) {
          return mount.gateway->read_files(paths, max_bytes, attrs_of_files);
        },
        mount.caller_buffers};
    return skein::client::fetch_files(context, command.substr(12), fd, peer);
  }
  if (command.rfind("store-files ", 0) == 0) {
    const skein::client::FileStoreContext context{
        skein::client::mount_attrs(mount),
        [&mount](const std::vector<skein::client::GatewayClient::NewFile>& files) {
          return mount.gateway->write_files(files);
        },
        [&mount](const std::string& path) {
          using Inval = skein::client::Invalidation;
          mount.kernel_cache->invalidate(
              {{Inval::Kind::kEntry, path}, {Inval::Kind::kInode, path}});
        },
        mount.caller_buffers};
    return skein::client::store_files(context, command.substr(12), fd, peer);
  }
  return "error: unknown command '" + command +
         "' (known: drop-caches, status, whoami, fill, fill-files, fetch-files, store-files, "
         "forget-buffer)\n";
}

// `skein-mount --drop-caches|--status MOUNTPOINT`: asks the running mount and prints its answer.
int send_control_command(const MountArgs& args) {
  const bool drop = !args.drop_caches.empty();
  const std::string& mountpoint = drop ? args.drop_caches : args.status;
  std::string answer, error;
  if (!ControlSocket::request(args.control_dir, mountpoint, drop ? "drop-caches" : "status", answer,
                              error)) {
    fail(error);
    return 1;
  }
  std::fputs(answer.c_str(), stdout);
  return answer.rfind("error:", 0) == 0 ? 1 : 0;
}

skein::client::DataPath::Options data_path_options(const MountArgs& args) {
  skein::client::DataPath::Options o;
  o.read_ahead = args.read_ahead_mb > 0;
  if (o.read_ahead) {
    o.read.window.max = uint64_t{args.read_ahead_mb} << 20;
    o.read.window.min = std::min(o.read.window.min, o.read.window.max);
    o.read.window.slack = std::max<uint64_t>(
        o.read.window.slack, 2 * (o.read.window.max + (uint64_t{args.kernel_readahead_kb} << 10)));
  }
  o.write_behind = args.write_behind_mb > 0;
  if (o.write_behind) o.write.file_bytes = uint64_t{args.write_behind_mb} << 20;
  o.mountpoint = args.mountpoint;
  o.kernel_readahead_kb = args.kernel_readahead_kb;
  return o;
}

int run(const MountArgs& args, const std::string& token) {
  skein::keep_large_buffers_on_heap();
  skein::client::MountDaemon mount;
  mount.fill_key = skein::client::FillTag::key_for(args.ns, token);
  const std::string mount_id = new_mount_id();
  using KnowNames = skein::client::CachePolicy::Options::KnowNames;
  const KnowNames know_names = args.know_names == "always"  ? KnowNames::kAlways
                               : args.know_names == "never" ? KnowNames::kNever
                               : args.know_names == "made"  ? KnowNames::kMadeDirs
                                                            : KnowNames::kWhileWatched;
  mount.cache.set_options(
      {args.cache_ttl, args.safe_ttl, know_names, args.deferred_open, args.dir_read_ahead});
  const std::string opts = fuse_mount_options(args);
  std::vector<const char*> argv = {kProgram, "-o", opts.c_str()};
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  const fuse_lowlevel_ops& ops = skein::client::fuse_operations();
  fuse_session* se = fuse_session_new(&fargs, &ops, sizeof(ops), &mount);
  fuse_opt_free_args(&fargs);
  if (se == nullptr) {
    fail("cannot create the FUSE session (bad -o option?)");
    return 1;
  }
  // From here on, every way out unmounts (when mounted) and destroys the session.
  struct SessionGuard {
    fuse_session* se;
    bool mounted = false;
    bool signals = false;
    ~SessionGuard() {
      if (signals) fuse_remove_signal_handlers(se);
      if (mounted) fuse_session_unmount(se);
      fuse_session_destroy(se);
    }
  } guard{se};

  if (fuse_set_signal_handlers(se) != 0) {
    fail("cannot install signal handlers");
    return 1;
  }
  guard.signals = true;
  mount.kernel_cache =
      std::make_unique<skein::client::KernelCache>(se, args.mountpoint, mount.inodes, mount.cache);
  mount.kernel_cache->set_data_changed([&mount](skein::client::InodeNumber ino) {
    if (mount.data) mount.data->changed(ino);  // what was read ahead is stale too
  });
  // Bound before the fork, so it answers as soon as this command returns.
  {
    std::string error;
    // A job's mount (root's, from the Slurm prolog) also answers the job's user: its skein-mpi.
    // A mount that serves every user (allow_other) answers every user what it may read.
    ControlSocket::Access access;
    access.user = args.job_user.value_or(::geteuid());
    access.everyone = !args.job_user && allows_other(args);
    mount.judge_others = allows_other(args);
    mount.trusted_user = access.user;
    mount.control = ControlSocket::open(
        args.control_dir.empty() ? ControlSocket::default_dir() : args.control_dir, mount_id,
        args.mountpoint, error, access);
    if (!mount.control)
      fail("no control socket (--drop-caches and --status will not work): " + error);
  }
  // The watch and the control socket use the session: stop them before it is destroyed. A
  // notification of theirs (an invalidation, a fill's store) may be waiting in the kernel for a
  // directory or page lock held by a process whose request the loop left unanswered (a signal
  // ends the loop with requests still queued): after a while the connection is aborted, as
  // `umount -f` does, which fails those requests and lets the notification return.
  struct CoherenceGuard {
    skein::client::MountDaemon& mount;
    const std::string& mountpoint;
    bool mounted = false;
    ~CoherenceGuard() {
      auto stopped = std::async(std::launch::async, [this] {
        mount.control.reset();
        mount.watch.reset();
        mount.kernel_cache->stop();
      });
      if (mounted && stopped.wait_for(kNotificationsStopWithin) == std::future_status::timeout) {
        spdlog::warn(
            "unmounting {}: a cache notification is stuck in the kernel behind a request "
            "left unanswered: aborting the FUSE connection",
            mountpoint);
        if (::umount2(mountpoint.c_str(), MNT_FORCE) != 0 && errno != EBUSY)
          spdlog::error("cannot abort the FUSE connection of {} ({}): `umount -f {}` as root will",
                        mountpoint, std::strerror(errno), mountpoint);
      }
      stopped.wait();
    }
  } coherence_guard{mount, args.mountpoint};
  if (fuse_session_mount(se, args.mountpoint.c_str()) != 0) {
    fail("cannot mount on " + args.mountpoint);
    return 1;
  }
  guard.mounted = true;
  coherence_guard.mounted = true;
  spdlog::info("mounted namespace '{}' of gateway {} on {} (mount id {})", args.ns, args.gateway,
               args.mountpoint, mount_id);

  if (fuse_daemonize(args.foreground ? 1 : 0) != 0) {
    fail("cannot become a daemon");
    return 1;
  }
  if (!args.foreground && !args.log_file.empty()) {  // the daemon's stderr is /dev/null now
    if (auto error = skein::client::stderr_to_file(args.log_file))
      spdlog::warn("cannot send stderr to {}: {}", args.log_file, *error);
  }
  std::string channel_error;
  auto channel = GatewayClient::connect(args.gateway, args.tls, channel_error);
  if (!channel) {  // checked before the fork; files changed since
    spdlog::error("cannot connect to gateway {}: {}", args.gateway, channel_error);
    return 1;
  }
  mount.gateway = std::make_unique<GatewayClient>(
      channel, GatewayOptions{args.ns, token, std::chrono::milliseconds(args.timeout_ms),
                              /*watch_connection=*/true, mount_id});
  mount.data = std::make_unique<skein::client::DataPath>(data_path_options(args));
  mount.session = std::make_unique<skein::client::MountSession>(
      *mount.gateway, *mount.data, mount.inodes, mount.cache, mount.open_inodes);
  mount.session->set_async_creates(!args.sync_creates);
  // Started by the init operation, once the kernel is there to be told.
  mount.watch = std::make_unique<skein::client::WatchStream>(
      channel, skein::client::WatchStream::Options{args.ns, mount_id, token}, *mount.kernel_cache);
  if (mount.control) {
    mount.control->start([&mount, &args, mount_id](const std::string& command, int fd,
                                                   const skein::client::ControlPeer& peer) {
      return control_command(mount, args, mount_id, command, fd, peer);
    });
  }

  fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(loop, 0);
  fuse_loop_cfg_set_idle_threads(loop, kMaxIdleThreads);
  fuse_loop_cfg_set_max_threads(loop, kMaxThreads);
  int ret = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);
  // ret > 0 is the signal that ended the loop: a requested unmount, not a failure.
  if (ret < 0) spdlog::error("FUSE session loop failed: {}", std::strerror(-ret));
  spdlog::info("unmounting {}", args.mountpoint);
  return ret < 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  skein::wire::tune_grpc_process();
  MountArgs args;
  CLI::App app{"skein-mount: mounts a namespace of a skein gateway through FUSE."};
  app.add_option("gateway", args.gateway, "Gateway address, host:port");
  app.add_option("mountpoint", args.mountpoint, "Directory to mount on");
  app.add_option("--namespace", args.ns, "Namespace to mount")->capture_default_str();
  app.add_flag("-f,--foreground", args.foreground, "Stay in the foreground");
  app.add_option("-o", args.options, "Mount options, comma-separated (FUSE's, e.g. allow_other)")
      ->allow_extra_args(false);
  app.add_option(
      "--job", args.job,
      "Mount job JOBID's namespace, fetching a mount credential with the node certificate "
      "(--cert-file, mutual TLS) instead of a token file");
  app.add_option("--token-file", args.token_file,
                 "File holding the namespace's token (mode 0600; needed)");
  app.add_option("--ca-file", args.tls.ca_file,
                 "CA certificate (PEM) that signed the gateway's certificate");
  app.add_option("--cert-file", args.tls.cert_file,
                 "This node's client certificate (PEM), for a gateway with mutual TLS");
  app.add_option("--key-file", args.tls.key_file,
                 "The client certificate's private key (PEM, mode 0600)");
  app.add_option("--tls-server-name", args.tls.server_name,
                 "Name to expect in the gateway's certificate (default: the host dialled)");
  app.add_flag("--insecure", args.tls.insecure,
               "Plaintext gRPC, for a gateway with insecure = true (never across an untrusted "
               "network)");
  app.add_option("--log-file", args.log_file, "Log here (needed to see logs once daemonized)");
  app.add_option("--log-level", args.log_level, "trace, debug, info, warn, error, critical, off")
      ->capture_default_str();
  app.add_option("--timeout-ms", args.timeout_ms, "Deadline of every gateway call")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--read-ahead-mb", args.read_ahead_mb,
                 "Most a file reads ahead of a sequential reader, in MiB (0: no read-ahead)")
      ->capture_default_str();
  app.add_option("--write-behind-mb", args.write_behind_mb,
                 "Most a file holds of writes not yet acknowledged, in MiB (0: write through)")
      ->capture_default_str();
  app.add_flag("--sync-creates", args.sync_creates,
               "Wait for the server at every create (default: a create for writing only is "
               "answered at once, and made with its first write or at close)");
  app.add_option("--kernel-readahead-kb", args.kernel_readahead_kb,
                 "The kernel's read-ahead for the mount, in KiB (needs root; 0: leave FUSE's)")
      ->capture_default_str();
  app.add_option("--cache-ttl", args.cache_ttl,
                 "Entry and attribute lifetime (seconds) while the gateway's Watch stream is up")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--know-names", args.know_names,
                 "Answer lookups of absent names in a directory whose names the mount knows "
                 "without asking the gateway (the lookup the kernel makes before every create): "
                 "'made', those of directories this mount made, and 'auto', also those learnt "
                 "from a listing after two misses in a directory, both while the gateway's remote "
                 "watchers report every change on the namespace's servers (a name made there "
                 "appears within 50-100 ms); 'always' (without watchers such a name appears only "
                 "once revalidation finds it); or 'never'")
      ->capture_default_str()
      ->check(CLI::IsMember({"made", "auto", "always", "never"}));
  app.add_flag("--deferred-open,!--no-deferred-open", args.deferred_open,
               "Open a file for reading without asking the gateway when the mount holds its "
               "current attributes (Watch stream up, readable by all); the gateway opens it at the "
               "first read, by path. As on NFS, a file removed through another mount between the "
               "open and the first read then fails that read (ENOENT). On by default")
      ->capture_default_str();
  app.add_flag("--dir-read-ahead,!--no-dir-read-ahead", args.dir_read_ahead,
               "After a few files of one directory were read whole one after another (cat in a "
               "loop, grep -r, imports), fetch the directory's listing and the contents of its "
               "small files (up to 4 MiB) in a few calls, and answer the next files' lookups, "
               "opens and reads from them while the gateway's remote watchers report every change "
               "on the namespace's servers; a change reported of a file there drops what was read "
               "ahead of it, one of the directory itself (or this mount's own there) all of it. On "
               "by default")
      ->capture_default_str();
  app.add_option("--safe-ttl", args.safe_ttl,
                 "Entry and attribute lifetime (seconds) while the Watch stream is down")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--control-dir", args.control_dir,
                 "Directory of control sockets (default /run/skein for root, else "
                 "$XDG_RUNTIME_DIR/skein or /tmp/skein-UID; --drop-caches and --status also look "
                 "in /run/skein)");
  auto* drop = app.add_option("--drop-caches", args.drop_caches,
                              "Do not mount: drop every cache of the mount at MOUNTPOINT")
                   ->type_name("MOUNTPOINT");
  app.add_option("--status", args.status,
                 "Do not mount: show the state of the mount at MOUNTPOINT (watch, TTLs, inodes)")
      ->type_name("MOUNTPOINT")
      ->excludes(drop);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is fine; a usage error is 2
  }

  if (!args.drop_caches.empty() || !args.status.empty()) return send_control_command(args);
  if (args.gateway.empty() || args.mountpoint.empty()) {
    fail("a gateway address and a mount point are needed (see --help)");
    return 2;
  }

  skein::report_fatal_signals(kProgram);
  if (!skein::setup_logging(kProgram, args.log_level)) {
    fail("unknown log level '" + args.log_level + "'");
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(args.mountpoint, ec)) {
    if (ec.value() == ENOTCONN)
      fail("mount point " + args.mountpoint +
           ": the mount there has ended (transport endpoint is not connected): unmount it first "
           "(fusermount3 -u " +
           args.mountpoint + ")");
    else if (ec)
      fail("mount point " + args.mountpoint + ": " + ec.message());
    else
      fail("mount point " + args.mountpoint + " is not a directory");
    return 1;
  }
  // The daemon runs from "/" (fuse_daemonize), and reads the TLS files again later (at connect,
  // and when they are renewed): keep paths absolute.
  args.mountpoint = std::filesystem::absolute(args.mountpoint).lexically_normal().string();
  for (std::string* path :
       {&args.tls.ca_file, &args.tls.cert_file, &args.tls.key_file, &args.control_dir})
    if (!path->empty()) *path = std::filesystem::absolute(*path).lexically_normal().string();
  if (!args.job.empty() && !args.token_file.empty()) {
    fail("--job fetches the job's credential: give it without --token-file");
    return 2;
  }
  if (args.job.empty() && args.token_file.empty()) {
    fail(
        "a token file is needed (--token-file FILE): every namespace has a token "
        "(or --job JOBID, for a job's namespace, with a node certificate)");
    return 2;
  }
  if (auto problem = skein::wire::client_tls_problem(args.tls)) {
    fail(*problem);
    return 1;
  }
  std::string token;
  if (!args.job.empty()) {
    if (args.tls.cert_file.empty()) {
      fail(
          "--job needs the node's certificate (--cert-file, --key-file): the gateway gives a "
          "job's mount credential to nodes only");
      return 2;
    }
    auto c = fetch_job_credential(args);
    if (!c) return 1;
    args.ns = c->ns;
    args.job_user = c->uid;
    token = std::move(c->token);
  } else {
    auto token_read = read_token(args.token_file);
    if (!token_read) return 1;
    token = std::move(*token_read);
  }
  if (args.tls.insecure && !args.tls.ca_file.empty()) {
    fail("--insecure and --ca-file contradict each other: choose TLS or plaintext");
    return 2;
  }
  if (!args.log_file.empty()) {
    args.log_file = std::filesystem::absolute(args.log_file).string();
    if (auto error = skein::client::log_to_file(args.log_file)) {
      fail("cannot open log file " + args.log_file + ": " + *error);
      return 1;
    }
  }

  if (!gateway_serves_namespace(args, token)) return 1;
  const int rc = run(args, token);
  // Unmounted, and everything of the mount's let go. gRPC's own threads may still be at work (a
  // reconnect to a gateway that is down starts a TLS handshake): the exit handlers would tear
  // OpenSSL down under them, a SIGSEGV at every such unmount. The log is all that is left.
  spdlog::shutdown();
  std::fflush(nullptr);
  _exit(rc);
}
