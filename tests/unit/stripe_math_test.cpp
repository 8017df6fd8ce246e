// The stripe arithmetic of the striped layout: where a logical byte lives, how a range splits
// over the backends, and the logical size a set of part sizes stands for (and back).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "namespace/stripe_map.hpp"

namespace skein {
namespace {

constexpr uint64_t S = 4096;

TEST(StripeMap, StripeKLivesOnBackendKModWidthPackedDensely) {
  StripeMap m(S, 3);
  // Stripes 0..6 go to backends 0,1,2,0,1,2,0 at local stripes 0,0,0,1,1,1,2.
  for (uint64_t k = 0; k < 7; ++k) {
    EXPECT_EQ(m.backend_of(k * S), k % 3);
    EXPECT_EQ(m.backend_of(k * S + S - 1), k % 3);
    EXPECT_EQ(m.local_offset(k * S), (k / 3) * S);
    EXPECT_EQ(m.local_offset(k * S + 17), (k / 3) * S + 17);
  }
}

TEST(StripeMap, LogicalAndLocalOffsetsAreInverse) {
  for (uint32_t w : {1u, 2u, 3u, 5u}) {
    StripeMap m(S, w);
    for (uint64_t off :
         std::initializer_list<uint64_t>{0, 1, S - 1, S, S + 1, 7 * S + 5, 100 * S + S - 1}) {
      EXPECT_EQ(m.logical_offset(m.backend_of(off), m.local_offset(off)), off)
          << "width " << w << " offset " << off;
    }
  }
}

TEST(StripeMap, SegmentsCutAtStripeBoundariesAndCoverTheRange) {
  StripeMap m(S, 3);
  auto segs = m.segments(S - 10, 2 * S + 20);
  ASSERT_EQ(segs.size(), 4u);
  EXPECT_EQ(segs[0].backend, 0u);
  EXPECT_EQ(segs[0].logical_offset, S - 10);
  EXPECT_EQ(segs[0].length, 10u);
  EXPECT_EQ(segs[1].backend, 1u);
  EXPECT_EQ(segs[1].length, S);
  EXPECT_EQ(segs[2].backend, 2u);
  EXPECT_EQ(segs[2].length, S);
  EXPECT_EQ(segs[3].backend, 0u);
  EXPECT_EQ(segs[3].local_offset, S);
  EXPECT_EQ(segs[3].length, 10u);
  EXPECT_TRUE(m.segments(5, 0).empty());
}

TEST(StripeMap, EachBackendsShareOfARangeIsOneContiguousExtent) {
  StripeMap m(S, 3);
  // From the middle of stripe 1 to the middle of stripe 7.
  auto ext = m.extents(S + 100, 6 * S);
  ASSERT_EQ(ext.size(), 3u);
  // backend 1: stripes 1 (from 100), 4 and 7 (to 100): local S+100 .. 2S+S+100.
  EXPECT_EQ(ext[1].local_offset, 100u);
  EXPECT_EQ(ext[1].length, (S - 100) + S + 100);
  // backend 2: stripes 2 and 5, whole.
  EXPECT_EQ(ext[2].local_offset, 0u);
  EXPECT_EQ(ext[2].length, 2 * S);
  // backend 0: stripes 3 and 6, whole.
  EXPECT_EQ(ext[0].local_offset, S);
  EXPECT_EQ(ext[0].length, 2 * S);
}

TEST(StripeMap, ARangeInsideOneStripeTouchesOneBackend) {
  StripeMap m(S, 4);
  auto ext = m.extents(5 * S + 1, 100);
  for (uint32_t b = 0; b < 4; ++b) EXPECT_EQ(ext[b].length, b == 1 ? 100u : 0u);
  EXPECT_EQ(ext[1].local_offset, S + 1);
}

TEST(StripeMap, LogicalEndOfAPartIsOnePastItsLastByte) {
  StripeMap m(S, 3);
  EXPECT_EQ(m.logical_end(0, 0), 0u);
  EXPECT_EQ(m.logical_end(1, 0), 0u);
  EXPECT_EQ(m.logical_end(0, 1), 1u);
  EXPECT_EQ(m.logical_end(0, S), S);              // whole stripe 0
  EXPECT_EQ(m.logical_end(0, S + 1), 3 * S + 1);  // one byte of stripe 3
  EXPECT_EQ(m.logical_end(1, 5), S + 5);
  EXPECT_EQ(m.logical_end(2, 2 * S), 6 * S);  // stripes 2 and 5 whole
}

TEST(StripeMap, LogicalSizeIsTheLargestEndOverParts) {
  StripeMap m(S, 3);
  EXPECT_EQ(m.logical_size(std::vector<uint64_t>{0, 0, 0}), 0u);
  EXPECT_EQ(m.logical_size(std::vector<uint64_t>{S, S, 10}), 2 * S + 10);
  // A hole: only backend 2 holds data (stripe 5): the file is 6 stripes long.
  EXPECT_EQ(m.logical_size(std::vector<uint64_t>{0, 0, 2 * S}), 6 * S);
  // Backend 0 is ahead (stripe 3 started), the others have gaps before.
  EXPECT_EQ(m.logical_size(std::vector<uint64_t>{S + 7, 0, S}), 3 * S + 7);
  // Missing trailing entries count as empty parts.
  EXPECT_EQ(m.logical_size(std::vector<uint64_t>{S}), S);
}

TEST(StripeMap, LocalSizeGivesEachPartItsShareOfALogicalSize) {
  StripeMap m(S, 3);
  auto shares = [&](uint64_t size) {
    return std::vector<uint64_t>{m.local_size(0, size), m.local_size(1, size),
                                 m.local_size(2, size)};
  };
  EXPECT_EQ(shares(0), (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(shares(10), (std::vector<uint64_t>{10, 0, 0}));
  EXPECT_EQ(shares(S), (std::vector<uint64_t>{S, 0, 0}));
  EXPECT_EQ(shares(S + 1), (std::vector<uint64_t>{S, 1, 0}));
  EXPECT_EQ(shares(3 * S), (std::vector<uint64_t>{S, S, S}));
  EXPECT_EQ(shares(4 * S + 5), (std::vector<uint64_t>{S + S, S + 5, S}));
  EXPECT_EQ(shares(7 * S), (std::vector<uint64_t>{3 * S, 2 * S, 2 * S}));
}

TEST(StripeMap, PartSharesAddUpAndGiveBackTheLogicalSize) {
  // Truncation sets every part to its share; the size must read back exactly, at any size.
  std::mt19937_64 rng(3);
  for (uint32_t w : {1u, 2u, 3u, 4u, 7u}) {
    for (uint64_t stripe : std::initializer_list<uint64_t>{1, 4096, 1 << 20}) {
      StripeMap m(stripe, w);
      for (int i = 0; i < 500; ++i) {
        uint64_t size = i < 50 ? static_cast<uint64_t>(i) * stripe / 3 : rng() % (40 * stripe * w);
        std::vector<uint64_t> parts(w);
        uint64_t sum = 0;
        for (uint32_t b = 0; b < w; ++b) sum += parts[b] = m.local_size(b, size);
        ASSERT_EQ(sum, size) << "w " << w << " S " << stripe << " size " << size;
        ASSERT_EQ(m.logical_size(parts), size) << "w " << w << " S " << stripe << " size " << size;
      }
    }
  }
}

TEST(StripeMap, ExtentsAgreeWithAByteByByteModel) {
  // Every byte of a random range, mapped one by one, lands inside its backend's extent at the
  // place the extent says.
  std::mt19937_64 rng(11);
  for (uint32_t w : {1u, 2u, 3u, 5u}) {
    const uint64_t stripe = 64;
    StripeMap m(stripe, w);
    for (int i = 0; i < 200; ++i) {
      uint64_t off = rng() % 2000, len = rng() % 700;
      auto ext = m.extents(off, len);
      std::vector<uint64_t> count(w, 0);
      for (uint64_t x = off; x < off + len; ++x) {
        uint32_t b = m.backend_of(x);
        uint64_t local = m.local_offset(x);
        ASSERT_GE(local, ext[b].local_offset);
        ASSERT_LT(local, ext[b].local_offset + ext[b].length);
        ++count[b];
      }
      for (uint32_t b = 0; b < w; ++b) ASSERT_EQ(count[b], ext[b].length);
    }
  }
}

}  // namespace
}  // namespace skein
