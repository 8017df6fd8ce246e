// PathEpochs: a path replaced (renamed over or away, removed) while files are open at it or below
// it starts a new epoch for itself and everything below it, and for nothing else; the watcher's
// echo of the gateway's own replacement (one report) changes nothing; what no open file needs is
// forgotten.
#include "backend/path_epochs.hpp"

#include <gtest/gtest.h>

namespace skein {
namespace {

TEST(PathEpochs, AReplacedPathAndWhatIsBelowItStartANewEpochAndNothingElse) {
  PathEpochs epochs;
  const uint64_t file = epochs.opened("/exp/dir/file");
  const uint64_t dir = epochs.of("/exp/dir"), sibling = epochs.of("/exp/dirt");
  epochs.replaced("/exp/dir/file", true);
  EXPECT_NE(epochs.of("/exp/dir/file"), file);
  EXPECT_EQ(epochs.of("/exp/dir"), dir);
  const uint64_t file_now = epochs.of("/exp/dir/file");
  epochs.replaced("/exp/dir", true);  // a directory renamed: every path below it
  EXPECT_NE(epochs.of("/exp/dir/file"), file_now);
  EXPECT_NE(epochs.of("/exp/dir/new/deeper"), dir);
  EXPECT_EQ(epochs.of("/exp/dirt"), sibling);
  EXPECT_EQ(epochs.of("/exp/dir/file"), epochs.of("/exp/dir/file")) << "stable until replaced";
}

TEST(PathEpochs, APathWithNothingOpenIsNotRememberedAndWhatIsClosedIsForgotten) {
  PathEpochs epochs;
  epochs.replaced("/nothing/open", true);
  EXPECT_EQ(epochs.of("/nothing/open"), 0u);
  EXPECT_EQ(epochs.opened("/f"), 0u);
  epochs.replaced("/f", true);
  const uint64_t moved = epochs.of("/f");
  EXPECT_NE(moved, 0u);
  EXPECT_EQ(epochs.opened("/f"), moved) << "a file opened after the replacement";
  epochs.closed("/f");
  EXPECT_EQ(epochs.of("/f"), moved) << "forgotten while a file is still open at it";
  epochs.closed("/f");
  EXPECT_EQ(epochs.of("/f"), 0u) << "kept after every file at it was closed";
}

TEST(PathEpochs, TheWatchersEchoOfTheGatewaysOwnReplacementChangesNothing) {
  PathEpochs epochs;
  (void)epochs.opened("/ckpt");  // the old checkpoint, still open
  epochs.expect_echo("/ckpt");   // mv ckpt ckpt.old through the gateway
  epochs.replaced("/ckpt", /*by_gateway=*/true);
  const uint64_t made = epochs.opened("/ckpt");    // the new checkpoint
  epochs.replaced("/ckpt", /*by_gateway=*/false);  // the watcher's report of that mv
  EXPECT_EQ(epochs.of("/ckpt"), made);
  (void)epochs.opened("/other");
  const uint64_t other = epochs.of("/other");
  epochs.replaced("/other", /*by_gateway=*/false);  // moved on the server
  EXPECT_NE(epochs.of("/other"), other);
}

// The echo is one report: a second one within the echo time (`mv new ckpt` on the server,
// after the gateway's own rename) is a replacement the gateway did not make.
TEST(PathEpochs, OnlyOneReportIsTakenForTheEcho) {
  PathEpochs epochs;
  (void)epochs.opened("/ckpt");
  epochs.expect_echo("/ckpt");
  epochs.replaced("/ckpt", true);
  const uint64_t made = epochs.opened("/ckpt");
  epochs.replaced("/ckpt", false);  // the echo
  ASSERT_EQ(epochs.of("/ckpt"), made);
  epochs.replaced("/ckpt", false);  // mv on the server, a moment later
  EXPECT_NE(epochs.of("/ckpt"), made);
}

// A change the server refused, or whose answer never came, expects no echo: the watcher's report
// of the path is someone else's change.
TEST(PathEpochs, AChangeThatFailedExpectsNoEcho) {
  PathEpochs epochs;
  const uint64_t opened = epochs.opened("/f");
  epochs.expect_echo("/f");  // rm f through the gateway, refused (EACCES)
  epochs.no_echo("/f");
  epochs.replaced("/f", false);  // replaced on the server
  EXPECT_NE(epochs.of("/f"), opened);
  // A report without a change by the gateway before it is never an echo either.
  const uint64_t now = epochs.of("/f");
  epochs.replaced("/f", false);
  EXPECT_NE(epochs.of("/f"), now);
}

TEST(PathEpochs, AUniqueEpochIsNoPathsEpoch) {
  PathEpochs epochs;
  (void)epochs.opened("/a");
  for (int i = 0; i < 100; ++i) epochs.replaced("/a", true);
  const uint64_t a = epochs.of("/a"), u1 = epochs.unique(), u2 = epochs.unique();
  EXPECT_NE(u1, a);
  EXPECT_NE(u1, u2);
  EXPECT_NE(u1, 0u);
}

}  // namespace
}  // namespace skein
