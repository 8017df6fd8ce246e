// The SSH transport settings: the words ssh_transport takes (and the removed ones), the checks on
// a private key's mode and on proxy_jump, and the ssh command line of the openssh transport.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "sftp/endpoint.hpp"
#include "sftp/openssh_channel.hpp"
#include "temp_key_dir.hpp"

namespace skein::sftp {
namespace {

TEST(SshEndpoint, TransportWords) {
  SshTransport t = SshTransport::openssh;
  EXPECT_FALSE(parse_ssh_transport("libssh", t));
  EXPECT_EQ(t, SshTransport::libssh);
  EXPECT_FALSE(parse_ssh_transport("openssh", t));
  EXPECT_EQ(t, SshTransport::openssh);
  for (const char* removed : {"native", "auto"}) {
    auto e = parse_ssh_transport(removed, t);
    ASSERT_TRUE(e);
    EXPECT_NE(e->find("was removed"), std::string::npos) << *e;
    EXPECT_NE(e->find("\"openssh\""), std::string::npos) << *e;
  }
  auto e = parse_ssh_transport("putty", t);
  ASSERT_TRUE(e);
  EXPECT_NE(e->find("must be \"libssh\" or \"openssh\", not \"putty\""), std::string::npos) << *e;
  EXPECT_STREQ(ssh_transport_name(SshTransport::openssh), "openssh");
  EXPECT_STREQ(ssh_transport_name(SshTransport::libssh), "libssh");
}

TEST(SshEndpoint, PrivateKeyReadableByOthersIsRefused) {
  test::TempKeyDir files("skein-ssh-endpoint");
  chmod(files.key.c_str(), 0600);
  EXPECT_FALSE(private_key_problem(files.key));
  for (mode_t mode : {0640, 0604, 0644}) {
    chmod(files.key.c_str(), mode);
    auto p = private_key_problem(files.key);
    ASSERT_TRUE(p) << std::oct << mode;
    EXPECT_NE(p->find("chmod 600"), std::string::npos) << *p;
  }
  EXPECT_TRUE(private_key_problem(files.dir + "/missing"));
}

TEST(SshEndpoint, ProxyJumpOnlyOnOpensshAndOnlyHostNames) {
  Endpoint ep;
  ep.host = "st1";
  ep.user = "u";
  EXPECT_FALSE(endpoint_problem(ep));
  ep.proxy_jump = "gw@bastion:2222";
  auto p = endpoint_problem(ep);  // libssh
  ASSERT_TRUE(p);
  EXPECT_NE(p->find("ssh_transport = \"openssh\""), std::string::npos) << *p;
  ep.transport = SshTransport::openssh;
  EXPECT_FALSE(endpoint_problem(ep));
  for (const char* bad : {"-oProxyCommand=x", "a;b", "a b", "$(x)", "a'b", "a,b", "a%h"}) {
    ep.proxy_jump = bad;
    EXPECT_TRUE(endpoint_problem(ep)) << bad;
  }
  // On openssh the host, too, goes into ssh's ProxyCommand (%h).
  ep.proxy_jump.clear();
  for (const char* bad : {"-oProxyCommand=x", "a;b", "$(x)", "a`b`"}) {
    ep.host = bad;
    EXPECT_TRUE(endpoint_problem(ep)) << bad;
  }
  ep.host = "[fe80::1]";
  EXPECT_FALSE(endpoint_problem(ep));
}

TEST(SshEndpoint, OpensshCommandNeverPromptsAndChecksHostKeysStrictly) {
  Endpoint ep;
  ep.host = "st1";
  ep.port = 2222;
  ep.user = "skein";
  ep.identity_file = "/k/id";
  ep.known_hosts = "/k/known_hosts";
  ep.ssh_config = "/k/ssh_config";
  ep.proxy_jump = "bastion";
  ep.transport = SshTransport::openssh;
  auto has = [](const std::vector<std::string>& a, std::initializer_list<const char*> seq) {
    std::vector<std::string> want(seq.begin(), seq.end());
    return std::search(a.begin(), a.end(), want.begin(), want.end()) != a.end();
  };
  auto a = openssh_command(ep, {ChannelService::subsystem, "sftp"});
  EXPECT_EQ(a.front(), "ssh");
  EXPECT_TRUE(has(a, {"-oBatchMode=yes"}));
  EXPECT_TRUE(has(a, {"-oStrictHostKeyChecking=yes"}));
  EXPECT_TRUE(has(a, {"-F", "/k/ssh_config"}));
  EXPECT_TRUE(has(a, {"-p", "2222", "-l", "skein"}));
  EXPECT_TRUE(has(a, {"-i", "/k/id", "-oIdentitiesOnly=yes"}));
  EXPECT_TRUE(has(a, {"-oUserKnownHostsFile=/k/known_hosts"}));
  // The jump host is reached with the same options (ssh's own -J would pass it only -F).
  auto proxy =
      std::find_if(a.begin(), a.end(), [](auto& s) { return s.starts_with("-oProxyCommand="); });
  ASSERT_NE(proxy, a.end());
  EXPECT_NE(proxy->find("'-oBatchMode=yes'"), std::string::npos) << *proxy;
  EXPECT_NE(proxy->find("'-oUserKnownHostsFile=/k/known_hosts'"), std::string::npos) << *proxy;
  EXPECT_NE(proxy->find("-W '[%h]:%p' -- 'bastion'"), std::string::npos) << *proxy;
  EXPECT_TRUE(has(a, {"-s", "--", "st1", "sftp"}));
  // The host comes after "--": never read as an option.
  auto e = openssh_command(ep, {ChannelService::exec, "inotifywait -m /x"});
  EXPECT_TRUE(has(e, {"--", "st1", "inotifywait -m /x"}));
  EXPECT_FALSE(has(e, {"-s"}));
  // Nothing named: the site's ssh_config, known_hosts and agent decide.
  Endpoint site;
  site.host = "st1";
  site.user = "skein";
  auto s = openssh_command(site, {ChannelService::subsystem, "sftp"});
  EXPECT_FALSE(has(s, {"-F"}));
  EXPECT_FALSE(has(s, {"-i"}));
  EXPECT_FALSE(has(s, {"-oGlobalKnownHostsFile=/dev/null"}));
}

}  // namespace
}  // namespace skein::sftp
