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

// A fresh directory for one test under $SKEIN_TEST_TMP (or /tmp/skein-tests).
std::string make_test_dir(const std::string& name);

std::string source_dir();
std::string build_dir();

class LocalCluster {
 public:
  struct Options {
    int servers = 3;
    int mounts = 1;
    int latency_ms = 0;
  };
  // Starts a cluster; on failure returns null and puts skein-local's output in `error`.
  static std::unique_ptr<LocalCluster> start(const std::string& name, Options opts,
                                             std::string& error);
  ~LocalCluster();

  const std::string& state() const { return state_; }
  std::string mount(int i = 0) const { return list("SKEIN_MOUNTS").at(size_t(i)); }
  std::string export_dir(int i) const { return list("SKEIN_EXPORTS").at(size_t(i)); }
  std::string env(const std::string& key) const;
  std::vector<std::string> list(const std::string& key) const;

  // Kills storage server i with all its sessions / starts it again on the same port.
  bool stop_server(int i);
  bool start_server(int i);
  // The gateway's process id, from its pid file.
  int gateway_pid() const;

 private:
  std::string state_;
  std::map<std::string, std::string> env_;
};

}  // namespace skein::test
