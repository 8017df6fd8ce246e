// Security end to end, as a hostile user on a compute node would try it: a small gRPC client of
// its own talks to the gateway's port directly, not through a mount. No call is answered without
// a credential; an unknown namespace and a wrong token look alike; no path leads the gateway
// outside a backend's root, through a symlink planted on the server, one made through the API,
// or one in the last component; TLS refuses plaintext and strangers; credential files others may
// read are refused; runtime backends may only use keys kept for them.
#include <grp.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <regex>
#include <thread>

#include "fs_test_support.hpp"
#include "grpc_test_support.hpp"
#include "skein/path.hpp"
#include "skein/v1/admin.grpc.pb.h"
#include "skein/v1/fs.grpc.pb.h"
#include "skein/v1/watch.grpc.pb.h"

namespace skein::test {
namespace {

namespace pb = ::skein::v1;
using grpc::StatusCode;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

class Security : public ClusterSuite<1, 1> {
 protected:
  static void SetUpTestSuite() {
    ClusterSuite::SetUpTestSuite();
    if (!cluster_) return;
    // Beside the export, on the storage server: what no path of the namespace may reach.
    ::mkdir(outside().c_str(), 0755);
    write_file(outside() + "/secret", "the storage server's own file\n");
  }
  void SetUp() override {
    ClusterSuite::SetUp();
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(::mkdir(server(name_).c_str(), 0755), 0) << strerror(errno);
    std::string error;
    channel_ = wire::secure_channel(cluster_->env("SKEIN_GATEWAY"), cluster_tls(*cluster_), error);
    ASSERT_TRUE(channel_) << error;
    names_ = pb::Namespace::NewStub(channel_);
    data_ = pb::Data::NewStub(channel_);
    token_ = read_token(cluster_->token_file());
    ASSERT_FALSE(token_.empty());
  }

  static std::string outside() { return cluster_->state() + "/outside"; }
  // A path in this test's directory on the server, and the same as the namespace names it.
  std::string server(const std::string& rel) const {
    return cluster_->export_dir(0) + "/" + (rel == name_ ? rel : name_ + "/" + rel);
  }
  std::string vpath(const std::string& rel) const { return "/srv0/" + name_ + "/" + rel; }

  // A context with the namespace's token (or `token`) and a deadline.
  void prepare(grpc::ClientContext& ctx, const char* token) const {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (token) ctx.AddMetadata("x-skein-token", token);
  }
  // An Open (with O_CREAT, a Create) of `path` for user nobody (OpenRequest.as_user), in
  // `groups` too, through `data` (by default the suite's gateway).
  pb::OpenReply open_as_nobody(const std::string& path, uint32_t flags,
                               const std::vector<uint32_t>& groups = {},
                               pb::Data::Stub* data = nullptr) {
    pb::Credentials nobody;
    nobody.set_uid(65534);
    nobody.set_gid(65534);
    for (uint32_t g : groups) nobody.add_groups(g);
    return open(path, flags, (flags & O_CREAT) != 0, &nobody, data);
  }
  pb::AttrReply getattr(const std::string& path, grpc::Status* status = nullptr,
                        const std::string& ns = "default", const char* token = "") {
    grpc::ClientContext ctx;
    prepare(ctx, token && !*token ? token_.c_str() : token);
    pb::PathRequest req;
    req.set_ns(ns);
    req.set_path(path);
    pb::AttrReply reply;
    auto st = names_->GetAttr(&ctx, req, &reply);
    if (status) *status = st;
    EXPECT_TRUE(status || st.ok()) << st.error_message();
    return reply;
  }
  // An Open (with `create`, a Create) of `path` through `data` (by default the suite's gateway),
  // for `as_user` where given (OpenRequest.as_user).
  pb::OpenReply open(const std::string& path, uint32_t flags, bool create = false,
                     const pb::Credentials* as_user = nullptr, pb::Data::Stub* data = nullptr) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::OpenRequest req;
    req.set_ns("default");
    req.set_path(path);
    req.set_flags(flags);
    req.set_mode(0644);
    if (as_user) *req.mutable_as_user() = *as_user;
    if (!data) data = data_.get();
    pb::OpenReply reply;
    auto st = create ? data->Create(&ctx, req, &reply) : data->Open(&ctx, req, &reply);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return reply;
  }
  int read_dir(const std::string& path) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::PathRequest req;
    req.set_ns("default");
    req.set_path(path);
    auto reader = names_->ReadDir(&ctx, req);
    pb::ReadDirReply batch;
    int error = 0, entries = 0;
    while (reader->Read(&batch)) {
      if (batch.error()) error = batch.error();
      entries += batch.entries_size();
    }
    EXPECT_TRUE(reader->Finish().ok());
    return error ? error : (entries ? 0 : -1);
  }
  pb::AttrReply setattr(const std::string& path, uint32_t fields, uint32_t mode, uint64_t size) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::SetAttrRequest req;
    req.set_ns("default");
    req.set_path(path);
    req.set_fields(fields);
    req.set_mode(mode);
    req.set_size(size);
    pb::AttrReply reply;
    EXPECT_TRUE(names_->SetAttr(&ctx, req, &reply).ok());
    return reply;
  }
  pb::AttrReply symlink(const std::string& path, const std::string& target) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::SymlinkRequest req;
    req.set_ns("default");
    req.set_path(path);
    req.set_target(target);
    pb::AttrReply reply;
    EXPECT_TRUE(names_->Symlink(&ctx, req, &reply).ok());
    return reply;
  }
  int rename(const std::string& from, const std::string& to) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::RenameRequest req;
    req.set_ns("default");
    req.set_from(from);
    req.set_to(to);
    pb::ErrorReply reply;
    EXPECT_TRUE(names_->Rename(&ctx, req, &reply).ok());
    return reply.error();
  }
  int unlink(const std::string& path) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::PathRequest req;
    req.set_ns("default");
    req.set_path(path);
    pb::ErrorReply reply;
    EXPECT_TRUE(names_->Unlink(&ctx, req, &reply).ok());
    return reply.error();
  }
  pb::AttrReply mkdir(const std::string& path) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::MkdirRequest req;
    req.set_ns("default");
    req.set_path(path);
    req.set_mode(0755);
    pb::AttrReply reply;
    EXPECT_TRUE(names_->Mkdir(&ctx, req, &reply).ok());
    return reply;
  }

  // A gateway config of the cluster's with `edit` applied, checked by `skein-gateway
  // --check-config`: its exit status, and its output in `out`.
  int check_config(const std::function<void(std::string&)>& edit, std::string& out) {
    std::string text = slurp(cluster_->env("SKEIN_CONFIG"));
    edit(text);
    std::string file = cluster_->state() + "/" + name_ + ".toml";
    std::ofstream(file) << text;
    return run_command(
        "'" + build_dir() + "/gateway/skein-gateway' --check-config --config '" + file + "' 2>&1",
        &out);
  }

  // A [[backend]] table for server 0's sshd: `name`, at `root` on that server.
  static std::string backend_toml(const std::string& name, const std::string& root,
                                  int connections) {
    return "[[backend]]\nname = \"" + name +
           "\"\nhost = \"127.0.0.1\"\nport = " + cluster_->list("SKEIN_SSH_PORTS").at(0) +
           "\nuser = \"" + cluster_->env("SKEIN_SSH_USER") + "\"\nidentity_file = \"" +
           cluster_->env("SKEIN_SSH_KEY") + "\"\nknown_hosts = \"" +
           cluster_->env("SKEIN_KNOWN_HOSTS") + "\"\nroot = \"" + root +
           "\"\nconnections = " + std::to_string(connections) + "\n";
  }
  // A gateway's config at `address` with `settings` in [gateway], the cluster's TLS, server 0's
  // export as backend srv0, and the default namespace with it at /srv0.
  static std::string gateway_toml(const std::string& address, const std::string& settings,
                                  int connections) {
    return "[gateway]\nlisten = \"" + address + "\"\n" + settings + cluster_->gateway_tls_toml() +
           backend_toml("srv0", cluster_->export_dir(0), connections) +
           "[[namespace]]\nname = \"default\"\ntoken_file = \"" + cluster_->token_file() +
           "\"\n[[namespace.mount]]\npath = \"/srv0\"\nbackends = [\"srv0\"]\n";
  }

  // A gateway of the test's own, from `config`, on `address`, and a channel to it (as a mount's:
  // the cluster's TLS). Null, with `error`, when either fails.
  static std::unique_ptr<GatewayProcess> start_own_gateway(const std::string& config,
                                                           const std::string& address,
                                                           const std::string& log,
                                                           std::shared_ptr<grpc::Channel>& channel,
                                                           std::string& error) {
    auto gateway = GatewayProcess::start(config, address, log, error);
    if (!gateway) return nullptr;
    channel = wire::secure_channel(address, cluster_tls(*cluster_), error);
    return channel ? std::move(gateway) : nullptr;
  }

  std::string name_, token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Namespace::Stub> names_;
  std::unique_ptr<pb::Data::Stub> data_;
};

// --- credentials ---------------------------------------------------------------------------------

TEST_F(Security, NoServiceAnswersACallWithoutTheToken) {
  grpc::Status st;
  auto reply = getattr("/", &st, "default", nullptr);
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED) << st.error_message();
  EXPECT_FALSE(reply.has_attr());

  {
    grpc::ClientContext ctx;
    prepare(ctx, nullptr);
    pb::OpenRequest req;
    req.set_ns("default");
    req.set_path("/srv0/" + name_ + "/x");
    req.set_flags(O_RDWR | O_CREAT);
    pb::OpenReply open_reply;
    EXPECT_EQ(data_->Create(&ctx, req, &open_reply).error_code(), StatusCode::UNAUTHENTICATED);
    EXPECT_FALSE(exists(server("x"))) << "a call without a token created a file";
  }
  {
    grpc::ClientContext ctx;
    prepare(ctx, nullptr);
    pb::PathRequest req;
    req.set_ns("default");
    req.set_path("/srv0");
    auto reader = names_->ReadDir(&ctx, req);
    pb::ReadDirReply batch;
    EXPECT_FALSE(reader->Read(&batch));
    EXPECT_EQ(reader->Finish().error_code(), StatusCode::UNAUTHENTICATED);
  }
  {
    // The Watch stream: a subscription without the token is ended, not welcomed.
    auto watch = pb::Watch::NewStub(channel_);
    grpc::ClientContext ctx;
    prepare(ctx, nullptr);
    auto stream = watch->Stream(&ctx);
    pb::WatchRequest sub;
    sub.mutable_subscribe()->set_ns("default");
    sub.mutable_subscribe()->set_mount_id("intruder");
    stream->Write(sub);
    pb::WatchEvent event;
    EXPECT_FALSE(stream->Read(&event)) << "a subscription without the token was welcomed";
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), StatusCode::UNAUTHENTICATED);
  }
  {
    // Admin: neither the node certificate nor a token opens it.
    auto admin = pb::Admin::NewStub(channel_);
    grpc::ClientContext ctx;
    prepare(ctx, nullptr);
    pb::ListBackendsReply backends;
    auto admin_st = admin->ListBackends(&ctx, pb::ListBackendsRequest(), &backends);
    EXPECT_FALSE(admin_st.ok());
    EXPECT_EQ(backends.backends_size(), 0);
  }
}

TEST_F(Security, UnknownAndKnownNamespacesGetTheSameAnswerToABadToken) {
  grpc::Status known, unknown, missing, long_token;
  getattr("/", &known, "default", "wrong");
  getattr("/", &unknown, "no-such-namespace", "wrong");
  getattr("/", &missing, "no-such-namespace", nullptr);
  std::string longer = token_ + token_;  // the right one as a prefix: length tells nothing either
  getattr("/", &long_token, "default", longer.c_str());
  for (auto* st : {&known, &unknown, &missing, &long_token}) {
    EXPECT_EQ(st->error_code(), StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(st->error_message(), known.error_message());
    EXPECT_EQ(st->error_message().find("no-such-namespace"), std::string::npos);
  }
  // And the token never shows in the gateway's log.
  EXPECT_EQ(slurp(cluster_->state() + "/gateway.log").find(token_), std::string::npos);
}

TEST_F(Security, TokensAreInNoArgvAndNoLog) {
  const std::string admin_token = read_token(cluster_->env("SKEIN_ADMIN_TOKEN_FILE"));
  for (const std::string& log :
       {cluster_->state() + "/gateway.log", cluster_->state() + "/mount-0.log"}) {
    std::string text = slurp(log);
    EXPECT_FALSE(text.empty()) << log;
    EXPECT_EQ(text.find(token_), std::string::npos) << log;
    EXPECT_EQ(text.find(admin_token), std::string::npos) << log;
  }
  for (int pid : {cluster_->gateway_pid(), std::stoi(slurp(cluster_->state() + "/mount-0.pid"))}) {
    std::string argv = slurp("/proc/" + std::to_string(pid) + "/cmdline");
    EXPECT_FALSE(argv.empty()) << pid;
    EXPECT_EQ(argv.find(token_), std::string::npos);
    EXPECT_EQ(argv.find(admin_token), std::string::npos);
  }
}

// --- confinement -------------------------------------------------------------------------------

TEST_F(Security, ASymlinkPlantedInTheExportIsNotFollowed) {
  ASSERT_EQ(::symlink(outside().c_str(), server("escape").c_str()), 0);
  auto opened = open(vpath("escape/secret"), O_RDONLY);
  EXPECT_EQ(opened.error(), ELOOP);
  EXPECT_EQ(opened.handle(), 0u) << "a file outside the export was opened";
  EXPECT_EQ(getattr(vpath("escape/secret")).error(), ELOOP);
  EXPECT_EQ(read_dir(vpath("escape")), ELOOP) << "the listing went through the symlink";
  // The symlink itself is shown as one, not followed, and its target is kept verbatim.
  auto link = getattr(vpath("escape"));
  EXPECT_EQ(link.error(), 0);
  EXPECT_TRUE(S_ISLNK(link.attr().mode()));
}

TEST_F(Security, ASymlinkMadeThroughTheApiIsNotFollowed) {
  // The probe: /srv0/.../root -> /, then a file "in" it. Nothing may appear on the server.
  auto made = symlink(vpath("root"), "/");
  ASSERT_EQ(made.error(), 0);
  EXPECT_TRUE(S_ISLNK(made.attr().mode()));
  char target[64] = {};
  ASSERT_GT(::readlink(server("root").c_str(), target, sizeof target - 1), 0);
  EXPECT_STREQ(target, "/") << "the target is stored verbatim";

  const std::string via = vpath("root" + outside() + "/planted");
  EXPECT_EQ(open(via, O_RDWR | O_CREAT | O_TRUNC, /*create=*/true).error(), ELOOP);
  EXPECT_FALSE(exists(outside() + "/planted")) << "a file was made outside the export";
  EXPECT_EQ(mkdir(vpath("root" + outside() + "/dir")).error(), ELOOP);
  EXPECT_FALSE(exists(outside() + "/dir"));
  EXPECT_EQ(open(vpath("root" + outside() + "/secret"), O_RDONLY).error(), ELOOP);
  EXPECT_EQ(rename(vpath("root" + outside() + "/secret"), vpath("stolen")), ELOOP);
  EXPECT_TRUE(exists(outside() + "/secret"));
}

TEST_F(Security, ASymlinkInAMiddleComponentOnTheServerIsNotFollowed) {
  ASSERT_EQ(::mkdir(server("d1").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(outside().c_str(), server("d1/d2").c_str()), 0);
  const std::string secret = vpath("d1/d2/secret");
  EXPECT_EQ(open(secret, O_RDONLY).error(), ELOOP);
  EXPECT_EQ(open(vpath("d1/d2/new"), O_WRONLY | O_CREAT, true).error(), ELOOP);
  EXPECT_FALSE(exists(outside() + "/new"));
  EXPECT_EQ(setattr(secret, pb::SetAttrRequest::MODE, 0777, 0).error(), ELOOP);
  EXPECT_EQ(unlink(secret), ELOOP);
  EXPECT_EQ(rename(secret, vpath("stolen")), ELOOP);
  EXPECT_EQ(symlink(vpath("d1/d2/link"), "x").error(), ELOOP);
  struct stat st {};
  ASSERT_EQ(::stat((outside() + "/secret").c_str(), &st), 0) << "the file outside is gone";
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(slurp(outside() + "/secret"), "the storage server's own file\n");
  // A directory of the namespace that really is one still works at every depth.
  ASSERT_EQ(mkdir(vpath("d1/real")).error(), 0);
  EXPECT_EQ(open(vpath("d1/real/f"), O_WRONLY | O_CREAT, true).error(), 0);
  EXPECT_TRUE(exists(server("d1/real/f")));
}

TEST_F(Security, TheLastComponentIsNeverFollowed) {
  ASSERT_EQ(::symlink((outside() + "/secret").c_str(), server("link").c_str()), 0);
  ASSERT_EQ(::symlink((outside() + "/made-by-create").c_str(), server("dangling").c_str()), 0);
  EXPECT_EQ(open(vpath("link"), O_RDONLY).error(), ELOOP);
  EXPECT_EQ(open(vpath("link"), O_WRONLY | O_TRUNC).error(), ELOOP);
  struct stat secret {};
  ASSERT_EQ(::stat((outside() + "/secret").c_str(), &secret), 0);
  EXPECT_EQ(setattr(vpath("link"), pb::SetAttrRequest::SIZE, 0, 0).error(), ELOOP);
  EXPECT_EQ(setattr(vpath("link"), pb::SetAttrRequest::MODE, 0600, 0).error(), ELOOP);
  EXPECT_EQ(
      setattr(vpath("link"), pb::SetAttrRequest::ATIME | pb::SetAttrRequest::MTIME, 0, 0).error(),
      ELOOP);
  EXPECT_EQ(slurp(outside() + "/secret"), "the storage server's own file\n") << "truncated";
  struct stat after {};
  ASSERT_EQ(::stat((outside() + "/secret").c_str(), &after), 0);
  EXPECT_EQ(after.st_mode, secret.st_mode) << "the mode was changed through the symlink";
  EXPECT_EQ(after.st_mtime, secret.st_mtime) << "the times were changed through the symlink";
  // open(O_CREAT) alone would follow a dangling symlink and make its target.
  EXPECT_NE(open(vpath("dangling"), O_WRONLY | O_CREAT, true).error(), 0);
  EXPECT_FALSE(exists(outside() + "/made-by-create"));
  auto attr = getattr(vpath("link"));
  EXPECT_TRUE(S_ISLNK(attr.attr().mode())) << "GetAttr does not follow";
  // Removing or renaming the symlink itself is fine and leaves its target alone.
  EXPECT_EQ(rename(vpath("link"), vpath("link2")), 0);
  EXPECT_EQ(unlink(vpath("link2")), 0);
  EXPECT_TRUE(exists(outside() + "/secret"));
}

TEST_F(Security, AWholeFileReadByPathNeedsTheTokenAndFollowsNoSymlink) {
  // ReadRequest.whole_file opens the file by path for that one read: the same checks as any open.
  ASSERT_EQ(::symlink((outside() + "/secret").c_str(), server("wlink").c_str()), 0);
  write_file(server("plain"), "inside the export\n");
  auto read_whole = [&](const std::string& path, const char* token, pb::ReadReply& reply) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    pb::ReadRequest req;
    req.mutable_file()->set_ns("default");
    req.mutable_file()->set_path(path);
    req.mutable_file()->set_handle(0x5eed5eed5eedULL);  // never handed out
    req.mutable_file()->set_flags(O_RDONLY);
    req.set_size(4096);
    req.set_whole_file(true);
    return data_->Read(&ctx, req, &reply);
  };
  pb::ReadReply reply;
  EXPECT_EQ(read_whole(vpath("plain"), nullptr, reply).error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(reply.data().empty());
  reply.Clear();
  EXPECT_EQ(read_whole(vpath("plain"), "not-the-token", reply).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(reply.data().empty());
  reply.Clear();
  ASSERT_TRUE(read_whole(vpath("wlink"), token_.c_str(), reply).ok());
  EXPECT_EQ(reply.error(), ELOOP);
  EXPECT_TRUE(reply.data().empty()) << "a file outside the export was read";
  reply.Clear();
  ASSERT_TRUE(read_whole(vpath("plain"), token_.c_str(), reply).ok());
  EXPECT_EQ(reply.error(), 0);
  EXPECT_EQ(reply.data(), "inside the export\n");
}

// A mount that serves every user hands the gateway the credentials of a user it does not trust
// (OpenRequest.as_user). The gateway judges that open by the file it opened, as the kernel would
// judge the user's open(2): read and write by owner, group (also a supplementary one) and others;
// O_TRUNC needs write, and a refused open truncates nothing. The answer's attributes are the
// opened file's own. A create makes a new file, and opens a file it finds at the name (put there
// since the kernel's lookup) only as such an open.
TEST_F(Security, AnOpenForAnotherUserIsJudgedByTheFileItOpens) {
  constexpr uint32_t kNobody = 65534;
  const std::string kept(3000, 'k');
  ASSERT_TRUE(write_file(server("roots"), kept));
  ASSERT_EQ(::chmod(server("roots").c_str(), 0600), 0);
  ASSERT_TRUE(write_file(server("public"), "public\n"));
  ASSERT_EQ(::chmod(server("public").c_str(), 0644), 0);
  ASSERT_TRUE(write_file(server("group"), "group 4242\n"));
  ASSERT_EQ(::chown(server("group").c_str(), 0, 4242), 0);
  ASSERT_EQ(::chmod(server("group").c_str(), 0640), 0);
  ASSERT_TRUE(write_file(server("nobodys"), "nobody's own\n"));
  ASSERT_EQ(::chown(server("nobodys").c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(::chmod(server("nobodys").c_str(), 0600), 0);
  auto open_as = [&](const std::string& rel, uint32_t flags,
                     const std::vector<uint32_t>& groups = {}) {
    return open_as_nobody(vpath(rel), flags, groups);
  };
  pb::OpenReply r = open_as("roots", O_RDONLY);
  EXPECT_EQ(r.error(), EACCES);
  EXPECT_EQ(r.handle(), 0u);
  EXPECT_EQ(open_as("roots", O_WRONLY | O_TRUNC).error(), EACCES);
  EXPECT_EQ(read_file(server("roots")), kept) << "a refused open truncated the file";
  r = open_as("public", O_RDONLY);
  EXPECT_EQ(r.error(), 0);
  EXPECT_NE(r.handle(), 0u);
  EXPECT_TRUE(r.judged());
  EXPECT_TRUE(r.attr_of_file());
  EXPECT_EQ(r.attr().size(), 7u);
  EXPECT_EQ(open_as("public", O_RDWR).error(), EACCES);
  EXPECT_EQ(open_as("group", O_RDONLY).error(), EACCES);
  EXPECT_EQ(open_as("group", O_RDONLY, {17, 4242}).error(), 0);
  EXPECT_EQ(open_as("group", O_WRONLY, {4242}).error(), EACCES);
  r = open_as("nobodys", O_RDWR | O_TRUNC);
  EXPECT_EQ(r.error(), 0);
  EXPECT_EQ(r.attr().size(), 0u);
  EXPECT_EQ(read_file(server("nobodys")), "") << "the owner's O_TRUNC did not truncate";
  // Creates: a file found at the name is judged; a new one is made.
  constexpr uint32_t kCreate = O_WRONLY | O_CREAT | O_TRUNC;
  EXPECT_EQ(open_as("roots", kCreate).error(), EACCES);
  EXPECT_EQ(read_file(server("roots")), kept) << "a refused create truncated the file";
  ASSERT_TRUE(write_file(server("nobodys"), "nobody's own\n"));
  r = open_as("nobodys", kCreate);
  EXPECT_EQ(r.error(), 0);
  EXPECT_TRUE(r.judged());
  EXPECT_EQ(read_file(server("nobodys")), "") << "the owner's create did not truncate";
  r = open_as("new-one", kCreate);
  EXPECT_EQ(r.error(), 0);
  EXPECT_TRUE(r.judged());
  EXPECT_TRUE(exists(server("new-one")));
  EXPECT_EQ(open_as("roots", kCreate | O_EXCL).error(), EEXIST);
  // Changes of attributes: judged by the file they land on (SetAttrRequest.as_user).
  auto setattr_as = [&](const std::string& rel, uint32_t fields, uint32_t mode, uint64_t size) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::SetAttrRequest req;
    req.set_ns("default");
    req.set_path(vpath(rel));
    req.set_fields(fields);
    req.set_mode(mode);
    req.set_size(size);
    req.mutable_as_user()->set_uid(kNobody);
    req.mutable_as_user()->set_gid(kNobody);
    pb::AttrReply reply;
    EXPECT_TRUE(names_->SetAttr(&ctx, req, &reply).ok());
    return reply;
  };
  using F = pb::SetAttrRequest;
  struct stat st {};
  EXPECT_EQ(setattr_as("roots", F::MODE, 0666, 0).error(), EPERM);
  ASSERT_EQ(::stat(server("roots").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "nobody changed root's file's mode";
  EXPECT_EQ(setattr_as("roots", F::SIZE, 0, 1).error(), EACCES);
  EXPECT_EQ(setattr_as("roots", F::MTIME_NOW | F::ATIME_NOW, 0, 0).error(), EACCES);
  EXPECT_EQ(read_file(server("roots")), kept) << "nobody truncated root's file";
  ASSERT_TRUE(write_file(server("nobodys"), "nobody's own\n"));
  pb::AttrReply changed = setattr_as("nobodys", F::MODE | F::SIZE, 0640, 6);
  EXPECT_EQ(changed.error(), 0);
  EXPECT_EQ(changed.attr().mode() & 07777, 0640u);
  EXPECT_EQ(changed.attr().size(), 6u);
  EXPECT_EQ(read_file(server("nobodys")), "nobody");
  ASSERT_EQ(::chmod(server("public").c_str(), 0666), 0);  // writable by all, root's
  EXPECT_EQ(setattr_as("public", F::SIZE, 0, 3).error(), 0);
  EXPECT_EQ(read_file(server("public")), "pub");
  EXPECT_EQ(setattr_as("public", F::MODE, 0600, 0).error(), EPERM);
  // An ftruncate (the size and the times set to now, as the kernel sends it, with the handle of
  // the user's judged open for writing) goes through that handle, not judged again, as the
  // kernel does not judge it: even once the name leads nowhere.
  ASSERT_TRUE(write_file(server("nobodys"), "nobody's own\n"));
  r = open_as("nobodys", O_RDWR);
  ASSERT_EQ(r.error(), 0);
  ASSERT_EQ(::rename(server("nobodys").c_str(), server("nobodys-moved").c_str()), 0);
  {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::SetAttrRequest req;
    req.set_ns("default");
    req.set_path(vpath("nobodys"));
    req.set_fields(F::SIZE | F::MTIME_NOW);
    req.set_size(3);
    req.set_handle(r.handle());
    req.mutable_as_user()->set_uid(kNobody);
    req.mutable_as_user()->set_gid(kNobody);
    pb::AttrReply cut;
    ASSERT_TRUE(names_->SetAttr(&ctx, req, &cut).ok());
    EXPECT_EQ(cut.error(), 0);
    EXPECT_EQ(cut.attr().size(), 3u);
  }
  EXPECT_EQ(read_file(server("nobodys-moved")), "nob");
  ASSERT_EQ(::rename(server("nobodys-moved").c_str(), server("nobodys").c_str()), 0);
  // The owner's chmod keeps the set-group-ID bit only where the file's group is one of the
  // owner's, as the kernel does; elsewhere the bit is dropped and the rest is set.
  EXPECT_EQ(setattr_as("nobodys", F::MODE, 02750, 0).error(), 0);
  ASSERT_EQ(::stat(server("nobodys").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 02750u);
  ASSERT_EQ(::chown(server("nobodys").c_str(), kNobody, 4242), 0);
  changed = setattr_as("nobodys", F::MODE, 02710, 0);
  EXPECT_EQ(changed.error(), 0);
  EXPECT_EQ(changed.attr().mode() & 07777, 0710u);
  ASSERT_EQ(::stat(server("nobodys").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0710u) << "set-group-ID kept for a group the owner is not in";
  // A directory is opened and judged as a file; a fifo cannot be, and is refused (its OPEN
  // would wait for a writer).
  ASSERT_EQ(::mkdir(server("roots-dir").c_str(), 0755), 0);
  EXPECT_EQ(setattr_as("roots-dir", F::MODE, 0777, 0).error(), EPERM);
  ASSERT_EQ(::stat(server("roots-dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(::mkdir(server("nobodys-dir").c_str(), 0755), 0);
  ASSERT_EQ(::chown(server("nobodys-dir").c_str(), kNobody, kNobody), 0);
  EXPECT_EQ(setattr_as("nobodys-dir", F::MODE, 0700, 0).error(), 0);
  ASSERT_EQ(::stat(server("nobodys-dir").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  ASSERT_EQ(::mkfifo(server("fifo").c_str(), 0644), 0);
  ASSERT_EQ(::chown(server("fifo").c_str(), kNobody, kNobody), 0);
  EXPECT_EQ(setattr_as("fifo", F::MODE, 0600, 0).error(), EPERM);

  // A handle the gateway does not hold (as after its restart) is re-opened by path only as the
  // judged open would be: FileRef.as_user.
  auto read_as = [&](const std::string& rel, bool as_nobody, pb::ReadReply& reply) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::ReadRequest req;
    req.mutable_file()->set_ns("default");
    req.mutable_file()->set_path(vpath(rel));
    req.mutable_file()->set_handle(0x5eed0000ULL + (as_nobody ? 1 : 2));  // never handed out
    req.mutable_file()->set_flags(O_RDONLY);
    if (as_nobody) {
      req.mutable_file()->mutable_as_user()->set_uid(kNobody);
      req.mutable_file()->mutable_as_user()->set_gid(kNobody);
    }
    req.set_size(4096);
    return data_->Read(&ctx, req, &reply);
  };
  pb::ReadReply got;
  ASSERT_TRUE(read_as("roots", true, got).ok());
  EXPECT_EQ(got.error(), EACCES);
  EXPECT_TRUE(got.data().empty()) << "root's file was read for nobody through a re-open";
  got.Clear();
  ASSERT_TRUE(read_as("public", true, got).ok());
  EXPECT_EQ(got.data(), "pub");  // truncated above
  // Without as_user, the token alone opens anything in the export, as before.
  got.Clear();
  ASSERT_TRUE(read_as("roots", false, got).ok());
  EXPECT_EQ(got.data(), kept);
  r = open(vpath("roots"), O_RDONLY);
  EXPECT_EQ(r.error(), 0);
  EXPECT_FALSE(r.judged());
}

// A judged open's large reads spread over the backend's connections, each opening the file by path
// (RemoteFile: one handle per connection; a read of 1 MiB is several READs where the server's
// largest is smaller, as OpenSSH's 255 KiB, and goes to the connection of its 4 MiB run). Each such
// handle is judged by its own attributes before it serves: once the name leads to root's private
// file (swapped in on the server, and never reported: this test's gateway does not watch the
// server), the reads go on through the handle judged at the open and give none of root's bytes. A
// file the user created (with or without O_EXCL) is read and written only through the handle it was
// made with.
TEST_F(Security, HandlesOpenedByPathForAnotherUserAreJudgedEachByItsFile) {
  constexpr uint32_t kNobody = 65534;
  constexpr uint64_t kRun = 4 << 20;  // a connection's run of a file (RemoteFile::fetch)
  constexpr uint64_t kSize = 4 * kRun;
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::string config = cluster_->state() + "/unwatched.toml";
  const std::string log = cluster_->state() + "/unwatched-gateway.log";
  std::ofstream(config) << gateway_toml(address,
                                        "timeout_ms = 5000\nremote_watch = false\n"
                                        "revalidate_interval_ms = 3600000\n",
                                        4)
                        << "[[namespace.mount]]\npath = \"/striped\"\nlayout = \"striped\"\n"
                        << "stripe_size = \"1M\"\nbackends = [\"st0\", \"st1\"]\n";
  // Two backends on the one server, for a striped file of two parts.
  auto part_dir = [&](int b) {
    return cluster_->state() + "/" + name_ + "-st" + std::to_string(b);
  };
  for (int b : {0, 1}) {
    ASSERT_EQ(::mkdir(part_dir(b).c_str(), 0755), 0);
    std::ofstream(config, std::ios::app) << backend_toml("st" + std::to_string(b), part_dir(b), 2);
  }
  std::string error;
  std::shared_ptr<grpc::Channel> channel;
  auto gateway = start_own_gateway(config, address, log, channel, error);
  ASSERT_TRUE(gateway) << error;
  auto data = pb::Data::NewStub(channel);
  auto call_as = [&](grpc::ClientContext& ctx, pb::FileRef* file, const std::string& rel,
                     uint64_t handle, uint32_t flags) {
    prepare(ctx, token_.c_str());
    file->set_ns("default");
    file->set_path(vpath(rel));
    file->set_handle(handle);
    file->set_flags(flags);
    file->mutable_as_user()->set_uid(kNobody);
    file->mutable_as_user()->set_gid(kNobody);
  };
  auto read_as = [&](const std::string& rel, uint64_t handle, uint32_t flags, uint64_t offset) {
    grpc::ClientContext ctx;
    pb::ReadRequest req;
    call_as(ctx, req.mutable_file(), rel, handle, flags);
    req.set_offset(offset);
    req.set_size(1 << 20);
    pb::ReadReply reply;
    EXPECT_TRUE(data->Read(&ctx, req, &reply).ok());
    EXPECT_EQ(reply.error(), 0);
    return reply.data();
  };
  auto open_as = [&](const std::string& rel, uint32_t flags) {
    const pb::OpenReply reply = open_as_nobody(vpath(rel), flags, {}, data.get());
    EXPECT_EQ(reply.error(), 0);
    return reply.handle();
  };
  auto write_as = [&](const std::string& rel, uint64_t handle, uint32_t flags, uint64_t offset,
                      const std::string& bytes) {
    grpc::ClientContext ctx;
    pb::WriteRequest req;
    call_as(ctx, req.mutable_file(), rel, handle, flags);
    req.set_offset(offset);
    req.set_data(bytes);
    pb::WriteReply reply;
    EXPECT_TRUE(data->Write(&ctx, req, &reply).ok());
    return reply.error();
  };
  auto swap = [&](const std::string& a, const std::string& b) {
    return ::renameat2(AT_FDCWD, server(a).c_str(), AT_FDCWD, server(b).c_str(), RENAME_EXCHANGE) ==
           0;
  };
  const std::string secret(kSize, 'S');
  auto roots_file_intact = [&](const std::string& at) {
    struct stat st {};
    return ::stat(server(at).c_str(), &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 0600 &&
           read_file(server(at)) == secret;
  };
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string pub = "pub" + std::to_string(round);
    const std::string roots = "roots" + std::to_string(round);
    ASSERT_TRUE(write_file(server(pub), std::string(kSize, 'p')));
    ASSERT_EQ(::chown(server(pub).c_str(), kNobody, kNobody), 0);
    ASSERT_EQ(::chmod(server(pub).c_str(), 0644), 0);
    ASSERT_TRUE(write_file(server(roots), secret));
    ASSERT_EQ(::chmod(server(roots).c_str(), 0600), 0);
    // Opened for reading and judged; then the name leads to root's file, and every run is read.
    const uint64_t opened = open_as(pub, O_RDONLY);
    ASSERT_NE(opened, 0u);
    ASSERT_TRUE(swap(pub, roots));
    for (uint64_t off = kRun; off < kSize + kRun; off += kRun) {
      const std::string got = read_as(pub, opened, O_RDONLY, off % kSize);
      EXPECT_EQ(got, std::string(1 << 20, 'p')) << "at " << off % kSize;
    }
    ASSERT_TRUE(swap(pub, roots));  // back
    // Made by the user and written (its last byte: one handle, the create's); then the name
    // leads to root's file. Without O_EXCL, then with it.
    for (const uint32_t excl : {0, O_EXCL}) {
      const std::string made = "made" + std::to_string(round) + (excl ? "x" : "");
      const uint64_t created = open_as(made, O_RDWR | O_CREAT | O_TRUNC | excl);
      ASSERT_NE(created, 0u);
      ASSERT_EQ(write_as(made, created, O_RDWR, kSize - 1, "m"), 0);
      ASSERT_TRUE(swap(made, roots));
      for (uint64_t off = kRun; off < kSize + kRun; off += kRun) {
        const std::string got = read_as(made, created, O_RDWR, off % kSize);
        EXPECT_EQ(got.find('S'), std::string::npos) << "root's bytes read at " << off % kSize;
        EXPECT_EQ(write_as(made, created, O_RDWR, off % kSize, std::string(1 << 20, 'w')), 0);
      }
      EXPECT_TRUE(roots_file_intact(made)) << "root's file was written";
      ASSERT_TRUE(swap(made, roots));  // back
    }
  }
  // A striped file's parts are opened by path, one server after another: each part is judged by
  // its own attributes. Part 1 swapped for root's file on its server: the open is refused.
  {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::OpenRequest req;
    req.set_ns("default");
    req.set_path("/striped/f");
    req.set_flags(O_RDWR | O_CREAT);
    req.set_mode(0644);
    pb::OpenReply made;
    ASSERT_TRUE(data->Create(&ctx, req, &made).ok());
    ASSERT_EQ(made.error(), 0);
    for (uint64_t off : {0u, 1u << 20}) {  // a MiB on each part
      grpc::ClientContext wctx;
      prepare(wctx, token_.c_str());
      pb::WriteRequest w;
      w.mutable_file()->set_ns("default");
      w.mutable_file()->set_path("/striped/f");
      w.mutable_file()->set_handle(made.handle());
      w.mutable_file()->set_flags(O_RDWR);
      w.set_offset(off);
      w.set_data(std::string(1 << 20, 'p'));
      pb::WriteReply written;
      ASSERT_TRUE(data->Write(&wctx, w, &written).ok());
      ASSERT_EQ(written.error(), 0);
    }
  }
  for (int b : {0, 1}) {
    const std::string part = part_dir(b) + "/f";
    ASSERT_EQ(::chown(part.c_str(), kNobody, kNobody), 0);
    ASSERT_EQ(::chmod(part.c_str(), 0644), 0);
  }
  const std::string roots_part = part_dir(1) + "/roots";
  ASSERT_TRUE(write_file(roots_part, std::string(1 << 20, 'S')));
  ASSERT_EQ(::chmod(roots_part.c_str(), 0600), 0);
  auto open_striped = [&] { return open_as_nobody("/striped/f", O_RDONLY, {}, data.get()); };
  auto swap_part = [&] {
    return ::renameat2(AT_FDCWD, (part_dir(1) + "/f").c_str(), AT_FDCWD, roots_part.c_str(),
                       RENAME_EXCHANGE) == 0;
  };
  ASSERT_TRUE(swap_part());
  EXPECT_EQ(open_striped().error(), EACCES) << "a part of root's was opened for nobody";
  {
    // A chmod of nobody's (by part 0) is judged part by part too: nothing is changed.
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::SetAttrRequest req;
    req.set_ns("default");
    req.set_path("/striped/f");
    req.set_fields(pb::SetAttrRequest::MODE);
    req.set_mode(0666);
    req.mutable_as_user()->set_uid(kNobody);
    req.mutable_as_user()->set_gid(kNobody);
    pb::AttrReply reply;
    ASSERT_TRUE(pb::Namespace::NewStub(channel)->SetAttr(&ctx, req, &reply).ok());
    EXPECT_NE(reply.error(), 0);
    struct stat st {};
    ASSERT_EQ(::stat((part_dir(1) + "/f").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "nobody changed the mode of root's part";
  }
  ASSERT_TRUE(swap_part());  // back: nobody's own parts open
  EXPECT_EQ(open_striped().error(), 0);

  // Each round's open read its runs through handles opened by the swapped name: each refused.
  const std::string said = read_file(log);
  std::size_t refusals = 0;
  for (std::size_t at = 0; (at = said.find("its opener may not use", at)) != std::string::npos;
       ++at)
    ++refusals;
  EXPECT_EQ(refusals, 3u) << said;
}

// A name that another user may rename in its directory: the kernel judged the user's open, chmod
// and truncate by the file the name led to at its lookup, and the gateway acts on the name. Root's
// private file of the same size and mtime is swapped in and out under the name (renameat2's
// RENAME_EXCHANGE on the server, over and over, as a user who may write the directory could do
// through any mount) while the user opens, reads, truncates and writes the name through the shared
// mount. Not one byte of the private file is read, and it is never truncated, written nor given
// another mode; the user's creates of its own files (judged at the gateway too) still work.
TEST_F(Security, AFileSwappedInUnderAnotherUsersOpenIsNeverReadNorWritten) {
  constexpr uid_t kNobody = SwappingFiles::kNobody;
  constexpr std::size_t kSize = 4096;
  SwappingFiles files(server(name_), kSize);
  ASSERT_TRUE(files.made);
  const std::string name = cluster_->mount(0) + vpath("pub");
  // As nobody: a child that reads the name, and writes it (truncating first), for 8 s; it
  // reports the reads that got the private file's bytes, the reads and writes that went through.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    int leaks = 0, reads = 0, writes = 0, made = 0;
    if (::setgroups(0, nullptr) == 0 && ::setgid(kNobody) == 0 && ::setuid(kNobody) == 0) {
      char buf[kSize];
      const std::string mine(kSize, 'p');
      // A file of its own, made through the mount (a create the gateway judges).
      if (const int fd = ::open((name + "-made").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
          fd >= 0) {
        made = ::write(fd, "made", 4) == 4 && ::close(fd) == 0;
      }
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(8);
      while (std::chrono::steady_clock::now() < end) {
        // Its own file's mode and size, changed by name.
        (void)::chmod(name.c_str(), 0666);
        (void)::truncate(name.c_str(), static_cast<off_t>(kSize));
        if (const int fd = ::open(name.c_str(), O_RDONLY); fd >= 0) {
          const ssize_t n = ::pread(fd, buf, kSize, 0);
          if (n > 0 && std::memchr(buf, 'S', static_cast<std::size_t>(n))) ++leaks;
          if (n == static_cast<ssize_t>(kSize)) ++reads;
          ::close(fd);
        }
        if (const int fd = ::open(name.c_str(), O_WRONLY | O_TRUNC); fd >= 0) {
          if (::pwrite(fd, mine.data(), kSize, 0) == static_cast<ssize_t>(kSize)) ++writes;
          ::close(fd);
        }
      }
    }
    char out[64];
    const int len = std::snprintf(out, sizeof out, "%d %d %d %d", leaks, reads, writes, made);
    const bool ok = ::write(fds[1], out, static_cast<std::size_t>(len)) == len;
    ::_exit(ok ? 0 : 1);
  }
  ::close(fds[1]);
  char got[64] = {};
  const ssize_t n = ::read(fds[0], got, sizeof got - 1);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  files.stop();
  ASSERT_GT(n, 0);
  int leaks = -1, reads = -1, writes = -1, made = -1;
  ASSERT_EQ(std::sscanf(got, "%d %d %d %d", &leaks, &reads, &writes, &made), 4) << got;
  EXPECT_EQ(made, 1) << "nobody could not make a file of its own";
  EXPECT_EQ(read_file(files.pub + "-made"), "made");
  EXPECT_EQ(leaks, 0) << got << "; " << files.swaps() << " swaps";
  EXPECT_TRUE(read_file(files.roots()) == std::string(kSize, 'S'))
      << "root's file was truncated or written; " << files.swaps() << " swaps";
  struct stat st {};
  ASSERT_EQ(::stat(files.roots().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u) << "nobody changed root's file's mode";
  // Not vacuous: the swaps ran, and the user's own file was read and written all along.
  EXPECT_GT(files.swaps(), 100);
  EXPECT_GT(reads, 10) << got;
  EXPECT_GT(writes, 10) << got;
  std::cout << "swapped " << files.swaps() << " times; leaks, reads, writes, made: " << got << "\n";
}

// A token holder that opens without releasing, or names handles the gateway never gave (each
// re-opened by path), holds at most its namespace's max_open_files open on the storage servers,
// whose sftp-servers also serve every other namespace: past it the gateway answers EMFILE, makes
// no file, and a release makes room again.
TEST_F(Security, ANamespaceHoldsNoMoreOpenFilesThanItsLimit) {
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  const std::string config = cluster_->state() + "/" + name_ + ".toml";
  const std::string log = cluster_->state() + "/" + name_ + "-gateway.log";
  std::ofstream(config) << gateway_toml(
      address, "timeout_ms = 5000\nremote_watch = false\nmax_open_files = 4\n", 2);
  std::string error;
  std::shared_ptr<grpc::Channel> channel;
  auto gateway = start_own_gateway(config, address, log, channel, error);
  ASSERT_TRUE(gateway) << error;
  auto data = pb::Data::NewStub(channel);
  ASSERT_TRUE(write_file(server("f"), "contents"));
  std::vector<uint64_t> handles;
  for (int i = 0; i < 4; ++i) {
    const pb::OpenReply opened = open(vpath("f"), O_RDONLY, false, nullptr, data.get());
    ASSERT_EQ(opened.error(), 0) << i;
    handles.push_back(opened.handle());
  }
  EXPECT_EQ(open(vpath("f"), O_RDONLY, false, nullptr, data.get()).error(), EMFILE);
  EXPECT_EQ(open(vpath("new"), O_WRONLY | O_CREAT, true, nullptr, data.get()).error(), EMFILE);
  EXPECT_NE(::access(server("new").c_str(), F_OK), 0) << "a refused create made the file";
  auto read_with = [&](uint64_t handle) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::ReadRequest req;
    req.mutable_file()->set_ns("default");
    req.mutable_file()->set_path(vpath("f"));
    req.mutable_file()->set_handle(handle);
    req.set_offset(0);
    req.set_size(100);
    pb::ReadReply reply;
    EXPECT_TRUE(data->Read(&ctx, req, &reply).ok());
    return reply;
  };
  EXPECT_EQ(read_with(0x5eed0001).error(), EMFILE) << "a handle it never gave, re-opened";
  EXPECT_EQ(read_with(handles[0]).data(), "contents") << "a held handle is read as before";
  {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::FileRef file;
    file.set_ns("default");
    file.set_path(vpath("f"));
    file.set_handle(handles[0]);
    pb::ErrorReply reply;
    ASSERT_TRUE(data->Release(&ctx, file, &reply).ok());
    EXPECT_EQ(reply.error(), 0);
  }
  EXPECT_EQ(open(vpath("f"), O_RDONLY, false, nullptr, data.get()).error(), 0)
      << "no room after a release";
  // The suite's own gateway (its default limit) is not held back by this one's files.
  EXPECT_EQ(open(vpath("f"), O_RDONLY).error(), 0);
}

// A path longer than PATH_MAX could never be served, and each of its directories costs the
// gateway's confinement a prefix: a 256 KiB path made it build gigabytes. Refused at once, as is a
// symlink target the server's file system could not take; the gateway answers on.
TEST_F(Security, PathsAndSymlinkTargetsLongerThanPathMaxAreRefused) {
  std::string deep = vpath("");
  while (deep.size() < (256u << 10)) deep += "a/";
  grpc::Status st;
  getattr(deep, &st);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::RenameRequest req;
    req.set_ns("default");
    req.set_from(vpath("x"));
    req.set_to(deep);
    pb::ErrorReply reply;
    st = names_->Rename(&ctx, req, &reply);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::SymlinkRequest req;
    req.set_ns("default");
    req.set_path(vpath("longlink"));
    req.set_target(std::string(8192, 'x'));
    pb::AttrReply reply;
    st = names_->Symlink(&ctx, req, &reply);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_FALSE(exists(server("longlink")));
  }
  // Just under the limit the call is made, and the server answers for itself.
  std::string under = vpath("");
  while (under.size() + 2 <= kMaxPathBytes) under += "b/";
  getattr(under, &st);
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(getattr(vpath("")).error(), 0) << "the gateway still answers";
}

TEST_F(Security, ReadFilesNeedsTheTokenFollowsNoSymlinkAndKeepsItsLimits) {
  // ReadFiles opens each file by path: the same checks as any open, per file.
  ASSERT_EQ(::symlink((outside() + "/secret").c_str(), server("rlink").c_str()), 0);
  write_file(server("small"), "inside the export\n");
  write_file(server("bigger"), std::string(5000, 'b'));
  auto read_files = [&](const std::vector<std::string>& paths, uint32_t max_bytes,
                        const char* token, pb::ReadFilesReply& reply) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    pb::ReadFilesRequest req;
    req.set_ns("default");
    for (const auto& p : paths) req.add_paths(p);
    req.set_max_bytes(max_bytes);
    return data_->ReadFiles(&ctx, req, &reply);
  };
  pb::ReadFilesReply reply;
  EXPECT_EQ(read_files({vpath("small")}, 4096, nullptr, reply).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(reply.files_size(), 0);
  EXPECT_EQ(read_files({vpath("small")}, 4096, "not-the-token", reply).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(reply.files_size(), 0);
  // A path leading above the root, too many paths, or too many bytes: the whole call is refused.
  grpc::Status st =
      read_files({vpath("small"), "/srv0/../../etc/passwd"}, 4096, token_.c_str(), reply);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_EQ(reply.files_size(), 0);
  st = read_files(std::vector<std::string>(257, vpath("small")), 16, token_.c_str(), reply);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = read_files({vpath("small"), vpath("small")}, 1u << 20, token_.c_str(), reply);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_EQ(reply.files_size(), 0);
  // Each file's own answer: read, gone, a symlink out of the export, a directory, too long.
  ASSERT_TRUE(
      read_files({vpath("small"), vpath("absent"), vpath("rlink"), vpath(""), vpath("bigger")},
                 4096, token_.c_str(), reply)
          .ok());
  ASSERT_EQ(reply.files_size(), 5);
  EXPECT_EQ(reply.files(0).error(), 0);
  EXPECT_EQ(reply.files(0).data(), "inside the export\n");
  EXPECT_EQ(reply.files(0).attr().size(), 18u);
  EXPECT_TRUE(S_ISREG(reply.files(0).attr().mode()));
  EXPECT_EQ(reply.files(1).error(), ENOENT);
  EXPECT_EQ(reply.files(2).error(), ELOOP);
  EXPECT_TRUE(reply.files(2).data().empty()) << "a file outside the export was read";
  EXPECT_EQ(reply.files(3).error(), EISDIR);
  EXPECT_EQ(reply.files(4).error(), EFBIG);
  EXPECT_TRUE(reply.files(4).data().empty());

  // More files than one slice (the backend sends each slice's requests together): every answer in
  // the order asked, each checked as above, among them a file through a symlinked directory, a
  // fifo, an empty file and files of exactly the limit and one byte over it.
  ASSERT_EQ(::symlink(outside().c_str(), server("rdir").c_str()), 0);
  ASSERT_EQ(::mkfifo(server("fifo").c_str(), 0644), 0);
  write_file(server("empty"), "");
  write_file(server("limit"), std::string(4096, 'l'));
  write_file(server("over"), std::string(4097, 'o'));
  std::vector<std::string> paths;
  std::vector<std::string> want;  // content, or "!" and the errno
  for (int i = 0; i < 70; ++i) {
    switch (i % 7) {
      case 0:
        paths.push_back(vpath("rdir/secret"));
        want.push_back("!" + std::to_string(ELOOP));
        break;
      case 1:
        paths.push_back(vpath("fifo"));
        want.push_back("!" + std::to_string(EINVAL));
        break;
      case 2:
        paths.push_back(vpath("empty"));
        want.push_back("");
        break;
      case 3:
        paths.push_back(vpath("limit"));
        want.push_back(std::string(4096, 'l'));
        break;
      case 4:
        paths.push_back(vpath("over"));
        want.push_back("!" + std::to_string(EFBIG));
        break;
      case 5:
        paths.push_back(vpath("rlink"));
        want.push_back("!" + std::to_string(ELOOP));
        break;
      default: {
        const std::string name = "many" + std::to_string(i);
        write_file(server(name), "file " + std::to_string(i) + "\n");
        paths.push_back(vpath(name));
        want.push_back("file " + std::to_string(i) + "\n");
      }
    }
  }
  reply.Clear();
  ASSERT_TRUE(read_files(paths, 4096, token_.c_str(), reply).ok());
  ASSERT_EQ(reply.files_size(), 70);
  for (int i = 0; i < 70; ++i) {
    const auto& f = reply.files(i);
    if (want[i][0] == '!') {
      EXPECT_EQ(f.error(), std::stoi(want[i].substr(1))) << paths[i];
      EXPECT_TRUE(f.data().empty()) << paths[i];
    } else {
      EXPECT_EQ(f.error(), 0) << paths[i];
      EXPECT_EQ(f.data(), want[i]) << paths[i];
      EXPECT_EQ(f.attr().size(), want[i].size()) << paths[i];
    }
  }
  EXPECT_EQ(slurp(outside() + "/secret"), "the storage server's own file\n");
}

// A regular file in the export and a symlink to a file outside it, of the same size, swapped
// under the name over and over on the server (renameat2's RENAME_EXCHANGE, as someone who may
// write the export there could): ReadFiles looks at the name (LSTAT), then opens it, which follows
// a symlink swapped in between. Not one byte of the outside file comes back, with or without
// attrs_of_files, while the file's own bytes do.
TEST_F(Security, ReadFilesOfANameASymlinkIsSwappedUnderNeverReadsOutside) {
  constexpr std::size_t kSize = 4096;
  // Another user's file (nobody's, 0600), as a file the name should never reach would be; out of
  // the export, not in outside(), whose listing other tests check.
  const std::string target = cluster_->state() + "/" + name_ + "-target";
  ASSERT_TRUE(write_file(target, std::string(kSize, 'S')));
  ASSERT_EQ(::chown(target.c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  ASSERT_TRUE(write_file(server("f"), std::string(kSize, 'p')));
  ASSERT_EQ(::symlink(target.c_str(), server("l").c_str()), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0};
  std::thread swapper([&] {
    while (!stop) {
      if (::renameat2(AT_FDCWD, server("f").c_str(), AT_FDCWD, server("l").c_str(),
                      RENAME_EXCHANGE) == 0)
        ++swaps;
      std::this_thread::sleep_for(std::chrono::microseconds(200 + swaps.load() % 7 * 150));
    }
  });
  int leaks = 0, read_whole = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::ReadFilesRequest req;
    req.set_ns("default");
    for (int k = 0; k < 8; ++k) req.add_paths(vpath("f"));
    req.set_max_bytes(2 * kSize);
    req.set_attrs_of_files(i % 2 == 1);
    pb::ReadFilesReply reply;
    if (!data_->ReadFiles(&ctx, req, &reply).ok()) continue;
    for (const auto& file : reply.files()) {
      if (file.data().find('S') != std::string::npos) ++leaks;
      if (file.error() == 0 && file.data() == std::string(kSize, 'p')) ++read_whole;
    }
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(leaks, 0) << "bytes of the file outside the export came back; " << swaps << " swaps";
  EXPECT_GT(swaps.load(), 1000) << "not vacuous: the name was swapped all along";
  EXPECT_GT(read_whole, 10) << "the file's own bytes were read too";
  ::unlink(target.c_str());
}

TEST_F(Security, WriteFilesNeedsTheTokenFollowsNoSymlinkAndKeepsItsLimits) {
  // WriteFiles creates each file under its partial name and renames it over its path: the same
  // checks as a Create and a Rename, per file.
  ASSERT_EQ(::symlink(outside().c_str(), server("wfdir").c_str()), 0);
  ASSERT_EQ(::symlink((outside() + "/secret").c_str(), server("wflink").c_str()), 0);
  ASSERT_EQ(::symlink((outside() + "/secret").c_str(), server(".viapart.part").c_str()), 0);
  write_file(server("kept"), "already here\n");
  write_file(server(".left.part"), "a partial an earlier run left");
  ASSERT_EQ(::mkdir(server("adir").c_str(), 0755), 0);
  auto write_files = [&](const std::vector<std::pair<std::string, std::string>>& paths,
                         const std::string& data, const char* token, pb::WriteFilesReply& reply,
                         uint32_t mode = 0640) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    pb::WriteFilesRequest req;
    req.set_ns("default");
    for (const auto& [path, partial] : paths) {
      pb::NewFile* f = req.add_files();
      f->set_path(path);
      f->set_partial(partial);
      f->set_data(data);
      f->set_mode(mode);
      f->set_mtime_ns(1500000000LL * 1000000000LL);
      f->set_atime_ns(1500000000LL * 1000000000LL);
    }
    reply.Clear();
    return data_->WriteFiles(&ctx, req, &reply);
  };
  const std::pair<std::string, std::string> made{vpath("made"), vpath(".made.part")};
  pb::WriteFilesReply reply;
  EXPECT_EQ(write_files({made}, "x", nullptr, reply).error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(write_files({made}, "x", "not-the-token", reply).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(reply.files_size(), 0);
  EXPECT_FALSE(exists(server("made"))) << "a WriteFiles without the token wrote";
  // A path above the root, a partial outside the file's directory or the file itself, a mode
  // with more than permission bits, too many files, too many bytes: the whole call is refused.
  for (const auto& bad :
       std::vector<std::pair<std::string, std::string>>{{"/srv0/../../tmp/escaped", vpath(".p")},
                                                        {vpath("made"), "/srv0/../../tmp/.p"},
                                                        {vpath("made"), vpath("sub/.made.part")},
                                                        {vpath("made"), vpath("made")}}) {
    grpc::Status st = write_files({bad}, "x", token_.c_str(), reply);
    EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << bad.first << " " << bad.second;
    EXPECT_FALSE(st.error_message().empty());
  }
  grpc::Status st = write_files({made}, "x", token_.c_str(), reply, 0100644);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = write_files(std::vector<std::pair<std::string, std::string>>(257, made), "x", token_.c_str(),
                   reply);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  st = write_files({made, {vpath("two"), vpath(".two.part")}}, std::string(600u << 10, 'b'),
                   token_.c_str(), reply);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_EQ(reply.files_size(), 0);
  EXPECT_FALSE(exists(server("made")));
  EXPECT_FALSE(exists(server("two")));
  // Each file's own answer: made; through a symlinked directory (never followed: nothing made
  // outside); over a symlink to a file outside (replaced as a name, the file it named untouched);
  // in a directory that is not there; under a partial name that is a symlink to a file outside
  // (never followed: the symlink removed, a new file made); under a partial an earlier run left
  // (removed, a new file made).
  ASSERT_TRUE(write_files({made,
                           {vpath("wfdir/planted"), vpath("wfdir/.planted.part")},
                           {vpath("wflink"), vpath(".wflink.part")},
                           {vpath("absent/f"), vpath("absent/.f.part")},
                           {vpath("viapart"), vpath(".viapart.part")},
                           {vpath("left"), vpath(".left.part")},
                           {vpath("adir"), vpath(".adir.part")}},
                          "new bytes\n", token_.c_str(), reply)
                  .ok());
  ASSERT_EQ(reply.files_size(), 7);
  // Over a directory: refused, the directory kept, no partial left.
  EXPECT_EQ(reply.files(6).error(), EISDIR);
  struct stat st_dir;
  ASSERT_EQ(::lstat(server("adir").c_str(), &st_dir), 0);
  EXPECT_TRUE(S_ISDIR(st_dir.st_mode));
  EXPECT_FALSE(exists(server(".adir.part")));
  EXPECT_EQ(reply.files(4).error(), 0);
  struct stat st_via;
  ASSERT_EQ(::lstat(server("viapart").c_str(), &st_via), 0);
  EXPECT_TRUE(S_ISREG(st_via.st_mode));
  EXPECT_EQ(slurp(server("viapart")), "new bytes\n");
  EXPECT_FALSE(exists(server(".viapart.part")));
  EXPECT_EQ(reply.files(5).error(), 0);
  EXPECT_EQ(slurp(server("left")), "new bytes\n");
  EXPECT_FALSE(exists(server(".left.part")));
  EXPECT_EQ(reply.files(0).error(), 0);
  EXPECT_EQ(reply.files(0).attr().size(), 10u);
  EXPECT_EQ(reply.files(0).attr().mode() & 07777, 0640u);
  EXPECT_EQ(reply.files(0).attr().mtime_ns(), 1500000000LL * 1000000000LL);
  EXPECT_EQ(slurp(server("made")), "new bytes\n");
  struct stat st_made;
  ASSERT_EQ(::stat(server("made").c_str(), &st_made), 0);
  EXPECT_EQ(st_made.st_mode & 07777, 0640u);
  EXPECT_EQ(st_made.st_mtime, 1500000000);
  EXPECT_FALSE(exists(server(".made.part")));
  EXPECT_EQ(reply.files(1).error(), ELOOP);
  EXPECT_FALSE(exists(outside() + "/planted")) << "WriteFiles wrote outside the export";
  EXPECT_FALSE(exists(outside() + "/.planted.part")) << "WriteFiles wrote outside the export";
  EXPECT_EQ(reply.files(2).error(), 0);
  struct stat st_link;
  ASSERT_EQ(::lstat(server("wflink").c_str(), &st_link), 0);
  EXPECT_TRUE(S_ISREG(st_link.st_mode));
  EXPECT_EQ(reply.files(3).error(), ENOENT);
  EXPECT_EQ(slurp(outside() + "/secret"), "the storage server's own file\n");
  EXPECT_EQ(slurp(server("kept")), "already here\n");
}

TEST_F(Security, AnAsynchronousCreateByWriteNeedsTheTokenAndStaysInTheExport) {
  // FileRef.create lets a Write make its file (a mount's asynchronous create): the same checks as
  // Create. Tried here without the mount: no token, a wrong token, a path through a symlink to
  // outside the export, and create on another call than Write.
  ASSERT_EQ(::symlink(outside().c_str(), server("wescape").c_str()), 0);
  auto write_creating = [&](const std::string& path, const char* token, pb::WriteReply& reply,
                            bool as_nobody = false) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    pb::WriteRequest req;
    req.mutable_file()->set_ns("default");
    req.mutable_file()->set_path(path);
    req.mutable_file()->set_handle(0xc7ea7ec7ea7eULL);  // the mount's own pick
    req.mutable_file()->set_flags(O_WRONLY | O_CREAT | O_TRUNC);
    req.mutable_file()->set_create(true);
    req.mutable_file()->set_create_mode(0644);
    if (as_nobody) {
      req.mutable_file()->mutable_as_user()->set_uid(65534);
      req.mutable_file()->mutable_as_user()->set_gid(65534);
    }
    req.set_data("planted\n");
    return data_->Write(&ctx, req, &reply);
  };
  pb::WriteReply reply;
  // A user the mount does not trust creates only through Create, where it is judged: never by
  // a Write (whose create would open a file found at the name unjudged).
  ASSERT_TRUE(write_file(server("nobody-made"), "kept\n"));
  EXPECT_EQ(write_creating(vpath("nobody-made"), token_.c_str(), reply, true).error_code(),
            StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(read_file(server("nobody-made")), "kept\n") << "a judged user's Write created";
  EXPECT_EQ(write_creating(vpath("made"), nullptr, reply).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(write_creating(vpath("made"), "not-the-token", reply).error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_FALSE(exists(server("made"))) << "a Write without the token created a file";
  reply.Clear();
  ASSERT_TRUE(write_creating(vpath("wescape/planted-by-write"), token_.c_str(), reply).ok());
  EXPECT_EQ(reply.error(), ELOOP);
  EXPECT_FALSE(exists(outside() + "/planted-by-write"))
      << "a Write created a file outside the export";
  {
    grpc::ClientContext ctx;
    prepare(ctx, token_.c_str());
    pb::ReadRequest req;
    req.mutable_file()->set_ns("default");
    req.mutable_file()->set_path(vpath("by-read"));
    req.mutable_file()->set_handle(0xc7ea7ec7ea7fULL);
    req.mutable_file()->set_flags(O_WRONLY | O_CREAT);
    req.mutable_file()->set_create(true);
    req.set_size(16);
    pb::ReadReply read_reply;
    EXPECT_EQ(data_->Read(&ctx, req, &read_reply).error_code(), StatusCode::INVALID_ARGUMENT);
    EXPECT_FALSE(exists(server("by-read"))) << "a Read created a file";
  }
  reply.Clear();
  ASSERT_TRUE(write_creating(vpath("made"), token_.c_str(), reply).ok());
  EXPECT_EQ(reply.error(), 0);
  EXPECT_EQ(reply.written(), 8u);
  EXPECT_EQ(read_file(server("made")), "planted\n");
  EXPECT_TRUE(reply.has_file_attr()) << "the creating write from offset 0 reports the file";
  // WriteRequest.report_attrs (a mount's first write after a flush made the file) reports the
  // file's attributes only to a caller with the token, and writes nothing for one without.
  auto write_reporting = [&](const char* token, pb::WriteReply& out) {
    grpc::ClientContext ctx;
    prepare(ctx, token);
    pb::WriteRequest req;
    req.mutable_file()->set_ns("default");
    req.mutable_file()->set_path(vpath("made"));
    req.mutable_file()->set_handle(0xc7ea7ec7ea80ULL);
    req.mutable_file()->set_flags(O_WRONLY);
    req.set_report_attrs(true);
    req.set_data("rewritten\n");
    return data_->Write(&ctx, req, &out);
  };
  for (const char* token : {static_cast<const char*>(nullptr), "not-the-token"}) {
    pb::WriteReply refused;
    EXPECT_EQ(write_reporting(token, refused).error_code(), StatusCode::UNAUTHENTICATED);
    EXPECT_FALSE(refused.has_file_attr());
  }
  EXPECT_EQ(read_file(server("made")), "planted\n") << "a Write without the token wrote";
  pb::WriteReply reported;
  ASSERT_TRUE(write_reporting(token_.c_str(), reported).ok());
  EXPECT_EQ(reported.error(), 0);
  ASSERT_TRUE(reported.has_file_attr());
  EXPECT_EQ(reported.file_attr().size(), 10u);
}

TEST_F(Security, ARaceOfRenamesAndSymlinksThroughTheApiCannotLeadOutside) {
  // One client swaps a directory for a symlink to the outside and back, as fast as it can;
  // another creates and opens files through the directory at the same time. The gateway must
  // never let one of those land outside.
  ASSERT_EQ(mkdir(vpath("d")).error(), 0);
  std::atomic<bool> stop{false};
  std::thread swapper([&] {
    for (int i = 0; !stop; ++i) {
      rename(vpath("d"), vpath("d.away"));
      symlink(vpath("d"), outside());
      unlink(vpath("d"));
      rename(vpath("d.away"), vpath("d"));
    }
  });
  int created = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
    auto r = open(vpath("d/f" + std::to_string(i)), O_WRONLY | O_CREAT, true);
    if (r.error() == 0) ++created;
    open(vpath("d/secret"), O_RDONLY);
  }
  stop = true;
  swapper.join();
  EXPECT_GT(created, 0) << "no create went through while the directory was there";
  std::set<std::string> names = list_names(outside());
  names.erase(".");
  names.erase("..");
  EXPECT_EQ(names, (std::set<std::string>{"secret"})) << "something was made outside the export";
}

// --- TLS -----------------------------------------------------------------------------------------

TEST_F(Security, APlaintextClientIsRefusedByATlsGateway) {
  wire::ClientTls plaintext;
  plaintext.insecure = true;
  std::string error;
  auto channel = wire::secure_channel(cluster_->env("SKEIN_GATEWAY"), plaintext, error);
  ASSERT_TRUE(channel) << error;
  auto stub = pb::Namespace::NewStub(channel);
  grpc::ClientContext ctx;
  prepare(ctx, token_.c_str());
  pb::PathRequest req;
  req.set_ns("default");
  req.set_path("/");
  pb::AttrReply reply;
  EXPECT_EQ(stub->GetAttr(&ctx, req, &reply).error_code(), StatusCode::UNAVAILABLE);
  EXPECT_FALSE(reply.has_attr());
}

// The status of a GetAttr of "/" (with the token) over a channel with `tls`.
grpc::Status getattr_over(const std::string& gateway, const wire::ClientTls& tls,
                          const std::string& token) {
  std::string error;
  auto channel = wire::secure_channel(gateway, tls, error);
  if (!channel) return grpc::Status(StatusCode::INTERNAL, error);
  auto stub = pb::Namespace::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ctx.AddMetadata("x-skein-token", token);
  pb::PathRequest req;
  req.set_ns("default");
  req.set_path("/");
  pb::AttrReply reply;
  return stub->GetAttr(&ctx, req, &reply);
}

TEST_F(Security, ClientsOfAnotherCaAndClientsWithoutACertificateAreRefused) {
  const std::string dir = cluster_->state() + "/" + name_ + "-pki";
  ::mkdir(dir.c_str(), 0700);
  // Another CA, and under it a certificate for the gateway's address and one for a client.
  std::string out;
  ASSERT_EQ(run_command("cd '" + dir +
                            "' && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                            "-nodes -keyout other-ca.key -out other-ca.crt -days 2 -subj "
                            "/CN=other-ca 2>&1",
                        &out),
            0)
      << out;
  auto tls = cluster_tls(*cluster_);
  const std::string gateway = cluster_->env("SKEIN_GATEWAY");
  ASSERT_TRUE(getattr_over(gateway, tls, token_).ok());

  auto wrong_ca = tls;
  wrong_ca.ca_file = dir + "/other-ca.crt";
  EXPECT_EQ(getattr_over(gateway, wrong_ca, token_).error_code(), StatusCode::UNAVAILABLE)
      << "the gateway's certificate was accepted under a CA that did not sign it";

  auto no_cert = tls;
  no_cert.cert_file.clear();
  no_cert.key_file.clear();
  EXPECT_EQ(getattr_over(gateway, no_cert, token_).error_code(), StatusCode::UNAVAILABLE)
      << "mutual TLS let a client without a certificate in";

  // A certificate of the cluster's CA whose name maps to no role: refused like a bad token.
  const std::string ca = cluster_->state() + "/tls/ca";
  ASSERT_EQ(run_command("cd '" + dir +
                            "' && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
                            "-nodes -keyout intruder.key -out intruder.csr -subj /CN=intruder "
                            "2>&1 && openssl x509 -req -in intruder.csr -CA '" +
                            ca + ".crt' -CAkey '" + ca +
                            ".key' -CAcreateserial -days 2 -out intruder.crt 2>&1 && chmod 600 "
                            "intruder.key",
                        &out),
            0)
      << out;
  auto stranger = tls;
  stranger.cert_file = dir + "/intruder.crt";
  stranger.key_file = dir + "/intruder.key";
  auto st = getattr_over(gateway, stranger, token_);
  EXPECT_EQ(st.error_code(), StatusCode::UNAUTHENTICATED) << st.error_message();
}

TEST_F(Security, OnlyAnAdminCertificateWithTheAdminTokenReachesTheAdminService) {
  const std::string admin_token = read_token(cluster_->env("SKEIN_ADMIN_TOKEN_FILE"));
  auto health = [&](const wire::ClientTls& tls, const std::string& token) {
    std::string error;
    auto channel = wire::secure_channel(cluster_->env("SKEIN_GATEWAY"), tls, error);
    auto stub = pb::Admin::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("x-skein-admin-token", token);
    pb::HealthReply reply;
    return stub->Health(&ctx, pb::HealthRequest(), &reply);
  };
  auto node = cluster_tls(*cluster_), admin = cluster_tls(*cluster_, /*admin=*/true);
  EXPECT_EQ(health(node, admin_token).error_code(), StatusCode::PERMISSION_DENIED)
      << "a node certificate with the admin token reached the Admin service";
  EXPECT_EQ(health(admin, "").error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(health(admin, "wrong").error_code(), StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(health(admin, admin_token).ok());
}

TEST_F(Security, AddBackendOnlyTakesKeysKeptInBackendFilesDir) {
  std::string error;
  auto channel =
      wire::secure_channel(cluster_->env("SKEIN_GATEWAY"), cluster_tls(*cluster_, true), error);
  auto stub = pb::Admin::NewStub(channel);
  auto add = [&](const std::string& identity) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ctx.AddMetadata("x-skein-admin-token", read_token(cluster_->env("SKEIN_ADMIN_TOKEN_FILE")));
    pb::AddBackendRequest req;
    auto* b = req.mutable_backend();
    b->set_name("probe");
    b->set_host("127.0.0.1");
    b->set_port(static_cast<uint32_t>(std::stoi(cluster_->list("SKEIN_SSH_PORTS").at(0))));
    b->set_user(cluster_->env("SKEIN_SSH_USER"));
    b->set_identity_file(identity);
    b->set_known_hosts(cluster_->env("SKEIN_KNOWN_HOSTS"));
    b->set_root(outside());
    req.set_ns("default");
    req.set_mount_path("/probe");
    req.set_skip_connect_check(true);
    pb::AddBackendReply reply;
    return stub->AddBackend(&ctx, req, &reply);
  };
  // The storage server's own host key lies outside the directory kept for backend keys.
  const std::string host_key = cluster_->state() + "/servers/0/ssh_host_ed25519_key";
  auto st = add(host_key);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find(host_key + " is not below"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(getattr("/probe", &st).error(), ENOENT) << "the backend was added";
}

// --- credential files and plaintext --------------------------------------------------------------

TEST_F(Security, CredentialFilesOthersCanReadAreRefused) {
  const std::string loose = cluster_->state() + "/" + name_ + ".token";
  std::ofstream(loose) << token_ << "\n";
  ::chmod(loose.c_str(), 0644);
  std::string out;
  int rc = check_config(
      [&](std::string& t) {
        t.replace(t.find(cluster_->token_file()), cluster_->token_file().size(), loose);
      },
      out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(loose + " is accessible by group or others (mode 0644)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("chmod 600 " + loose), std::string::npos) << out;
  EXPECT_EQ(out.find(token_), std::string::npos) << "the message shows the token";

  // The mount refuses such a token file too, and leaves no mount behind.
  const std::string mnt = cluster_->state() + "/" + name_ + "-mnt";
  std::string error;
  auto m = FuseMount::start(cluster_->env("SKEIN_GATEWAY"), mnt, "default", error,
                            cluster_->mount_credentials(loose));
  EXPECT_FALSE(m) << "mounted with a token file others can read";
  EXPECT_NE(error.find("is accessible by group or others (mode 0644)"), std::string::npos) << error;
  EXPECT_EQ(list_names(mnt), (std::set<std::string>{".", ".."}));

  // And a TLS key others can read.
  const std::string key = cluster_->state() + "/" + name_ + ".key";
  ASSERT_EQ(run_command("cp '" + cluster_->state() + "/tls/gateway.key' '" + key +
                        "' && chmod 644 '" + key + "'"),
            0);
  rc = check_config(
      [&](std::string& t) {
        const std::string k = cluster_->state() + "/tls/gateway.key";
        t.replace(t.find(k), k.size(), key);
      },
      out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(key + " is accessible by group or others (mode 0644)"), std::string::npos)
      << out;
}

// `--check-config` refuses what a start would: an empty token file, a token no client could
// send, an unknown log level. It said OK to all three, and the start then failed.
TEST_F(Security, TheCheckOfAConfigRefusesWhatAStartWould) {
  const std::string file = cluster_->state() + "/" + name_ + ".token";
  auto with_token_file = [&](const std::string& contents, std::string& out) {
    std::ofstream(file) << contents;
    ::chmod(file.c_str(), 0600);
    return check_config(
        [&](std::string& t) {
          t.replace(t.find(cluster_->token_file()), cluster_->token_file().size(), file);
        },
        out);
  };
  std::string out;
  EXPECT_EQ(with_token_file(" \n", out), 2) << out;
  EXPECT_NE(out.find(file + " is empty"), std::string::npos) << out;
  EXPECT_EQ(with_token_file(token_ + "\nhas\ta-tab\n", out), 2) << out;
  EXPECT_NE(out.find(file + ", line 2: a token may hold only printable ASCII"), std::string::npos)
      << out;
  EXPECT_EQ(with_token_file(token_ + "\n", out), 0) << out;
  EXPECT_EQ(check_config(
                [](std::string& t) {
                  auto at = t.find("\nlog_level = ") + 1;
                  t.replace(at, t.find('\n', at) - at, "log_level = \"verbose\"");
                },
                out),
            2)
      << out;
  EXPECT_NE(out.find("'log_level' must be one of trace, debug"), std::string::npos) << out;
}

// A mount's log names the files its users worked on (a Slurm job's, in a log directory every user
// may list): a new one is its owner's only. It was made 0644.
TEST_F(Security, AMountsNewLogIsReadableByItsOwnerOnly) {
  const std::string mnt = cluster_->state() + "/" + name_ + "-mnt";
  std::string error;
  auto m = FuseMount::start(cluster_->env("SKEIN_GATEWAY"), mnt, "default", error,
                            cluster_->mount_credentials());
  ASSERT_TRUE(m) << error;
  struct stat st {};
  ASSERT_EQ(::stat((mnt + ".log").c_str(), &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(Security, ANamespaceWithoutATokenAndPlaintextWithoutInsecureAreRefusedAtStart) {
  std::string out;
  int rc = check_config(
      [&](std::string& t) {
        auto at = t.find("\ntoken_file = ") + 1;  // the namespace's, not admin_token_file
        t.erase(at, t.find('\n', at) - at);
      },
      out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex(R"(\.toml:\d+: namespace 'default' needs 'token_file')")))
      << out;

  rc = check_config(
      [&](std::string& t) {
        auto at = t.find("[gateway.tls]");
        t.erase(at, t.find("[[backend]]") - at);
      },
      out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("[gateway] needs a [gateway.tls] table"), std::string::npos) << out;
  EXPECT_NE(out.find("'insecure = true'"), std::string::npos) << out;

  // Written out, plaintext is allowed, and said so at start.
  std::string file = cluster_->state() + "/" + name_ + "-plain.toml";
  std::string text = without_jobs(slurp(cluster_->env("SKEIN_CONFIG")));
  auto at = text.find("[gateway.tls]");
  text.replace(at, text.find("[[backend]]") - at, "insecure = true\n\n");
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  auto l = text.find("listen = ");
  text.replace(l, text.find('\n', l) - l, "listen = \"" + address + "\"");
  std::ofstream(file) << text;
  std::string error;
  auto gw = GatewayProcess::start(file, address, file + ".log", error);
  ASSERT_TRUE(gw) << error;
  EXPECT_NE(slurp(file + ".log").find("insecure = true: gRPC is plaintext"), std::string::npos);
  wire::ClientTls plaintext;
  plaintext.insecure = true;
  EXPECT_TRUE(getattr_over(address, plaintext, token_).ok());
  EXPECT_EQ(getattr_over(address, plaintext, "wrong").error_code(), StatusCode::UNAUTHENTICATED)
      << "plaintext is no reason to skip the token";
}

}  // namespace
}  // namespace skein::test
