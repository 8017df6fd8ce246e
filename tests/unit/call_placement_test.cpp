// CallPlacement: calls run in the receiving thread up to the inline limit, the rest (and every call
// that may not run inline) on the pool, and a place is given back when its call ends; a call whose
// client gave up while it waited is not run.
#include "service/call_placement.hpp"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "skein/v1/fs.grpc.pb.h"

namespace skein {
namespace {

TEST(CallPlacement, ASmallCallRunsInTheCallersThreadWhileAPlaceIsFree) {
  CallPlacement placement(4, 1);
  std::thread::id ran_on;
  EXPECT_TRUE(placement.run(true, [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  // The place is free again: the next one runs inline too.
  EXPECT_TRUE(placement.run(true, [] {}));
}

TEST(CallPlacement, ACallThatMayNotRunInlineGoesToThePool) {
  CallPlacement placement(4, 1);
  std::promise<std::thread::id> ran_on;
  EXPECT_FALSE(placement.run(false, [&] { ran_on.set_value(std::this_thread::get_id()); }));
  auto f = ran_on.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());
}

TEST(CallPlacement, CallsBeyondTheInlineLimitGoToThePoolWhileTheOthersBlock) {
  CallPlacement placement(4, 1);
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<bool> blocking{false};
  // One call blocks inline in a thread of its own (as on a gRPC thread waiting for a server).
  std::thread receiver([&] {
    EXPECT_TRUE(placement.run(true, [&] {
      blocking = true;
      released.wait();
    }));
  });
  while (!blocking) std::this_thread::yield();
  // Meanwhile another receiving thread's call is not held up: it goes to the pool and runs.
  std::promise<void> ran;
  EXPECT_FALSE(placement.run(true, [&] { ran.set_value(); }));
  EXPECT_EQ(ran.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  release.set_value();
  receiver.join();
  EXPECT_TRUE(placement.run(true, [] {})) << "the blocked call gave its place back";
}

TEST(CallPlacement, NoInlinePlacesMeansEverythingOnThePool) {
  CallPlacement placement(2, 0);
  std::promise<void> ran;
  EXPECT_FALSE(placement.run(true, [&] { ran.set_value(); }));
  EXPECT_EQ(ran.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

// A Namespace service whose GetAttr runs through CallPlacement::serve: the call for path "/hold"
// blocks until released, every other records its path.
class HeldCalls final : public v1::Namespace::WithCallbackMethod_GetAttr<v1::Namespace::Service> {
 public:
  explicit HeldCalls(CallPlacement& placement) : placement_(placement) {}
  grpc::ServerUnaryReactor* GetAttr(grpc::CallbackServerContext* c, const v1::PathRequest* q,
                                    v1::AttrReply*) override {
    return placement_.serve(c, true, [this, q] {
      if (q->path() == "/hold") {
        holding.set_value();
        release.get_future().wait();
      } else {
        std::lock_guard lock(mu);
        ran.push_back(q->path());
      }
      return grpc::Status::OK;
    });
  }
  std::promise<void> holding, release;
  std::mutex mu;
  std::vector<std::string> ran;  // guarded by mu

 private:
  CallPlacement& placement_;
};

grpc::Status get_attr(v1::Namespace::Stub& stub, const std::string& path,
                      std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  v1::PathRequest req;
  req.set_path(path);
  v1::AttrReply reply;
  return stub.GetAttr(&ctx, req, &reply);
}

TEST(CallPlacement, ACallWhoseClientGaveUpWhileItWaitedOnThePoolDoesNotRun) {
  // One pool thread and no inline places: a call waits while another holds the thread.
  CallPlacement placement(1, 0);
  HeldCalls service(placement);
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto stub = v1::Namespace::NewStub(server->InProcessChannel(grpc::ChannelArguments()));

  auto held = std::async(std::launch::async,
                         [&] { return get_attr(*stub, "/hold", std::chrono::seconds(30)); });
  ASSERT_EQ(service.holding.get_future().wait_for(std::chrono::seconds(10)),
            std::future_status::ready);
  // This one waits for the pool thread past its deadline: its client reports it failed...
  EXPECT_EQ(get_attr(*stub, "/late", std::chrono::milliseconds(200)).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  // ...and when its turn comes it is not run. A call queued after it runs (the pool takes them
  // in order, so it has had its turn by then).
  service.release.set_value();
  EXPECT_TRUE(held.get().ok());
  EXPECT_TRUE(get_attr(*stub, "/next", std::chrono::seconds(30)).ok());
  std::lock_guard lock(service.mu);
  EXPECT_EQ(service.ran, std::vector<std::string>{"/next"});
  server->Shutdown();
}

}  // namespace
}  // namespace skein
