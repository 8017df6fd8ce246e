// PathEpochs: a path replaced (renamed over or away, removed) starts a new epoch for itself and
// everything below it, and for nothing else.
#include "backend/path_epochs.hpp"

#include <gtest/gtest.h>

#include <string>

namespace skein {
namespace {

TEST(PathEpochs, AReplacedPathAndWhatIsBelowItStartANewEpochAndNothingElse) {
  PathEpochs epochs;
  const uint64_t file = epochs.of("/exp/dir/file"), dir = epochs.of("/exp/dir");
  const uint64_t sibling = epochs.of("/exp/dirt"), other = epochs.of("/exp/other");
  epochs.replaced("/exp/dir/file");
  EXPECT_NE(epochs.of("/exp/dir/file"), file);
  EXPECT_EQ(epochs.of("/exp/dir"), dir);
  const uint64_t file_now = epochs.of("/exp/dir/file");
  epochs.replaced("/exp/dir");  // a directory renamed: every path below it
  EXPECT_NE(epochs.of("/exp/dir/file"), file_now);
  EXPECT_NE(epochs.of("/exp/dir/new/deeper"), dir);
  EXPECT_NE(epochs.of("/exp/dir"), dir);
  EXPECT_EQ(epochs.of("/exp/dirt"), sibling);
  EXPECT_EQ(epochs.of("/exp/other"), other);
  EXPECT_EQ(epochs.of("/exp/dir/file"), epochs.of("/exp/dir/file")) << "stable until replaced";
}

TEST(PathEpochs, PastItsLimitEveryPathStartsANewEpochTogether) {
  PathEpochs epochs;
  const uint64_t kept = epochs.of("/kept");
  for (std::size_t i = 0; i < PathEpochs::kMaxPaths; ++i)
    epochs.replaced("/gone/" + std::to_string(i));
  EXPECT_EQ(epochs.of("/kept"), kept);
  const uint64_t before = epochs.of("/gone/1");
  epochs.replaced("/one/more");  // past the limit: all of them forgotten at once
  EXPECT_NE(epochs.of("/kept"), kept) << "a path kept an epoch from before the limit";
  EXPECT_NE(epochs.of("/gone/1"), before);
  EXPECT_EQ(epochs.of("/kept"), epochs.of("/gone/1"));
}

}  // namespace
}  // namespace skein
