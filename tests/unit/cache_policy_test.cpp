// The client's coherence bookkeeping without a kernel: cache lifetimes by Watch stream state,
// page-cache keeping across opens, silly-rename open counts, and the names the inode table hands
// out for invalidation.
#include "cache_policy.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "inode_table.hpp"
#include "open_inodes.hpp"

namespace skein::client {
namespace {

// A policy with a 60 s cache TTL and a 1 s safe TTL, its Watch stream healthy.
struct HealthyPolicy : CachePolicy {
  HealthyPolicy() : CachePolicy({/*cache_ttl=*/60, /*safe_ttl=*/1, Options::KnowNames::kAlways}) {
    set_healthy(true);
  }
};

TEST(CachePolicy, ShortLifetimesUntilTheStreamIsHealthyThenLongOnes) {
  CachePolicy policy({60, 1});
  EXPECT_EQ(policy.timeout(policy.ticket()), 1);
  EXPECT_EQ(policy.current_timeout(), 1);
  policy.set_healthy(true);
  EXPECT_EQ(policy.timeout(policy.ticket()), 60);
  EXPECT_EQ(policy.current_timeout(), 60);
  policy.set_healthy(false);
  EXPECT_EQ(policy.timeout(policy.ticket()), 1);
}

TEST(CachePolicy, TheOwnerAFileWasMadeWithIsForgottenWhenAnotherChangesIt) {
  HealthyPolicy policy;
  EXPECT_FALSE(policy.made_owner(5));
  policy.made_file(5, 1000);
  policy.made_file(6, 0);
  policy.wrote(5);  // this mount's own changes keep it: the attributes then show the owner
  EXPECT_EQ(policy.made_owner(5), 1000u);
  policy.invalidating(5);  // another mount's or the server's change
  EXPECT_FALSE(policy.made_owner(5));
  EXPECT_EQ(policy.made_owner(6), 0u);
  policy.invalidating_all();
  EXPECT_FALSE(policy.made_owner(6));
}

TEST(CachePolicy, ReplyOverlappingAnInvalidationIsNotCached) {
  HealthyPolicy policy;
  auto ticket = policy.ticket();
  policy.invalidating();
  EXPECT_EQ(policy.timeout(ticket), 0);
  EXPECT_EQ(policy.timeout(policy.ticket()), 60);
}

TEST(CachePolicy, ReplyFetchedBeforeTheSubscriptionGetsTheShortLifetime) {
  CachePolicy policy({60, 1});
  auto before = policy.ticket();
  policy.set_healthy(true);
  EXPECT_EQ(policy.timeout(before), 1);
}

TEST(CachePolicy, ReplyOverlappingTheLossOfTheStreamGetsTheShortLifetime) {
  HealthyPolicy policy;
  auto ticket = policy.ticket();
  policy.set_healthy(false);
  EXPECT_EQ(policy.timeout(ticket), 1);
}

TEST(CachePolicy, ListingKeptUntilAnInvalidationTouchesTheDirectory) {
  HealthyPolicy policy;
  EXPECT_FALSE(policy.keep_listing(5));  // never listed
  policy.listed(policy.ticket(), 5);
  policy.listed(policy.ticket(), 6);
  EXPECT_TRUE(policy.keep_listing(5));
  policy.invalidating(5);  // an entry in it, or the directory itself
  EXPECT_FALSE(policy.keep_listing(5));
  EXPECT_TRUE(policy.keep_listing(6));
  policy.invalidating_all();
  EXPECT_FALSE(policy.keep_listing(6));
}

TEST(CachePolicy, ListingFetchedAcrossAnInvalidationOrInSafeModeIsNotKept) {
  HealthyPolicy policy;
  auto ticket = policy.ticket();
  policy.invalidating();
  policy.listed(ticket, 5);
  EXPECT_FALSE(policy.keep_listing(5));
  policy.listed(policy.ticket(), 5);
  policy.set_healthy(false);
  EXPECT_FALSE(policy.keep_listing(5));
  EXPECT_FALSE(policy.may_cache_listing());
}

TEST(CachePolicy, DirectoryAttributesAreKeptUntilSomethingTouchesTheDirectory) {
  HealthyPolicy policy;
  const FileAttr dir{.mode = 040755, .size = 4096, .mtime_ns = 42};
  const FileAttr file{.mode = 0100644, .size = 10, .mtime_ns = 42};
  policy.sent_attrs(3, dir, policy.ticket());
  policy.sent_attrs(4, file, policy.ticket());
  auto kept = policy.dir_attrs(3);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->first.mtime_ns, 42);
  EXPECT_EQ(kept->second, 60);
  EXPECT_TRUE(policy.dir_attrs(3).has_value()) << "kept for every getattr, not just one";
  EXPECT_FALSE(policy.dir_attrs(4).has_value()) << "files are always asked (writes change them)";
  policy.dir_changed(3);  // this mount created or removed an entry in it
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
  policy.sent_attrs(3, dir, policy.ticket());
  policy.invalidating(3);  // another mount changed it, or an entry in it
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
  policy.sent_attrs(3, dir, policy.ticket());
  policy.set_healthy(false);
  EXPECT_FALSE(policy.dir_attrs(3).has_value()) << "never in safe mode";
}

TEST(CachePolicy, DirectoryAttributesFetchedAcrossAnInvalidationAreNotKept) {
  HealthyPolicy policy;
  const FileAttr dir{.mode = 040755};
  auto ticket = policy.ticket();
  policy.invalidating();
  policy.sent_attrs(3, dir, ticket);
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
}

TEST(CachePolicy, PostOpAttributesReplaceTheKeptOnesUnlessAnotherChangeOfTheDirectoryBegan) {
  HealthyPolicy policy;
  const FileAttr before{.mode = 040755, .mtime_ns = 1};
  const FileAttr after{.mode = 040755, .mtime_ns = 2};
  policy.sent_attrs(3, before, policy.ticket());
  policy.sent_attrs(4, before, policy.ticket());
  auto create = policy.begin_mutation(3);
  policy.post_op_attrs(3, after, create);
  ASSERT_TRUE(policy.dir_attrs(3).has_value());
  EXPECT_EQ(policy.dir_attrs(3)->first.mtime_ns, 2);
  // Two creates in the directory in flight at once: the first reply may predate the second.
  auto first = policy.begin_mutation(3);
  (void)policy.begin_mutation(3);
  policy.post_op_attrs(3, after, first);
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
  // A change of the directory itself (setattr) meanwhile counts too.
  policy.sent_attrs(3, before, policy.ticket());
  create = policy.begin_mutation(3);
  (void)policy.begin_mutation(3);
  policy.post_op_attrs(3, after, create);
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
  // A change in another directory does not: two processes creating or removing files in
  // directories of their own each keep their post-op attributes.
  policy.sent_attrs(3, before, policy.ticket());
  create = policy.begin_mutation(3);
  auto elsewhere = policy.begin_mutation(4);
  policy.post_op_attrs(3, after, create);
  policy.post_op_attrs(4, after, elsewhere);
  ASSERT_TRUE(policy.dir_attrs(3).has_value());
  EXPECT_EQ(policy.dir_attrs(3)->first.mtime_ns, 2);
  ASSERT_TRUE(policy.dir_attrs(4).has_value());
  EXPECT_EQ(policy.dir_attrs(4)->first.mtime_ns, 2);
  // A change that may touch any directory (a rename) does.
  policy.sent_attrs(3, before, policy.ticket());
  create = policy.begin_mutation(3);
  (void)policy.begin_mutation();
  policy.post_op_attrs(3, after, create);
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
  // Attributes of another directory than the change's are not taken for it.
  policy.sent_attrs(4, before, policy.ticket());
  create = policy.begin_mutation(3);
  policy.post_op_attrs(4, after, create);
  EXPECT_FALSE(policy.dir_attrs(4).has_value());
  // A directory the mount held nothing of when the change began: its changes were not counted.
  create = policy.begin_mutation(9);
  policy.sent_attrs(9, before, policy.ticket());
  policy.post_op_attrs(9, after, create);
  EXPECT_FALSE(policy.dir_attrs(9).has_value());
  // An invalidation of the directory while the create was on its way.
  policy.sent_attrs(3, before, policy.ticket());
  create = policy.begin_mutation(3);
  policy.invalidating();
  policy.invalidating(3);
  policy.sent_attrs(3, before, policy.ticket());  // the kernel asked again meanwhile
  policy.post_op_attrs(3, after, create);
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
  // One of another inode does not spoil it, as it would not an open's reply.
  create = policy.begin_mutation(3);
  policy.invalidating();
  policy.invalidating(5);
  policy.post_op_attrs(3, after, create);
  ASSERT_TRUE(policy.dir_attrs(3).has_value());
  EXPECT_EQ(policy.dir_attrs(3)->first.mtime_ns, 2);
  // Nor does a loss of the stream while it was on its way go unnoticed.
  policy.sent_attrs(3, before, policy.ticket());
  create = policy.begin_mutation(3);
  policy.set_healthy(false);
  policy.set_healthy(true);
  policy.post_op_attrs(3, after, create);
  EXPECT_FALSE(policy.dir_attrs(3).has_value());
}

TEST(CachePolicy, PagesKeptOnlyWhenTheFileIsAsTheLastOpenSawIt) {
  HealthyPolicy policy;
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);  // first open
  EXPECT_TRUE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 2000, 10).keep_cache);  // mtime changed
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 2000, 11).keep_cache);  // size changed
  EXPECT_TRUE(policy.opened(policy.ticket(), 7, 2000, 11).keep_cache);
}

TEST(CachePolicy, OpenMatchesOnlyTheVersionTheLastOpenSawUntilAnInvalidation) {
  HealthyPolicy policy;
  EXPECT_FALSE(policy.open_matches(7, 1000, 10));  // never opened
  policy.opened(policy.ticket(), 7, 1000, 10);
  EXPECT_TRUE(policy.open_matches(7, 1000, 10));
  EXPECT_FALSE(policy.open_matches(7, 1001, 10));
  EXPECT_FALSE(policy.open_matches(7, 1000, 11));
  policy.invalidating(7);
  EXPECT_FALSE(policy.open_matches(7, 1000, 10));
  // An open that overlapped an invalidation is no basis either.
  auto t = policy.ticket();
  policy.invalidating(7);
  policy.opened(t, 7, 1000, 10);
  EXPECT_FALSE(policy.open_matches(7, 1000, 10));
  policy.opened(policy.ticket(), 7, 1000, 10);
  EXPECT_TRUE(policy.open_matches(7, 1000, 10));
  policy.set_healthy(false);
  EXPECT_FALSE(policy.open_matches(7, 1000, 10));
}

// The mount hears of no invalidation for its own writes and truncations: they spoil the version
// its last open saw as much as another mount's change would, until it opens the file again.
TEST(CachePolicy, OpenMatchesNothingAfterAWriteOfThisMount) {
  HealthyPolicy policy;
  policy.opened(policy.ticket(), 7, 1000, 10);
  ASSERT_TRUE(policy.open_matches(7, 1000, 10));
  policy.wrote(7);
  EXPECT_FALSE(policy.open_matches(7, 1000, 10));
  policy.wrote(8);
  policy.opened(policy.ticket(), 7, 1000, 10);
  EXPECT_TRUE(policy.open_matches(7, 1000, 10)) << "another file's write spoils nothing";
}

TEST(CachePolicy, PagesNeverKeptInSafeMode) {
  CachePolicy policy({60, 1});
  policy.opened(policy.ticket(), 7, 1000, 10);
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
}

TEST(CachePolicy, InvalidationForgetsWhatTheLastOpenSaw) {
  HealthyPolicy policy;
  policy.opened(policy.ticket(), 7, 1000, 10);
  policy.invalidating(7);
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
  policy.invalidating_all();
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
}

TEST(CachePolicy, OpenOverlappingAnInvalidationKeepsNothingNowOrNextTime) {
  HealthyPolicy policy;
  policy.opened(policy.ticket(), 7, 1000, 10);
  auto ticket = policy.ticket();
  policy.invalidating();
  policy.invalidating(7);
  EXPECT_FALSE(policy.opened(ticket, 7, 1000, 10).keep_cache);
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
  EXPECT_TRUE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
  // Recorded by an open that overlapped the invalidation, the version is no basis either.
  ticket = policy.ticket();
  policy.invalidating(7);
  policy.opened(ticket, 7, 1000, 10);
  EXPECT_FALSE(policy.open_matches(7, 1000, 10));
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).keep_cache);
}

// On a cluster where other mounts write all the time, invalidations of other files arrive during
// nearly every open; they say nothing about this file's pages.
TEST(CachePolicy, OpenOverlappingInvalidationsOfOtherFilesKeepsThePages) {
  HealthyPolicy policy;
  policy.opened(policy.ticket(), 7, 1000, 10);
  auto ticket = policy.ticket();
  policy.invalidating();  // a batch of invalidations begins
  policy.invalidating(8);
  policy.invalidating(9);
  EXPECT_TRUE(policy.opened(ticket, 7, 1000, 10).keep_cache);
  EXPECT_TRUE(policy.open_matches(7, 1000, 10));
  // ... but not the entries and attributes replied meanwhile (a lookup's path may be new).
  EXPECT_EQ(policy.timeout(ticket), 0.0);
}

TEST(CachePolicy, OpenOverlappingADropOfEverythingOrOfTheStreamKeepsNoPages) {
  HealthyPolicy policy;
  policy.opened(policy.ticket(), 7, 1000, 10);
  auto ticket = policy.ticket();
  policy.invalidating_all();
  EXPECT_FALSE(policy.opened(ticket, 7, 1000, 10).keep_cache);

  policy.opened(policy.ticket(), 7, 1000, 10);
  ticket = policy.ticket();
  policy.set_healthy(false);
  policy.set_healthy(true);
  EXPECT_FALSE(policy.opened(ticket, 7, 1000, 10).keep_cache);

  policy.opened(policy.ticket(), 7, 1000, 10);
  ticket = policy.ticket();
  policy.set_servers_watched(true);
  EXPECT_FALSE(policy.opened(ticket, 7, 1000, 10).keep_cache);
}

TEST(CachePolicy, OpenOlderThanTheInvalidationsRememberedKeepsNoPages) {
  HealthyPolicy policy;
  policy.opened(policy.ticket(), 7, 1000, 10);
  auto ticket = policy.ticket();
  // More invalidations of other inodes than are remembered: one of 7 may have been among them.
  for (InodeNumber i = 100; i < 100 + 2000; ++i) policy.invalidating(i);
  EXPECT_FALSE(policy.opened(ticket, 7, 1000, 10).keep_cache);
  policy.opened(policy.ticket(), 7, 1000, 10);
  ticket = policy.ticket();
  for (InodeNumber i = 100; i < 100 + 500; ++i) policy.invalidating(i);
  EXPECT_TRUE(policy.opened(ticket, 7, 1000, 10).keep_cache);
}

TEST(CachePolicy, OpenAsksForAttributeRefreshWhenTheKernelWasToldOtherwise) {
  HealthyPolicy policy;
  policy.sent_attrs(7, FileAttr{.size = 10, .mtime_ns = 1000}, policy.ticket());
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 10).refresh_attrs);
  EXPECT_TRUE(policy.opened(policy.ticket(), 7, 1000, 12).refresh_attrs);  // changed on a server
  // Until the kernel is told again, every open asks.
  EXPECT_TRUE(policy.opened(policy.ticket(), 7, 1000, 12).refresh_attrs);
  policy.sent_attrs(7, FileAttr{.size = 12, .mtime_ns = 1000}, policy.ticket());
  EXPECT_FALSE(policy.opened(policy.ticket(), 7, 1000, 12).refresh_attrs);
  policy.forget(7);
  EXPECT_TRUE(policy.opened(policy.ticket(), 7, 1000, 12).refresh_attrs);
}

TEST(CachePolicy, FileAttributesAreCurrentUntilAnInvalidationOrAChangeOfThisMount) {
  HealthyPolicy policy;
  policy.set_servers_watched(true);
  const FileAttr file{.mode = 0100644, .size = 10, .mtime_ns = 42};
  const FileAttr dir{.mode = 040755, .size = 4096, .mtime_ns = 42};
  EXPECT_FALSE(policy.current_attrs(7).has_value()) << "never told";
  policy.sent_attrs(7, file, policy.ticket());
  policy.sent_attrs(3, dir, policy.ticket());
  ASSERT_TRUE(policy.current_attrs(7).has_value());
  EXPECT_EQ(policy.current_attrs(7)->size, 10u);
  EXPECT_FALSE(policy.current_attrs(3).has_value()) << "directories have dir_attrs";
  policy.wrote(7);  // this mount writes it: size and mtime move
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  policy.sent_attrs(7, file, policy.ticket());
  policy.invalidating(7);  // another mount changed it
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  policy.sent_attrs(7, file, policy.ticket());
  policy.invalidating_all();
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  // Fetched across an invalidation of anything: not known to be current.
  auto ticket = policy.ticket();
  policy.invalidating();
  policy.sent_attrs(7, file, ticket);
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  // An open that finds the file otherwise than the kernel was told.
  policy.sent_attrs(7, file, policy.ticket());
  policy.opened(policy.ticket(), 7, 43, 10);
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  policy.sent_attrs(7, file, policy.ticket());
  policy.set_healthy(false);
  EXPECT_FALSE(policy.current_attrs(7).has_value()) << "never in safe mode";
  policy.set_healthy(true);
  policy.set_servers_watched(true);
  policy.sent_attrs(7, file, policy.ticket());
  EXPECT_TRUE(policy.current_attrs(7).has_value());
  policy.forget(7);
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  // Kept attributes handed to the kernel again (MountSession's getattr and lookup) go with a
  // ticket taken before they were read: an invalidation between the read and the send keeps
  // them from being current again.
  policy.sent_attrs(7, file, policy.ticket());
  ticket = policy.ticket();
  const auto kept = policy.current_attrs(7);
  ASSERT_TRUE(kept.has_value());
  policy.invalidating(7);
  policy.sent_attrs(7, *kept, ticket);
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  EXPECT_EQ(policy.timeout(ticket), 0.0);
}

// A small file this mount wrote whole (an echo-style create): its content is read back without a
// call while its attributes stay current and of that version, and is dropped by every change.
TEST(CachePolicy, AFileWrittenWholeIsKeptWhileItsAttributesAreCurrent) {
  HealthyPolicy policy;
  policy.set_servers_watched(true);
  const FileAttr file{.mode = 0100644, .size = 5, .mtime_ns = 42};
  const std::string hello = "hello";
  auto write_whole = [&](InodeNumber ino,
                         const FileAttr& attr = {.mode = 0100644, .size = 5, .mtime_ns = 42}) {
    policy.wrote(ino);
    auto ticket = policy.ticket();
    policy.wrote(ino);
    policy.wrote_whole(ino, attr, ticket, policy.writes(ino), hello);
  };
  write_whole(7);
  ASSERT_TRUE(policy.whole_content(7));
  EXPECT_EQ(*policy.whole_content(7), "hello");
  ASSERT_TRUE(policy.current_attrs(7).has_value()) << "its attributes are current too";
  EXPECT_EQ(policy.current_attrs(7)->mtime_ns, 42);

  policy.wrote(7);  // written again
  EXPECT_FALSE(policy.whole_content(7));
  write_whole(7);
  policy.invalidating(7);  // changed through another mount or on the server
  EXPECT_FALSE(policy.whole_content(7));
  write_whole(7);
  policy.invalidating_all();
  EXPECT_FALSE(policy.whole_content(7));
  write_whole(7);
  policy.forget(7);
  EXPECT_FALSE(policy.whole_content(7));
  write_whole(7);
  policy.sent_attrs(7, FileAttr{.mode = 0100644, .size = 5, .mtime_ns = 43}, policy.ticket());
  EXPECT_FALSE(policy.whole_content(7)) << "another version";
  write_whole(7);
  policy.set_healthy(false);
  EXPECT_FALSE(policy.whole_content(7)) << "never in safe mode";
  policy.set_healthy(true);
  policy.set_servers_watched(true);

  // Not kept: a size other than the bytes written (the file was not empty), an invalidation of
  // the file while the write was on its way, a write of this mount meanwhile.
  write_whole(8, FileAttr{.mode = 0100644, .size = 9, .mtime_ns = 42});
  EXPECT_FALSE(policy.whole_content(8));
  auto ticket = policy.ticket();
  policy.invalidating(8);
  policy.wrote_whole(8, file, ticket, policy.writes(8), hello);
  EXPECT_FALSE(policy.whole_content(8));
  ticket = policy.ticket();
  const uint64_t writes = policy.writes(8);
  policy.wrote(8);
  policy.wrote_whole(8, file, ticket, writes, hello);
  EXPECT_FALSE(policy.whole_content(8));

  // At most kContentBytes across the mount, the oldest dropped first.
  const std::string big(CachePolicy::kContentFileBytes, 'x');
  const FileAttr big_attr{.mode = 0100644, .size = big.size(), .mtime_ns = 42};
  const uint64_t fit = CachePolicy::kContentBytes / CachePolicy::kContentFileBytes;
  for (InodeNumber ino = 100; ino < 100 + fit + 1; ++ino) {
    auto t = policy.ticket();
    policy.wrote_whole(ino, big_attr, t, policy.writes(ino), big);
  }
  EXPECT_FALSE(policy.whole_content(100)) << "the oldest";
  EXPECT_TRUE(policy.whole_content(101));
  EXPECT_TRUE(policy.whole_content(100 + fit));
  const std::string larger(CachePolicy::kContentFileBytes + 1, 'x');
  auto t = policy.ticket();
  policy.wrote_whole(9, FileAttr{.mode = 0100644, .size = larger.size(), .mtime_ns = 42}, t,
                     policy.writes(9), larger);
  EXPECT_FALSE(policy.whole_content(9)) << "larger files are not kept";
  EXPECT_TRUE(policy.current_attrs(9).has_value()) << "their attributes are";
}

// Without remote watchers a server's change reaches the mount only in the attributes the next
// open fetches (close-to-open): nothing is current then, and what was fetched then stays stale
// once the servers are watched again.
// One small file kept while others are written whole and dropped again, over and over (a loop
// of creates and removes): what the mount remembers of them stays bounded.
TEST(CachePolicy, ContentsWrittenAndDroppedLeaveNothingBehind) {
  HealthyPolicy policy;
  policy.set_servers_watched(true);
  const FileAttr attr{.mode = 0100644, .size = 5, .mtime_ns = 42};
  auto write_whole = [&](InodeNumber ino) {
    policy.wrote(ino);
    auto ticket = policy.ticket();
    policy.wrote(ino);
    policy.wrote_whole(ino, attr, ticket, policy.writes(ino), "hello");
  };
  write_whole(7);
  for (InodeNumber ino = 100; ino < 100100; ++ino) {
    write_whole(ino);
    policy.forget(ino);  // removed, and the kernel let go of it
  }
  ASSERT_TRUE(policy.whole_content(7));
  EXPECT_LT(policy.content_order_size(), 200u);
}

TEST(CachePolicy, FileAttributesAreCurrentOnlyWhileTheServersAreWatched) {
  HealthyPolicy policy;
  const FileAttr file{.mode = 0100644, .size = 10, .mtime_ns = 42};
  policy.sent_attrs(7, file, policy.ticket());
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  policy.set_servers_watched(true);
  EXPECT_FALSE(policy.current_attrs(7).has_value()) << "fetched while unwatched";
  auto ticket = policy.ticket();
  policy.set_servers_watched(false);
  policy.set_servers_watched(true);
  policy.sent_attrs(7, file, ticket);
  EXPECT_FALSE(policy.current_attrs(7).has_value()) << "fetched across a time unwatched";
  policy.sent_attrs(7, file, policy.ticket());
  EXPECT_TRUE(policy.current_attrs(7).has_value());
  policy.set_servers_watched(false);
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  policy.set_servers_watched(true);
  EXPECT_FALSE(policy.current_attrs(7).has_value());
  policy.sent_attrs(7, file, policy.ticket());
  policy.set_healthy(false);
  policy.set_healthy(true);
  EXPECT_FALSE(policy.current_attrs(7).has_value()) << "a new stream tells again";
}

TEST(CachePolicy, FileAttributesAreNotKeptWithoutDeferredOpen) {
  CachePolicy policy({60, 1, CachePolicy::Options::KnowNames::kNever, /*deferred_open=*/false});
  policy.set_healthy(true);
  policy.set_servers_watched(true);
  policy.sent_attrs(7, FileAttr{.mode = 0100644, .size = 10}, policy.ticket());
  EXPECT_FALSE(policy.current_attrs(7).has_value());
}

TEST(CachePolicy, KnownNamesAnswerAbsentNamesAndFollowThisMountsChanges) {
  HealthyPolicy policy;
  const InodeNumber dir = 7;
  EXPECT_FALSE(policy.known_absent(dir, "a")) << "nothing known yet";
  policy.names_known(dir, policy.ticket(), policy.names_changes(dir), {"a", "b"});
  EXPECT_FALSE(policy.known_absent(dir, "a"));
  EXPECT_TRUE(policy.known_absent(dir, "c"));
  policy.name_added(dir, "c");
  EXPECT_FALSE(policy.known_absent(dir, "c"));
  policy.name_removed(dir, "a");
  EXPECT_TRUE(policy.known_absent(dir, "a"));
  policy.names_unknown(dir);
  EXPECT_FALSE(policy.known_absent(dir, "a"));
}

TEST(CachePolicy, TheSecondMissInADirectoryAsksForItsNames) {
  HealthyPolicy policy;
  EXPECT_FALSE(policy.missed(7));
  EXPECT_TRUE(policy.missed(7));
  EXPECT_FALSE(policy.missed(7)) << "a listing that was not recorded: not at every miss";
  EXPECT_TRUE(policy.missed(7));
  policy.names_known(7, policy.ticket(), policy.names_changes(7), {});
  EXPECT_FALSE(policy.missed(7)) << "names known: nothing to learn";
  policy.invalidating(7);
  EXPECT_FALSE(policy.missed(7));
  EXPECT_TRUE(policy.missed(7));
  CachePolicy unhealthy({60, 1, CachePolicy::Options::KnowNames::kAlways});
  EXPECT_FALSE(unhealthy.missed(7));
  EXPECT_FALSE(unhealthy.missed(7));
}

// By default names are known only while every change on the servers is reported: a name made
// on a server then reaches the mount within the watcher's delay.
TEST(CachePolicy, NamesAreKnownOnlyWhileTheServersAreWatchedUnlessAskedOtherwise) {
  CachePolicy policy({60, 1});
  policy.set_healthy(true);
  EXPECT_FALSE(policy.missed(7));
  EXPECT_FALSE(policy.missed(7));
  policy.names_known(7, policy.ticket(), policy.names_changes(7), {});
  EXPECT_FALSE(policy.known_absent(7, "x")) << "servers not watched";
  policy.set_servers_watched(true);
  EXPECT_FALSE(policy.missed(7));
  EXPECT_TRUE(policy.missed(7));
  policy.names_known(7, policy.ticket(), policy.names_changes(7), {});
  EXPECT_TRUE(policy.known_absent(7, "x"));
  policy.set_servers_watched(false);
  EXPECT_FALSE(policy.known_absent(7, "x")) << "not used while unwatched";
  policy.set_servers_watched(true);
  EXPECT_FALSE(policy.known_absent(7, "x")) << "a name may have come meanwhile";

  CachePolicy never({60, 1, CachePolicy::Options::KnowNames::kNever});
  never.set_healthy(true);
  never.set_servers_watched(true);
  EXPECT_FALSE(never.missed(7));
  EXPECT_FALSE(never.missed(7));
  never.names_known(7, never.ticket(), never.names_changes(7), {});
  EXPECT_FALSE(never.known_absent(7, "x"));
}

TEST(CachePolicy, KnownNamesGoWithAnInvalidationOfTheDirectoryOrTheStream) {
  HealthyPolicy policy;
  const InodeNumber dir = 7, other = 8;
  auto know = [&](InodeNumber d) {
    policy.names_known(d, policy.ticket(), policy.names_changes(d), {});
  };
  know(dir);
  know(other);
  policy.invalidating(dir);  // another mount made a name in it
  EXPECT_FALSE(policy.known_absent(dir, "x"));
  EXPECT_TRUE(policy.known_absent(other, "x")) << "an invalidation of another directory";
  policy.set_healthy(false);
  EXPECT_FALSE(policy.known_absent(other, "x")) << "safe mode trusts nothing";
  policy.set_healthy(true);
  know(dir);
  policy.invalidating_all();
  EXPECT_FALSE(policy.known_absent(dir, "x"));
  know(dir);
  policy.forget(dir);
  EXPECT_FALSE(policy.known_absent(dir, "x"));
}

TEST(CachePolicy, NamesFetchedAcrossAnInvalidationOrAChangeOfThisMountAreNotKept) {
  HealthyPolicy policy;
  const InodeNumber dir = 7;
  auto t = policy.ticket();
  auto m = policy.names_changes(dir);
  policy.invalidating();  // the listing may predate a change it announced
  policy.names_known(dir, t, m, {});
  EXPECT_FALSE(policy.known_absent(dir, "x"));
  t = policy.ticket();
  m = policy.names_changes(dir);
  policy.name_added(dir, "x");  // a create of this mount, done while the listing was in flight
  policy.names_known(dir, t, m, {});
  EXPECT_FALSE(policy.known_absent(dir, "x"));
  // A change of this mount in another directory does not matter.
  t = policy.ticket();
  m = policy.names_changes(dir);
  policy.name_added(dir + 1, "y");
  policy.names_known(dir, t, m, {"x"});
  EXPECT_TRUE(policy.known_absent(dir, "z"));
  CachePolicy unhealthy({60, 1, CachePolicy::Options::KnowNames::kAlways});
  unhealthy.names_known(dir, unhealthy.ticket(), unhealthy.names_changes(dir), {});
  EXPECT_FALSE(unhealthy.known_absent(dir, "x"));
}

TEST(CachePolicy, OnlyDirectoriesThisMountMadeHaveKnownNamesWhenOnlyTheyAreAskedFor) {
  CachePolicy policy({60, 1, CachePolicy::Options::KnowNames::kMadeDirs});
  policy.set_healthy(true);
  policy.set_servers_watched(true);
  const InodeNumber made = 7, found = 8;
  // A directory found on the server: no names learnt, however often lookups miss in it.
  EXPECT_FALSE(policy.missed(found));
  EXPECT_FALSE(policy.missed(found));
  policy.names_known(found, policy.ticket(), policy.names_changes(found), {});
  EXPECT_FALSE(policy.known_absent(found, "x")) << "a listing teaches nothing of it";
  // A directory this mount made: empty from the mkdir on, then kept with this mount's changes.
  policy.made_dir(made, "/made", policy.ticket());
  EXPECT_TRUE(policy.known_absent(made, "x"));
  policy.name_added(made, "x");
  EXPECT_FALSE(policy.known_absent(made, "x"));
  EXPECT_TRUE(policy.known_absent(made, "y"));
  // The gateway's invalidation once the servers' watchers see it: names learnt again from a
  // listing after two misses, as for any directory with `auto`.
  policy.invalidating();
  policy.invalidating(made);
  EXPECT_FALSE(policy.known_absent(made, "y"));
  EXPECT_FALSE(policy.missed(made));
  EXPECT_TRUE(policy.missed(made));
  policy.names_known(made, policy.ticket(), policy.names_changes(made), {"x"});
  EXPECT_TRUE(policy.known_absent(made, "y"));
  EXPECT_FALSE(policy.known_absent(made, "x"));
  // The kernel forgets it and looks it up again (another inode number): still made here, so its
  // names are learnt again; until this mount removes it or renames it away.
  FileAttr dir_attr;
  dir_attr.mode = S_IFDIR | 0755;
  policy.forget(made);
  const InodeNumber again = 12;
  policy.entry_added(again, "/made", dir_attr);
  EXPECT_FALSE(policy.missed(again));
  EXPECT_TRUE(policy.missed(again));
  policy.names_known(again, policy.ticket(), policy.names_changes(again), {});
  EXPECT_TRUE(policy.known_absent(again, "y"));
  policy.made_dir(13, "/made/sub", policy.ticket());
  policy.dir_renamed("/made", "/moved");
  policy.forget(again);
  policy.forget(13);
  auto learns = [&](InodeNumber d, const std::string& path) {
    policy.entry_added(d, path, dir_attr);
    policy.missed(d);
    policy.names_known(d, policy.ticket(), policy.names_changes(d), {});
    return policy.known_absent(d, "y");
  };
  EXPECT_TRUE(learns(14, "/moved")) << "renamed by this mount: made still";
  EXPECT_FALSE(learns(15, "/made")) << "another directory at the old path";
  EXPECT_FALSE(learns(16, "/moved/sub")) << "what was below is not counted";
  policy.forget(14);
  policy.dir_removed("/moved");
  EXPECT_FALSE(learns(17, "/moved")) << "removed by this mount";

  // An invalidation between the mkdir's ticket and its reply: a name may be there already.
  auto t = policy.ticket();
  policy.invalidating();
  policy.made_dir(9, "/nine", t);
  EXPECT_FALSE(policy.known_absent(9, "x"));
  // Not used while the servers are not watched, nor in safe mode; and never with `never`.
  policy.made_dir(10, "/ten", policy.ticket());
  EXPECT_TRUE(policy.known_absent(10, "x"));
  policy.set_servers_watched(false);
  EXPECT_FALSE(policy.known_absent(10, "x"));
  policy.set_servers_watched(true);
  policy.made_dir(11, "/eleven", policy.ticket());
  policy.set_healthy(false);
  EXPECT_FALSE(policy.known_absent(11, "x"));
  CachePolicy never({60, 1, CachePolicy::Options::KnowNames::kNever});
  never.set_healthy(true);
  never.set_servers_watched(true);
  never.made_dir(made, "/made", never.ticket());
  EXPECT_FALSE(never.known_absent(made, "x"));
}

TEST(OpenInodes, LastCloseOfASillyRenamedFileNamesTheHiddenPathToRemove) {
  OpenInodes open;
  open.opened(5, FileAttr{});
  open.opened(5, FileAttr{});
  EXPECT_TRUE(open.is_open(5));
  EXPECT_TRUE(open.hide(5, "/d/.skein-deleted-5-1"));
  EXPECT_EQ(open.closed(5), std::nullopt);
  EXPECT_EQ(open.closed(5), "/d/.skein-deleted-5-1");
  EXPECT_FALSE(open.is_open(5));
  EXPECT_EQ(open.count(), 0u);
}

// An open file's attributes as last seen follow this mount's writes: they answer a getattr when
// the file's name is gone, and must not take back what the writer wrote.
TEST(OpenInodes, WritesMakeTheLastSeenSizeAtLeastTheirEnd) {
  OpenInodes open;
  FileAttr at_open{};
  at_open.size = 100;
  at_open.mtime_ns = 1;
  open.opened(5, at_open);
  open.wrote(5, 1 << 20);
  EXPECT_EQ(open.last_seen(5)->size, 1u << 20);
  EXPECT_GT(open.last_seen(5)->mtime_ns, 1);
  open.wrote(5, 10);  // within the file: the size stays
  EXPECT_EQ(open.last_seen(5)->size, 1u << 20);
  open.wrote(6, 10);  // not open: nothing kept
  EXPECT_EQ(open.last_seen(6), std::nullopt);
}

// Whole reads in `dir` until its read-ahead is set off (CachePolicy::read_whole_in): its number,
// or 0 if none was.
uint64_t set_off_read_ahead(CachePolicy& p, InodeNumber dir) {
  uint64_t number = 0;
  for (int i = 0; i < CachePolicy::kAheadAfter && !number; ++i) number = p.read_whole_in(dir);
  return number;
}

// What a directory read ahead holds, and everything that drops it.
TEST(CachePolicy, ADirectoryReadAheadHoldsItsNamesUntilAnythingMayHaveChangedThem) {
  constexpr InodeNumber kDir = 5, kOther = 6, kFile = 7;
  FileAttr attr{};
  attr.mode = S_IFREG | 0644;
  attr.size = 3;
  attr.mtime_ns = 42;
  const auto read_ahead = [&](CachePolicy& p, InodeNumber dir) -> uint64_t {
    const uint64_t number = set_off_read_ahead(p, dir);
    if (!number) return 0;
    p.ahead_listed(dir, number, {{"a", attr}, {"b", attr}, {"c", attr}});
    p.ahead_content(dir, number, "a", attr, "abc");
    p.ahead_content(dir, number, "b", attr, "too long");  // changed between listing and read
    return number;
  };
  HealthyPolicy policy;
  EXPECT_EQ(read_ahead(policy, kDir), 0u) << "not while the servers are not watched";
  policy.set_servers_watched(true);
  for (int i = 1; i < CachePolicy::kAheadAfter; ++i) EXPECT_EQ(policy.read_whole_in(kDir), 0u);
  const uint64_t number = policy.read_whole_in(kDir);
  ASSERT_NE(number, 0u) << "the kAheadAfter-th whole read";
  EXPECT_EQ(policy.read_whole_in(kDir), 0u) << "once at a time";
  // A lookup before the listing waits for it, up to Options::ahead_listing_wait; once a wait ran
  // out, the next lookups of that read-ahead ask the gateway at once.
  const auto started = std::chrono::steady_clock::now();
  EXPECT_FALSE(policy.take_ahead(kDir, "a")) << "nothing before the listing";
  EXPECT_GE(std::chrono::steady_clock::now() - started,
            std::chrono::duration<double>(policy.options().ahead_listing_wait));
  EXPECT_FALSE(policy.take_ahead(kDir, "a"));
  EXPECT_EQ(policy.ahead_counts().waits, 1u) << "waited again after a wait ran out";
  policy.ahead_listed(kDir, number, {{"a", attr}, {"b", attr}});
  policy.ahead_content(kDir, number, "a", attr, "abc");
  policy.ahead_content(kDir, number, "b", attr, "too long");
  auto a = policy.take_ahead(kDir, "a");
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->content);
  EXPECT_EQ(*a->content, "abc");
  EXPECT_FALSE(policy.take_ahead(kDir, "a")) << "taken once";
  auto b = policy.take_ahead(kDir, "b");
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->content) << "a content that is not the listed size is not kept";
  // What was taken answers the open and reads, unless anything was invalidated since the ticket.
  auto t = policy.ticket();
  policy.fetched_whole(kFile, *a, t);
  EXPECT_TRUE(policy.current_attrs(kFile));
  ASSERT_TRUE(policy.whole_content(kFile));
  t = policy.ticket();
  policy.invalidating();
  policy.fetched_whole(kFile + 1, *a, t);
  EXPECT_FALSE(policy.current_attrs(kFile + 1));

  // Each of these drops what was read ahead.
  const std::vector<std::pair<const char*, std::function<void(CachePolicy&)>>> drops = {
      {"a rename of this mount's in it", [&](CachePolicy& p) { p.ahead_changed(kDir); }},
      {"the directory's invalidation", [&](CachePolicy& p) { p.invalidating(kDir); }},
      {"everything invalidated", [&](CachePolicy& p) { p.invalidating_all(); }},
      {"a change of this mount in it", [&](CachePolicy& p) { (void)p.begin_mutation(kDir); }},
      {"a rename anywhere", [&](CachePolicy& p) { (void)p.begin_mutation(); }},
      // A change of this mount's that began before the read-ahead and ended after its listing.
      {"a name this mount removed", [&](CachePolicy& p) { p.name_removed(kDir, "a"); }},
      {"a name this mount added", [&](CachePolicy& p) { p.name_added(kDir, "z"); }},
      {"names this mount no longer knows", [&](CachePolicy& p) { p.names_unknown(kDir); }},
      {"the servers watched again",
       [&](CachePolicy& p) {
         p.set_servers_watched(false);
         p.set_servers_watched(true);
       }},
      {"the kernel forgetting it", [&](CachePolicy& p) { p.forget(kDir); }},
      {"the stream lost", [&](CachePolicy& p) { p.set_healthy(false); }},
      {"the servers no longer watched", [&](CachePolicy& p) { p.set_servers_watched(false); }},
  };
  for (const auto& [what, drop] : drops) {
    HealthyPolicy p;
    p.set_servers_watched(true);
    ASSERT_NE(read_ahead(p, kDir), 0u) << what;
    ASSERT_NE(read_ahead(p, kOther), 0u) << what;
    drop(p);
    if (!p.healthy()) p.set_healthy(true);
    if (!p.servers_watched()) p.set_servers_watched(true);
    EXPECT_FALSE(p.take_ahead(kDir, "c")) << what;
  }
  // An invalidation naming an entry of the directory, or the file an entry names, drops what was
  // read ahead of that name only: also before the listing came.
  {
    HealthyPolicy p;
    p.set_servers_watched(true);
    ASSERT_NE(read_ahead(p, kDir), 0u);
    p.drop_ahead_name(kDir, "a");
    p.invalidating_entry(kDir, "b");
    EXPECT_FALSE(p.take_ahead(kDir, "a"));
    EXPECT_FALSE(p.take_ahead(kDir, "b"));
    EXPECT_TRUE(p.take_ahead(kDir, "c"));
    const uint64_t n = set_off_read_ahead(p, kOther);
    ASSERT_NE(n, 0u);
    p.drop_ahead_name(kOther, "a");
    p.invalidating_entry(kOther, "b");
    p.ahead_listed(kOther, n, {{"a", attr}, {"b", attr}, {"c", attr}});
    EXPECT_FALSE(p.take_ahead(kOther, "a"));
    EXPECT_FALSE(p.take_ahead(kOther, "b"));
    EXPECT_TRUE(p.take_ahead(kOther, "c"));
  }
  // A listing that arrives after a drop is not taken; nor is one for a directory not begun.
  HealthyPolicy p;
  p.set_servers_watched(true);
  const uint64_t n = set_off_read_ahead(p, kDir);
  ASSERT_NE(n, 0u);
  p.ahead_changed(kDir);
  p.ahead_listed(kDir, n, {{"a", attr}});
  EXPECT_FALSE(p.take_ahead(kDir, "a"));
  EXPECT_FALSE(p.ahead_alive(kDir, n));
  p.ahead_listed(kOther, n, {{"a", attr}});
  EXPECT_FALSE(p.take_ahead(kOther, "a"));
  // A name the kernel got by other means goes, also while the listing is on its way; a
  // subdirectory is never read ahead (this mount is not among those that cache it).
  ASSERT_NE(read_ahead(p, kOther), 0u);
  p.drop_ahead_name(kOther, "c");
  EXPECT_FALSE(p.take_ahead(kOther, "c"));
  EXPECT_TRUE(p.take_ahead(kOther, "b"));
  constexpr InodeNumber kThird = 8;
  const uint64_t m = set_off_read_ahead(p, kThird);
  ASSERT_NE(m, 0u);
  p.drop_ahead_name(kThird, "looked-up");
  FileAttr sub{};
  sub.mode = S_IFDIR | 0755;
  p.ahead_listed(kThird, m, {{"looked-up", attr}, {"sub", sub}, {"file", attr}});
  EXPECT_FALSE(p.take_ahead(kThird, "looked-up"));
  EXPECT_FALSE(p.take_ahead(kThird, "sub"));
  EXPECT_TRUE(p.take_ahead(kThird, "file"));
  // Not a directory too large to list at once.
  FileAttr huge{};
  huge.mode = S_IFDIR | 0755;
  huge.size = CachePolicy::kAheadDirSize + 1;
  p.sent_attrs(kFile, huge, p.ticket());
  for (int i = 0; i < 2 * CachePolicy::kAheadAfter; ++i) EXPECT_EQ(p.read_whole_in(kFile), 0u);
  // At most kAheadDirs directories: the oldest goes first.
  HealthyPolicy q;
  q.set_servers_watched(true);
  for (InodeNumber dir = 100; dir < 100 + CachePolicy::kAheadDirs + 1; ++dir)
    ASSERT_NE(read_ahead(q, dir), 0u);
  EXPECT_FALSE(q.take_ahead(100, "c"));
  EXPECT_TRUE(q.take_ahead(101, "c"));
}

// A lookup in a directory whose read-ahead listing is on its way waits for the listing, and is
// answered from it; anything that may end the wait ends it at once: the read-ahead dropped or
// failed, or any invalidation (the waiting lookup then asks the gateway, and an invalidation of
// an entry in the directory does not wait for it).
TEST(CachePolicy, ALookupWaitsForTheReadAheadListingOnItsWay) {
  using namespace std::chrono_literals;
  CachePolicy::Options options;
  options.ahead_listing_wait = 60;  // longer than any of these waits may take
  CachePolicy p(options);
  p.set_healthy(true);
  p.set_servers_watched(true);
  FileAttr attr{};
  attr.mode = S_IFREG | 0644;
  attr.size = 3;
  // A lookup of `name` in `dir` in a thread of its own, once it waits.
  const auto waiting_take = [&](InodeNumber dir, const std::string& name) {
    const uint64_t waits = p.ahead_counts().waits;
    auto taken =
        std::async(std::launch::async, [&p, dir, name] { return p.take_ahead(dir, name); });
    for (int i = 0; i < 10000 && p.ahead_counts().waits == waits; ++i)
      std::this_thread::sleep_for(1ms);
    EXPECT_EQ(p.ahead_counts().waits, waits + 1) << "the lookup did not wait";
    EXPECT_EQ(taken.wait_for(20ms), std::future_status::timeout) << "it did not go on waiting";
    return taken;
  };
  const auto ended = [](std::future<std::optional<CachePolicy::Ahead>>& taken) {
    return taken.wait_for(10s) == std::future_status::ready;
  };

  // The listing lands: the waiting lookup is answered from it.
  constexpr InodeNumber kDir = 5;
  uint64_t number = set_off_read_ahead(p, kDir);
  ASSERT_NE(number, 0u);
  auto taken = waiting_take(kDir, "a");
  p.ahead_listed(kDir, number, {{"a", attr}, {"b", attr}});
  ASSERT_TRUE(ended(taken));
  EXPECT_TRUE(taken.get()) << "not answered from the listing it waited for";

  // Any invalidation ends the wait: the lookup asks the gateway. The read-ahead goes on, and the
  // next lookup waits for it again.
  constexpr InodeNumber kOther = 6;
  number = set_off_read_ahead(p, kOther);
  ASSERT_NE(number, 0u);
  taken = waiting_take(kOther, "a");
  p.invalidating();
  ASSERT_TRUE(ended(taken)) << "an invalidation did not end the wait";
  EXPECT_FALSE(taken.get());
  taken = waiting_take(kOther, "a");
  p.invalidating_entry(kOther, "z");  // the Watch thread's, before it needs the kernel's lock
  ASSERT_TRUE(ended(taken));
  EXPECT_FALSE(taken.get());
  // While an invalidation is being applied to the kernel, a waiting lookup stops at once, and
  // none waits.
  taken = waiting_take(kOther, "a");
  {
    const CachePolicy::Applying applying(p);
    ASSERT_TRUE(ended(taken)) << "an invalidation being applied did not end the wait";
    EXPECT_FALSE(taken.get());
    const uint64_t waits = p.ahead_counts().waits;
    EXPECT_FALSE(p.take_ahead(kOther, "a"));
    EXPECT_EQ(p.ahead_counts().waits, waits) << "waited while an invalidation was being applied";
  }
  taken = waiting_take(kOther, "a");
  p.ahead_listed(kOther, number, {{"a", attr}});
  ASSERT_TRUE(ended(taken));
  EXPECT_TRUE(taken.get());

  // The listing failed, or the read-ahead was dropped: nothing, at once.
  constexpr InodeNumber kFailed = 7, kDropped = 8;
  number = set_off_read_ahead(p, kFailed);
  ASSERT_NE(number, 0u);
  taken = waiting_take(kFailed, "a");
  p.ahead_failed(kFailed, number);
  ASSERT_TRUE(ended(taken)) << "a failed listing did not end the wait";
  EXPECT_FALSE(taken.get());
  ASSERT_NE(set_off_read_ahead(p, kDropped), 0u);
  taken = waiting_take(kDropped, "a");
  (void)p.begin_mutation(kDropped);  // a change of this mount's there
  ASSERT_TRUE(ended(taken)) << "a dropped read-ahead did not end the wait";
  EXPECT_FALSE(taken.get());

  // With no wait allowed, a lookup before the listing asks the gateway at once.
  options.ahead_listing_wait = 0;
  CachePolicy q(options);
  q.set_healthy(true);
  q.set_servers_watched(true);
  ASSERT_NE(set_off_read_ahead(q, kDir), 0u);
  EXPECT_FALSE(q.take_ahead(kDir, "a"));
  EXPECT_EQ(q.ahead_counts().waits, 0u);
}

TEST(OpenInodes, HidingAFileClosedMeanwhileIsRefused) {
  OpenInodes open;
  EXPECT_FALSE(open.hide(5, "/d/.skein-deleted-5-1"));
  open.opened(5, FileAttr{});
  EXPECT_EQ(open.closed(5), std::nullopt);  // never hidden
  EXPECT_FALSE(open.hide(5, "/d/.skein-deleted-5-1"));
}

TEST(OpenInodes, RemembersTheLastAttributesOfOpenInodesOnly) {
  OpenInodes open;
  open.seen(5, FileAttr{.size = 1});
  EXPECT_EQ(open.last_seen(5), std::nullopt);
  open.opened(5, FileAttr{.size = 2});
  EXPECT_EQ(open.last_seen(5)->size, 2u);
  open.seen(5, FileAttr{.size = 3});
  EXPECT_EQ(open.last_seen(5)->size, 3u);
  EXPECT_EQ(open.closed(5), std::nullopt);
  EXPECT_EQ(open.last_seen(5), std::nullopt);
}

TEST(OpenInodes, HiddenNamesAreRecognisedAndDistinct) {
  std::string a = OpenInodes::hidden_name(42);
  std::string b = OpenInodes::hidden_name(42);
  EXPECT_NE(a, b);
  EXPECT_TRUE(OpenInodes::is_hidden_name(a));
  EXPECT_EQ(a.rfind(".skein-deleted-2a-", 0), 0u) << a;
  EXPECT_FALSE(OpenInodes::is_hidden_name("skein-deleted-1"));
  EXPECT_FALSE(OpenInodes::is_hidden_name(".skein"));
}

TEST(InodeTableNames, NamesBelowAPathComeDeepestFirstWithTheirParents) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  InodeNumber b = table.lookup_add("/a/b").ino;
  InodeNumber c = table.lookup_add("/a/b/c").ino;
  InodeNumber x = table.lookup_add("/a-x").ino;  // sorts between "/a" and "/a/..."; not below
  auto names = table.names_at_or_below("/a");
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0].ino, c);
  EXPECT_EQ(names[0].parent, b);
  EXPECT_EQ(names[0].name, "c");
  EXPECT_EQ(names[1].ino, b);
  EXPECT_EQ(names[1].parent, a);
  EXPECT_EQ(names[2].ino, a);
  EXPECT_EQ(names[2].parent, kRootInode);
  EXPECT_EQ(names[2].name, "a");
  EXPECT_EQ(table.names_at_or_below("/").size(), 4u);  // never the root itself
  EXPECT_EQ(table.all_inodes().size(), 5u);
  auto name = table.name_at("/a-x");
  ASSERT_TRUE(name);
  EXPECT_EQ(name->ino, x);
  EXPECT_EQ(name->parent, kRootInode);
  EXPECT_FALSE(table.name_at("/"));
  EXPECT_FALSE(table.name_at("/unknown"));
}

TEST(InodeTableNames, ForgetReportsWhetherTheInodeWasDropped) {
  InodeTable table;
  InodeNumber a = table.lookup_add("/a").ino;
  table.lookup_add("/a");
  EXPECT_FALSE(table.forget(a, 1));
  EXPECT_TRUE(table.forget(a, 1));
  EXPECT_FALSE(table.forget(a, 1));
}

}  // namespace
}  // namespace skein::client
