// InodeTable: the mount's synthetic inode numbers, their lookup counts, and how renames and
// removals move or detach the paths they stand for.
#include "inode_table.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace skein::client {
namespace {

TEST(InodeTable, RootIsInodeOneAtSlash) {
  InodeTable table;
  EXPECT_EQ(table.path_of(kRootInode), "/");
  EXPECT_EQ(table.find("/"), kRootInode);
}

TEST(InodeTable, LookupOfSamePathReturnsSameInodeAndCountsEachLookup) {
  InodeTable table;
  InodeRef first = table.lookup_add("/a");
  InodeRef second = table.lookup_add("/a");
  EXPECT_EQ(first.ino, second.ino);
  EXPECT_EQ(first.generation, second.generation);
  EXPECT_EQ(table.lookup_count(first.ino), 2u);
}

TEST(InodeTable, DifferentPathsGetDifferentNumbersNeverTheRoot) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  InodeNumber b = table.lookup_add("/b").ino;
  EXPECT_NE(a, b);
  EXPECT_NE(a, kRootInode);
  EXPECT_NE(b, kRootInode);
}

TEST(InodeTable, ForgettingAllLookupsDropsTheInode) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  table.lookup_add("/a");
  table.forget(a, 1);
  EXPECT_EQ(table.path_of(a), "/a");
  table.forget(a, 1);
  EXPECT_EQ(table.path_of(a), std::nullopt);
  EXPECT_EQ(table.find("/a"), std::nullopt);
  EXPECT_EQ(table.size(), 1u);  // only the root
}

TEST(InodeTable, ForgettingMoreThanCountedDropsTheInodeWithoutUnderflow) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  table.forget(a, 5);
  EXPECT_EQ(table.lookup_count(a), 0u);
  EXPECT_EQ(table.find("/a"), std::nullopt);
}

TEST(InodeTable, NumbersAreNotReusedAfterForget) {
  InodeTable table;
  InodeNumber old = table.lookup_add("/a").ino;
  table.forget(old, 1);
  InodeNumber fresh = table.lookup_add("/a").ino;
  EXPECT_NE(fresh, old);
}

TEST(InodeTable, APathKeepsItsFileNumberWhenTheKernelForgetsItsInode) {
  // st_ino stays the same across the kernel forgetting an inode (cp compares it before and after
  // its open); the inode number does not come back.
  InodeTable table;
  const InodeRef first = table.lookup_add("/d/f");
  EXPECT_EQ(first.file_id, first.ino);
  table.forget(first.ino, 1);
  const InodeRef again = table.lookup_add("/d/f");
  EXPECT_NE(again.ino, first.ino);
  EXPECT_EQ(again.file_id, first.file_id);
  EXPECT_EQ(table.file_id(again.ino), first.file_id);
  EXPECT_EQ(table.file_id_at("/d/f"), first.file_id);
  // Another path never gets it.
  const InodeRef other = table.lookup_add("/d/g");
  EXPECT_NE(other.file_id, first.file_id);
  EXPECT_EQ(table.file_id(12345), 12345u) << "unknown: the number itself";
}

// The file number an inode made at `path` gets, after which the kernel forgets it again.
uint64_t looked_up_and_forgotten(InodeTable& table, const std::string& path) {
  const InodeRef r = table.lookup_add(path);
  table.forget(r.ino, 1);
  return r.file_id;
}

TEST(InodeTable, AFileNumberIsDroppedWhenTheNameMayStandForAnotherFile) {
  InodeTable table;
  auto forgotten = [&](const std::string& path) { return looked_up_and_forgotten(table, path); };
  auto next_id = forgotten;
  // Removed through this mount (the file, or a directory above it).
  uint64_t id = forgotten("/a");
  table.unlink("/a");
  EXPECT_NE(next_id("/a"), id);
  id = forgotten("/d1/x");
  table.unlink("/d1");
  EXPECT_NE(next_id("/d1/x"), id);
  // The gateway said the name changed, or a subtree did.
  id = forgotten("/b");
  table.changed("/b", false);
  EXPECT_NE(next_id("/b"), id);
  id = forgotten("/d2/y");
  const uint64_t beside = forgotten("/d2z");
  table.changed("/d2", false);
  EXPECT_EQ(next_id("/d2/y"), id) << "only the name itself";
  table.changed("/d2", true);
  EXPECT_NE(next_id("/d2/y"), id);
  EXPECT_EQ(next_id("/d2z"), beside) << "a sibling whose name only starts the same";
}

TEST(InodeTable, FileNumbersFollowRenamesAndExchanges) {
  InodeTable table;
  auto forgotten = [&](const std::string& path) { return looked_up_and_forgotten(table, path); };
  const uint64_t moved = forgotten("/src/f"), replaced = forgotten("/dst/f");
  table.lookup_add("/src");  // the directory the kernel still holds
  table.rename("/src", "/dst");
  EXPECT_EQ(forgotten("/dst/f"), moved);
  EXPECT_NE(forgotten("/src/f"), moved);
  EXPECT_NE(forgotten("/dst/f"), replaced);
  const uint64_t at_a = forgotten("/a/x"), at_b = forgotten("/b/x");
  table.exchange("/a", "/b");
  EXPECT_EQ(forgotten("/b/x"), at_a);
  EXPECT_EQ(forgotten("/a/x"), at_b);
}

TEST(InodeTable, FileNumbersAreKeptForAtMostAHundredThousandPaths) {
  InodeTable table;
  const InodeRef oldest = table.lookup_add("/oldest");
  table.forget(oldest.ino, 1);
  for (int i = 0; i < 100'000; ++i) {
    const InodeRef r = table.lookup_add("/f" + std::to_string(i));
    table.forget(r.ino, 1);
  }
  EXPECT_NE(table.lookup_add("/oldest").file_id, oldest.file_id) << "the oldest went";
  const InodeRef newest = table.lookup_add("/f99999");
  EXPECT_NE(newest.ino, newest.file_id) << "the newest stayed";
}

TEST(InodeTable, RootIsNeverForgotten) {
  InodeTable table;
  table.forget(kRootInode, 100);
  EXPECT_EQ(table.path_of(kRootInode), "/");
}

TEST(InodeTable, ForgetOfUnknownInodeIsIgnored) {
  InodeTable table;
  table.forget(12345, 1);
  EXPECT_EQ(table.size(), 1u);
}

TEST(InodeTable, RenameMovesTheInodeAndItsWholeSubtree) {
  InodeTable table;
  InodeNumber dir = table.lookup_add("/a").ino;
  InodeNumber child = table.lookup_add("/a/x").ino;
  InodeNumber grandchild = table.lookup_add("/a/x/y").ino;
  table.rename("/a", "/b");
  EXPECT_EQ(table.path_of(dir), "/b");
  EXPECT_EQ(table.path_of(child), "/b/x");
  EXPECT_EQ(table.path_of(grandchild), "/b/x/y");
  EXPECT_EQ(table.find("/b/x/y"), grandchild);
  EXPECT_EQ(table.find("/a"), std::nullopt);
  EXPECT_EQ(table.find("/a/x"), std::nullopt);
}

TEST(InodeTable, RenameLeavesSiblingsSharingThePrefixAlone) {
  InodeTable table;
  table.lookup_add("/a");
  InodeNumber ab = table.lookup_add("/ab").ino;
  InodeNumber a_dash = table.lookup_add("/a-b/c").ino;
  table.rename("/a", "/z");
  EXPECT_EQ(table.path_of(ab), "/ab");
  EXPECT_EQ(table.path_of(a_dash), "/a-b/c");
}

TEST(InodeTable, RenameOverAnExistingNameDetachesTheReplacedInode) {
  InodeTable table;
  InodeNumber src = table.lookup_add("/src").ino;
  InodeNumber dst = table.lookup_add("/dst").ino;
  table.rename("/src", "/dst");
  EXPECT_EQ(table.find("/dst"), src);
  EXPECT_EQ(table.path_of(dst), std::nullopt);
  EXPECT_EQ(table.last_path_of(dst), "/dst");  // still usable by an open file
  EXPECT_EQ(table.lookup_count(dst), 1u);      // until the kernel forgets it
}

TEST(InodeTable, ForgettingADetachedInodeDoesNotDisturbItsReplacement) {
  InodeTable table;
  InodeNumber src = table.lookup_add("/src").ino;
  InodeNumber dst = table.lookup_add("/dst").ino;
  table.rename("/src", "/dst");
  table.forget(dst, 1);
  EXPECT_EQ(table.find("/dst"), src);
  EXPECT_EQ(table.path_of(src), "/dst");
}

TEST(InodeTable, RenameToANewDirectoryKeepsDeepPathsConsistent) {
  InodeTable table;
  InodeNumber f = table.lookup_add("/a/b/c/f").ino;
  table.rename("/a/b", "/x/y/b");
  EXPECT_EQ(table.path_of(f), "/x/y/b/c/f");
  EXPECT_EQ(table.find("/x/y/b/c/f"), f);
}

TEST(InodeTable, ExchangeSwapsTwoSubtrees) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  InodeNumber a_child = table.lookup_add("/a/1").ino;
  InodeNumber b = table.lookup_add("/b").ino;
  InodeNumber b_child = table.lookup_add("/b/2").ino;
  table.exchange("/a", "/b");
  EXPECT_EQ(table.path_of(a), "/b");
  EXPECT_EQ(table.path_of(a_child), "/b/1");
  EXPECT_EQ(table.path_of(b), "/a");
  EXPECT_EQ(table.path_of(b_child), "/a/2");
  EXPECT_EQ(table.find("/a"), b);
  EXPECT_EQ(table.find("/b"), a);
}

TEST(InodeTable, UnlinkDetachesTheInodeButKeepsItsNumberForOpenFiles) {
  InodeTable table;
  InodeNumber f = table.lookup_add("/f").ino;
  table.unlink("/f");
  EXPECT_EQ(table.path_of(f), std::nullopt);
  EXPECT_EQ(table.last_path_of(f), "/f");
  EXPECT_EQ(table.find("/f"), std::nullopt);
  InodeNumber recreated = table.lookup_add("/f").ino;
  EXPECT_NE(recreated, f);
  table.forget(f, 1);
  EXPECT_EQ(table.last_path_of(f), std::nullopt);
  EXPECT_EQ(table.find("/f"), recreated);
}

TEST(InodeTable, RemovingADirectoryDetachesWhatWasKnownBelowIt) {
  InodeTable table;
  InodeNumber stale = table.lookup_add("/d/stale").ino;
  table.unlink("/d");
  EXPECT_EQ(table.path_of(stale), std::nullopt);
  EXPECT_EQ(table.find("/d/stale"), std::nullopt);
}

TEST(InodeTable, UnlinkOfUnknownPathChangesNothing) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  table.unlink("/nothing");
  EXPECT_EQ(table.path_of(a), "/a");
  EXPECT_EQ(table.size(), 2u);
}

TEST(InodeTable, RootCannotBeRenamedOrUnlinked) {
  InodeTable table;
  table.rename("/", "/x");
  table.unlink("/");
  EXPECT_EQ(table.path_of(kRootInode), "/");
  EXPECT_EQ(table.find("/"), kRootInode);
}

TEST(InodeTable, ConcurrentLookupsAndForgetsBalanceOut) {
  InodeTable table;
  constexpr int kThreads = 4;
  constexpr int kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&table] {
      for (int i = 0; i < kRounds; ++i) {
        InodeNumber ino = table.lookup_add("/shared/" + std::to_string(i % 10)).ino;
        table.forget(ino, 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(table.size(), 1u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(table.find("/shared/" + std::to_string(i)), std::nullopt);
}

}  // namespace
}  // namespace skein::client
