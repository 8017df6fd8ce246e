// WatchStream against an in-process fake of the gateway's Watch service: it subscribes with the
// mount's id, hands events to its listener and acknowledges them afterwards, reports a lost
// stream once and subscribes again, and stops promptly while blocked on the stream.
#include "watch_stream.hpp"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "skein/v1/watch.grpc.pb.h"

namespace skein::client {
namespace {

namespace pb = ::skein::v1;
using namespace std::chrono_literals;

// Serves Watch streams: welcome, one event, wait for its ack; the first stream then ends as a
// lost lease would, later ones stay open until cancelled.
class FakeWatch final : public pb::Watch::Service {
 public:
  grpc::Status Stream(grpc::ServerContext* ctx,
                      grpc::ServerReaderWriter<pb::WatchEvent, pb::WatchRequest>* stream) override {
    pb::WatchRequest req;
    if (!stream->Read(&req) || !req.has_subscribe()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "subscribe first");
    }
    int n;
    {
      std::lock_guard lock(mu);
      n = ++streams;
      subscribe = req.subscribe();
      auto md = ctx->client_metadata().find("x-skein-mount");
      if (md != ctx->client_metadata().end())
        mount_header.assign(md->second.data(), md->second.size());
    }
    pb::WatchEvent welcome;
    welcome.set_seq(0);
    welcome.set_lease_ms(777);
    stream->Write(welcome);
    pb::WatchEvent event;
    event.set_seq(1);
    for (auto [kind, path] :
         {std::pair{pb::Invalidation::INODE, "/a"}, std::pair{pb::Invalidation::ENTRY, "/b/c"},
          std::pair{pb::Invalidation::TREE, "/d"}, std::pair{pb::Invalidation::ALL, ""}}) {
      auto* i = event.add_invalidations();
      i->set_kind(kind);
      i->set_path(path);
    }
    stream->Write(event);
    if (stream->Read(&req)) {
      std::lock_guard lock(mu);
      acked = req.ack();
      cv.notify_all();
    }
    if (n == 1) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "lease lost");
    while (!ctx->IsCancelled()) std::this_thread::sleep_for(5ms);
    return grpc::Status::CANCELLED;
  }

  std::mutex mu;
  std::condition_variable cv;
  int streams = 0;
  pb::Subscribe subscribe;
  std::string mount_header;
  uint64_t acked = 0;
};

class RecordingListener final : public WatchStream::Listener {
 public:
  void subscribed() override {
    std::lock_guard lock(mu);
    ++subscriptions;
    cv.notify_all();
  }
  void lost(const std::string& why) override {
    std::lock_guard lock(mu);
    losses.push_back(why);
    cv.notify_all();
  }
  void invalidate(const std::vector<Invalidation>& items) override {
    std::lock_guard lock(mu);
    events.push_back(items);
    cv.notify_all();
  }
  template <typename Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 5s, pred);
  }

  std::mutex mu;
  std::condition_variable cv;
  int subscriptions = 0;
  std::vector<std::string> losses;
  std::vector<std::vector<Invalidation>> events;
};

TEST(WatchStream, SubscribesAppliesAcknowledgesAndComesBackAfterALostLease) {
  FakeWatch service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  RecordingListener listener;
  {
    auto owned = std::make_unique<WatchStream>(
        server->InProcessChannel(grpc::ChannelArguments()),
        WatchStream::Options{"ns1", "00c0ffee00c0ffee", "", 10ms, 50ms}, listener);
    WatchStream& watch = *owned;
    EXPECT_FALSE(watch.state().healthy);
    watch.start();

    ASSERT_TRUE(listener.wait([&] { return listener.subscriptions >= 1; }));
    ASSERT_TRUE(listener.wait([&] { return !listener.events.empty(); }));
    {
      std::lock_guard lock(listener.mu);
      const auto& items = listener.events[0];
      ASSERT_EQ(items.size(), 4u);
      EXPECT_EQ(items[0].kind, Invalidation::Kind::kInode);
      EXPECT_EQ(items[0].path, "/a");
      EXPECT_EQ(items[1].kind, Invalidation::Kind::kEntry);
      EXPECT_EQ(items[1].path, "/b/c");
      EXPECT_EQ(items[2].kind, Invalidation::Kind::kTree);
      EXPECT_EQ(items[3].kind, Invalidation::Kind::kAll);
    }
    {
      std::unique_lock lock(service.mu);
      ASSERT_TRUE(service.cv.wait_for(lock, 5s, [&] { return service.acked == 1; }));
      EXPECT_EQ(service.subscribe.ns(), "ns1");
      EXPECT_EQ(service.subscribe.mount_id(), "00c0ffee00c0ffee");
      EXPECT_EQ(service.mount_header, "00c0ffee00c0ffee");
    }

    // The first stream ends ("lease lost"): reported once, then a new subscription.
    ASSERT_TRUE(listener.wait([&] { return listener.subscriptions >= 2; }));
    {
      std::lock_guard lock(listener.mu);
      ASSERT_EQ(listener.losses.size(), 1u);
      EXPECT_EQ(listener.losses[0], "lease lost");
    }
    ASSERT_TRUE(listener.wait([&] { return listener.events.size() >= 2; }));
    // The state follows: healthy, with the welcome's lease.
    for (int i = 0; i < 100 && watch.state().subscriptions < 2; ++i)
      std::this_thread::sleep_for(10ms);
    WatchStream::State state = watch.state();
    EXPECT_TRUE(state.healthy);
    EXPECT_EQ(state.lease_ms, 777u);
    EXPECT_EQ(state.subscriptions, 2u);

    // Destruction cancels the stream it is blocked on.
    auto start = std::chrono::steady_clock::now();
    owned.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  }
  server->Shutdown(std::chrono::system_clock::now() + 2s);
}

TEST(WatchStream, UnreachableGatewayIsRetriedQuietlyAndStopsPromptly) {
  RecordingListener listener;
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  auto start = std::chrono::steady_clock::now();
  {
    WatchStream watch(channel, {"ns", "id", "", 10ms, 20ms}, listener);
    watch.start();
    std::this_thread::sleep_for(200ms);
    WatchStream::State state = watch.state();
    EXPECT_FALSE(state.healthy);
    EXPECT_FALSE(state.why.empty());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  std::lock_guard lock(listener.mu);
  EXPECT_EQ(listener.subscriptions, 0);
  EXPECT_TRUE(listener.losses.empty()) << "never subscribed: nothing was lost";
}

// A gateway that answers renews: one stream, renews answered while `answering`.
class RenewingWatch final : public pb::Watch::Service {
 public:
  grpc::Status Stream(grpc::ServerContext* ctx,
                      grpc::ServerReaderWriter<pb::WatchEvent, pb::WatchRequest>* stream) override {
    pb::WatchRequest req;
    if (!stream->Read(&req) || !req.has_subscribe())
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "subscribe first");
    {
      std::lock_guard lock(mu);
      ++streams;
    }
    pb::WatchEvent welcome;
    welcome.set_seq(0);
    welcome.set_lease_ms(300);
    welcome.set_renews(true);
    stream->Write(welcome);
    while (!ctx->IsCancelled() && stream->Read(&req)) {
      if (req.msg_case() != pb::WatchRequest::kRenew) continue;
      std::lock_guard lock(mu);
      ++renews;
      if (!answering) continue;
      pb::WatchEvent renewed;
      renewed.set_seq(0);
      renewed.set_renewed(req.renew());
      stream->Write(renewed);
    }
    return grpc::Status::CANCELLED;
  }

  std::mutex mu;
  int streams = 0;
  int renews = 0;
  bool answering = true;
};

// A gateway that stops answering (a network cut off between them, the stream still open) is
// taken for a lost stream within the lease, as the gateway goes on without the mount after it;
// its next answer brings the mount back, on the same stream.
TEST(WatchStream, ALeaseLeftUnrenewedIsLostUntilTheGatewayAnswersAgain) {
  RenewingWatch service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  RecordingListener listener;
  {
    WatchStream watch(server->InProcessChannel(grpc::ChannelArguments()),
                      {"ns", "id", "", 10ms, 50ms}, listener);
    watch.start();
    ASSERT_TRUE(listener.wait([&] { return listener.subscriptions == 1; }));
    // Renewed all along while answered: several leases without a loss.
    std::this_thread::sleep_for(1200ms);
    {
      std::lock_guard lock(listener.mu);
      EXPECT_TRUE(listener.losses.empty()) << listener.losses.front();
    }
    {
      std::lock_guard lock(service.mu);
      EXPECT_GE(service.renews, 6) << "one renew every fifth of the lease";
      service.answering = false;
    }
    const auto cut = std::chrono::steady_clock::now();
    ASSERT_TRUE(listener.wait([&] { return !listener.losses.empty(); }));
    const auto lost_after = std::chrono::steady_clock::now() - cut;
    EXPECT_GE(lost_after, 100ms) << "lost before the renews' answers were overdue";
    {
      std::lock_guard lock(listener.mu);
      EXPECT_NE(listener.losses[0].find("no answer from the gateway"), std::string::npos)
          << listener.losses[0];
    }
    EXPECT_FALSE(watch.state().healthy);
    {
      std::lock_guard lock(service.mu);
      service.answering = true;
    }
    ASSERT_TRUE(listener.wait([&] { return listener.subscriptions == 2; }));
    for (int i = 0; i < 100 && !watch.state().healthy; ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(watch.state().healthy);
    EXPECT_EQ(watch.state().subscriptions, 1u) << "the same subscription";
    std::lock_guard lock(service.mu);
    EXPECT_EQ(service.streams, 1);
    std::lock_guard listened(listener.mu);
    EXPECT_EQ(listener.losses.size(), 1u);
  }
  server->Shutdown(std::chrono::system_clock::now() + 2s);
}

}  // namespace
}  // namespace skein::client
