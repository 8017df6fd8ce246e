// Configuration checking: a good file loads, and each kind of mistake names file, line, problem.
#include "config/gateway_config.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "temp_key_dir.hpp"

namespace {

class GatewayConfigTest : public ::testing::Test {
 protected:
  std::string backend(const std::string& name = "a") {
    return "[[backend]]\nname = \"" + name +
           "\"\nhost = \"127.0.0.1\"\nport = 2222\nuser = \"root\"\n" + "identity_file = \"" +
           key_ + "\"\nknown_hosts = \"" + kh_ + "\"\nroot = \"/srv\"\n";
  }
  std::string ns(const std::string& backends = "[\"a\"]") {
    return ns_head() + "[[namespace.mount]]\npath = \"/a\"\nbackends = " + backends + "\n";
  }
  // A namespace "default" with its token, before its mounts.
  std::string ns_head() {
    return "[[namespace]]\nname = \"default\"\ntoken_file = \"" + token_ + "\"\n";
  }
  // `text` with a plaintext [gateway] at its end when it has none (a gateway needs TLS or
  // insecure = true), so that the tests of other keys keep their line numbers.
  static std::string plaintext(const std::string& text) {
    return text.find("[gateway]") == std::string::npos ? text + "[gateway]\ninsecure = true\n"
                                                       : text;
  }
  skein::GatewayConfig parse(const std::string& text) {
    return skein::parse_gateway_config(plaintext(text), "gw.toml");
  }
  // The message of the ConfigError that `text` raises, or "" when it loads.
  std::string error_of(const std::string& text, bool add_plaintext = true) {
    try {
      skein::parse_gateway_config(add_plaintext ? plaintext(text) : text, "gw.toml");
    } catch (const skein::ConfigError& e) {
      return e.what();
    }
    return "";
  }
  skein::test::TempKeyDir files_{"skein-config-test"};
  const std::string &dir_ = files_.dir, &key_ = files_.key, &kh_ = files_.known_hosts,
                    &token_ = files_.token;
};

}  // namespace

TEST_F(GatewayConfigTest, LoadsAGoodFile) {
  auto cfg = skein::parse_gateway_config(
      "[gateway]\nlisten = \"127.0.0.1:9000\"\ntimeout_ms = 2000\ninsecure = true\n" + backend() +
          ns(),
      "gw.toml");
  EXPECT_EQ(cfg.listen, "127.0.0.1:9000");
  ASSERT_EQ(cfg.backends.size(), 1u);
  EXPECT_EQ(cfg.backends[0].endpoint.port, 2222);
  EXPECT_EQ(cfg.backends[0].connections, 4);
  EXPECT_EQ(cfg.backends[0].endpoint.timeout.count(), 2000);
  ASSERT_EQ(cfg.namespaces.size(), 1u);
  EXPECT_EQ(cfg.namespaces[0].mounts[0].path, "/a");
}

TEST_F(GatewayConfigTest, TheOrphanTimeoutIsTenMinutesUnlessSetAndAtLeastASecond) {
  EXPECT_EQ(parse(backend() + ns()).orphan_timeout.count(), 600000);
  EXPECT_EQ(parse("[gateway]\ninsecure = true\norphan_timeout_ms = 5000\n" + backend() + ns())
                .orphan_timeout.count(),
            5000);
  const std::string e =
      error_of("[gateway]\ninsecure = true\norphan_timeout_ms = 10\n" + backend() + ns());
  EXPECT_NE(e.find("orphan_timeout_ms"), std::string::npos) << e;
  EXPECT_NE(e.find("1000"), std::string::npos) << e;
}

TEST_F(GatewayConfigTest, EachNamespaceMayHold16384OpenFilesUnlessSetAndAtLeastOne) {
  EXPECT_EQ(parse(backend() + ns()).max_open_files, 16384u);
  EXPECT_EQ(
      parse("[gateway]\ninsecure = true\nmax_open_files = 4\n" + backend() + ns()).max_open_files,
      4u);
  const std::string e =
      error_of("[gateway]\ninsecure = true\nmax_open_files = 0\n" + backend() + ns());
  EXPECT_NE(e.find("max_open_files"), std::string::npos) << e;
}

TEST_F(GatewayConfigTest, SyntaxErrorNamesFileAndLine) {
  EXPECT_EQ(error_of("[gateway]\nlisten = \n").substr(0, 10), "gw.toml:2:");
}

TEST_F(GatewayConfigTest, UnknownKeyIsNamedWithItsLine) {
  auto e = error_of(backend() + "colour = \"red\"\n" + ns());
  EXPECT_NE(e.find("gw.toml:9:"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'colour'"), std::string::npos) << e;
}

TEST_F(GatewayConfigTest, UnknownBackendInMountIsRefused) {
  auto e = error_of(backend() + ns("[\"nope\"]"));
  EXPECT_NE(e.find("unknown backend 'nope'"), std::string::npos) << e;
}

TEST_F(GatewayConfigTest, BadPortAndRelativeRootAndMissingKeyFileAreRefused) {
  std::string b = backend();
  EXPECT_NE(error_of(std::string(b).replace(b.find("2222"), 4, "70000") + ns())
                .find("between 1 and 65535"),
            std::string::npos);
  EXPECT_NE(
      error_of(std::string(b).replace(b.find("\"/srv\""), 6, "\"srv\"") + ns()).find("absolute"),
      std::string::npos);
  EXPECT_NE(error_of(std::string(b).replace(b.find(key_), key_.size(), "/nonexistent/key") + ns())
                .find("cannot read identity file /nonexistent/key"),
            std::string::npos);
}

TEST_F(GatewayConfigTest, DuplicatesAndEscapingMountPathsAreRefused) {
  EXPECT_NE(error_of(backend() + backend() + ns()).find("defined twice"), std::string::npos);
  std::string n = ns();
  n.replace(n.find("\"/a\""), 4, "\"/../x\"");
  EXPECT_NE(error_of(backend() + n).find("without '..'"), std::string::npos);
}

TEST_F(GatewayConfigTest, NeedsBackendsAndNamespaces) {
  EXPECT_NE(error_of(ns()).find("no [[backend]]"), std::string::npos);
  EXPECT_NE(error_of(backend()).find("no [[namespace]]"), std::string::npos);
}

TEST_F(GatewayConfigTest, TheSshTransportIsLibsshUnlessABackendNamesOpenssh) {
  auto cfg = parse(backend() + ns());
  EXPECT_EQ(cfg.backends[0].endpoint.transport, skein::sftp::SshTransport::libssh);
  cfg = parse(backend() + "ssh_transport = \"openssh\"\n" + ns());
  EXPECT_EQ(cfg.backends[0].endpoint.transport, skein::sftp::SshTransport::openssh);
  for (const char* removed : {"native", "auto"}) {
    auto e = error_of(backend() + "ssh_transport = \"" + removed + "\"\n" + ns());
    EXPECT_NE(e.find("gw.toml:9:"), std::string::npos) << e;
    EXPECT_NE(e.find("'ssh_transport' in backend 'a': ssh_transport \"" + std::string(removed) +
                     "\" was removed with skein's own SSH transport"),
              std::string::npos)
        << e;
  }
  auto e = error_of(backend() + "ssh_transport = \"putty\"\n" + ns());
  EXPECT_NE(e.find("must be \"libssh\" or \"openssh\", not \"putty\""), std::string::npos) << e;
}

TEST_F(GatewayConfigTest, SiteSshSettingsOfABackend) {
  std::ofstream(dir_ + "/ssh_config") << "Host *\n";
  auto cfg = parse(
      backend() + "ssh_transport = \"openssh\"\nssh_config = \"" + dir_ +
      "/ssh_config\"\nproxy_jump = \"gw@bastion:2222\"\nssh_agent = \"/run/a.sock\"\n" + ns());
  auto& ep = cfg.backends[0].endpoint;
  EXPECT_EQ(ep.ssh_config, dir_ + "/ssh_config");
  EXPECT_EQ(ep.proxy_jump, "gw@bastion:2222");
  EXPECT_EQ(ep.agent_socket, "/run/a.sock");
  // libssh 0.10 has no ProxyJump: the error says to use openssh.
  auto e = error_of(backend() + "proxy_jump = \"bastion\"\n" + ns());
  EXPECT_NE(e.find("proxy_jump needs ssh_transport = \"openssh\""), std::string::npos) << e;
  EXPECT_NE(error_of(backend() + "ssh_config = \"" + dir_ + "/none\"\n" + ns()).find("cannot read"),
            std::string::npos);
  // Neither an identity file nor known_hosts is needed: the agent and the site's files serve.
  std::string bare = backend();
  bare.erase(bare.find("identity_file"), bare.find("root =") - bare.find("identity_file"));
  cfg = parse(bare + ns());
  EXPECT_TRUE(cfg.backends[0].endpoint.identity_file.empty());
  EXPECT_TRUE(cfg.backends[0].endpoint.known_hosts.empty());
}

TEST_F(GatewayConfigTest, AnIdentityFileOthersCanReadIsRefused) {
  chmod(key_.c_str(), 0644);
  auto e = error_of(backend() + ns());
  chmod(key_.c_str(), 0600);
  EXPECT_NE(e.find("'identity_file' in backend 'a': identity file " + key_ +
                   " is accessible by group or others (mode 0644)"),
            std::string::npos)
      << e;
}

namespace {
// A backend named `name` at host:port:root.
std::string backend_at(const std::string& name, const std::string& host, int port,
                       const std::string& root, const std::string& key, const std::string& kh) {
  return "[[backend]]\nname = \"" + name + "\"\nhost = \"" + host +
         "\"\nport = " + std::to_string(port) + "\nidentity_file = \"" + key +
         "\"\nknown_hosts = \"" + kh + "\"\nroot = \"" + root + "\"\n";
}
std::string striped_mount(const std::string& path, const std::string& backends) {
  return "[[namespace.mount]]\npath = \"" + path +
         "\"\nlayout = \"striped\"\nbackends = " + backends + "\n";
}
}  // namespace

TEST_F(GatewayConfigTest, StripedBackendsInOneDirectoryAreRefused) {
  auto with_roots = [&](const std::string& host_b, int port_b, const std::string& root_a,
                        const std::string& root_b) {
    return error_of(backend_at("p", "h", 22, root_a, key_, kh_) +
                    backend_at("q", host_b, port_b, root_b, key_, kh_) + ns_head() +
                    striped_mount("/s", "[\"p\", \"q\"]"));
  };
  auto e = with_roots("h", 22, "/data/s", "/data/s/");
  EXPECT_NE(e.find("striped mount '/s': backends 'p' (h:22:/data/s) and 'q' (h:22:/data/s) "
                   "reach the same directory"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("gw.toml:"), std::string::npos) << e;
  EXPECT_NE(with_roots("H", 22, "/data", "/data/s").find("reach the same directory"),
            std::string::npos);
  EXPECT_NE(with_roots("h", 22, "/", "/data").find("reach the same directory"), std::string::npos);
  // Apart: other directories, a name that only starts alike, another port or host.
  EXPECT_EQ(with_roots("h", 22, "/data/s0", "/data/s1"), "");
  EXPECT_EQ(with_roots("h", 22, "/data/s", "/data/s2"), "");
  EXPECT_EQ(with_roots("h", 2222, "/data/s", "/data/s"), "");
  EXPECT_EQ(with_roots("other", 22, "/data/s", "/data/s"), "");
}

TEST_F(GatewayConfigTest, AStripedMountOverAnotherMountsFilesIsWarnedOncePerPair) {
  const std::string backends = backend_at("plain", "h", 22, "/export", key_, kh_) +
                               backend_at("s0", "h", 22, "/export/striped", key_, kh_) +
                               backend_at("s1", "h2", 22, "/export", key_, kh_) +
                               backend_at("apart", "h", 22, "/scratch", key_, kh_);
  auto warnings = [&](const std::string& mounts) {
    return skein::shared_root_warnings(parse(backends + ns_head() + mounts));
  };
  // /striped's part on h lies below /plain's root: one warning, naming both mounts and places.
  auto w = warnings("[[namespace.mount]]\npath = \"/plain\"\nbackends = [\"plain\"]\n" +
                    striped_mount("/striped", "[\"s0\", \"s1\"]"));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0],
            "striped mount default:/striped and mount default:/plain reach the same files "
            "(backend 's0' at h:22:/export/striped, backend 'plain' at h:22:/export): a file made "
            "through one shows through the other, as a part or whole, and a write through one "
            "overwrites the other's data; give the striped mount directories no other mount uses");
  // The same backend in two striped mounts: once, not once from each side.
  w = warnings(striped_mount("/x", "[\"s0\", \"s1\"]") +
               striped_mount("/y", "[\"apart\", \"s1\"]"));
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("striped mount default:/x and mount default:/y reach the same files (both "
                      "use backend 's1' at h2:22:/export)"),
            std::string::npos)
      << w[0];
  // Apart, and plain mounts sharing a root with each other (no parts involved): nothing.
  EXPECT_TRUE(warnings("[[namespace.mount]]\npath = \"/plain\"\nbackends = [\"plain\"]\n"
                       "[[namespace.mount]]\npath = \"/again\"\nbackends = [\"plain\"]\n" +
                       striped_mount("/striped", "[\"apart\", \"s1\"]"))
                  .empty());
}

// A pool's backends hold every job's directory: no static namespace may reach them, by the same
// backend or by another one whose root is the pool's, above it or below it on the same server.
TEST_F(GatewayConfigTest, AStaticBackendThatReachesAPoolsFilesIsRefused) {
  auto with_root = [&](const std::string& name, const std::string& root) {
    std::string b = backend(name);
    b.replace(b.find("root = \"/srv\""), 13, "root = \"" + root + "\"");
    return b;
  };
  const std::string jobs =
      "[jobs]\ndatabase = \"/var/lib/skein/jobs.db\"\n[[jobs.pool]]\nname = \"p\"\n"
      "backends = [\"pooled\"]\n";
  // Above the pool's root: the namespace would list the job directories.
  std::string err =
      error_of(with_root("a", "/srv") + with_root("pooled", "/srv/pool") + ns() + jobs);
  EXPECT_NE(err.find("reaches the same files as backend 'a'"), std::string::npos) << err;
  // Below it: one job's directory, or all of them.
  err =
      error_of(with_root("a", "/srv/pool/job-1") + with_root("pooled", "/srv/pool") + ns() + jobs);
  EXPECT_NE(err.find("reaches the same files"), std::string::npos) << err;
  // Beside it: fine.
  EXPECT_EQ(error_of(with_root("a", "/srv/data") + with_root("pooled", "/srv/pool") + ns() + jobs),
            "");
}

// A root written with a trailing slash or a "." is the same root: the remote watcher compares the
// server's paths with it, and "/srv/" took every event of the export for a sibling's.
TEST_F(GatewayConfigTest, ABackendsRootIsNormalised) {
  std::string text = backend();
  text.replace(text.find("root = \"/srv\""), 13, "root = \"/srv/./x/\"");
  auto cfg = parse(text + ns());
  ASSERT_EQ(cfg.backends.size(), 1u);
  EXPECT_EQ(cfg.backends[0].root, "/srv/x");
  text.replace(text.find("root = \"/srv/./x/\""), 18, "root = \"/..\"");
  EXPECT_NE(error_of(text + ns()).find("must be an absolute path"), std::string::npos);
}

// A lifetime is added to the time of a create: 2^63 - 1 ("no limit") wrapped round, and the
// namespace expired, its files removed, within a second of being made.
TEST_F(GatewayConfigTest, LifetimesOfMoreThanAHundredYearsAreRefused) {
  auto with = [&](const std::string& setting) {
    std::string pooled = backend("pooled");
    pooled.replace(pooled.find("root = \"/srv\""), 13, "root = \"/pool\"");
    return backend() + pooled + ns() + "[jobs]\ndatabase = \"/var/lib/skein/jobs.db\"\n" + setting +
           "\n[[jobs.pool]]\nname = \"p\"\nbackends = [\"pooled\"]\n";
  };
  for (const char* bad : {"max_lifetime = 9223372036854775807", "default_lifetime = 3155760001",
                          "max_lifetime = \"36526d\"", "orphan_grace = \"9223372036854775807s\""}) {
    std::string err = error_of(with(bad));
    EXPECT_NE(err.find("of at most 100 years"), std::string::npos) << bad << ": " << err;
  }
  EXPECT_EQ(error_of(with("max_lifetime = \"36525d\"")), "");
  EXPECT_EQ(parse(with("max_lifetime = 3155760000")).jobs->max_lifetime.count(), 3155760000LL);
}

// What a start refuses, the check of the config refuses too (skein-gateway --check-config).
TEST_F(GatewayConfigTest, AListenAddressWithoutAPortAndAnUnknownLogLevelAreRefused) {
  for (const char* bad : {"host:", "host:abc", ":7070", "host:70000", "7070"}) {
    std::string err = error_of("[gateway]\ninsecure = true\nlisten = \"" + std::string(bad) +
                               "\"\n" + backend() + ns());
    EXPECT_NE(err.find("gw.toml:3: 'listen' must be HOST:PORT"), std::string::npos)
        << bad << ": " << err;
  }
  for (const char* good : {"127.0.0.1:0", "[::1]:7070", "gateway.example.org:65535"})
    EXPECT_EQ(error_of("[gateway]\ninsecure = true\nlisten = \"" + std::string(good) + "\"\n" +
                       backend() + ns()),
              "")
        << good;
  std::string err =
      error_of("[gateway]\ninsecure = true\nlog_level = \"verbose\"\n" + backend() + ns());
  EXPECT_NE(err.find("gw.toml:3: 'log_level' must be one of trace, debug"), std::string::npos)
      << err;
  EXPECT_EQ(
      parse("[gateway]\ninsecure = true\nlog_level = \"debug\"\n" + backend() + ns()).log_level,
      "debug");
}
