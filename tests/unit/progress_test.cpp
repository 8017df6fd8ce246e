// Progress of copies as skeinctl and skein-mpi show it (common/include/skein/progress.hpp).
#include "skein/progress.hpp"

#include <gtest/gtest.h>

namespace skein {
namespace {

TEST(ProgressTest, SizesInBinaryUnits) {
  EXPECT_EQ(size_text(0), "0 B");
  EXPECT_EQ(size_text(1023), "1023 B");
  EXPECT_EQ(size_text(1024), "1.0 KiB");
  EXPECT_EQ(size_text(1536), "1.5 KiB");
  EXPECT_EQ(size_text(250675200), "239.1 MiB");
  EXPECT_EQ(size_text(2.0 * (1ull << 30)), "2.0 GiB");
  EXPECT_EQ(size_text(3.0 * (1ull << 50)), "3.0 PiB");
  EXPECT_EQ(size_text(4096.0 * (1ull << 50)), "4096.0 PiB");
}

TEST(ProgressTest, TheFractionGoesByBytesElseByItems) {
  EXPECT_DOUBLE_EQ(fraction_done(25, 100, 9, 10), 0.25);
  EXPECT_DOUBLE_EQ(fraction_done(0, 0, 3, 4), 0.75);  // empty files only
  EXPECT_DOUBLE_EQ(fraction_done(0, 0, 0, 0), 0.0);
  EXPECT_DOUBLE_EQ(fraction_done(120, 100, 0, 0), 1.0);  // a file that grew: never past the end
}

TEST(ProgressTest, ABarOfThirtyWithItsPercentage) {
  EXPECT_EQ(progress_bar(0), "[..............................]   0%");
  EXPECT_EQ(progress_bar(0.35), "[##########....................]  35%");
  EXPECT_EQ(progress_bar(1), "[##############################] 100%");
  EXPECT_EQ(progress_bar(2), progress_bar(1));
  EXPECT_EQ(progress_bar(-1), progress_bar(0));
}

}  // namespace
}  // namespace skein
