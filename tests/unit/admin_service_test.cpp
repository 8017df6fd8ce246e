// The Admin service over an in-process channel, without any storage server: the admin token
// check, the refusals of each RPC with their status codes and messages, and the mount-table
// changes that add, remove and drain make. Also the admin_token_file configuration key.
#include "service/admin_service.hpp"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "gateway.hpp"
#include "skein/credential_file.hpp"
#include "temp_key_dir.hpp"

namespace {

using grpc::StatusCode;
using skein::v1::Admin;

class AdminServiceTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  // Backends a, b, c on a port where nothing listens; namespace "ns" with /a = a and
  // /bc = union(b, c); namespace "solo" with only /x = a.
  std::string config_text() {
    std::string text =
        "[gateway]\nlisten = \"127.0.0.1:0\"\ntimeout_ms = 1000\ninsecure = true\n"
        "backend_files_dir = \"" +
        dir_ + "\"\n";
    for (auto name : {"a", "b", "c"})
      text += "[[backend]]\nname = \"" + std::string(name) +
              "\"\nhost = \"127.0.0.1\"\nport = 1\nuser = \"u\"\nidentity_file = \"" + key_ +
              "\"\nknown_hosts = \"" + kh_ + "\"\nroot = \"/srv/" + name + "\"\n";
    const std::string token = "token_file = \"" + files_.token + "\"\n";
    text += "[[namespace]]\nname = \"ns\"\n" + token +
            "[[namespace.mount]]\npath = \"/a\"\nbackends = [\"a\"]\n"
            "[[namespace.mount]]\npath = \"/bc\"\nbackends = [\"b\", \"c=RO\"]\n"
            "[[namespace]]\nname = \"solo\"\n" +
            token + "[[namespace.mount]]\npath = \"/x\"\nbackends = [\"a\"]\n";
    return text + extra_config_;
  }

  void start(const std::string& token = "s3cret") {
    gateway_ = std::make_unique<skein::Gateway>(skein::parse_gateway_config(config_text(), "t"));
    service_ = std::make_unique<skein::AdminService>(
        *gateway_, token.empty() ? std::vector<std::string>{} : std::vector<std::string>{token});
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = Admin::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  template <typename Req, typename Rep>
  grpc::Status call(grpc::Status (Admin::Stub::*rpc)(grpc::ClientContext*, const Req&, Rep*),
                    const Req& req, Rep* rep, const char* token = "s3cret") {
    grpc::ClientContext ctx;
    if (token) ctx.AddMetadata("x-skein-admin-token", token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return (stub_.get()->*rpc)(&ctx, req, rep);
  }

  skein::v1::AddBackendRequest add_request(const std::string& name, const std::string& ns,
                                           const std::string& path) {
    skein::v1::AddBackendRequest req;
    auto* b = req.mutable_backend();
    b->set_name(name);
    b->set_host("127.0.0.1");
    b->set_port(1);
    b->set_user("u");
    b->set_identity_file(key_);
    b->set_known_hosts(kh_);
    b->set_root("/srv/" + name);
    req.set_ns(ns);
    req.set_mount_path(path);
    req.set_skip_connect_check(true);
    return req;
  }

  // The layout description of `path` in namespace `ns`, or "" when there is no such mount.
  std::string layout_of(const std::string& ns, const std::string& path) {
    for (auto& n : gateway_->namespaces()) {
      if (n.config.name != ns) continue;
      for (auto& m : n.table->mounts())
        if (m.path == path) return m.layout->describe();
    }
    return "";
  }

  std::string extra_config_;  // appended to config_text()
  skein::test::TempKeyDir files_{"skein-admin-test"};
  const std::string &dir_ = files_.dir, &key_ = files_.key, &kh_ = files_.known_hosts;
  std::unique_ptr<skein::Gateway> gateway_;
  std::unique_ptr<skein::AdminService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Admin::Stub> stub_;
};

TEST_F(AdminServiceTest, EveryCallNeedsTheAdminToken) {
  start();
  skein::v1::HealthReply health;
  auto st = call(&Admin::Stub::Health, skein::v1::HealthRequest(), &health, nullptr);
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_NE(st.error_message().find("missing admin token"), std::string::npos);
  st = call(&Admin::Stub::Health, skein::v1::HealthRequest(), &health, "s3cre");
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(st.error_message(), "wrong admin token");
  skein::v1::RemoveBackendReply removed;
  skein::v1::RemoveBackendRequest remove;
  remove.set_name("b");
  st = call(&Admin::Stub::RemoveBackend, remove, &removed, "wrong");
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(layout_of("ns", "/bc"), "union(b, c=RO; create ff)")
      << "a refused call changes nothing";
  EXPECT_TRUE(call(&Admin::Stub::Health, skein::v1::HealthRequest(), &health).ok());
}

TEST_F(AdminServiceTest, WithoutATokenFileAdminIsDisabled) {
  start("");
  skein::v1::HealthReply health;
  auto st = call(&Admin::Stub::Health, skein::v1::HealthRequest(), &health, "");
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_NE(st.error_message().find("admin is disabled"), std::string::npos) << st.error_message();
  st = call(&Admin::Stub::Health, skein::v1::HealthRequest(), &health, "anything");
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED);
}

TEST_F(AdminServiceTest, HealthCountsBackendsAndNamesNamespaces) {
  start();
  skein::v1::HealthReply health;
  ASSERT_TRUE(call(&Admin::Stub::Health, skein::v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.version(), skein::Gateway::version());
  EXPECT_EQ(health.backends_total(), 3u);
  ASSERT_EQ(health.namespaces_size(), 2);
  EXPECT_EQ(health.namespaces(0), "ns");
  EXPECT_EQ(health.namespaces(1), "solo");
}

TEST_F(AdminServiceTest, ListNamespacesShowsMountsBranchesAndLayouts) {
  start();
  skein::v1::ListNamespacesReply reply;
  ASSERT_TRUE(call(&Admin::Stub::ListNamespaces, skein::v1::ListNamespacesRequest(), &reply).ok());
  ASSERT_EQ(reply.namespaces_size(), 2);
  auto& ns = reply.namespaces(0);
  EXPECT_EQ(ns.name(), "ns");
  EXPECT_EQ(ns.create_policy(), "ff");
  ASSERT_EQ(ns.mounts_size(), 2);
  EXPECT_EQ(ns.mounts(1).path(), "/bc");
  EXPECT_EQ(ns.mounts(1).layout_kind(), "union");
  EXPECT_EQ(ns.mounts(1).layout(), "union(b, c=RO; create ff)");
  ASSERT_EQ(ns.mounts(1).branches_size(), 2);
  EXPECT_EQ(ns.mounts(1).branches(1).backend(), "c");
  EXPECT_EQ(ns.mounts(1).branches(1).mode(), skein::v1::BRANCH_MODE_RO);
}

TEST_F(AdminServiceTest, AddBackendCreatesAMountOrJoinsAUnion) {
  start();
  skein::v1::AddBackendReply reply;
  ASSERT_TRUE(call(&Admin::Stub::AddBackend, add_request("d", "ns", "/new//dir/"), &reply).ok());
  EXPECT_TRUE(reply.new_mount());
  EXPECT_EQ(reply.mount_path(), "/new/dir");
  EXPECT_EQ(reply.layout(), "d");
  EXPECT_EQ(layout_of("ns", "/new/dir"), "d");
  EXPECT_EQ(reply.backend().spec().port(), 1u);
  EXPECT_EQ(reply.backend().spec().connections(), 4u) << "default pool size";
  ASSERT_EQ(reply.backend().mounts_size(), 1);
  EXPECT_EQ(reply.backend().mounts(0), "ns:/new/dir");

  auto req = add_request("e", "ns", "/bc");
  req.set_mode(skein::v1::BRANCH_MODE_NC);
  ASSERT_TRUE(call(&Admin::Stub::AddBackend, req, &reply).ok());
  EXPECT_FALSE(reply.new_mount());
  EXPECT_EQ(reply.layout(), "union(b, c=RO, e=NC; create ff)");
  EXPECT_EQ(layout_of("ns", "/bc"), "union(b, c=RO, e=NC; create ff)");
  EXPECT_EQ(layout_of("ns", "/a"), "a") << "other mounts are untouched";
  EXPECT_EQ(gateway_->config().backends.size(), 5u);
}

TEST_F(AdminServiceTest, AddBackendRefusesBadInputWithClearMessages) {
  start();
  // A key outside backend_files_dir, and a symlink inside it that leads out.
  const std::string outside = files_.dir + "-outside-key";
  std::ofstream(outside) << "key";
  ::symlink(outside.c_str(), (dir_ + "/leads-out").c_str());
  struct Case {
    std::string what;
    std::function<void(skein::v1::AddBackendRequest&)> change;
    StatusCode code;
    std::string message;
  };
  std::vector<Case> cases = {
      {"duplicate name", [](auto& r) { r.mutable_backend()->set_name("b"); },
       StatusCode::ALREADY_EXISTS, "there is already a backend 'b'"},
      {"unknown namespace", [](auto& r) { r.set_ns("nope"); }, StatusCode::NOT_FOUND,
       "no namespace 'nope'"},
      {"name with slash", [](auto& r) { r.mutable_backend()->set_name("x/y"); },
       StatusCode::INVALID_ARGUMENT, "may not contain '/'"},
      {"empty name", [](auto& r) { r.mutable_backend()->set_name(""); },
       StatusCode::INVALID_ARGUMENT, "needs a name"},
      {"relative root", [](auto& r) { r.mutable_backend()->set_root("srv"); },
       StatusCode::INVALID_ARGUMENT, "must be an absolute path"},
      {"no host", [](auto& r) { r.mutable_backend()->set_host(""); }, StatusCode::INVALID_ARGUMENT,
       "needs a host"},
      {"port", [](auto& r) { r.mutable_backend()->set_port(70000); }, StatusCode::INVALID_ARGUMENT,
       "port must be between 1 and 65535"},
      {"connections", [](auto& r) { r.mutable_backend()->set_connections(100); },
       StatusCode::INVALID_ARGUMENT, "connections must be between 1 and 64"},
      {"unreadable key",
       [this](auto& r) { r.mutable_backend()->set_identity_file(dir_ + "/missing"); },
       StatusCode::INVALID_ARGUMENT, "cannot read the identity file"},
      {"relative known_hosts", [](auto& r) { r.mutable_backend()->set_known_hosts("kh"); },
       StatusCode::INVALID_ARGUMENT, "must be an absolute path on the gateway's machine"},
      {"relative mount path", [](auto& r) { r.set_mount_path("x"); }, StatusCode::INVALID_ARGUMENT,
       "mount path 'x' must be an absolute path"},
      {"mount path escaping", [](auto& r) { r.set_mount_path("/../x"); },
       StatusCode::INVALID_ARGUMENT, "without '..'"},
      {"bad mode", [](auto& r) { r.set_mode(skein::v1::BranchMode(9)); },
       StatusCode::INVALID_ARGUMENT, "unknown branch mode"},
      {"key outside backend_files_dir",
       [&](auto& r) { r.mutable_backend()->set_identity_file(outside); },
       StatusCode::INVALID_ARGUMENT, "is not below " + dir_ + " (backend_files_dir"},
      {"known_hosts outside backend_files_dir",
       [](auto& r) { r.mutable_backend()->set_known_hosts("/etc/hostname"); },
       StatusCode::INVALID_ARGUMENT, "known_hosts file /etc/hostname is not below"},
      {"symlink leading out of backend_files_dir",
       [this](auto& r) { r.mutable_backend()->set_identity_file(dir_ + "/leads-out"); },
       StatusCode::INVALID_ARGUMENT, "/leads-out is not below"},
      {"removed ssh transport", [](auto& r) { r.mutable_backend()->set_ssh_transport("native"); },
       StatusCode::INVALID_ARGUMENT, "ssh_transport \"native\" was removed"},
      {"proxy jump on libssh", [](auto& r) { r.mutable_backend()->set_proxy_jump("bastion"); },
       StatusCode::INVALID_ARGUMENT, "proxy_jump needs ssh_transport = \"openssh\""},
  };
  for (auto& c : cases) {
    auto req = add_request("d", "ns", "/d");
    c.change(req);
    skein::v1::AddBackendReply reply;
    auto st = call(&Admin::Stub::AddBackend, req, &reply);
    EXPECT_EQ(st.error_code(), c.code) << c.what << ": " << st.error_message();
    EXPECT_NE(st.error_message().find(c.message), std::string::npos)
        << c.what << ": " << st.error_message();
  }
  EXPECT_EQ(gateway_->config().backends.size(), 3u) << "nothing was added";
  EXPECT_EQ(layout_of("ns", "/d"), "");
  ::unlink(outside.c_str());
}

TEST_F(AdminServiceTest, AddBackendIsOffWithoutBackendFilesDir) {
  gateway_ = std::make_unique<skein::Gateway>(skein::parse_gateway_config(
      std::string(config_text())
          .replace(config_text().find("backend_files_dir"), 17, "# backend_files_dir"),
      "t"));
  service_ = std::make_unique<skein::AdminService>(*gateway_, std::vector<std::string>{"s3cret"});
  grpc::ServerBuilder builder;
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  stub_ = Admin::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  skein::v1::AddBackendReply reply;
  auto st = call(&Admin::Stub::AddBackend, add_request("d", "ns", "/d"), &reply);
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("set backend_files_dir in its [gateway] section"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(layout_of("ns", "/d"), "");
}

TEST_F(AdminServiceTest, AddBackendRefusesAServerItCannotReach) {
  start();
  auto req = add_request("d", "ns", "/d");
  req.set_skip_connect_check(false);
  skein::v1::AddBackendReply reply;
  auto st = call(&Admin::Stub::AddBackend, req, &reply);
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("backend 'd' not added"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(layout_of("ns", "/d"), "");
}

// A job pool's backends hold every job's directory: a backend added to a static namespace may
// not reach them, whether its root is the pool's, above it or below it on the same server.
TEST_F(AdminServiceTest, AddBackendRefusesABackendThatReachesAPoolsFiles) {
  extra_config_ =
      "[[backend]]\nname = \"pooled\"\nhost = \"127.0.0.1\"\nport = 1\nuser = \"u\"\n"
      "identity_file = \"" +
      key_ + "\"\nknown_hosts = \"" + kh_ +
      "\"\nroot = \"/srv/pool\"\n"
      "[jobs]\ndatabase = \"" +
      dir_ +
      "/jobs.db\"\n"
      "[[jobs.pool]]\nname = \"scratch\"\nbackends = [\"pooled\"]\n";
  start();
  for (const std::string root : {"/srv/pool", "/srv/pool/", "/srv", "/", "/srv/pool/job-1"}) {
    auto req = add_request("d", "ns", "/d");
    req.mutable_backend()->set_root(root);
    skein::v1::AddBackendReply reply;
    auto st = call(&Admin::Stub::AddBackend, req, &reply);
    EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION)
        << root << ": " << st.error_message();
    EXPECT_NE(st.error_message().find("reaches the same files as backend 'pooled' "
                                      "(127.0.0.1:1:/srv/pool) of job pool 'scratch'"),
              std::string::npos)
        << root << ": " << st.error_message();
  }
  EXPECT_EQ(layout_of("ns", "/d"), "") << "nothing was added";
  // Beside the pool's root, or the same directory on another server: added.
  for (const std::string root : {"/srv/poolside", "/srv/data"}) {
    auto req =
        add_request("d" + std::to_string(root.size()), "ns", "/d" + std::to_string(root.size()));
    req.mutable_backend()->set_root(root);
    skein::v1::AddBackendReply reply;
    EXPECT_TRUE(call(&Admin::Stub::AddBackend, req, &reply).ok()) << root;
  }
  auto other_server = add_request("e", "ns", "/e");
  other_server.mutable_backend()->set_root("/srv/pool");
  other_server.mutable_backend()->set_port(2);
  skein::v1::AddBackendReply reply;
  EXPECT_TRUE(call(&Admin::Stub::AddBackend, other_server, &reply).ok());
}

TEST_F(AdminServiceTest, RemoveBackendDropsEmptyMountsAndKeepsUnions) {
  start();
  skein::v1::RemoveBackendRequest req;
  skein::v1::RemoveBackendReply reply;
  req.set_name("b");
  ASSERT_TRUE(call(&Admin::Stub::RemoveBackend, req, &reply).ok());
  ASSERT_EQ(reply.left_mounts_size(), 1);
  EXPECT_EQ(reply.left_mounts(0), "ns:/bc");
  EXPECT_EQ(reply.dropped_mounts_size(), 0);
  EXPECT_EQ(layout_of("ns", "/bc"), "c");

  req.set_name("c");
  ASSERT_TRUE(call(&Admin::Stub::RemoveBackend, req, &reply).ok());
  ASSERT_EQ(reply.dropped_mounts_size(), 1);
  EXPECT_EQ(reply.dropped_mounts(0), "ns:/bc");
  EXPECT_EQ(layout_of("ns", "/bc"), "") << "a mount without backends disappears";
  EXPECT_EQ(layout_of("ns", "/a"), "a");

  req.set_name("c");
  auto st = call(&Admin::Stub::RemoveBackend, req, &reply);
  EXPECT_EQ(st.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(st.error_message(), "no backend 'c'");
}

TEST_F(AdminServiceTest, RemoveBackendRefusesToEmptyANamespace) {
  start();
  skein::v1::RemoveBackendRequest req;
  skein::v1::RemoveBackendReply reply;
  req.set_name("a");  // the only backend of namespace "solo"
  auto st = call(&Admin::Stub::RemoveBackend, req, &reply);
  EXPECT_EQ(st.error_code(), StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("last backend of namespace 'solo'"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(layout_of("ns", "/a"), "a") << "nothing changed in any namespace";
  EXPECT_EQ(layout_of("solo", "/x"), "a");
}

TEST_F(AdminServiceTest, DrainBackendTogglesAndReportsTheState) {
  start();
  skein::v1::DrainBackendRequest req;
  skein::v1::DrainBackendReply reply;
  req.set_name("b");
  ASSERT_TRUE(call(&Admin::Stub::DrainBackend, req, &reply).ok());
  EXPECT_TRUE(reply.backend().draining());
  for (auto& v : gateway_->backends())
    EXPECT_EQ(v.backend->draining(), v.backend->name() == "b") << v.backend->name();
  req.set_undrain(true);
  ASSERT_TRUE(call(&Admin::Stub::DrainBackend, req, &reply).ok());
  EXPECT_FALSE(reply.backend().draining());
  req.set_name("zz");
  EXPECT_EQ(call(&Admin::Stub::DrainBackend, req, &reply).error_code(), StatusCode::NOT_FOUND);
}

TEST_F(AdminServiceTest, ListBackendsShowsSpecsAndWhereEachIsUsed) {
  start();
  skein::v1::ListBackendsReply reply;
  ASSERT_TRUE(call(&Admin::Stub::ListBackends, skein::v1::ListBackendsRequest(), &reply).ok());
  ASSERT_EQ(reply.backends_size(), 3);
  auto& a = reply.backends(0);
  EXPECT_EQ(a.spec().name(), "a");
  EXPECT_EQ(a.spec().root(), "/srv/a");
  ASSERT_EQ(a.mounts_size(), 2);
  EXPECT_EQ(a.mounts(0), "ns:/a");
  EXPECT_EQ(a.mounts(1), "solo:/x");
  EXPECT_FALSE(a.free_space_known()) << "nothing listens on port 1";
}

TEST_F(AdminServiceTest, AdminTokenFileMustBeTheOwnersOnly) {
  std::string token = dir_ + "/admin.token";
  std::ofstream(token) << "tok\n";
  auto text = [&] {
    return "[gateway]\nadmin_token_file = \"" + token + "\"\n" +
           config_text().substr(config_text().find("timeout_ms"));
  };
  chmod(token.c_str(), 0640);
  try {
    skein::parse_gateway_config(text(), "gw.toml");
    ADD_FAILURE() << "a group-readable token file was accepted";
  } catch (const skein::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gw.toml:2: 'admin_token_file' " + token +
                                         " is accessible by group or others (mode 0640); a file "
                                         "holding a secret must be readable by its owner only: "
                                         "chmod 600 " +
                                         token),
              std::string::npos)
        << e.what();
  }
  chmod(token.c_str(), 0600);
  auto cfg = skein::parse_gateway_config(text(), "gw.toml");
  EXPECT_EQ(cfg.admin_token_file, token);
  EXPECT_EQ(skein::read_token_file(token, "admin_token_file"), std::vector<std::string>{"tok"});
  std::ofstream(token) << "\n";
  EXPECT_THROW(skein::read_token_file(token, "admin_token_file"), skein::ConfigError);
  // Two tokens (a rotation under way): the gateway takes both, a client sends the newer, last one
  // (before, skeinctl sent "old\nnew" as one metadata value, and gRPC aborted the process).
  std::ofstream(token) << "  old-token\r\n\n\tnew-token \n";
  EXPECT_EQ(skein::read_token_file(token, "admin_token_file"),
            (std::vector<std::string>{"old-token", "new-token"}));
  EXPECT_EQ(skein::read_client_token(token, "the admin token file"), "new-token");
  // A token gRPC cannot carry is refused where it is read, with the line, not the secret.
  std::ofstream(token) << "good\nin side\n";
  try {
    skein::read_token_file(token, "admin_token_file");
    ADD_FAILURE() << "a token with a space inside was taken";
  } catch (const skein::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("admin_token_file " + token +
                                         ", line 2: a token may hold "
                                         "only printable ASCII"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(std::string(e.what()).find("in side"), std::string::npos) << e.what();
  }
  std::ofstream(token) << "caf\xc3\xa9\n";
  EXPECT_THROW(skein::read_client_token(token, "token file"), skein::CredentialError);
}

}  // namespace
