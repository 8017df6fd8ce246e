// What users see when set-up goes wrong: a bad config, an unknown server key, an unreachable
// gateway. Each must fail clearly and leave nothing behind.
#include <fstream>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

std::string gateway_bin() { return build_dir() + "/gateway/skein-gateway"; }
std::string mount_bin() { return build_dir() + "/client/skein-mount"; }

TEST(GatewayStartup, BadConfigNamesFileLineAndProblemAndExitsNonZero) {
  std::string dir = make_test_dir("badconfig");
  std::string cfg = dir + "/gw.toml";
  std::ofstream(cfg) << "[gateway]\nlisten = \"127.0.0.1:0\"\ninsecure = true\n\n[[backend]]\nname "
                        "= \"a\"\nport = "
                        "\"x\"\n";
  std::string out;
  int rc = run_command("'" + gateway_bin() + "' --config '" + cfg + "'", &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find(cfg + ":5: backend 'a' needs 'host'"), std::string::npos) << out;

  rc = run_command("'" + gateway_bin() + "' --config '" + dir + "/missing.toml'", &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("cannot read"), std::string::npos) << out;
}

TEST(GatewayStartup, UnknownOrChangedHostKeyIsRefused) {
  std::string error;
  auto cluster = LocalCluster::start("hostkey", {.servers = 1, .mounts = 0}, error);
  ASSERT_TRUE(cluster) << error;
  std::string cfg_text;
  {
    std::ifstream in(cluster->env("SKEIN_CONFIG"));
    cfg_text.assign(std::istreambuf_iterator<char>(in), {});
    cfg_text = without_jobs(cfg_text);  // the cluster's gateway holds the job database
  }
  std::string dir = make_test_dir("hostkey-gw");
  std::string kh = cluster->env("SKEIN_KNOWN_HOSTS");
  ASSERT_FALSE(kh.empty());
  auto with_known_hosts = [&](const std::string& file) {
    std::string t = cfg_text;
    for (size_t at; (at = t.find(kh)) != std::string::npos;) t.replace(at, kh.size(), file);
    // Listen elsewhere so the cluster's own gateway keeps its port.
    auto l = t.find("listen = \"");
    auto e = t.find('"', l + 10);
    t.replace(l, e - l + 1, "listen = \"127.0.0.1:0\"");
    return t;
  };
  // Unknown: an empty known_hosts.
  std::ofstream(dir + "/empty_known_hosts") << "";
  std::ofstream(dir + "/unknown.toml") << with_known_hosts(dir + "/empty_known_hosts");
  // Changed: the right host with some other key.
  std::string port = cluster->list("SKEIN_SSH_PORTS").at(0);
  std::string out;
  ASSERT_EQ(run_command("ssh-keygen -q -t ed25519 -N '' -f '" + dir +
                            "/other' && echo \"[127.0.0.1]:" + port + " $(cut -d' ' -f1,2 '" + dir +
                            "/other.pub')\" > '" + dir + "/changed_known_hosts'",
                        &out),
            0)
      << out;
  std::ofstream(dir + "/changed.toml") << with_known_hosts(dir + "/changed_known_hosts");

  for (auto [name, expect] : {std::pair{"unknown", "is not in"}, std::pair{"changed", "CHANGED"}}) {
    // The gateway starts (a server may be fixed later) but refuses the server, and says why.
    std::string log = dir + "/" + name + ".log";
    run_command("timeout -s INT 3 '" + gateway_bin() + "' --config '" + dir + "/" + name +
                ".toml' > '" + log + "'");
    std::ifstream in(log);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(text.find(expect), std::string::npos) << name << ":\n" << text;
    EXPECT_NE(text.find("refusing to connect"), std::string::npos) << name << ":\n" << text;
  }
}

TEST(MountStartup, UnreachableGatewayFailsClearlyAndMountsNothing) {
  std::string dir = make_test_dir("unreachable");
  std::string mp = dir + "/mnt";
  ::mkdir(mp.c_str(), 0755);
  std::string token = dir + "/token";
  std::ofstream(token) << "t\n";
  ::chmod(token.c_str(), 0600);
  std::string out;
  auto start = std::chrono::steady_clock::now();
  int rc = run_command(
      "'" + mount_bin() + "' 127.0.0.1:1 '" + mp + "' --insecure --token-file '" + token + "'",
      &out);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("127.0.0.1:1"), std::string::npos) << out;
  EXPECT_LT(took, 10.0);
  std::string mounts;
  run_command("grep -c ' " + mp + " ' /proc/mounts", &mounts);
  EXPECT_EQ(mounts, "0\n") << "a mount was left behind";
}

TEST(MountStartup, UnknownNamespaceFailsClearly) {
  std::string error;
  auto cluster = LocalCluster::start("nsname", {.servers = 1, .mounts = 0}, error);
  ASSERT_TRUE(cluster) << error;
  std::string mp = cluster->state() + "/extra-mnt";
  ::mkdir(mp.c_str(), 0755);
  std::string out;
  int rc = run_command("'" + mount_bin() + "' " + cluster->env("SKEIN_GATEWAY") + " '" + mp +
                           "' --namespace no-such-namespace" + cluster->mount_credentials(),
                       &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("refused access to namespace 'no-such-namespace' (check --namespace"),
            std::string::npos)
      << out;

  // Without a token file, or with no TLS set-up, the mount says what it needs before it tries.
  rc =
      run_command("'" + mount_bin() + "' " + cluster->env("SKEIN_GATEWAY") + " '" + mp + "'", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("a token file is needed (--token-file FILE)"), std::string::npos) << out;
  rc = run_command("'" + mount_bin() + "' " + cluster->env("SKEIN_GATEWAY") + " '" + mp +
                       "' --token-file '" + cluster->token_file() + "'",
                   &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("no CA file to check the gateway's certificate with"), std::string::npos)
      << out;
}

// Relative paths to the TLS files and the control directory, given from the directory that holds
// them: the mount reads the files again after it has gone into the background from "/" (at
// connect), so they are taken as absolute at start. It must stay mounted, and answer.
TEST(MountStartup, RelativePathsOfTheTlsFilesAndControlDirectoryWork) {
  std::string error;
  auto cluster = LocalCluster::start("relpaths", {.servers = 1, .mounts = 0}, error);
  ASSERT_TRUE(cluster) << error;
  if (cluster->env("SKEIN_INSECURE") == "1") GTEST_SKIP() << "the cluster runs without TLS";
  const std::string mp = cluster->state() + "/rel-mnt";
  ::mkdir(mp.c_str(), 0755);
  const std::string ca = cluster->env("SKEIN_CA_FILE"), cert = cluster->env("SKEIN_NODE_CERT"),
                    key = cluster->env("SKEIN_NODE_KEY");
  const std::string dir = ca.substr(0, ca.rfind('/'));
  auto in_dir = [&](const std::string& path) {
    return path.rfind(dir + "/", 0) == 0 ? path.substr(dir.size() + 1) : path;
  };
  std::string out;
  int rc =
      run_command("cd '" + dir + "' && '" + mount_bin() + "' " + cluster->env("SKEIN_GATEWAY") +
                      " '" + mp + "' --token-file '" + cluster->token_file() + "' --ca-file '" +
                      in_dir(ca) + "' --cert-file '" + in_dir(cert) + "' --key-file '" +
                      in_dir(key) + "' --control-dir rel-ctl",
                  &out);
  ASSERT_EQ(rc, 0) << out;
  std::this_thread::sleep_for(std::chrono::seconds(2));  // past the daemon's connect
  std::string mounts;
  run_command("grep -c ' " + mp + " ' /proc/mounts", &mounts);
  EXPECT_EQ(mounts, "1\n") << "the mount went away after it went into the background";
  EXPECT_EQ(run_command("ls '" + mp + "' >/dev/null", &out), 0) << out;
  EXPECT_EQ(run_command("'" + mount_bin() + "' --status '" + mp + "' --control-dir '" + dir +
                            "/rel-ctl' >/dev/null",
                        &out),
            0)
      << out;
  run_command("fusermount3 -u '" + mp + "'", &out);
}

}  // namespace
}  // namespace skein::test
