// The invalidation rules: for each change made through the gateway (and for a change found on a
// server), which paths the other mounts must drop. Each rule is pinned item by item, and the
// rules that reach mounts only through a path's directory or a subtree are also pushed through
// the broker, to show which mount hears of them.
#include "coherence/invalidation_rules.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "coherence/invalidation_broker.hpp"

namespace skein {
namespace {

// "ENTRY /d/f" for each item, sorted: the rules promise a set, not an order.
std::vector<std::string> text(const std::vector<v1::Invalidation>& items) {
  std::vector<std::string> out;
  for (auto& i : items) out.push_back(v1::Invalidation::Kind_Name(i.kind()) + " " + i.path());
  std::sort(out.begin(), out.end());
  return out;
}

using Items = std::vector<std::string>;

TEST(InvalidationRules, CreateDropsTheNameAndTheFileItMayHaveOpenedOrTruncated) {
  EXPECT_EQ(text(invalidations_for(Change::create, "/d/f")), (Items{"ENTRY /d/f", "INODE /d/f"}));
}

// A file's other names (hard links) share its contents and attributes, not its name: they are
// stale after a change of those, and of nothing else.
TEST(InvalidationRules, AFilesOtherNamesAreStaleAfterAChangeOfItsContentsOrAttributesOnly) {
  const std::vector<std::string> others{"/d/g", "/e/h"};
  for (Change c : {Change::create, Change::setattr, Change::truncate_on_open, Change::write,
                   Change::found_changed})
    EXPECT_EQ(text(invalidations_for_other_names(c, others)), (Items{"INODE /d/g", "INODE /e/h"}))
        << static_cast<int>(c);
  for (Change c : {Change::mkdir, Change::symlink, Change::rmdir, Change::unlink, Change::rename,
                   Change::rename_noreplace, Change::link})
    EXPECT_TRUE(invalidations_for_other_names(c, others).empty()) << static_cast<int>(c);
  EXPECT_TRUE(invalidations_for_other_names(Change::write, {}).empty());
}

TEST(InvalidationRules, MkdirDropsOnlyTheNewName) {
  EXPECT_EQ(text(invalidations_for(Change::mkdir, "/d/sub")), (Items{"ENTRY /d/sub"}));
}

TEST(InvalidationRules, SymlinkDropsOnlyTheNewName) {
  EXPECT_EQ(text(invalidations_for(Change::symlink, "/d/l")), (Items{"ENTRY /d/l"}));
}

TEST(InvalidationRules, RmdirDropsTheNameAndTheDirectory) {
  EXPECT_EQ(text(invalidations_for(Change::rmdir, "/d/sub")),
            (Items{"ENTRY /d/sub", "INODE /d/sub"}));
}

TEST(InvalidationRules, UnlinkDropsTheNameAndTheFileWhoseLinkCountChanged) {
  EXPECT_EQ(text(invalidations_for(Change::unlink, "/d/f")), (Items{"ENTRY /d/f", "INODE /d/f"}));
}

TEST(InvalidationRules, RenameDropsBothNamesTheReplacedFileAndTheOldSubtree) {
  EXPECT_EQ(text(invalidations_for(Change::rename, "/a/old", "/b/new")),
            (Items{"ENTRY /a/old", "ENTRY /b/new", "INODE /b/new", "TREE /a/old"}));
}

// The new name's ENTRY says the file it named was replaced (a deferred open of it must not read
// on in the file that took its name); nothing else does, nor a rename that replaced nothing.
TEST(InvalidationRules, OnlyAReplacingRenameMarksTheNewNameReplaced) {
  auto replaced = [](Change change, const std::string& path, const std::string& other = {}) {
    std::vector<std::string> out;
    for (auto& i : invalidations_for(change, path, other))
      if (i.replaced()) out.push_back(v1::Invalidation::Kind_Name(i.kind()) + " " + i.path());
    return out;
  };
  EXPECT_EQ(replaced(Change::rename, "/a/old", "/b/new"), (Items{"ENTRY /b/new"}));
  EXPECT_TRUE(replaced(Change::rename_noreplace, "/a/old", "/b/new").empty());
  for (Change c : {Change::create, Change::unlink, Change::write, Change::found_changed})
    EXPECT_TRUE(replaced(c, "/d/f").empty());
}

TEST(InvalidationRules, RenameWithoutReplaceStillDropsWhatAMountHeldAtTheNewName) {
  // Nothing was at the new name for the gateway, but a mount may still cache a file the server
  // removed there behind the gateway's back: the same items as a replacing rename.
  EXPECT_EQ(text(invalidations_for(Change::rename_noreplace, "/a/old", "/b/new")),
            (Items{"ENTRY /a/old", "ENTRY /b/new", "INODE /b/new", "TREE /a/old"}));
  EXPECT_EQ(rename_change(0), Change::rename);
  EXPECT_EQ(rename_change(1), Change::rename_noreplace);
}

TEST(InvalidationRules, LinkDropsTheNewNameAndTheFileWithOneLinkMore) {
  EXPECT_EQ(text(invalidations_for(Change::link, "/d/file", "/e/alias")),
            (Items{"ENTRY /e/alias", "INODE /d/file"}));
}

TEST(InvalidationRules, SetattrTruncateOnOpenAndWriteDropTheFileButNotItsName) {
  for (Change c : {Change::setattr, Change::truncate_on_open, Change::write})
    EXPECT_EQ(text(invalidations_for(c, "/d/f")), (Items{"INODE /d/f"})) << static_cast<int>(c);
}

TEST(InvalidationRules, AChangeFoundOnTheServerDropsTheNameAndTheFile) {
  EXPECT_EQ(text(invalidations_for(Change::found_changed, "/d/f")),
            (Items{"ENTRY /d/f", "INODE /d/f"}));
}

// A mount's Watch stream that records what it is sent and acknowledges at once.
class Recorder : public InvalidationBroker::Stream {
 public:
  explicit Recorder(InvalidationBroker& b) : broker(b) {}
  void send(const v1::WatchEvent& e) override {
    events.push_back(e);
    acks.emplace_back([this, seq = e.seq()] { broker.acked(id, seq); });
  }
  void end(const std::string&) override {}
  ~Recorder() override {
    for (auto& t : acks) t.join();
  }
  InvalidationBroker& broker;
  SessionId id = 0;
  std::vector<v1::WatchEvent> events;
  std::vector<std::thread> acks;
};

// Which of the mounts (each having looked up the one path given, so caching it and its directory)
// hear of `change`, made by another.
std::vector<bool> who_hears(Change change, const std::string& path, const std::string& other,
                            const std::vector<std::string>& cached) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  Recorder maker(broker);
  maker.id = broker.attach("ns", "maker", &maker);
  std::vector<std::unique_ptr<Recorder>> mounts;
  for (size_t i = 0; i < cached.size(); ++i) {
    mounts.push_back(std::make_unique<Recorder>(broker));
    mounts.back()->id = broker.attach("ns", "m" + std::to_string(i), mounts.back().get());
    broker.served("ns", "m" + std::to_string(i), cached[i], std::nullopt, true);
  }
  broker.changed("ns", invalidations_for(change, path, other), "maker");
  std::vector<bool> out;
  for (auto& m : mounts) {
    out.push_back(!m->events.empty());
    broker.detach(m->id);
  }
  broker.detach(maker.id);
  return out;
}

TEST(InvalidationRules, AMountThatListedTheDirectoryHearsOfANewName) {
  EXPECT_EQ(who_hears(Change::mkdir, "/d/sub", "", {"/d", "/elsewhere"}),
            (std::vector<bool>{true, false}));
}

TEST(InvalidationRules, ARenameReachesMountsCachingBelowTheOldNameOrTheNewOnesDirectory) {
  EXPECT_EQ(who_hears(Change::rename, "/a/dir", "/b/dir", {"/a/dir/deep/f", "/b", "/b/dir"}),
            (std::vector<bool>{true, true, true}));
}

TEST(InvalidationRules, ALinkReachesMountsCachingTheExistingFile) {
  EXPECT_EQ(who_hears(Change::link, "/d/file", "/e/alias", {"/d/file", "/e", "/x/y"}),
            (std::vector<bool>{true, true, false}));
}

TEST(InvalidationRules, AWriteReachesOnlyMountsCachingTheFileOrItsDirectory) {
  EXPECT_EQ(who_hears(Change::write, "/d/f", "", {"/d/f", "/d", "/e/g"}),
            (std::vector<bool>{true, true, false}));
}

}  // namespace
}  // namespace skein
