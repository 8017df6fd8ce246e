// The per-server state of path confinement: verified directories (their lifetime, what a change
// forgets) and the lock that keeps symlink-making operations apart from path operations.
#include "backend/path_guard.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace skein {
namespace {

using namespace std::chrono_literals;

TEST(PathGuard, OneGuardPerServerWhateverTheHostsCase) {
  auto a = PathGuard::of("Storage1", 22);
  EXPECT_EQ(a, PathGuard::of("storage1", 22));
  EXPECT_NE(a, PathGuard::of("storage1", 2222));
  EXPECT_NE(a, PathGuard::of("storage2", 22));
}

TEST(PathGuard, ForgettingATreeForgetsWhatIsBelowAndNothingBeside) {
  PathGuard g;
  for (auto d : {"/x/a", "/x/a/b", "/x/a/b/c", "/x/ab", "/x/a.b", "/x/b"}) g.mark_verified(d);
  g.forget_tree("/x/a");
  EXPECT_FALSE(g.verified("/x/a"));
  EXPECT_FALSE(g.verified("/x/a/b"));
  EXPECT_FALSE(g.verified("/x/a/b/c"));
  EXPECT_TRUE(g.verified("/x/ab"));
  EXPECT_TRUE(g.verified("/x/a.b"));
  EXPECT_TRUE(g.verified("/x/b"));
  g.forget_tree("/");
  EXPECT_FALSE(g.verified("/x/b"));
}

TEST(PathGuard, AVerifiedDirectoryIsTrustedOnlyForTheTtl) {
  PathGuard::set_ttl(50ms);
  PathGuard g;
  g.mark_verified("/x/d");
  EXPECT_TRUE(g.verified("/x/d"));
  std::this_thread::sleep_for(80ms);
  EXPECT_FALSE(g.verified("/x/d"));
  PathGuard::set_ttl(1000ms);
}

TEST(PathGuard, HoldsAreReentrantOnTheirThread) {
  PathGuard g;
  {
    auto outer = g.hold(PathGuard::Mode::exclusive);
    auto inner = g.hold(PathGuard::Mode::shared);  // a diagnosis under a rename: no deadlock
    auto inner2 = g.hold(PathGuard::Mode::exclusive);
  }
  auto again = g.hold(PathGuard::Mode::exclusive);  // all released
}

TEST(PathGuard, AnExclusiveHoldWaitsForSharedOnesAndKeepsNewOnesOut) {
  PathGuard g;
  std::atomic<int> stage{0};
  auto reader = std::make_unique<PathGuard::Hold>(g.hold(PathGuard::Mode::shared));
  std::thread writer([&] {
    auto w = g.hold(PathGuard::Mode::exclusive);
    stage = 1;
    std::this_thread::sleep_for(50ms);
    stage = 2;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(stage.load(), 0) << "the exclusive hold did not wait for the shared one";
  // A new shared hold from another thread queues behind the waiting writer.
  std::atomic<int> seen_by_late_reader{-1};
  std::thread late([&] {
    auto r = g.hold(PathGuard::Mode::shared);
    seen_by_late_reader = stage.load();
  });
  std::this_thread::sleep_for(20ms);
  reader.reset();
  writer.join();
  late.join();
  EXPECT_EQ(seen_by_late_reader.load(), 2) << "a shared hold got in while a writer waited";
}

TEST(PathGuard, SeveralGuardsAreHeldInOneOrder) {
  auto a = std::make_shared<PathGuard>(), b = std::make_shared<PathGuard>();
  std::atomic<bool> stop{false};
  // Two threads holding both in opposite orders of asking, and writers on each: no deadlock.
  auto both = [&](PathGuard* x, PathGuard* y) {
    while (!stop) auto holds = PathGuard::hold_all({x, y});
  };
  auto write = [&](PathGuard* x) {
    while (!stop) auto h = x->hold(PathGuard::Mode::exclusive);
  };
  std::thread t1(both, a.get(), b.get()), t2(both, b.get(), a.get()), w1(write, a.get()),
      w2(write, b.get());
  std::this_thread::sleep_for(300ms);
  stop = true;
  t1.join();
  t2.join();
  w1.join();
  w2.join();
}

}  // namespace
}  // namespace skein
