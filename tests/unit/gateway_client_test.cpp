// GatewayClient against a fake gateway served in-process: how replies, gRPC failures, deadlines
// and the token reach the mount as values and errnos.
#include "gateway_client.hpp"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <thread>

#include "skein/v1/fs.grpc.pb.h"

namespace skein::client {
namespace {

namespace pb = ::skein::v1;
using namespace std::chrono_literals;

// Answers by path: "/missing" is ENOENT, "/denied" a gRPC UNAUTHENTICATED, "/slow" never answers
// before the caller gives up; anything else is a 0644 file of 42 bytes.
class FakeNamespace final : public pb::Namespace::Service {
 public:
  grpc::Status GetAttr(grpc::ServerContext* ctx, const pb::PathRequest* req,
                       pb::AttrReply* reply) override {
    record(ctx, req->ns());
    if (req->ns() == "slow-root" && req->path() == "/") {  // waiting for a storage server
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(10ms);
      return grpc::Status::CANCELLED;
    }
    if (req->path() == "/missing") {
      reply->set_error(ENOENT);
    } else if (req->path() == "/denied") {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bad token");
    } else if (req->path() == "/slow") {
      while (!ctx->IsCancelled()) std::this_thread::sleep_for(10ms);
      return grpc::Status::CANCELLED;
    } else {
      reply->mutable_attr()->set_mode(req->path() == "/" ? S_IFDIR | 0755 : S_IFREG | 0644);
      reply->mutable_attr()->set_size(42);
    }
    return grpc::Status::OK;
  }

  // Two batches for "/two-batches"; an error after the first batch for "/fails-midway".
  grpc::Status ReadDir(grpc::ServerContext* ctx, const pb::PathRequest* req,
                       grpc::ServerWriter<pb::ReadDirReply>* writer) override {
    record(ctx, req->ns());
    pb::ReadDirReply batch;
    batch.add_entries()->set_name("a");
    batch.add_entries()->set_name("b");
    writer->Write(batch);
    batch.Clear();
    if (req->path() == "/fails-midway") {
      batch.set_error(EACCES);
    } else {
      batch.add_entries()->set_name("c");
    }
    writer->Write(batch);
    return grpc::Status::OK;
  }

  std::string last_token() {
    std::lock_guard lock(mu_);
    return token_;
  }
  std::string last_ns() {
    std::lock_guard lock(mu_);
    return ns_;
  }

 private:
  void record(grpc::ServerContext* ctx, const std::string& ns) {
    std::lock_guard lock(mu_);
    ns_ = ns;
    auto it = ctx->client_metadata().find("x-skein-token");
    token_ =
        it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }
  std::mutex mu_;
  std::string token_;
  std::string ns_;
};

// Echoes what a FileRef carried, so tests can see it arrive whole.
class FakeData final : public pb::Data::Service {
 public:
  grpc::Status Read(grpc::ServerContext*, const pb::ReadRequest* req,
                    pb::ReadReply* reply) override {
    const pb::FileRef& f = req->file();
    reply->set_data(f.ns() + "|" + f.path() + "|" + std::to_string(f.handle()) + "|" +
                    std::to_string(f.flags()) + "|" + std::to_string(req->offset()) + "|" +
                    std::to_string(req->size()));
    return grpc::Status::OK;
  }
  grpc::Status Write(grpc::ServerContext*, const pb::WriteRequest* req,
                     pb::WriteReply* reply) override {
    if (req->file().handle() == 0) {
      reply->set_error(EBADF);
    } else {
      reply->set_written(static_cast<uint32_t>(req->data().size()));
    }
    return grpc::Status::OK;
  }
  // Releases answered, by handle; while unavailable(true), every Release fails as a gateway that
  // cannot be reached does.
  grpc::Status Release(grpc::ServerContext*, const pb::FileRef* req, pb::ErrorReply*) override {
    std::lock_guard lock(mu_);
    if (unavailable_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down");
    released_.push_back(req->handle());
    return grpc::Status::OK;
  }
  void unavailable(bool down) {
    std::lock_guard lock(mu_);
    unavailable_ = down;
  }
  std::vector<uint64_t> released() {
    std::lock_guard lock(mu_);
    return released_;
  }

 private:
  std::mutex mu_;
  bool unavailable_ = false;
  std::vector<uint64_t> released_;
};

class GatewayClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&names_);
    builder.RegisterService(&data_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now() + 1s); }

  GatewayClient client(std::string token = "", std::chrono::milliseconds timeout = 5000ms) {
    return GatewayClient(server_->InProcessChannel(grpc::ChannelArguments()),
                         GatewayOptions{"scratch", std::move(token), timeout});
  }

  FakeNamespace names_;
  FakeData data_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(GatewayClientTest, AttributesOfAnExistingPathAreReturned) {
  auto attr = client().getattr("/file");
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->mode, static_cast<uint32_t>(S_IFREG | 0644));
  EXPECT_EQ(attr->size, 42u);
  EXPECT_EQ(names_.last_ns(), "scratch");
}

TEST_F(GatewayClientTest, ReplyErrorIsPassedThroughAsErrno) {
  auto attr = client().getattr("/missing");
  ASSERT_FALSE(attr.ok());
  EXPECT_EQ(attr.error(), ENOENT);
}

// A mounted namespace that refuses the mount's credential is gone (destroyed, expired): ESTALE.
TEST_F(GatewayClientTest, UnauthenticatedCallFailsWithEstale) {
  auto attr = client().getattr("/denied");
  ASSERT_FALSE(attr.ok());
  EXPECT_EQ(attr.error(), ESTALE);
}

// Never ENOSYS, which the kernel would take for "no such operation in this mount" for good.
TEST_F(GatewayClientTest, UnimplementedCallFailsWithEio) {
  EXPECT_EQ(client().mkdir("/d", 0755).error(), EIO);
}

TEST_F(GatewayClientTest, TokenIsSentInMetadata) {
  (void)client("s3cret").getattr("/file");
  EXPECT_EQ(names_.last_token(), "s3cret");
}

TEST_F(GatewayClientTest, NoTokenMeansNoMetadata) {
  (void)client().getattr("/file");
  EXPECT_EQ(names_.last_token(), "");
}

TEST_F(GatewayClientTest, GatewayThatDoesNotAnswerFailsWithEioWithinTheDeadline) {
  auto start = std::chrono::steady_clock::now();
  auto attr = client("", 300ms).getattr("/slow");
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(attr.ok());
  EXPECT_EQ(attr.error(), EIO);
  EXPECT_LT(took, 2s);
}

TEST_F(GatewayClientTest, ReadDirJoinsEveryBatchOfTheStream) {
  auto entries = client().readdir("/two-batches");
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].name, "a");
  EXPECT_EQ((*entries)[2].name, "c");
}

TEST_F(GatewayClientTest, ReadDirErrorInALaterBatchFailsTheWholeListing) {
  auto entries = client().readdir("/fails-midway");
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.error(), EACCES);
}

TEST_F(GatewayClientTest, FileRefReachesTheGatewayWhole) {
  auto data = client().read(FileRef{"/dir/f", 77, 02}, 4096, 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*data, "scratch|/dir/f|77|2|4096|100");
}

TEST_F(GatewayClientTest, WriteReportsBytesWrittenOrTheReplyError) {
  auto written = client().write(FileRef{"/f", 5, 01}, 0, "hello");
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, 5u);
  EXPECT_EQ(client().write(FileRef{"/f", 0, 01}, 0, "x").error(), EBADF);
}

// A Release the gateway does not answer leaves a file open there: it is sent again once a later
// Release is answered.
TEST_F(GatewayClientTest, AReleaseTheGatewayDidNotAnswerIsSentAgainOnceOneIsAnswered) {
  auto c = client();
  data_.unavailable(true);
  c.release_async(FileRef{"/a", 7, O_RDONLY});
  std::this_thread::sleep_for(200ms);
  EXPECT_TRUE(data_.released().empty());
  data_.unavailable(false);
  c.release_async(FileRef{"/b", 8, O_RDONLY});
  std::vector<uint64_t> got;
  for (int i = 0; i < 200 && (got = data_.released()).size() < 2; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(got, (std::vector<uint64_t>{8, 7}));
}

TEST_F(GatewayClientTest, NamespaceCheckPassesWhenRootIsADirectory) {
  EXPECT_EQ(client().check_namespace(2s).outcome, NamespaceCheck::Outcome::kOk);
}

// A mount's channel without TLS (the fake gateways here listen in plaintext).
std::shared_ptr<grpc::Channel> plaintext_channel(const std::string& address) {
  std::string error;
  skein::wire::ClientTls plaintext;
  plaintext.insecure = true;
  auto channel = GatewayClient::connect(address, plaintext, error);
  EXPECT_NE(channel, nullptr) << error;
  return channel;
}

TEST(GatewayClientUnreachable, CallsFailWithEioQuicklyWhenNothingListens) {
  GatewayClient client(plaintext_channel("127.0.0.1:1"), GatewayOptions{"default", "", 5s});
  auto start = std::chrono::steady_clock::now();
  auto attr = client.getattr("/");
  ASSERT_FALSE(attr.ok());
  EXPECT_EQ(attr.error(), EIO);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// A gateway that is reached (over TCP) but answers too late, waiting for a storage server, is
// not called unreachable.
TEST(GatewayClientUnreachable, NamespaceCheckOfASlowButConnectedGatewaySaysSo) {
  FakeNamespace names;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&names);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server);
  GatewayClient slow(plaintext_channel("127.0.0.1:" + std::to_string(port)),
                     GatewayOptions{"slow-root", "", 500ms});
  ASSERT_TRUE(slow.getattr("/file").ok());  // connected
  NamespaceCheck check = slow.check_namespace(500ms);
  EXPECT_EQ(check.outcome, NamespaceCheck::Outcome::kFailed);
  EXPECT_NE(check.detail.find("connected but slow"), std::string::npos) << check.detail;
  server->Shutdown(std::chrono::system_clock::now() + 1s);
}

TEST(GatewayClientUnreachable, NamespaceCheckSaysUnreachable) {
  GatewayClient client(plaintext_channel("127.0.0.1:1"), GatewayOptions{"default", "", 5s});
  NamespaceCheck check = client.check_namespace(2s);
  EXPECT_EQ(check.outcome, NamespaceCheck::Outcome::kUnreachable);
  EXPECT_FALSE(check.detail.empty());
}

// A gateway restarted on its port is used again within about the longest reconnect backoff.
TEST(GatewayClientReconnect, GatewayRestartedOnItsPortIsUsedAgainWithinTwoSeconds) {
  auto serve = [](FakeNamespace* service, const std::string& address, int* port) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
    builder.RegisterService(service);
    return builder.BuildAndStart();
  };
  FakeNamespace first_service;
  int port = 0;
  auto server = serve(&first_service, "127.0.0.1:0", &port);
  ASSERT_NE(server, nullptr);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  GatewayClient client(plaintext_channel(address),
                       GatewayOptions{"default", "", 2s, /*watch_connection=*/true});
  ASSERT_TRUE(client.getattr("/f").ok());

  server->Shutdown(std::chrono::system_clock::now());
  server.reset();
  auto down_since = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - down_since < 4s) {  // let reconnect backoff grow
    EXPECT_EQ(client.getattr("/f").error(), EIO);
    std::this_thread::sleep_for(200ms);
  }

  FakeNamespace second_service;
  int same_port = 0;
  server = serve(&second_service, address, &same_port);
  ASSERT_NE(server, nullptr);
  ASSERT_EQ(same_port, port);
  auto back_since = std::chrono::steady_clock::now();
  while (!client.getattr("/f").ok() && std::chrono::steady_clock::now() - back_since < 10s) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - back_since, 2s);
  server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace
}  // namespace skein::client
