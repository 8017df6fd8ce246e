// LocalCluster and test helpers; see local_cluster.hpp.
#include "local_cluster.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace skein::test {

std::string source_dir() { return SKEIN_SOURCE_DIR; }
std::string build_dir() { return SKEIN_BINARY_DIR; }

int run_command(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = pclose(p);
  if (output) *output = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool process_runs(int pid) {
  // A daemon's parent is init, which may reap it late: a zombie has ended too.
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const auto end_of_name = stat.rfind(')');  // "pid (comm) state ..."
  if (end_of_name == std::string::npos || end_of_name + 2 >= stat.size()) return false;
  const char state = stat[end_of_name + 2];
  return state != 'Z' && state != 'X';
}

std::string make_test_dir(const std::string& name) {
  const char* root = getenv("SKEIN_TEST_TMP");
  std::string base = root && *root ? root : "/tmp/skein-tests";
  mkdir(base.c_str(), 0755);
  std::string tmpl = base + "/" + name + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) return "";
  chmod(tmpl.c_str(), 0755);  // tests also act as unprivileged users
  return tmpl;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

namespace {
bool port_accepts(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

std::string without_jobs(std::string text) {
  auto at = text.find("\n[jobs]");
  if (at != std::string::npos) text.erase(at + 1);
  return text;
}

std::unique_ptr<GatewayProcess> GatewayProcess::start(const std::string& config,
                                                      const std::string& address,
                                                      const std::string& log, std::string& error) {
  std::unique_ptr<GatewayProcess> g(new GatewayProcess());
  g->address_ = address;
  int port = std::stoi(address.substr(address.rfind(':') + 1));
  std::string bin = build_dir() + "/gateway/skein-gateway";
  pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "w", stdout);
    dup2(fileno(stdout), 2);
    execl(bin.c_str(), bin.c_str(), "--config", config.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  g->pid_ = pid;
  for (int i = 0; i < 200; ++i) {
    if (port_accepts(port)) return g;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      g->pid_ = -1;
      error = "gateway exited:\n" + slurp(log);
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  error = "gateway did not listen within 20 s:\n" + slurp(log);
  return nullptr;
}

GatewayProcess::~GatewayProcess() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::unique_ptr<FuseMount> FuseMount::start(const std::string& gateway,
                                            const std::string& mountpoint, const std::string& ns,
                                            std::string& error, const std::string& extra_args) {
  mkdir(mountpoint.c_str(), 0755);
  std::string cmd = "'" + build_dir() + "/client/skein-mount' " + gateway + " '" + mountpoint +
                    "' --namespace '" + ns + "' --log-file '" + mountpoint + ".log' " + extra_args;
  if (run_command(cmd, &error) != 0) return nullptr;
  std::unique_ptr<FuseMount> m(new FuseMount());
  m->path_ = mountpoint;
  return m;
}

FuseMount::~FuseMount() {
  if (run_command("fusermount3 -u '" + path_ + "'") != 0) run_command("umount -l '" + path_ + "'");
}

namespace {
std::string skein_local() {
  return "SKEIN_BUILD_DIR='" + build_dir() + "' '" + source_dir() + "/deploy/skein-local'";
}
}  // namespace

std::unique_ptr<LocalCluster> LocalCluster::start(const std::string& name, Options opts,
                                                  std::string& error) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->state_ = make_test_dir(name);
  std::ostringstream cmd;
  cmd << skein_local() << " up --no-build --state '" << c->state_ << "' --servers " << opts.servers
      << " --mounts " << opts.mounts;
  if (opts.latency_ms) cmd << " --latency-ms " << opts.latency_ms;
  if (!opts.ssh_user.empty()) cmd << " --ssh-user '" << opts.ssh_user << "'";
  if (run_command(cmd.str(), &error) != 0) {
    return nullptr;  // the destructor takes down what did start
  }
  // Read DIR/env: lines of `export KEY='value'`.
  std::string env_cmd = ". '" + c->state_ + "/env' && env | grep '^SKEIN_'";
  std::string out;
  if (run_command("bash -c \"" + env_cmd + "\"", &out) != 0) {
    error = "cannot read " + c->state_ + "/env: " + out;
    return nullptr;
  }
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) c->env_[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return c;
}

LocalCluster::~LocalCluster() {
  if (state_.empty()) return;
  report_dead_daemons();
  run_command(skein_local() + " down --state '" + state_ + "'");
}

void LocalCluster::report_dead_daemons() const {
  // Only where something failed: tests that stop a daemon on purpose pass.
  const auto* unit = ::testing::UnitTest::GetInstance();
  const auto* test = unit->current_test_info();
  if (unit->failed_test_count() == 0 && !(test && test->result()->Failed())) return;
  auto report = [](const std::string& what, const std::string& pid_file, const std::string& log) {
    std::ifstream in(pid_file);
    int pid = 0;
    if (!(in >> pid) || pid <= 0 || process_runs(pid)) return;
    std::string tail;
    run_command("tail -n 60 '" + log + "'", &tail);
    std::fprintf(stderr, "%s (pid %d) is no longer running; the end of %s:\n%s\n", what.c_str(),
                 pid, log.c_str(), tail.c_str());
  };
  report("the gateway", state_ + "/gateway.pid", state_ + "/gateway.log");
  for (size_t j = 0; j < list("SKEIN_MOUNTS").size(); ++j)
    report("mount " + std::to_string(j), state_ + "/mount-" + std::to_string(j) + ".pid",
           state_ + "/mount-" + std::to_string(j) + ".log");
}

std::string LocalCluster::env(const std::string& key) const {
  auto it = env_.find(key);
  return it == env_.end() ? "" : it->second;
}

std::vector<std::string> LocalCluster::list(const std::string& key) const {
  std::vector<std::string> out;
  std::istringstream in(env(key));
  std::string item;
  while (in >> item) out.push_back(item);
  return out;
}

std::string LocalCluster::mount_credentials(const std::string& token) const {
  std::string out = " --token-file '" + (token.empty() ? token_file() : token) + "'";
  if (env("SKEIN_INSECURE") == "1") return out + " --insecure";
  return out + " --ca-file '" + env("SKEIN_CA_FILE") + "' --cert-file '" + env("SKEIN_NODE_CERT") +
         "' --key-file '" + env("SKEIN_NODE_KEY") + "'";
}

std::string LocalCluster::gateway_tls_toml() const {
  if (env("SKEIN_INSECURE") == "1") return "insecure = true\n";
  std::string tls = state_ + "/tls/";
  return "[gateway.tls]\ncert_file = \"" + tls + "gateway.crt\"\nkey_file = \"" + tls +
         "gateway.key\"\nclient_ca_file = \"" + tls +
         "ca.crt\"\nnode_clients = [\"CN=skein-node-*\"]\nadmin_clients = [\"CN=skein-admin\"]\n";
}

std::string LocalCluster::admin_env() const {
  std::string out;
  for (const char* key : {"SKEIN_ADMIN_TOKEN_FILE", "SKEIN_CA_FILE", "SKEIN_ADMIN_CERT",
                          "SKEIN_ADMIN_KEY", "SKEIN_INSECURE"}) {
    if (!env(key).empty()) out += std::string(key) + "='" + env(key) + "' ";
  }
  return out;
}

bool LocalCluster::server_command(const char* command, int i) {
  return run_command(skein_local() + " " + command + " " + std::to_string(i) + " --state '" +
                     state_ + "'") == 0;
}

bool LocalCluster::stop_server(int i) { return server_command("stop-server", i); }
bool LocalCluster::start_server(int i) { return server_command("start-server", i); }
bool LocalCluster::freeze_server(int i) { return server_command("freeze-server", i); }
bool LocalCluster::thaw_server(int i) { return server_command("thaw-server", i); }

bool LocalCluster::stop_gateway(bool kill) {
  return run_command(skein_local() + " stop-gateway" + (kill ? " --kill" : "") + " --state '" +
                     state_ + "'") == 0;
}
bool LocalCluster::start_gateway() {
  return run_command(skein_local() + " start-gateway --state '" + state_ + "'") == 0;
}

int LocalCluster::gateway_pid() const {
  std::ifstream in(state_ + "/gateway.pid");
  int pid = 0;
  in >> pid;
  return pid;
}

}  // namespace skein::test
