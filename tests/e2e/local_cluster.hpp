// LocalCluster: a real skein cluster for one end-to-end test suite, started and stopped with
// deploy/skein-local (real sshd servers, the gateway, FUSE mounts) in a state directory under
// $SKEIN_TEST_TMP. Its destructor takes everything down, whatever the test did.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace skein::test {

// Runs a shell command; returns its exit status and, in `output`, stdout and stderr together.
int run_command(const std::string& cmd, std::string* output = nullptr);

// Whether process `pid` exists and has not ended (a zombie has).
bool process_runs(int pid);

// A fresh directory for one test under $SKEIN_TEST_TMP (or /tmp/skein-tests).
std::string make_test_dir(const std::string& name);

std::string source_dir();
std::string build_dir();

// A gateway configuration of a cluster's without its [jobs] section (which skein-local writes
// last): for a test's second gateway, since one job database serves one gateway.
std::string without_jobs(std::string config_text);

// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

// A skein-gateway started with a test's own configuration; killed on destruction.
class GatewayProcess {
 public:
  // Starts the gateway with `config` (which must listen on `address`) and waits until it accepts
  // connections. On failure returns null with the log in `error`.
  static std::unique_ptr<GatewayProcess> start(const std::string& config,
                                               const std::string& address, const std::string& log,
                                               std::string& error);
  ~GatewayProcess();
  const std::string& address() const { return address_; }
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  std::string address_;
};

// A skein-mount of one namespace; unmounted (lazily if it must) on destruction.
class FuseMount {
 public:
  static std::unique_ptr<FuseMount> start(const std::string& gateway, const std::string& mountpoint,
                                          const std::string& ns, std::string& error,
                                          const std::string& extra_args = "");
  ~FuseMount();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class LocalCluster {
 public:
  struct Options {
    int servers = 3;
    int mounts = 1;
    int latency_ms = 0;
    std::string ssh_user{};  // the storage servers' account (skein-local --ssh-user); "": ours
  };
  // Starts a cluster; on failure returns null and puts skein-local's output in `error`.
  static std::unique_ptr<LocalCluster> start(const std::string& name, Options opts,
                                             std::string& error);
  ~LocalCluster();

  const std::string& state() const { return state_; }
  std::string mount(int i = 0) const { return list("SKEIN_MOUNTS").at(static_cast<size_t>(i)); }
  std::string export_dir(int i) const { return list("SKEIN_EXPORTS").at(static_cast<size_t>(i)); }
  // Server i's directory for its parts of /striped's files (backend stripe<i>).
  std::string stripe_dir(int i) const {
    return list("SKEIN_STRIPE_DIRS").at(static_cast<size_t>(i));
  }
  std::string env(const std::string& key) const;
  std::vector<std::string> list(const std::string& key) const;

  // The credentials of the cluster, for tests that start gateways and mounts of their own:
  // the token file of namespace "default" (tests reuse it for their namespaces), skein-mount's
  // arguments for it and the node certificate, and the TOML a test's own [gateway] table needs
  // for the cluster's TLS set-up (mutual TLS with the cluster's CA), written after its keys.
  std::string token_file() const { return env("SKEIN_TOKEN_FILE"); }
  std::string mount_credentials(const std::string& token_file = "") const;
  std::string gateway_tls_toml() const;
  // Environment assignments (`K='v' ...`, for a shell command's start) that give skeinctl the
  // admin token file, the CA and the admin certificate.
  std::string admin_env() const;

  // Kills storage server i with all its sessions / starts it again on the same port.
  bool stop_server(int i);
  bool start_server(int i);
  // Freezes storage server i (SIGSTOP: a hung server, connections open) / lets it go on.
  bool freeze_server(int i);
  bool thaw_server(int i);
  // Thaws storage server i when it goes: a test that froze it and stops half way leaves it
  // running for the tests after it in its suite.
  class ThawOnExit {
   public:
    ThawOnExit(LocalCluster& cluster, int i) : cluster_(cluster), i_(i) {}
    ~ThawOnExit() { cluster_.thaw_server(i_); }
    ThawOnExit(const ThawOnExit&) = delete;
    ThawOnExit& operator=(const ThawOnExit&) = delete;

   private:
    LocalCluster& cluster_;
    const int i_;
  };
  // Stops the gateway (SIGTERM; SIGKILL with `kill`, or to tell skein-local of a gateway the test
  // killed itself) / starts it again on the same port, with the same configuration file.
  bool stop_gateway(bool kill = false);
  bool start_gateway();
  // The gateway's process id, from its pid file.
  int gateway_pid() const;

 private:
  // `skein-local COMMAND I --state STATE`; true when it succeeded.
  bool server_command(const char* command, int i);
  // When a test of the program has failed: the end of the log of each daemon (the gateway, a
  // mount) whose process is gone, on stderr, for it is where a crash left its report.
  void report_dead_daemons() const;
  std::string state_;
  std::map<std::string, std::string> env_;
};

}  // namespace skein::test
