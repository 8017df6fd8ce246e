// CallPlacement: calls run in the receiving thread up to the inline limit, the rest (and every call
// that may not run inline) on the pool, and a place is given back when its call ends.
#include "service/call_placement.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

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

}  // namespace
}  // namespace skein
