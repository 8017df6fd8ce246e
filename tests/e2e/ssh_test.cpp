// Both SSH transports, libssh and openssh (the system's ssh client), against real OpenSSH sshd
// servers on loopback, each test with a server configured for what it checks: SFTP data both
// ways (short reads at a file's end, writes beyond the server's window under a stream of reads),
// unknown and changed host keys, a host key signed by a CA (@cert-authority: openssh; libssh's
// refusal), a user certificate, a key held only by an ssh-agent of the test's, a Host alias of an
// ssh_config, ProxyJump through a second sshd (openssh), keys others can read, unauthorized keys,
// keepalives of an idle connection, a command's channel (the remote watcher's), and a server that
// dies or hangs mid-stream.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "backend/remote_file.hpp"
#include "backend/sftp_backend.hpp"
#include "coherence/remote_watcher.hpp"
#include "local_cluster.hpp"
#include "sftp/connection.hpp"
#include "sftp/openssh_channel.hpp"

namespace skein::test {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string random_bytes(size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    memcpy(s.data() + i, &v, 8);
  }
  return s;
}

// One sshd on a free loopback port, with its own host keys, an authorized client key and an
// export directory; killed with its sessions when it goes.
class SshServer {
 public:
  // host_key_types: ssh-keygen -t values ("ed25519", "ecdsa", "rsa"); extra: sshd_config lines.
  // before_start: given the server's directory and host keys, returns more sshd_config lines
  // (for files it makes there first: a host certificate, a CA of user keys).
  using BeforeStart =
      std::function<std::string(const std::string& dir, const std::vector<std::string>& keys)>;
  SshServer(const std::string& name, std::vector<std::string> host_key_types,
            const std::string& extra = "", BeforeStart before_start = nullptr) {
    dir_ = make_test_dir(name);
    export_ = dir_ + "/export";
    mkdir(export_.c_str(), 0755);
    port_ = free_port();
    std::string config = "Port " + std::to_string(port_) + "\nListenAddress 127.0.0.1\nPidFile " +
                         dir_ + "/sshd.pid\n" + "AuthorizedKeysFile " + dir_ +
                         "/authorized_keys\n" +
                         "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                         "KbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\n"
                         "UseDNS no\nSubsystem sftp internal-sftp\nMaxSessions 50\n"
                         // A command's bash reads no ~/.bashrc (see deploy/skein-local).
                         "SetEnv SHLVL=1\n" +
                         extra + "\n";
    for (auto& t : host_key_types) {
      const std::string key = dir_ + "/host_" + t;
      keygen(t, key);
      config += "HostKey " + key + "\n";
      host_keys_.push_back(key);
    }
    client_key_ = add_client_key("ed25519", "id_ed25519", true);
    if (before_start) config += before_start(dir_, host_keys_) + "\n";
    std::ofstream(dir_ + "/sshd_config") << config;
    write_known_hosts(host_keys_);
    mkdir("/run/sshd", 0755);
    std::string out;
    if (run_command("/usr/sbin/sshd -f " + dir_ + "/sshd_config -E " + dir_ + "/sshd.log", &out) !=
        0) {
      ADD_FAILURE() << "sshd did not start: " << out << slurp(dir_ + "/sshd.log");
      return;
    }
    for (int i = 0; i < 100 && slurp(dir_ + "/sshd.pid").empty(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pid_ = atoi(slurp(dir_ + "/sshd.pid").c_str());
  }
  ~SshServer() { stop(); }

  // Kills the server and every session it forked.
  void stop() {
    if (pid_ <= 0) return;
    run_command("pkill -KILL -P " + std::to_string(pid_));
    kill(pid_, SIGKILL);
    pid_ = -1;
  }

  // Makes a client key; `authorized`: the server lets it in.
  std::string add_client_key(const std::string& type, const std::string& name, bool authorized,
                             const std::string& format = "") {
    const std::string key = dir_ + "/" + name;
    keygen(type, key, format);
    if (authorized) std::ofstream(dir_ + "/authorized_keys", std::ios::app) << slurp(key + ".pub");
    return key;
  }
  // known_hosts holding these host keys (private key paths) for this server.
  void write_known_hosts(const std::vector<std::string>& keys, const std::string& path = "") {
    std::ofstream out(path.empty() ? known_hosts() : path);
    for (auto& k : keys) out << "[127.0.0.1]:" << port_ << " " << slurp(k + ".pub");
  }

  sftp::Endpoint endpoint(sftp::SshTransport transport = sftp::SshTransport::libssh) const {
    sftp::Endpoint ep;
    ep.host = "127.0.0.1";
    ep.port = port_;
    ep.user = "root";
    ep.identity_file = client_key_;
    ep.known_hosts = known_hosts();
    ep.timeout = std::chrono::milliseconds(5000);
    ep.transport = transport;
    return ep;
  }
  int port() const { return port_; }
  int pid() const { return pid_; }
  std::string known_hosts() const { return dir_ + "/known_hosts"; }
  const std::string& export_dir() const { return export_; }
  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& host_keys() const { return host_keys_; }
  void set_client_key(const std::string& k) { client_key_ = k; }
  bool running() const { return pid_ > 0; }

 private:
  static void keygen(const std::string& type, const std::string& path,
                     const std::string& format = "") {
    std::string out;
    const std::string bits = type == "rsa" ? " -b 3072" : "";
    ASSERT_EQ(
        run_command("ssh-keygen -q -N '' -t " + type + bits + " " + format + " -f " + path, &out),
        0)
        << out;
  }
  std::string dir_, export_, client_key_;
  std::vector<std::string> host_keys_;
  int port_ = 0;
  int pid_ = -1;
};

// Writes `data` to `rel` on the backend in 1 MiB writes, then reads it back in 1 MiB reads.
std::string write_then_read(Backend& backend, const std::string& rel, const std::string& data) {
  auto f = backend.open(rel, O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (!f.ok()) return "open failed: errno " + std::to_string(f.error());
  auto owner = std::make_shared<std::string>(data);
  for (size_t at = 0; at < data.size(); at += 1 << 20) {
    const size_t n = std::min<size_t>(1 << 20, data.size() - at);
    auto w = (*f)->write(at, SharedBytes({std::string_view(*owner).substr(at, n)}, owner));
    if (!w.ok() || *w != n) return "write failed at " + std::to_string(at);
  }
  std::string back;
  for (size_t at = 0; at < data.size(); at += 1 << 20) {
    auto r = (*f)->read(at, 1 << 20);
    if (!r.ok()) return "read failed at " + std::to_string(at);
    back += r->flatten();
  }
  (void)(*f)->close();
  return back;
}

std::shared_ptr<SftpBackend> backend_on(const SshServer& server, sftp::SshTransport transport) {
  BackendConfig cfg;
  cfg.name = "b";
  cfg.endpoint = server.endpoint(transport);
  cfg.root = server.export_dir();
  cfg.connections = 2;
  return std::make_shared<SftpBackend>(cfg);
}

// An ssh-agent of the test's own, on a socket in `dir`; killed when it goes.
class Agent {
 public:
  explicit Agent(const std::string& dir) : socket_(dir + "/agent.sock") {
    std::string out;
    if (run_command("ssh-agent -a " + socket_, &out) != 0) {
      ADD_FAILURE() << "ssh-agent did not start: " << out;
      return;
    }
    const size_t at = out.find("SSH_AGENT_PID=");
    if (at != std::string::npos) pid_ = atoi(out.c_str() + at + 14);
  }
  ~Agent() {
    if (pid_ > 0) kill(pid_, SIGTERM);
  }
  bool add(const std::string& key) {
    std::string out;
    const bool ok = run_command("SSH_AUTH_SOCK=" + socket_ + " ssh-add " + key, &out) == 0;
    if (!ok) ADD_FAILURE() << "ssh-add: " << out;
    return ok;
  }
  const std::string& socket() const { return socket_; }

 private:
  std::string socket_;
  int pid_ = -1;
};

std::string connect_error(const sftp::Endpoint& ep) {
  std::string error;
  auto conn = sftp::Connection::connect(ep, error);
  return conn ? "" : (error.empty() ? "(failed without a message)" : error);
}

class OnEachTransport : public ::testing::TestWithParam<sftp::SshTransport> {
 protected:
  sftp::SshTransport transport() const { return GetParam(); }
  bool openssh() const { return GetParam() == sftp::SshTransport::openssh; }
};

TEST_P(OnEachTransport, SftpDataCrossesIntactBothWays) {
  SshServer server("ssh-data", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(transport()), error);
  ASSERT_TRUE(conn) << error;
  EXPECT_EQ(conn->transport(), transport());
  EXPECT_TRUE(conn->has_extension("posix-rename@openssh.com"));
  EXPECT_GT(conn->limits().max_read, 32768u);

  auto backend = backend_on(server, transport());
  const std::string data = random_bytes(16 << 20, 1);
  EXPECT_TRUE(write_then_read(*backend, "/data", data) == data);
  EXPECT_TRUE(slurp(server.export_dir() + "/data") == data);
}

// Small WRITEs go to the server joined in one channel write (connection.hpp, kJoinedWrite): a
// call of scattered extents of 1 byte to 40 KiB, some joined, some not, some straddling the join's
// limit, lands byte for byte where each was written.
TEST_P(OnEachTransport, ScatteredSmallWritesLandIntact) {
  SshServer server("ssh-scattered", {"ed25519"});
  ASSERT_TRUE(server.running());
  auto backend = backend_on(server, transport());
  const std::string before = random_bytes(8 << 20, 3);
  ASSERT_TRUE(write_then_read(*backend, "/scattered", before) == before);
  auto f = backend->open("/scattered", O_RDWR, 0);
  ASSERT_TRUE(f.ok());
  std::string want = before;
  std::vector<BackendFile::Extent> extents;
  uint32_t total = 0;
  for (uint64_t i = 0; i < 200; ++i) {
    const size_t size = i % 10 == 9 ? 40 << 10 : 1 + (i * 2654435761u) % (12 << 10);
    const uint64_t offset = (i * 7919 % 200) * (40 << 10) + i % 7;  // none overlaps another
    auto owner = std::make_shared<std::string>(random_bytes(size, 100 + i));
    want.replace(offset, size, *owner);
    extents.push_back({offset, SharedBytes({std::string_view(*owner)}, owner)});
    total += static_cast<uint32_t>(size);
  }
  auto wrote = (*f)->write_extents(extents);
  ASSERT_TRUE(wrote.ok()) << "errno " << wrote.error();
  EXPECT_EQ(*wrote, total);
  ASSERT_TRUE((*f)->close().ok());
  EXPECT_TRUE(slurp(server.export_dir() + "/scattered") == want);
}

TEST_P(OnEachTransport, ReadsPastTheEndOfAFileComeBackAtOnce) {
  SshServer server("ssh-short-reads", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string data = random_bytes(100000, 5);
  std::ofstream(server.export_dir() + "/small") << data;
  auto backend = backend_on(server, transport());
  auto f = backend->open("/small", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::future<Result<SharedBytes>>> reads;
  for (int round = 0; round < 20; ++round) {
    for (uint64_t off :
         {static_cast<uint64_t>(0), static_cast<uint64_t>(1) << 20, static_cast<uint64_t>(2) << 20})
      reads.push_back(
          std::async(std::launch::async, [&, off] { return (*f)->read(off, 1 << 20); }));
    for (size_t i = reads.size() - 3; i < reads.size(); ++i) {
      auto r = reads[i].get();
      ASSERT_TRUE(r.ok());
      if (i % 3 == 0) {
        EXPECT_TRUE(r->flatten() == data);
      } else {
        EXPECT_EQ(r->size(), 0u);
      }
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST_P(OnEachTransport, WritesBeyondTheServersWindowGoOnUnderAStreamOfReads) {
  // One connection carries a stream of reads and writes larger than sshd's 2 MiB channel window:
  // the writer must keep taking replies while it waits for room, or both ends stall until the
  // deadline.
  SshServer server("ssh-write-under-reads", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string big = random_bytes(16 << 20, 6);
  std::ofstream(server.export_dir() + "/big") << big;
  BackendConfig cfg;
  cfg.name = "b";
  cfg.endpoint = server.endpoint(transport());
  // A stall lasts until the transport's timeout: a long one tells it from a slow host (CI has
  // taken 4 s for these writes).
  cfg.endpoint.timeout = std::chrono::seconds(20);
  cfg.root = server.export_dir();
  cfg.connections = 1;
  auto backend = std::make_shared<SftpBackend>(cfg);
  auto in = backend->open("/big", O_RDONLY, 0);
  auto out = backend->open("/out", O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(in.ok() && out.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> read_errors{0}, bad_data{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      for (uint64_t off = static_cast<uint64_t>(t) << 20; !stop;
           off = (off + (3 << 20)) % big.size()) {
        auto r = (*in)->read(off, 1 << 20);
        if (!r.ok())
          ++read_errors;
        else if (r->flatten() != std::string_view(big).substr(off, 1 << 20))
          ++bad_data;  // a short read must never pass for a whole one
      }
    });
  }
  auto owner = std::make_shared<std::string>(random_bytes(6 << 20, 7));
  const auto start = std::chrono::steady_clock::now();
  int write_errors = 0;
  for (int i = 0; i < 6; ++i) {
    auto w = (*out)->write(static_cast<uint64_t>(i) * owner->size(), SharedBytes({*owner}, owner));
    if (!w.ok() || *w != owner->size()) ++write_errors;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(write_errors, 0);
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_EQ(bad_data.load(), 0);
  EXPECT_LT(took, std::chrono::seconds(15));  // a stalled wait would last the 20 s timeout
}

TEST_P(OnEachTransport, UnknownAndChangedHostKeysAreRefused) {
  SshServer server("ssh-hostkey-refused", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::ofstream(server.known_hosts()) << "";
  std::string e = connect_error(server.endpoint(transport()));
  if (openssh()) {
    EXPECT_NE(e.find("No ED25519 host key is known for [127.0.0.1]:" +
                     std::to_string(server.port()) + " and you have requested strict checking"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("Host key verification failed"), std::string::npos) << e;
  } else {
    EXPECT_NE(e.find("is not in " + server.known_hosts() + " (unknown server); refusing"),
              std::string::npos)
        << e;
  }

  const std::string other = server.dir() + "/other_host";
  run_command("ssh-keygen -q -N '' -t ed25519 -f " + other);
  server.write_known_hosts({other});
  e = connect_error(server.endpoint(transport()));
  if (openssh()) {
    EXPECT_NE(e.find("REMOTE HOST IDENTIFICATION HAS CHANGED"), std::string::npos) << e;
    EXPECT_NE(e.find("Host key verification failed"), std::string::npos) << e;
  } else {
    EXPECT_NE(e.find("host key CHANGED"), std::string::npos) << e;
  }
}

TEST_P(OnEachTransport, AnUnauthorizedKeyIsRefusedWithAClearMessage) {
  SshServer server("ssh-identity-refused", {"ed25519"});
  ASSERT_TRUE(server.running());
  server.set_client_key(server.add_client_key("ed25519", "stranger", false));
  const std::string e = connect_error(server.endpoint(transport()));
  if (openssh()) {
    EXPECT_NE(e.find("Permission denied (publickey)"), std::string::npos) << e;
  } else {
    EXPECT_NE(e.find("public key authentication failed"), std::string::npos) << e;
    EXPECT_NE(e.find("stranger"), std::string::npos) << e;
  }
}

TEST_P(OnEachTransport, AKeyOthersCanReadIsRefusedBeforeAnyConnection) {
  SshServer server("ssh-key-mode", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string key = server.endpoint().identity_file;
  for (mode_t mode : {0640, 0644}) {
    chmod(key.c_str(), mode);
    const std::string e = connect_error(server.endpoint(transport()));
    EXPECT_NE(e.find("identity file " + key + " is accessible by group or others"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("chmod 600"), std::string::npos) << e;
  }
  chmod(key.c_str(), 0600);
  EXPECT_EQ(connect_error(server.endpoint(transport())), "");
}

TEST_P(OnEachTransport, AKeyHeldOnlyByAnSshAgentLogsIn) {
  SshServer server("ssh-agent", {"ed25519"});
  ASSERT_TRUE(server.running());
  // A key known to the server, loaded into an agent of the test's;
  // the backend names no identity file.
  const std::string key = server.dir() + "/id_agent";
  std::string out;
  ASSERT_EQ(run_command("ssh-keygen -q -t ed25519 -N '' -f " + key, &out), 0) << out;
  std::ofstream(server.dir() + "/authorized_keys", std::ios::app) << slurp(key + ".pub");
  Agent agent(server.dir());
  ASSERT_TRUE(agent.add(key));
  ::unlink(key.c_str());  // the agent is the only holder of the private key now
  sftp::Endpoint ep = server.endpoint(transport());
  ep.identity_file.clear();
  // Without the agent, nothing lets the gateway in.
  ep.agent_socket = server.dir() + "/no-agent.sock";
  EXPECT_NE(connect_error(ep), "");
  ep.agent_socket = agent.socket();
  EXPECT_EQ(connect_error(ep), "");
  auto conn = sftp::Connection::connect(ep, out);
  ASSERT_TRUE(conn) << out;
  EXPECT_TRUE(conn->call(sftp::PacketWriter(sftp::FXP_LSTAT).str(server.export_dir()).take()).ok());
}

TEST_P(OnEachTransport, AUserCertificateLogsIn) {
  // The server trusts a user CA and has no authorized key for the certificate's key.
  std::string ca_pub;
  SshServer server("ssh-user-cert", {"ed25519"}, "",
                   [&](const std::string& dir, const std::vector<std::string>&) {
                     run_command("ssh-keygen -q -N '' -t ed25519 -f " + dir + "/user_ca");
                     return "TrustedUserCAKeys " + dir + "/user_ca.pub";
                   });
  ASSERT_TRUE(server.running());
  const std::string key = server.add_client_key("ed25519", "id_cert", false);
  server.set_client_key(key);
  EXPECT_NE(connect_error(server.endpoint(transport())), "");  // no certificate yet
  std::string out;
  ASSERT_EQ(run_command("ssh-keygen -q -s " + server.dir() + "/user_ca -I skein-test -n root " +
                            key + ".pub",
                        &out),
            0)
      << out;
  // The certificate beside the key (id_cert-cert.pub) is found, as OpenSSH finds it.
  EXPECT_EQ(connect_error(server.endpoint(transport())), "");
  // Or named.
  ASSERT_EQ(::rename((key + "-cert.pub").c_str(), (server.dir() + "/named-cert.pub").c_str()), 0);
  sftp::Endpoint ep = server.endpoint(transport());
  ep.certificate_file = server.dir() + "/named-cert.pub";
  EXPECT_EQ(connect_error(ep), "");
}

TEST_P(OnEachTransport, AHostAliasOfTheBackendsSshConfigIsFollowed) {
  SshServer server("ssh-config-alias", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string config = server.dir() + "/ssh_config";
  std::ofstream(config) << "Host storage-one\n  HostName 127.0.0.1\n";
  sftp::Endpoint ep = server.endpoint(transport());
  ep.host = "storage-one";
  ep.ssh_config = config;
  EXPECT_EQ(connect_error(ep), "");
  ep.ssh_config.clear();  // the site's ssh_config knows no such host
  EXPECT_NE(connect_error(ep), "");
}

TEST_P(OnEachTransport, AnIdleConnectionAnswersTheServersKeepalives) {
  // An sshd with ClientAliveInterval drops a client that leaves its keepalives unanswered, here
  // after about 4 s (sshd checks every other second). A pooled connection with nothing to do must
  // still answer them.
  SshServer server("ssh-keepalive", {"ed25519"}, "ClientAliveInterval 1\nClientAliveCountMax 1");
  ASSERT_TRUE(server.running());
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(transport()), error);
  ASSERT_TRUE(conn) << error;
  auto lstat = [&] {
    return conn->call(sftp::PacketWriter(sftp::FXP_LSTAT).str(server.export_dir()).take());
  };
  ASSERT_TRUE(lstat().ok());
  std::this_thread::sleep_for(std::chrono::seconds(6));
  EXPECT_TRUE(conn->alive()) << conn->failure();
  auto r = lstat();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, sftp::FXP_ATTRS);
}

TEST_P(OnEachTransport, ACommandRunsAndItsOutputEndsWithTheChannel) {
  // The remote watcher's kind of channel: a command whose output is read until it ends.
  SshServer server("ssh-exec", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  auto ch = sftp::open_channel(server.endpoint(transport()),
                               {sftp::ChannelService::exec, "echo out; echo err >&2; seq 1 20000"},
                               error);
  ASSERT_TRUE(ch) << error;
  std::string out;
  char buf[4096];
  long n = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    while ((n = ch->read(buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    if (n < 0) break;
    pollfd p{ch->fd(), POLLIN, 0};
    poll(&p, 1, 100);
  }
  EXPECT_LT(n, 0) << "the channel did not end with the command";
  std::string expected = "out\n";
  for (int i = 1; i <= 20000; ++i) expected += std::to_string(i) + "\n";
  EXPECT_TRUE(out == expected) << out.size() << " bytes: " << out.substr(0, 100);
}

TEST_P(OnEachTransport, TheRemoteWatcherReportsServerSideChangesAndEndsItsInotifywait) {
  SshServer server("ssh-watcher", {"ed25519"});
  ASSERT_TRUE(server.running());
  auto backend = backend_on(server, transport());
  std::mutex mu;
  std::set<std::string> seen, replaced, dirs_gone;
  {
    RemoteWatcher watcher(backend, [&](const std::string& rel, const RemoteWatcher::Report& r) {
      std::lock_guard lock(mu);
      seen.insert(rel);
      if (r.replaced) replaced.insert(rel);
      if (r.dir_gone) dirs_gone.insert(rel);
    });
    const auto start = std::chrono::steady_clock::now();
    while (!watcher.watching() &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(watcher.watching()) << "inotifywait never set its watches";
    std::ofstream(server.export_dir() + "/made-on-server") << "x";
    bool got = false;
    for (int i = 0; i < 40 && !got; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard lock(mu);
      got = seen.count("/made-on-server") > 0;
    }
    EXPECT_TRUE(got) << "no report of a file made on the server within 2 s";
    {
      std::lock_guard lock(mu);
      EXPECT_EQ(replaced.count("/made-on-server"), 0u) << "a new file taken for a replaced one";
    }
    // Moved: both names may lead to other files now.
    ASSERT_EQ(::rename((server.export_dir() + "/made-on-server").c_str(),
                       (server.export_dir() + "/moved-on-server").c_str()),
              0);
    got = false;
    for (int i = 0; i < 40 && !got; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard lock(mu);
      got = replaced.count("/made-on-server") > 0 && replaced.count("/moved-on-server") > 0;
    }
    EXPECT_TRUE(got) << "a move on the server not reported as replacing both names within 2 s";
    // A directory moved away, and one removed: what was below them is elsewhere or nowhere. A
    // file removed is no directory gone.
    ASSERT_EQ(::mkdir((server.export_dir() + "/d").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((server.export_dir() + "/e").c_str(), 0755), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // watched once seen made
    ASSERT_EQ(
        ::rename((server.export_dir() + "/d").c_str(), (server.export_dir() + "/d.old").c_str()),
        0);
    ASSERT_EQ(::rmdir((server.export_dir() + "/e").c_str()), 0);
    ASSERT_EQ(::unlink((server.export_dir() + "/moved-on-server").c_str()), 0);
    got = false;
    for (int i = 0; i < 40 && !got; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::lock_guard lock(mu);
      got = dirs_gone.count("/d") > 0 && dirs_gone.count("/e") > 0 &&
            replaced.count("/moved-on-server") > 0 && seen.count("/d.old") > 0;
    }
    EXPECT_TRUE(got) << "a directory moved away or removed not reported so within 2 s";
    std::lock_guard lock(mu);
    EXPECT_EQ(dirs_gone.count("/moved-on-server"), 0u) << "a file taken for a directory";
    EXPECT_EQ(dirs_gone.count("/d.old"), 0u) << "where a directory came taken for where it went";
  }
  // The watcher is gone: so is its inotifywait on the server, soon.
  std::string out;
  bool ended = false;
  for (int i = 0; i < 50 && !ended; ++i) {
    ended = run_command("pgrep -af 'inotifywai[t].*" + server.export_dir() + "'", &out) != 0;
    if (!ended) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ended) << "inotifywait still runs: " << out;
}

TEST_P(OnEachTransport, AServerThatDiesMidStreamEndsTheReadAtOnce) {
  SshServer server("ssh-dies", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  auto ch = sftp::open_channel(server.endpoint(transport()),
                               {sftp::ChannelService::exec, "cat /dev/zero"}, error);
  ASSERT_TRUE(ch) << error;
  std::vector<char> buf(1 << 16);
  size_t got = 0;
  while (got < (4 << 20)) {
    long n = ch->read(buf.data(), buf.size());
    ASSERT_GE(n, 0) << ch->error();
    got += static_cast<size_t>(n);
    if (n == 0) {
      pollfd p{ch->fd(), POLLIN, 0};
      poll(&p, 1, 100);
    }
  }
  server.stop();
  const auto start = std::chrono::steady_clock::now();
  long n = 0;
  while (n >= 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    n = ch->read(buf.data(), buf.size());
    if (n == 0) {
      pollfd p{ch->fd(), POLLIN, 0};
      poll(&p, 1, 100);
    }
  }
  EXPECT_LT(n, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(ch->error(), "");
}

// A server that stops taking bytes (its side of the channel no longer read: here `sleep`, which
// never reads its input, once the channel's window is used up) fails a write at the write's
// deadline, however many packets the write is, not at the transport's timeout (libssh used to
// wait its whole session timeout for the server's window).
TEST_P(OnEachTransport, AWriteThatTheServerStopsTakingFailsAtItsDeadline) {
  SshServer server("ssh-stops", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  auto ep = server.endpoint(transport());
  ep.timeout = std::chrono::seconds(20);  // the transport's own: far past the write's deadline
  auto ch = sftp::open_channel(ep, {sftp::ChannelService::exec, "sleep 600"}, error);
  ASSERT_TRUE(ch) << error;
  const std::string data(16 << 20, 'w');
  const std::string_view piece(data);
  const auto start = std::chrono::steady_clock::now();
  const bool written =
      ch->write("", std::span<const std::string_view>(&piece, 1), start + std::chrono::seconds(2));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(written) << "16 MiB went to a command that reads nothing";
  EXPECT_LT(took, std::chrono::seconds(6)) << "the write outlived its 2 s deadline";
}

INSTANTIATE_TEST_SUITE_P(Transports, OnEachTransport,
                         ::testing::Values(sftp::SshTransport::libssh, sftp::SshTransport::openssh),
                         [](const auto& info) {
                           return std::string(sftp::ssh_transport_name(info.param));
                         });

TEST(SshHostCertificate, TrustedThroughCertAuthorityOnOpensshAndRefusedClearlyByLibssh) {
  // The host key is signed by a CA made with ssh-keygen; known_hosts trusts the CA only.
  SshServer server("ssh-host-cert", {"ed25519"}, "",
                   [](const std::string& dir, const std::vector<std::string>& keys) {
                     run_command("ssh-keygen -q -N '' -t ed25519 -f " + dir + "/host_ca");
                     run_command("ssh-keygen -q -s " + dir + "/host_ca -I skein-test-host -h " +
                                 "-n 127.0.0.1 " + keys[0] + ".pub");
                     return "HostCertificate " + keys[0] + "-cert.pub";
                   });
  ASSERT_TRUE(server.running());
  std::ofstream(server.known_hosts()) << "@cert-authority 127.0.0.1,[127.0.0.1]:" << server.port()
                                      << " " << slurp(server.dir() + "/host_ca.pub");
  EXPECT_EQ(connect_error(server.endpoint(sftp::SshTransport::openssh)), "");
  auto backend = backend_on(server, sftp::SshTransport::openssh);
  const std::string data = random_bytes(1 << 20, 8);
  EXPECT_TRUE(write_then_read(*backend, "/via-cert", data) == data);

  const std::string e = connect_error(server.endpoint(sftp::SshTransport::libssh));
  EXPECT_NE(e.find("@cert-authority"), std::string::npos) << e;
  EXPECT_NE(e.find("libssh 0.10 does not check host certificates"), std::string::npos) << e;
  EXPECT_NE(e.find("ssh_transport = \"openssh\""), std::string::npos) << e;

  // A certificate from another CA is refused.
  const std::string other = server.dir() + "/other_ca";
  run_command("ssh-keygen -q -N '' -t ed25519 -f " + other);
  std::ofstream(server.known_hosts())
      << "@cert-authority [127.0.0.1]:" << server.port() << " " << slurp(other + ".pub");
  const std::string refused = connect_error(server.endpoint(sftp::SshTransport::openssh));
  EXPECT_NE(refused.find("Host key verification failed"), std::string::npos) << refused;
}

TEST(SshProxyJump, TheServerIsReachedThroughASecondSshd) {
  SshServer target("ssh-jump-target", {"ed25519"});
  SshServer jump("ssh-jump-host", {"ed25519"});
  ASSERT_TRUE(target.running() && jump.running());
  // One identity and one known_hosts for both, as a site would have them.
  std::ofstream(jump.dir() + "/authorized_keys", std::ios::app)
      << slurp(target.endpoint().identity_file + ".pub");
  std::ofstream(target.known_hosts(), std::ios::app)
      << "[127.0.0.1]:" << jump.port() << " " << slurp(jump.host_keys()[0] + ".pub");
  sftp::Endpoint ep = target.endpoint(sftp::SshTransport::openssh);
  ep.proxy_jump = "root@127.0.0.1:" + std::to_string(jump.port());
  EXPECT_EQ(connect_error(ep), "");
  auto backend = std::make_shared<SftpBackend>(BackendConfig{"b", ep, target.export_dir(), 2, 0});
  const std::string data = random_bytes(2 << 20, 9);
  EXPECT_TRUE(write_then_read(*backend, "/jumped", data) == data);
  // The way goes through the jump host: without it, no connection.
  jump.stop();
  EXPECT_NE(connect_error(ep), "");
  // libssh says what to use instead.
  ep.transport = sftp::SshTransport::libssh;
  EXPECT_NE(connect_error(ep).find("proxy_jump needs ssh_transport = \"openssh\""),
            std::string::npos);
}

}  // namespace
}  // namespace skein::test
