// skein's own SSH transport against real OpenSSH sshd servers on loopback, each test with a
// server configured for what it checks: data through SFTP both ways, key re-exchanges started by
// the server and by the client in the middle of transfers, every host key and identity type,
// refused host keys and logins (never retried on libssh), the libssh fallback for a server
// without AES-GCM, and a server that dies mid-stream.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "backend/remote_file.hpp"
#include "backend/sftp_backend.hpp"
#include "local_cluster.hpp"
#include "sftp/connection.hpp"
#include "ssh/session_channel.hpp"

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
  SshServer(const std::string& name, std::vector<std::string> host_key_types,
            const std::string& extra = "") {
    dir_ = make_test_dir(name);
    export_ = dir_ + "/export";
    mkdir(export_.c_str(), 0755);
    port_ = free_port();
    std::string config = "Port " + std::to_string(port_) + "\nListenAddress 127.0.0.1\nPidFile " +
                         dir_ + "/sshd.pid\n" + "AuthorizedKeysFile " + dir_ +
                         "/authorized_keys\n" +
                         "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                         "KbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\n"
                         "UseDNS no\nSubsystem sftp internal-sftp\nMaxSessions 50\n" +
                         extra + "\n";
    for (auto& t : host_key_types) {
      const std::string key = dir_ + "/host_" + t;
      keygen(t, key);
      config += "HostKey " + key + "\n";
      host_keys_.push_back(key);
    }
    client_key_ = add_client_key("ed25519", "id_ed25519", true);
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

  sftp::Endpoint endpoint(sftp::SshStack stack = sftp::SshStack::native) const {
    sftp::Endpoint ep;
    ep.host = "127.0.0.1";
    ep.port = port_;
    ep.user = "root";
    ep.identity_file = client_key_;
    ep.known_hosts = known_hosts();
    ep.timeout = std::chrono::milliseconds(5000);
    ep.stack = stack;
    return ep;
  }
  ssh::TransportOptions transport_options() const { return endpoint(); }
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

std::shared_ptr<SftpBackend> backend_on(const SshServer& server, sftp::SshStack stack) {
  BackendConfig cfg;
  cfg.name = "b";
  cfg.endpoint = server.endpoint(stack);
  cfg.root = server.export_dir();
  cfg.connections = 2;
  return std::make_shared<SftpBackend>(cfg);
}

TEST(SshTransport, SftpDataCrossesIntactBothWays) {
  SshServer server("ssh-data", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(), error);
  ASSERT_TRUE(conn) << error;
  EXPECT_EQ(conn->stack(), sftp::SshStack::native);
  EXPECT_TRUE(conn->has_extension("posix-rename@openssh.com"));
  EXPECT_GT(conn->limits().max_read, 32768u);

  auto backend = backend_on(server, sftp::SshStack::native);
  const std::string data = random_bytes(24 << 20, 1);
  EXPECT_TRUE(write_then_read(*backend, "/data", data) == data);
  EXPECT_TRUE(slurp(server.export_dir() + "/data") == data);
}

TEST(SshTransport, ReadsPastTheEndOfAFileDoNotWaitForBytesThatNeverCome) {
  // Many MiB of READs outstanding make the connection wake only for 128 KiB batches; short
  // replies (a file's end) must still come back at once, not at a deadline.
  SshServer server("ssh-short-reads", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string data = random_bytes(100000, 5);
  std::ofstream(server.export_dir() + "/small") << data;
  auto backend = backend_on(server, sftp::SshStack::native);
  auto f = backend->open("/small", O_RDONLY, 0);
  ASSERT_TRUE(f.ok());
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::future<Result<SharedBytes>>> reads;
  for (int round = 0; round < 20; ++round) {
    for (uint64_t off : {uint64_t(0), uint64_t(1) << 20, uint64_t(2) << 20})
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

TEST(SshTransport, WritesBeyondTheServersWindowGoOnWhileReadsAreBatched) {
  // One connection carries a stream of reads (batched wake-ups) and writes larger than sshd's
  // 2 MiB channel window, which wait for its WINDOW_ADJUST: a small message that must wake the
  // writer even while the socket is set to wake only for 128 KiB batches.
  SshServer server("ssh-write-under-batch", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string big = random_bytes(16 << 20, 6);
  std::ofstream(server.export_dir() + "/big") << big;
  BackendConfig cfg;
  cfg.name = "b";
  cfg.endpoint = server.endpoint(sftp::SshStack::native);
  cfg.root = server.export_dir();
  cfg.connections = 1;
  auto backend = std::make_shared<SftpBackend>(cfg);
  auto in = backend->open("/big", O_RDONLY, 0);
  auto out = backend->open("/out", O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(in.ok() && out.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> read_errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&, t] {
      for (uint64_t off = uint64_t(t) << 20; !stop; off = (off + (3 << 20)) % big.size())
        if (!(*in)->read(off, 1 << 20).ok()) ++read_errors;
    });
  }
  auto owner = std::make_shared<std::string>(random_bytes(6 << 20, 7));
  const auto start = std::chrono::steady_clock::now();
  int write_errors = 0;
  for (int i = 0; i < 6; ++i) {
    auto w = (*out)->write(uint64_t(i) * owner->size(), SharedBytes({*owner}, owner));
    if (!w.ok() || *w != owner->size()) ++write_errors;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(write_errors, 0);
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_LT(took, std::chrono::seconds(4));  // a stalled wait would last the 5 s timeout
}

TEST(SshTransport, KeysAreRenewedWhenTheServerAsksMidTransfer) {
  SshServer server("ssh-rekey-server", {"ed25519"}, "RekeyLimit 1M");
  ASSERT_TRUE(server.running());
  auto backend = backend_on(server, sftp::SshStack::native);
  const std::string data = random_bytes(16 << 20, 2);
  EXPECT_TRUE(write_then_read(*backend, "/rekeyed", data) == data);
  EXPECT_TRUE(slurp(server.export_dir() + "/rekeyed") == data);

  // The same through one channel, counting the exchanges: one per MiB either way.
  std::string error;
  ssh::ConnectFailure why;
  auto ch = ssh::SessionChannel::exec(server.transport_options(),
                                      "cat " + server.export_dir() + "/rekeyed", error, why);
  ASSERT_TRUE(ch) << error;
  std::string got;
  std::vector<char> buf(1 << 20);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got.size() < data.size() && std::chrono::steady_clock::now() < deadline) {
    long n = ch->read(buf.data(), buf.size());
    ASSERT_GE(n, 0) << ch->error();
    if (n == 0) {
      pollfd p{ch->fd(), POLLIN, 0};
      poll(&p, 1, 100);
      continue;
    }
    got.append(buf.data(), size_t(n));
  }
  EXPECT_TRUE(got == data);
  EXPECT_GE(ch->transport().key_exchanges(), 10);
}

TEST(SshTransport, KeysAreRenewedWhenTheClientAsksMidTransfer) {
  SshServer server("ssh-rekey-client", {"ed25519"});
  ASSERT_TRUE(server.running());
  const std::string data = random_bytes(8 << 20, 3);
  auto options = server.transport_options();
  options.rekey_bytes = 256 * 1024;
  std::string error;
  ssh::ConnectFailure why;
  const std::string out = server.export_dir() + "/written";
  auto ch = ssh::SessionChannel::exec(
      options, "head -c " + std::to_string(data.size()) + " > " + out, error, why);
  ASSERT_TRUE(ch) << error;
  std::vector<std::string_view> pieces;
  for (size_t at = 0; at < data.size(); at += 100000)
    pieces.push_back(std::string_view(data).substr(at, 100000));
  ASSERT_TRUE(ch->write("", pieces, std::chrono::steady_clock::now() + std::chrono::seconds(30)))
      << ch->error();
  // head exits once it has them all: the server reports its exit and closes the channel.
  char sink[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ch->at_eof() && std::chrono::steady_clock::now() < deadline) {
    if (ch->read(sink, sizeof sink) == 0) {
      pollfd p{ch->fd(), POLLIN, 0};
      poll(&p, 1, 100);
    }
  }
  EXPECT_TRUE(ch->at_eof());
  EXPECT_TRUE(slurp(out) == data);
  // A new exchange starts once 256 KiB went under the keys in use; data goes on flowing (up to
  // the server's 2 MiB window) until the server's NEWKEYS is in, so at least one per 2.25 MiB.
  EXPECT_GE(ch->transport().key_exchanges(), 1 + 3);
}

class HostKeyTypes : public ::testing::TestWithParam<const char*> {};

TEST_P(HostKeyTypes, AKnownHostKeyOfEachTypeIsAccepted) {
  SshServer server(std::string("ssh-hostkey-") + GetParam(), {GetParam()});
  ASSERT_TRUE(server.running());
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(), error);
  ASSERT_TRUE(conn) << error;
  EXPECT_EQ(conn->stack(), sftp::SshStack::native);
}

INSTANTIATE_TEST_SUITE_P(EveryType, HostKeyTypes, ::testing::Values("ed25519", "ecdsa", "rsa"));

TEST(SshTransport, TheServerShowsTheHostKeyTypeThatIsOnRecord) {
  // The server has three keys; only its RSA key is known here.
  SshServer server("ssh-hostkey-order", {"ed25519", "ecdsa", "rsa"});
  ASSERT_TRUE(server.running());
  server.write_known_hosts({server.host_keys()[2]});
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(), error);
  EXPECT_TRUE(conn) << error;
}

TEST(SshTransport, UnknownAndChangedHostKeysAreRefusedAndNeverRetriedOnLibssh) {
  SshServer server("ssh-hostkey-refused", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  std::ofstream(server.known_hosts()) << "";
  EXPECT_FALSE(sftp::Connection::connect(server.endpoint(sftp::SshStack::automatic), error));
  EXPECT_NE(error.find("is not in " + server.known_hosts() + " (unknown server); refusing"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("SHA256:"), std::string::npos) << error;  // the key, to check by hand

  const std::string other = server.dir() + "/other_host";
  run_command("ssh-keygen -q -N '' -t ed25519 -f " + other);
  server.write_known_hosts({other});
  EXPECT_FALSE(sftp::Connection::connect(server.endpoint(sftp::SshStack::automatic), error));
  EXPECT_NE(error.find("host key CHANGED"), std::string::npos) << error;
  EXPECT_EQ(error.find("libssh"), std::string::npos) << error;
}

TEST(SshTransport, EveryIdentityTypeLogsIn) {
  SshServer server("ssh-identity", {"ed25519"});
  ASSERT_TRUE(server.running());
  for (auto [type, format] : {std::pair{"rsa", ""}, std::pair{"ecdsa", ""},
                              std::pair{"rsa", "-m PEM"}, std::pair{"ecdsa", "-m PKCS8"}}) {
    const std::string name = std::string("id_") + type + (format[0] ? "_pem" : "");
    server.set_client_key(server.add_client_key(type, name, true, format));
    std::string error;
    auto conn = sftp::Connection::connect(server.endpoint(), error);
    EXPECT_TRUE(conn) << type << " " << format << ": " << error;
  }
}

TEST(SshTransport, AnUnauthorizedKeyIsRefusedWithAClearMessage) {
  SshServer server("ssh-identity-refused", {"ed25519"});
  ASSERT_TRUE(server.running());
  server.set_client_key(server.add_client_key("ed25519", "stranger", false));
  std::string error;
  EXPECT_FALSE(sftp::Connection::connect(server.endpoint(sftp::SshStack::automatic), error));
  EXPECT_NE(error.find("public key authentication failed"), std::string::npos) << error;
  EXPECT_NE(error.find("stranger"), std::string::npos) << error;
}

TEST(SshTransport, AServerWithoutAesGcmIsServedByLibsshUnlessNativeIsRequired) {
  SshServer server("ssh-fallback", {"ed25519"},
                   "Ciphers aes128-ctr,aes256-ctr\nMACs hmac-sha2-256");
  ASSERT_TRUE(server.running());
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(sftp::SshStack::automatic), error);
  ASSERT_TRUE(conn) << error;
  EXPECT_EQ(conn->stack(), sftp::SshStack::libssh);
  auto backend = backend_on(server, sftp::SshStack::automatic);
  const std::string data = random_bytes(3 << 20, 4);
  EXPECT_TRUE(write_then_read(*backend, "/via-libssh", data) == data);

  EXPECT_FALSE(sftp::Connection::connect(server.endpoint(sftp::SshStack::native), error));
  EXPECT_NE(error.find("offers none of the algorithms"), std::string::npos) << error;
  EXPECT_NE(error.find("aes128-ctr"), std::string::npos) << error;  // what it does offer
}

TEST(SshTransport, AServerThatDiesMidStreamEndsTheReadAtOnce) {
  SshServer server("ssh-dies", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  ssh::ConnectFailure why;
  auto ch = ssh::SessionChannel::exec(server.transport_options(), "cat /dev/zero", error, why);
  ASSERT_TRUE(ch) << error;
  std::vector<char> buf(1 << 16);
  size_t got = 0;
  while (got < (4 << 20)) {
    long n = ch->read(buf.data(), buf.size());
    ASSERT_GE(n, 0);
    got += size_t(n);
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
  EXPECT_NE(ch->error().find("connection"), std::string::npos) << ch->error();
}

class OnEachStack : public ::testing::TestWithParam<sftp::SshStack> {};

TEST_P(OnEachStack, AnIdleConnectionAnswersTheServersKeepalives) {
  // An sshd with ClientAliveInterval drops a client that leaves its keepalives unanswered, here
  // after about 4 s (sshd checks every other second). A pooled connection with nothing to do must
  // still answer them.
  SshServer server("ssh-keepalive", {"ed25519"}, "ClientAliveInterval 1\nClientAliveCountMax 1");
  ASSERT_TRUE(server.running());
  std::string error;
  auto conn = sftp::Connection::connect(server.endpoint(GetParam()), error);
  ASSERT_TRUE(conn) << error;
  auto lstat = [&] {
    return conn->call(sftp::PacketWriter(sftp::FXP_LSTAT).str(server.export_dir()).take());
  };
  ASSERT_TRUE(lstat().ok());
  std::this_thread::sleep_for(std::chrono::seconds(7));
  EXPECT_TRUE(conn->alive()) << conn->failure();
  auto r = lstat();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->type, sftp::FXP_ATTRS);
}

TEST_P(OnEachStack, ACommandRunsAndItsOutputEndsWithTheChannel) {
  // The remote watcher's kind of channel: a command whose output is read until it ends.
  SshServer server("ssh-exec", {"ed25519"});
  ASSERT_TRUE(server.running());
  std::string error;
  sftp::SshStack used;
  auto ch = sftp::open_channel(server.endpoint(GetParam()),
                               {sftp::ChannelService::exec, "echo out; echo err >&2; seq 1 20000"},
                               error, used);
  ASSERT_TRUE(ch) << error;
  EXPECT_EQ(used, GetParam());
  std::string out;
  char buf[4096];
  long n = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    while ((n = ch->read(buf, sizeof buf)) > 0) out.append(buf, size_t(n));
    if (n < 0) break;
    pollfd p{ch->fd(), POLLIN, 0};
    poll(&p, 1, 100);
  }
  EXPECT_LT(n, 0) << "the channel did not end with the command";
  std::string expected = "out\n";
  for (int i = 1; i <= 20000; ++i) expected += std::to_string(i) + "\n";
  EXPECT_TRUE(out == expected) << out.size() << " bytes: " << out.substr(0, 100);
}

INSTANTIATE_TEST_SUITE_P(SshStacks, OnEachStack,
                         ::testing::Values(sftp::SshStack::native, sftp::SshStack::libssh),
                         [](const auto& info) {
                           return std::string(sftp::ssh_stack_name(info.param));
                         });

}  // namespace
}  // namespace skein::test
