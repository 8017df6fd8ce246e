// skein-mount: mounts one namespace of a skein gateway through FUSE.
// Order matters: the gateway is checked before anything is mounted (a bad address or namespace
// fails the command, leaving no mount behind), and the gRPC channel the mount uses is created only
// after the daemon has forked, because gRPC's threads do not survive a fork.
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "fuse_ops.hpp"
#include "gateway_client.hpp"
#include "log_file.hpp"
#include "skein/logging.hpp"

namespace {

using skein::client::GatewayClient;
using skein::client::GatewayOptions;
using skein::client::NamespaceCheck;

constexpr char kProgram[] = "skein-mount";
constexpr std::chrono::milliseconds kMountCheckDeadline{5000};
constexpr unsigned kMaxIdleThreads = 32;
// Each thread may wait up to the gateway timeout; allow enough of them to keep I/O flowing.
constexpr unsigned kMaxThreads = 64;

struct MountArgs {
  std::string gateway;
  std::string mountpoint;
  std::string ns = "default";
  bool foreground = false;
  std::vector<std::string> options;  // each a -o argument, comma-separated
  std::string token_file;
  std::string log_file;
  std::string log_level = "info";
  int timeout_ms = 15000;
};

void fail(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
}

std::string trim(const std::string& s) {
  const char* space = " \t\r\n";
  auto begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

std::optional<std::string> read_token(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    fail("cannot read token file " + path + ": " + std::strerror(errno));
    return std::nullopt;
  }
  std::stringstream content;
  content << in.rdbuf();
  std::string token = trim(content.str());
  if (token.empty()) {
    fail("token file " + path + " is empty");
    return std::nullopt;
  }
  return token;
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
             "' (check --token-file): " + check.detail;
    case Outcome::kFailed:
      break;
  }
  return "gateway " + args.gateway + " cannot serve namespace '" + args.ns + "': " + check.detail;
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
    GatewayClient client(GatewayClient::connect(args.gateway),
                         GatewayOptions{args.ns, token, kMountCheckDeadline});
    NamespaceCheck check = client.check_namespace(kMountCheckDeadline);
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

std::string fuse_mount_options(const MountArgs& args) {
  std::string opts = "fsname=" + escape_option("skein:" + args.ns + "@" + args.gateway) +
                     ",subtype=skein,default_permissions,max_read=" + std::to_string(1 << 20);
  for (const std::string& group : args.options) {
    std::stringstream items(group);
    std::string opt;
    while (std::getline(items, opt, ',')) {
      if (!is_fstab_only(opt)) opts += "," + opt;
    }
  }
  return opts;
}

int run(const MountArgs& args, const std::string& token) {
  skein::client::Mount mount;
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
  if (fuse_session_mount(se, args.mountpoint.c_str()) != 0) {
    fail("cannot mount on " + args.mountpoint);
    return 1;
  }
  guard.mounted = true;
  spdlog::info("mounted namespace '{}' of gateway {} on {}", args.ns, args.gateway,
               args.mountpoint);

  if (fuse_daemonize(args.foreground ? 1 : 0) != 0) {
    fail("cannot become a daemon");
    return 1;
  }
  mount.gateway = std::make_unique<GatewayClient>(
      GatewayClient::connect(args.gateway),
      GatewayOptions{args.ns, token, std::chrono::milliseconds(args.timeout_ms),
                     /*watch_connection=*/true});

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
  MountArgs args;
  CLI::App app{"skein-mount: mounts a namespace of a skein gateway through FUSE."};
  app.add_option("gateway", args.gateway, "Gateway address, host:port")->required();
  app.add_option("mountpoint", args.mountpoint, "Directory to mount on")->required();
  app.add_option("--namespace", args.ns, "Namespace to mount")->capture_default_str();
  app.add_flag("-f,--foreground", args.foreground, "Stay in the foreground");
  app.add_option("-o", args.options, "Mount options, comma-separated (FUSE's, e.g. allow_other)")
      ->allow_extra_args(false);
  app.add_option("--token-file", args.token_file, "File holding the namespace token")
      ->check(CLI::ExistingFile);
  app.add_option("--log-file", args.log_file, "Log here (needed to see logs once daemonized)");
  app.add_option("--log-level", args.log_level, "trace, debug, info, warn, error, critical, off")
      ->capture_default_str();
  app.add_option("--timeout-ms", args.timeout_ms, "Deadline of every gateway call")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is fine; a usage error is 2
  }

  if (!skein::setup_logging(kProgram, args.log_level)) {
    fail("unknown log level '" + args.log_level + "'");
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(args.mountpoint, ec)) {
    fail("mount point " + args.mountpoint + " is not a directory");
    return 1;
  }
  // The daemon runs from "/": keep paths absolute.
  args.mountpoint = std::filesystem::absolute(args.mountpoint).lexically_normal().string();
  std::string token;
  if (!args.token_file.empty()) {
    auto read = read_token(args.token_file);
    if (!read) return 1;
    token = std::move(*read);
  }
  if (!args.log_file.empty()) {
    args.log_file = std::filesystem::absolute(args.log_file).string();
    if (auto error = skein::client::log_to_file(args.log_file)) {
      fail("cannot open log file " + args.log_file + ": " + *error);
      return 1;
    }
  }

  if (!gateway_serves_namespace(args, token)) return 1;
  return run(args, token);
}
