// Configuration checking: a good file loads, and each kind of mistake names file, line, problem.
#include "config/gateway_config.hpp"

#include <gtest/gtest.h>

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
    return "[[namespace]]\nname = \"default\"\n[[namespace.mount]]\npath = \"/a\"\nbackends = " +
           backends + "\n";
  }
  // The message of the ConfigError that `text` raises, or "" when it loads.
  std::string error_of(const std::string& text) {
    try {
      skein::parse_gateway_config(text, "gw.toml");
    } catch (const skein::ConfigError& e) {
      return e.what();
    }
    return "";
  }
  skein::test::TempKeyDir files_{"skein-config-test"};
  const std::string &dir_ = files_.dir, &key_ = files_.key, &kh_ = files_.known_hosts;
};

}  // namespace

TEST_F(GatewayConfigTest, LoadsAGoodFile) {
  auto cfg = skein::parse_gateway_config(
      "[gateway]\nlisten = \"127.0.0.1:9000\"\ntimeout_ms = 2000\n" + backend() + ns(), "gw.toml");
  EXPECT_EQ(cfg.listen, "127.0.0.1:9000");
  ASSERT_EQ(cfg.backends.size(), 1u);
  EXPECT_EQ(cfg.backends[0].endpoint.port, 2222);
  EXPECT_EQ(cfg.backends[0].connections, 4);
  EXPECT_EQ(cfg.backends[0].endpoint.timeout.count(), 2000);
  ASSERT_EQ(cfg.namespaces.size(), 1u);
  EXPECT_EQ(cfg.namespaces[0].mounts[0].path, "/a");
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
                .find("cannot read /nonexistent/key"),
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

TEST_F(GatewayConfigTest, TheSshTransportIsAutoUnlessABackendNamesOne) {
  auto cfg = skein::parse_gateway_config(backend() + ns(), "gw.toml");
  EXPECT_EQ(cfg.backends[0].endpoint.stack, skein::sftp::SshStack::automatic);
  cfg = skein::parse_gateway_config(backend() + "ssh_transport = \"libssh\"\n" + ns(), "gw.toml");
  EXPECT_EQ(cfg.backends[0].endpoint.stack, skein::sftp::SshStack::libssh);
  auto e = error_of(backend() + "ssh_transport = \"openssh\"\n" + ns());
  EXPECT_NE(e.find("gw.toml:9:"), std::string::npos) << e;
  EXPECT_NE(e.find("'ssh_transport' in backend 'a' must be \"auto\", \"native\" or \"libssh\""),
            std::string::npos)
      << e;
}
