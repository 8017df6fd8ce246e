// Which connection a run of a file is read on (slot_for_run): one stream keeps every connection
// busy, and readers that split a file into equal parts do not all land on one connection.
#include <gtest/gtest.h>

#include <set>

#include "backend/remote_file.hpp"

namespace skein {
namespace {

TEST(SlotForRun, ConsecutiveRunsGoToDifferentConnections) {
  for (size_t slots : {2u, 3u, 4u, 8u}) {
    // Runs slots*m .. slots*m + slots-1 differ in their last digit only: every connection once.
    for (uint64_t m = 0; m < 500; ++m) {
      std::set<size_t> used;
      for (uint64_t r = slots * m; r < slots * (m + 1); ++r) used.insert(slot_for_run(r, slots));
      EXPECT_EQ(used.size(), slots) << "slots " << slots << ", runs from " << slots * m;
    }
    // A run and the next share a connection only where the carry runs through slots-1 digits
    // (or a multiple of that): with the default 4 connections or more, under 2% of the time.
    if (slots < 4) continue;
    int same = 0;
    for (uint64_t run = 0; run < 4096; ++run)
      same += slot_for_run(run, slots) == slot_for_run(run + 1, slots);
    EXPECT_LT(same, 4096 / 50) << "slots " << slots;
  }
}

TEST(SlotForRun, ReadersOfEqualPartsOfAFileUseDifferentConnections) {
  // skein-mpi stage's 64 MiB chunks of a large file are 16 runs of 4 MiB apart; four ranks read
  // four chunks at once, run by run in step.
  for (uint64_t first_chunk : {0u, 4u, 8u, 100u}) {
    for (uint64_t step = 0; step < 16; ++step) {
      std::set<size_t> used;
      for (uint64_t c = first_chunk; c < first_chunk + 4; ++c)
        used.insert(slot_for_run(16 * c + step, 4));
      EXPECT_EQ(used.size(), 4u) << "chunks from " << first_chunk << ", run " << step;
    }
  }
}

TEST(SlotForRun, OneConnectionTakesEverything) {
  EXPECT_EQ(slot_for_run(0, 1), 0u);
  EXPECT_EQ(slot_for_run(12345, 1), 0u);
  EXPECT_EQ(slot_for_run(12345, 0), 0u);
}

}  // namespace
}  // namespace skein
