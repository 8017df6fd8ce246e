// skeinctl end to end: every command through the real binary against a live cluster of three
// sshd servers with a FUSE mount, its exit codes (usage 2, connection 3, refused 4) and its JSON;
// and backends added, drained and removed at runtime while the mount stays up.
#include <dirent.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

using Json = nlohmann::json;

std::string q(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::set<std::string> list_dir(const std::string& path) {
  std::set<std::string> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) return out;
  while (auto* e = ::readdir(d))
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.insert(e->d_name);
  ::closedir(d);
  return out;
}

// Mounts cache entries for about a second: a runtime change shows within a few.
bool eventually(const std::function<bool()>& cond) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

class Skeinctl : public ClusterSuite<3, 1> {
 protected:
  static std::string bin() { return build_dir() + "/client/skeinctl"; }
  std::string gateway() const { return cluster_->env("SKEIN_GATEWAY"); }
  std::string token_file() const { return cluster_->env("SKEIN_ADMIN_TOKEN_FILE"); }
  // `K='v' ` assignments giving skeinctl the cluster's CA and admin certificate (not the token).
  std::string tls_env() const {
    std::string out;
    for (const char* key :
         {"SKEIN_CA_FILE", "SKEIN_ADMIN_CERT", "SKEIN_ADMIN_KEY", "SKEIN_INSECURE"})
      if (!cluster_->env(key).empty()) out += std::string(key) + "=" + q(cluster_->env(key)) + " ";
    return out;
  }

  // Runs `skeinctl --gateway G ARGS` with the cluster's admin token; stdout and stderr in `out`.
  int ctl(const std::string& args, std::string* out = nullptr) {
    return run_command("SKEIN_ADMIN_TOKEN_FILE=" + q(token_file()) + " " + tls_env() + q(bin()) +
                           " --gateway " + q(gateway()) + " " + args,
                       out);
  }
  // Same with --json; parses stdout (stderr is dropped) into `json`.
  int ctl_json(const std::string& args, Json& json) {
    std::string out;
    int rc = run_command("(SKEIN_ADMIN_TOKEN_FILE=" + q(token_file()) + " " + tls_env() + q(bin()) +
                             " --gateway " + q(gateway()) + " --json " + args + " 2>/dev/null)",
                         &out);
    json = Json::parse(out, nullptr, false);
    EXPECT_FALSE(json.is_discarded()) << "not JSON:\n" << out;
    return rc;
  }

  // A new export directory beside the servers' own, served by server 0's sshd.
  std::string new_root(const std::string& name) {
    std::string dir = cluster_->state() + "/exports/" + name;
    ::mkdir(dir.c_str(), 0755);
    return dir;
  }
  // `backends add NAME` for a root on server 0.
  std::string add_args(const std::string& name, const std::string& root, const std::string& path) {
    return "backends add " + q(name) + " --host 127.0.0.1 --port " +
           cluster_->list("SKEIN_SSH_PORTS").at(0) + " --user " +
           q(cluster_->env("SKEIN_SSH_USER")) + " --identity " + q(cluster_->env("SKEIN_SSH_KEY")) +
           " --known-hosts " + q(cluster_->env("SKEIN_KNOWN_HOSTS")) + " --root " + q(root) +
           " --namespace default --path " + q(path);
  }
  // The backend called `name` in `backends list --json`, or null.
  Json backend_json(const std::string& name) {
    Json j;
    EXPECT_EQ(ctl_json("backends list", j), 0);
    for (auto& b : j["backends"])
      if (b["name"] == name) return b;
    return nullptr;
  }
  std::string mnt(const std::string& rel) const { return cluster_->mount(0) + rel; }
};

TEST_F(Skeinctl, HealthShowsVersionBackendsAndNamespaces) {
  std::string out;
  ASSERT_EQ(ctl("health", &out), 0) << out;
  EXPECT_NE(out.find("status      ok\n"), std::string::npos) << out;
  EXPECT_NE(out.find("backends    9/9 up\n"), std::string::npos) << out;
  EXPECT_NE(out.find("namespaces  1 (default)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("gateway     " + gateway()), std::string::npos) << out;

  Json j;
  ASSERT_EQ(ctl_json("health", j), 0);
  EXPECT_EQ(j["status"], "ok");
  EXPECT_EQ(j["version"], "0.1.0");
  EXPECT_EQ(j["backends_up"], 9);  // srv0..2, stripe0..2 and the job pool's scratch0..2
  EXPECT_EQ(j["backends_total"], 9);
  EXPECT_EQ(j["namespaces"], Json::array({"default"}));
  EXPECT_TRUE(j["uptime_s"].is_number_unsigned());
  EXPECT_EQ(j["listen"], gateway());
}

TEST_F(Skeinctl, BackendsListShowsAddressStateConnectionsSpaceAndTraffic) {
  ASSERT_TRUE(write_file(mnt("/srv1/traffic"), std::string(100000, 'x')));
  ASSERT_EQ(read_file(mnt("/srv1/traffic")).size(), 100000u);
  std::string out;
  ASSERT_EQ(ctl("backends list", &out), 0) << out;
  std::istringstream lines(out);
  std::string header, row;
  std::getline(lines, header);
  EXPECT_TRUE(std::regex_search(header, std::regex("^NAME +ADDRESS +STATE"))) << out;
  size_t state_col = header.find("STATE");
  ASSERT_NE(state_col, std::string::npos) << out;
  std::string user = cluster_->env("SKEIN_SSH_USER");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(std::getline(lines, row)) << out;  // scratch0..2 first
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(std::getline(lines, row)) << out;
    EXPECT_EQ(row.rfind("srv" + std::to_string(i) + " ", 0), 0u) << out;
    EXPECT_NE(row.find(user + "@127.0.0.1:" +
                       cluster_->list("SKEIN_SSH_PORTS").at(static_cast<size_t>(i)) + ":" +
                       cluster_->export_dir(i)),
              std::string::npos)
        << out;
    EXPECT_EQ(row.substr(state_col, 3), "up ") << "columns are aligned:\n" << out;
    EXPECT_NE(row.find("default:/srv" + std::to_string(i)), std::string::npos) << out;
  }

  Json j;
  ASSERT_EQ(ctl_json("backends list", j), 0);
  ASSERT_EQ(j["backends"].size(), 9u);  // scratch0..2 (jobs), srv0..2, stripe0..2 (/striped)
  auto& b = j["backends"][4];
  EXPECT_EQ(b["name"], "srv1");
  EXPECT_EQ(b["host"], "127.0.0.1");
  EXPECT_EQ(std::to_string(b["port"].get<int>()), cluster_->list("SKEIN_SSH_PORTS").at(1));
  EXPECT_EQ(b["root"], cluster_->export_dir(1));
  EXPECT_EQ(b["state"], "up");
  EXPECT_EQ(b["up"], true);
  EXPECT_EQ(b["draining"], false);
  EXPECT_EQ(b["connections"], 4);
  EXPECT_GE(b["live_connections"].get<int>(), 1);
  EXPECT_EQ(b["ssh_transport"], cluster_->env("SKEIN_SSH_TRANSPORT"));
  EXPECT_EQ(b["ssh_stack"], cluster_->env("SKEIN_SSH_TRANSPORT"));  // what its connections run on
  EXPECT_EQ(b["ssh_config"], cluster_->env("SKEIN_SSH_CONFIG"));
  ASSERT_TRUE(b["free_bytes"].is_number()) << b.dump();
  EXPECT_GT(b["total_bytes"].get<uint64_t>(), 0u);
  EXPECT_GE(b["bytes_written"].get<uint64_t>(), 100000u);
  EXPECT_GE(b["bytes_read"].get<uint64_t>(), 100000u);
  EXPECT_GT(b["ops"].get<uint64_t>(), 0u);
  EXPECT_EQ(b["mounts"][0], "default:/srv1") << b.dump();
  ::unlink(mnt("/srv1/traffic").c_str());
}

TEST_F(Skeinctl, NamespacesListShowsMountsAndLayouts) {
  std::string out;
  ASSERT_EQ(ctl("namespaces list", &out), 0) << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex("^NAMESPACE  POLICY  TOKEN  OPEN  MOUNT +LAYOUT\n")))
      << out;
  EXPECT_NE(out.find("default    ff      yes"), std::string::npos) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\n +/srv2 +srv2\n"))) << out;

  Json j;
  ASSERT_EQ(ctl_json("namespaces list", j), 0);
  ASSERT_EQ(j["namespaces"].size(), 1u);
  auto& ns = j["namespaces"][0];
  EXPECT_EQ(ns["name"], "default");
  EXPECT_EQ(ns["create_policy"], "ff");
  EXPECT_EQ(ns["token_required"], true);
  ASSERT_GE(ns["mounts"].size(), 3u);
  auto& srv0 = ns["mounts"][0];  // sorted by path
  EXPECT_EQ(srv0["path"], "/srv0");
  EXPECT_EQ(srv0["layout_kind"], "union");
  EXPECT_EQ(srv0["layout"], "srv0");
  EXPECT_EQ(srv0["branches"], Json::parse(R"([{"backend": "srv0", "mode": "RW"}])"));
}

TEST_F(Skeinctl, WrongTokenIsRefusedWithExit4) {
  std::string dir = make_test_dir("admin-token");
  std::string bad = dir + "/bad.token";
  std::ofstream(bad) << "not-the-token\n";
  ::chmod(bad.c_str(), 0600);
  std::string out;
  int rc = run_command(tls_env() + q(bin()) + " --gateway " + q(gateway()) + " --token-file " +
                           q(bad) + " backends list",
                       &out);
  EXPECT_EQ(rc, 4) << out;
  EXPECT_NE(out.find("the gateway refused: wrong admin token (UNAUTHENTICATED)"), std::string::npos)
      << out;
  rc = run_command("(" + tls_env() + q(bin()) + " --gateway " + q(gateway()) + " --token-file " +
                       q(bad) + " --json health 2>/dev/null)",
                   &out);
  EXPECT_EQ(rc, 4);
  auto j = Json::parse(out, nullptr, false);
  EXPECT_EQ(j["error"]["code"], "UNAUTHENTICATED") << out;
  EXPECT_EQ(j["error"]["message"], "wrong admin token") << out;
  EXPECT_EQ(j["error"]["exit_code"], 4) << out;
}

TEST_F(Skeinctl, MissingOrEmptyTokenFileIsAClearUsageError) {
  std::string out;
  std::string dir = make_test_dir("admin-token");
  int rc = run_command(tls_env() + q(bin()) + " --gateway " + q(gateway()) + " --token-file " +
                           q(dir + "/missing") + " health",
                       &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(
      out.find("cannot read the admin token file " + dir + "/missing: No such file or directory"),
      std::string::npos)
      << out;

  rc = run_command("env -u SKEIN_ADMIN_TOKEN_FILE " + tls_env() + q(bin()) + " --gateway " +
                       q(gateway()) + " health",
                   &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("no admin token: give --token-file FILE or set SKEIN_ADMIN_TOKEN_FILE"),
            std::string::npos)
      << out;

  std::ofstream(dir + "/empty") << "\n";
  ::chmod((dir + "/empty").c_str(), 0600);
  rc = run_command(tls_env() + q(bin()) + " --gateway " + q(gateway()) + " --token-file " +
                       q(dir + "/empty") + " health",
                   &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("is empty"), std::string::npos) << out;
}

// A token file in the middle of a rotation holds the old token and the new one, a line each
// (security.md): skeinctl sends the last, the newest. It sent both lines as one metadata value,
// which gRPC refuses with an abort of the process (exit 134). A token gRPC cannot carry at all
// is a usage error that names the line.
TEST_F(Skeinctl, ATokenFileOfTwoLinesSendsTheLastAndAnUnsendableTokenIsAUsageError) {
  std::string dir = make_test_dir("admin-token");
  std::string rotating = dir + "/rotating.token";
  {
    std::ifstream current(token_file());
    std::ofstream(rotating) << "an-older-token\n" << current.rdbuf();
  }
  ::chmod(rotating.c_str(), 0600);
  std::string out;
  int rc = run_command(tls_env() + q(bin()) + " --gateway " + q(gateway()) + " --token-file " +
                           q(rotating) + " health 2>&1",
                       &out);
  EXPECT_EQ(rc, 0) << out;
  std::ofstream(rotating) << "caf\xc3\xa9\n";
  rc = run_command(tls_env() + q(bin()) + " --gateway " + q(gateway()) + " --token-file " +
                       q(rotating) + " health 2>&1",
                   &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(rotating + ", line 1: a token may hold only printable ASCII"),
            std::string::npos)
      << out;
}

TEST_F(Skeinctl, UnreachableGatewayExits3) {
  std::string out;
  std::string address = "127.0.0.1:" + std::to_string(free_port());
  auto start = std::chrono::steady_clock::now();
  int rc = run_command("SKEIN_ADMIN_TOKEN_FILE=" + q(token_file()) + " " + tls_env() + q(bin()) +
                           " --gateway " + address + " health",
                       &out);
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("cannot reach the gateway at " + address), std::string::npos) << out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7))
      << "every call has a deadline";
}

TEST_F(Skeinctl, BadArgumentsExit2) {
  std::string root = cluster_->export_dir(0);
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"", "give a command: backends, namespaces, ns, stage, health"},
      {"frobnicate", "not expected: frobnicate"},
      {"backends", "backends: give one of list, add, remove, drain"},
      {"backends frob", "not expected: frob"},
      {"namespaces", "namespaces: give list"},
      {"backends drain", "NAME is required"},
      {"backends add x --host h", "required"},
      {add_args("x", root, "/x") + " --port 70000", "--port"},
      {add_args("x", root, "/x") + " --mode XX", "--mode"},
      {add_args("x", root, "/x") + " --connections 0", "--connections"},
      {add_args("x", root, "/x") + " --min-free 12Q", "'12Q' is not a size"},
      {add_args("x", root, "relative"), "'relative' must be an absolute path"},
      {add_args("x", root, "/x") + " --ssh-transport native", "--ssh-transport"},
      {"backends list --bogus", "--bogus"},
  };
  for (auto& c : cases) {
    std::string out;
    EXPECT_EQ(ctl(c.args, &out), 2) << c.args << ":\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << ":\n" << out;
  }
  std::string out;
  EXPECT_EQ(run_command("SKEIN_ADMIN_TOKEN_FILE=" + q(token_file()) + " " + tls_env() + q(bin()) +
                            " --gateway no-port health",
                        &out),
            2);
  EXPECT_NE(out.find("gateway address 'no-port' must be HOST:PORT"), std::string::npos) << out;
  EXPECT_EQ(run_command("env -u SKEIN_GATEWAY " + tls_env() + q(bin()) + " health", &out), 2);
  EXPECT_NE(out.find("no gateway"), std::string::npos) << out;
  EXPECT_EQ(run_command(tls_env() + q(bin()) + " --help", &out), 0);
  EXPECT_NE(out.find("backends"), std::string::npos) << out;
}

TEST_F(Skeinctl, RefusalsFromTheGatewayExit4WithItsMessage) {
  std::string root = new_root("refused");
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"backends remove nope", "no backend 'nope' (NOT_FOUND)"},
      {"backends drain nope", "no backend 'nope' (NOT_FOUND)"},
      {add_args("srv0", root, "/x"), "there is already a backend 'srv0' (ALREADY_EXISTS)"},
      {add_args("x", "relative/root", "/x"), "must be an absolute path (INVALID_ARGUMENT)"},
      {add_args("x/y", root, "/x"), "may not contain '/'"},
      {add_args("x", root + "/missing", "/x"),
       "backend 'x' not added: root " + root + "/missing on 127.0.0.1: No such file or directory"},
      {add_args("x", root + "/missing", "/x"), "(FAILED_PRECONDITION)"},
      {std::regex_replace(add_args("x", root, "/x"), std::regex("--identity '[^']*'"),
                          "--identity /nonexistent/key"),
       "cannot read the identity file /nonexistent/key"},
      {add_args("x", root, "/x") + " --proxy-jump bastion",
       "proxy_jump needs ssh_transport = \"openssh\": libssh 0.10 has no ProxyJump"},
  };
  for (auto& c : cases) {
    std::string out;
    EXPECT_EQ(ctl(c.args, &out), 4) << c.args << ":\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << ":\n" << out;
  }
  std::string out;
  std::string args = add_args("x", root, "/x");
  args.replace(args.find("--namespace default"), 19, "--namespace nope");
  EXPECT_EQ(ctl(args, &out), 4) << out;
  EXPECT_NE(out.find("no namespace 'nope' (NOT_FOUND)"), std::string::npos) << out;
  // A server that does not answer is refused, unless asked to add it anyway.
  args = add_args("x", root, "/x");
  args.replace(args.find(cluster_->list("SKEIN_SSH_PORTS").at(0)),
               cluster_->list("SKEIN_SSH_PORTS").at(0).size(), std::to_string(free_port()));
  EXPECT_EQ(ctl(args, &out), 4) << out;
  EXPECT_NE(out.find("backend 'x' not added"), std::string::npos) << out;
  Json j;
  ASSERT_EQ(ctl_json(args + " --no-check", j), 0);
  EXPECT_EQ(j["new_mount"], true);
  EXPECT_TRUE(eventually([&] { return backend_json("x")["state"] == "down"; }))
      << "it answers nothing, so it shows as down: " << backend_json("x").dump();
  ASSERT_EQ(ctl("backends remove x", &out), 0) << out;
  EXPECT_EQ(backend_json("x"), nullptr);
}

TEST_F(Skeinctl, AdminIsDisabledWithoutATokenFileAndATokenFileOthersCanReadIsRefused) {
  std::string dir = make_test_dir("admin-disabled");
  std::string text;
  {
    std::ifstream in(cluster_->env("SKEIN_CONFIG"));
    text.assign(std::istreambuf_iterator<char>(in), {});
    text = without_jobs(text);  // the cluster's gateway holds the job database
  }
  auto l = text.find("listen = \"");
  text.replace(l, text.find('\n', l) - l, "LISTEN");
  auto t = text.find("admin_token_file = ");
  ASSERT_NE(t, std::string::npos) << text;
  std::string token_line = text.substr(t, text.find('\n', t) - t);

  // A token file that others may read: the gateway does not start, and says why.
  std::string loose = dir + "/loose.token";
  std::ofstream(loose) << "tok\n";
  ::chmod(loose.c_str(), 0644);
  std::string cfg = dir + "/loose.toml";
  std::string loose_text = text;
  loose_text.replace(loose_text.find(token_line), token_line.size(),
                     "admin_token_file = \"" + loose + "\"");
  std::ofstream(cfg)
      << std::string(loose_text).replace(loose_text.find("LISTEN"), 6, "listen = \"127.0.0.1:1\"");
  std::string out;
  EXPECT_EQ(run_command(q(build_dir() + "/gateway/skein-gateway") + " --config " + q(cfg), &out), 2)
      << out;
  EXPECT_NE(out.find("is accessible by group or others (mode 0644)"), std::string::npos) << out;
  EXPECT_NE(out.find("chmod 600 " + loose), std::string::npos) << out;

  // No admin_token_file: the gateway serves, and its Admin service refuses everything.
  std::string address = "127.0.0.1:" + std::to_string(free_port());
  std::string open_text = text;
  open_text.replace(open_text.find(token_line), token_line.size(), "");
  open_text.replace(open_text.find("LISTEN"), 6, "listen = \"" + address + "\"");
  cfg = dir + "/open.toml";
  std::ofstream(cfg) << open_text;
  std::string error;
  auto gw = GatewayProcess::start(cfg, address, dir + "/gateway.log", error);
  ASSERT_TRUE(gw) << error;
  int rc = run_command("SKEIN_ADMIN_TOKEN_FILE=" + q(token_file()) + " " + tls_env() + q(bin()) +
                           " --gateway " + address + " health",
                       &out);
  EXPECT_EQ(rc, 4) << out;
  EXPECT_NE(out.find("admin is disabled on this gateway"), std::string::npos) << out;
}

TEST_F(Skeinctl, RuntimeAddDrainAndRemoveUnderALiveMount) {
  std::string root_a = new_root("extra-a"), root_b = new_root("extra-b");
  ASSERT_TRUE(write_file(root_a + "/hello.txt", "hello from a"));
  ASSERT_TRUE(write_file(root_a + "/shared.txt", "from a"));
  ASSERT_TRUE(write_file(root_b + "/shared.txt", "from b"));
  ASSERT_TRUE(write_file(root_b + "/only-b.txt", "b only"));
  ASSERT_TRUE(write_file(mnt("/srv0/before.txt"), "srv0 file"));

  // A new mount appears in the live mount, without a remount.
  std::string out;
  ASSERT_EQ(ctl(add_args("extra-a", root_a, "/extra"), &out), 0) << out;
  EXPECT_NE(out.find("added backend extra-a"), std::string::npos) << out;
  EXPECT_NE(out.find("to default:/extra as a new mount"), std::string::npos) << out;
  EXPECT_TRUE(eventually([&] { return read_file(mnt("/extra/hello.txt")) == "hello from a"; }));
  EXPECT_TRUE(list_dir(cluster_->mount(0)).count("extra"));
  Json a = backend_json("extra-a");
  EXPECT_EQ(a["state"], "up") << a.dump();
  EXPECT_EQ(a["root"], root_a);
  EXPECT_EQ(a["mounts"], Json::array({"default:/extra"}));

  // A second backend joins it: /extra becomes a union, the first branch winning duplicates. It
  // runs on the other SSH transport, with the cluster's ssh_config.
  const std::string other =
      cluster_->env("SKEIN_SSH_TRANSPORT") == "openssh" ? "libssh" : "openssh";
  Json added;
  ASSERT_EQ(ctl_json(add_args("extra-b", root_b, "/extra") + " --ssh-transport " + other +
                         " --ssh-config " + q(cluster_->env("SKEIN_SSH_CONFIG")),
                     added),
            0);
  EXPECT_EQ(added["backend"]["ssh_transport"], other);
  EXPECT_EQ(added["backend"]["ssh_config"], cluster_->env("SKEIN_SSH_CONFIG"));
  EXPECT_TRUE(eventually([&] { return backend_json("extra-b")["ssh_stack"] == other; }))
      << backend_json("extra-b").dump();
  EXPECT_EQ(added["new_mount"], false);
  EXPECT_EQ(added["mount_path"], "/extra");
  EXPECT_EQ(added["layout"], "union(extra-a, extra-b; create ff)");
  EXPECT_EQ(added["backend"]["name"], "extra-b");
  EXPECT_TRUE(eventually([&] { return list_dir(mnt("/extra")).count("only-b.txt") > 0; }));
  EXPECT_EQ(list_dir(mnt("/extra")),
            (std::set<std::string>{"hello.txt", "only-b.txt", "shared.txt"}));
  EXPECT_EQ(read_file(mnt("/extra/shared.txt")), "from a");
  EXPECT_EQ(read_file(mnt("/extra/only-b.txt")), "b only");
  ASSERT_TRUE(write_file(mnt("/extra/new1.txt"), "1"));
  EXPECT_TRUE(exists(root_a + "/new1.txt")) << "first-found puts new files on extra-a";

  // Drained: new files go to extra-b; extra-a's files are still read and written.
  ASSERT_EQ(ctl("backends drain extra-a", &out), 0) << out;
  EXPECT_NE(out.find("backend extra-a is draining"), std::string::npos) << out;
  EXPECT_EQ(backend_json("extra-a")["state"], "draining");
  ASSERT_TRUE(write_file(mnt("/extra/new2.txt"), "2"));
  EXPECT_TRUE(exists(root_b + "/new2.txt"));
  EXPECT_FALSE(exists(root_a + "/new2.txt"));
  EXPECT_EQ(read_file(mnt("/extra/hello.txt")), "hello from a");
  ASSERT_TRUE(write_file(mnt("/extra/hello.txt"), "changed while draining"));
  EXPECT_EQ(read_file(root_a + "/hello.txt"), "changed while draining");
  Json drained;
  ASSERT_EQ(ctl_json("backends drain extra-a --undo", drained), 0);
  EXPECT_EQ(drained["backend"]["state"], "up");
  EXPECT_EQ(drained["backend"]["draining"], false);
  ASSERT_TRUE(write_file(mnt("/extra/new3.txt"), "3"));
  EXPECT_TRUE(exists(root_a + "/new3.txt")) << "undrained: extra-a takes new files again";

  // namespaces list shows the union.
  ASSERT_EQ(ctl("namespaces list", &out), 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("/extra +union\\(extra-a, extra-b; create ff\\)")))
      << out;

  // Removing the first branch: the mount keeps working with what extra-b holds.
  Json removed;
  ASSERT_EQ(ctl_json("backends remove extra-a", removed), 0);
  EXPECT_EQ(removed["removed"], "extra-a");
  EXPECT_EQ(removed["left_mounts"], Json::array({"default:/extra"}));
  EXPECT_EQ(removed["dropped_mounts"], Json::array());
  EXPECT_TRUE(eventually([&] { return !exists(mnt("/extra/hello.txt")); }));
  EXPECT_TRUE(eventually([&] { return read_file(mnt("/extra/shared.txt")) == "from b"; }));
  EXPECT_EQ(read_file(mnt("/extra/new2.txt")), "2");
  EXPECT_EQ(backend_json("extra-a"), nullptr);

  // Removing the last one: the mount path disappears; the rest of the namespace is untouched.
  ASSERT_EQ(ctl("backends remove extra-b", &out), 0) << out;
  EXPECT_NE(out.find("mounts gone (no other backend): default:/extra"), std::string::npos) << out;
  EXPECT_TRUE(eventually([&] { return !exists(mnt("/extra")); }));
  EXPECT_FALSE(list_dir(cluster_->mount(0)).count("extra"));
  EXPECT_EQ(read_file(mnt("/srv0/before.txt")), "srv0 file");
  Json health;
  ASSERT_EQ(ctl_json("health", health), 0);
  EXPECT_EQ(health["backends_total"], 9);  // as before the additions
}

TEST_F(Skeinctl, RuntimeBranchJoinsAnExistingMount) {
  std::string root_c = new_root("extra-c");
  ASSERT_TRUE(write_file(root_c + "/from-c.txt", "c"));
  ASSERT_TRUE(write_file(mnt("/srv2/own.txt"), "srv2"));
  std::string out;
  ASSERT_EQ(ctl(add_args("extra-c", root_c, "/srv2") + " --mode ro", &out), 0) << out;
  EXPECT_NE(out.find("default:/srv2: union(srv2, extra-c=RO; create ff)"), std::string::npos)
      << out;
  EXPECT_TRUE(eventually([&] { return read_file(mnt("/srv2/from-c.txt")) == "c"; }));
  EXPECT_EQ(read_file(mnt("/srv2/own.txt")), "srv2");
  ASSERT_TRUE(write_file(mnt("/srv2/new.txt"), "n"));
  EXPECT_TRUE(exists(cluster_->export_dir(2) + "/new.txt"));
  EXPECT_FALSE(exists(root_c + "/new.txt")) << "a read-only branch takes nothing";
  EXPECT_EQ(SKEIN_ERRNO_OF(::unlink(mnt("/srv2/from-c.txt").c_str())), EROFS);

  ASSERT_EQ(ctl("backends remove extra-c", &out), 0) << out;
  EXPECT_NE(out.find("still served by their other branches: default:/srv2"), std::string::npos)
      << out;
  EXPECT_TRUE(eventually([&] { return !exists(mnt("/srv2/from-c.txt")); }));
  EXPECT_EQ(read_file(mnt("/srv2/own.txt")), "srv2");
  EXPECT_EQ(read_file(mnt("/srv2/new.txt")), "n");
  ::unlink(mnt("/srv2/new.txt").c_str());
  ::unlink(mnt("/srv2/own.txt").c_str());
}

}  // namespace
}  // namespace skein::test
