// Quota counting: limits never passed, give-backs never below zero, one size per open path.
#include "jobs/quota.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace skein {
namespace {

TEST(Quota, TakesUpToTheLimitAndNoFurther) {
  Quota q(100, 3);
  EXPECT_TRUE(q.take_bytes(60));
  EXPECT_TRUE(q.take_bytes(40));
  EXPECT_FALSE(q.take_bytes(1));
  EXPECT_EQ(q.usage().bytes, 100u);
  EXPECT_FALSE(q.take_bytes(UINT64_MAX)) << "no overflow";
  EXPECT_TRUE(q.take_inodes(3));
  EXPECT_FALSE(q.take_inodes(1));
  q.give_bytes(30);
  EXPECT_TRUE(q.take_bytes(30));
  q.give_bytes(1000);
  EXPECT_EQ(q.usage().bytes, 0u) << "a give-back never goes below zero";
}

TEST(Quota, ConcurrentTakersNeverPassTheLimit) {
  Quota q(1000, 1000);
  std::vector<std::thread> ts;
  std::atomic<int> granted{0};
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 500; ++i)
        if (q.take_bytes(1)) ++granted;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(granted.load(), 1000);
  EXPECT_EQ(q.usage().bytes, 1000u);
}

TEST(Quota, EveryChangeBumpsTheGeneration) {
  Quota q(10, 10);
  auto g = q.generation();
  q.take_bytes(1);
  EXPECT_GT(q.generation(), g);
  g = q.generation();
  EXPECT_FALSE(q.take_bytes(100));
  EXPECT_EQ(q.generation(), g) << "a refusal changes nothing";
}

TEST(OpenSizes, HandlesOfOnePathShareOneCellThatFollowsRenames) {
  OpenSizes s;
  auto a = s.acquire("/d/f");
  auto b = s.acquire("/d/f");
  EXPECT_EQ(a, b);
  s.renamed("/d", "/e");
  EXPECT_EQ(s.find("/d/f"), nullptr);
  EXPECT_EQ(s.find("/e/f"), a);
  s.removed("/e/f");
  EXPECT_EQ(s.find("/e/f"), nullptr);
  a.reset();
  b.reset();
  EXPECT_NE(s.acquire("/e/f"), nullptr);
}

// A recount sets the usage only if nothing changed since it began: a change counted between its
// check and its setting would otherwise be lost.
TEST(Quota, ARecountSetsTheUsageOnlyIfNothingChangedSinceItBegan) {
  Quota q(100, 10, 50, 5);
  const uint64_t began = q.generation();
  ASSERT_TRUE(q.take_bytes(10));  // a write during the walk
  EXPECT_FALSE(q.set_used_if(began, 30, 3));
  EXPECT_EQ(q.usage().bytes, 60u);
  EXPECT_TRUE(q.set_used_if(q.generation(), 30, 3));
  EXPECT_EQ(q.usage().bytes, 30u);
  EXPECT_EQ(q.usage().inodes, 3u);
}

}  // namespace
}  // namespace skein
