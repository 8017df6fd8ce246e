// UnionLayout against in-memory backends: first-found lookups, merged listings, the create
// policies and what stops a branch taking new files, parent directories cloned onto the branch
// a new entry lands on, ranked errors across branches, renames that stay on each branch (EXDEV
// where they cannot), hard links, and branches that are down, full or read-only.
#include "namespace/union_layout.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attrs_each.hpp"
#include "backend/backend_file.hpp"
#include "fake_backend.hpp"
#include "namespace/create_policy.hpp"

namespace skein {
namespace {

using test::FakeBackend;

SharedBytes bytes(const std::string& s) {
  auto keep = std::make_shared<std::string>(s);
  return SharedBytes({std::string_view(*keep)}, keep);
}

// A union over `n` fake backends b0, b1, ... with the given modes (read-write by default).
struct Union {
  explicit Union(size_t n, const std::string& policy = "ff", std::vector<BranchMode> modes = {}) {
    std::vector<Branch> branches;
    for (size_t i = 0; i < n; ++i) {
      b.push_back(FakeBackend::make("b" + std::to_string(i)));
      branches.push_back({b.back(), i < modes.size() ? modes[i] : BranchMode::read_write});
    }
    layout = std::make_unique<UnionLayout>(std::move(branches), make_create_policy(policy));
  }
  // Which backends hold `rel`.
  std::vector<size_t> holders(const std::string& rel) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < b.size(); ++i)
      if (b[i]->has(rel)) out.push_back(i);
    return out;
  }
  std::vector<std::shared_ptr<FakeBackend>> b;
  std::unique_ptr<UnionLayout> layout;
};

std::vector<std::string> names_of(const std::vector<DirEntryAttrs>& entries) {
  std::vector<std::string> out;
  for (auto& e : entries) out.push_back(e.name);
  return out;
}

using Holders = std::vector<size_t>;

// --- Lookups and listings.

TEST(UnionLayout, LookupIsFirstFoundInBranchOrder) {
  Union u(3);
  u.b[1]->put_file("/f", "from b1", 0600);
  u.b[2]->put_file("/f", "from b2, longer", 0644);
  auto a = u.layout->getattr("/f");
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(a->size, 7u);
  EXPECT_EQ(a->permissions & 07777, 0600u);
  auto f = u.layout->open("/f", O_RDONLY);
  ASSERT_TRUE(f);
  EXPECT_EQ((*f)->read(0, 100)->flatten(), "from b1");
  EXPECT_EQ(u.layout->getattr("/nowhere").error(), ENOENT);
}

TEST(UnionLayout, ListingMergesBranchesAndTheFirstBranchWinsADuplicateName) {
  Union u(3);
  u.b[0]->put_file("/d/a", "0");
  u.b[1]->put_file("/d/a", "longer in b1");
  u.b[1]->put_file("/d/b", "1");
  u.b[2]->put_dir("/d/c");
  auto l = u.layout->readdir("/d");
  ASSERT_TRUE(l) << strerror(l.error());
  std::multiset<std::string> names;
  for (auto& e : *l) names.insert(e.name);
  EXPECT_EQ(names, (std::multiset<std::string>{"a", "b", "c"}));
  for (auto& e : *l) {
    if (e.name == "a") {
      EXPECT_EQ(e.attrs.size, 1u) << "b0's copy";
    }
    if (e.name == "c") {
      EXPECT_TRUE(S_ISDIR(e.attrs.permissions));
    }
  }
}

TEST(UnionLayout, ABranchThatIsDownDropsOutOfListingsAndLookups) {
  Union u(2);
  u.b[0]->put_file("/d/zero", "");
  u.b[1]->put_file("/d/one", "");
  u.b[0]->set_down(true);
  auto l = u.layout->readdir("/d");
  ASSERT_TRUE(l) << strerror(l.error());
  EXPECT_EQ(names_of(*l), (std::vector<std::string>{"one"}));
  EXPECT_TRUE(u.layout->getattr("/d/one")) << "found on the branch that is up";
  EXPECT_EQ(u.layout->getattr("/d/zero").error(), ENOENT)
      << "a down branch hides nothing and says 'not there', not EIO";
  u.b[1]->set_down(true);
  EXPECT_EQ(u.layout->readdir("/d").error(), EIO) << "with every branch down there is no listing";
}

// getattr_each asks every branch about every path at once, and answers each as getattr does:
// first found in branch order, a branch that is down hiding nothing, else the most telling error.
TEST(UnionLayout, AttributesOfManyPathsAreThoseOfEachAlone) {
  for (size_t down : {size_t(3), size_t(0)}) {  // none down, then b0 down
    Union u(3);
    u.b[1]->put_file("/f", "from b1", 0600);
    u.b[2]->put_file("/f", "from b2, longer", 0644);
    u.b[2]->put_dir("/d");
    u.b[0]->put_file("/d/only0", "zero");
    u.b[2]->put_symlink("/l", "/f");
    if (down < u.b.size()) u.b[down]->set_down(true);
    const std::vector<std::string> paths{"/f", "/d", "/none", "/d/only0", "/l", "/f"};
    const size_t lstats_before = u.b[1]->calls("lstat");
    auto each = u.layout->getattr_each(paths);
    EXPECT_EQ(u.b[1]->calls("lstat") - lstats_before, paths.size()) << "each path asked once";
    test::expect_each_as_alone(each, paths,
                               [&](const std::string& p) { return u.layout->getattr(p); });
    ASSERT_FALSE(HasFatalFailure());
    EXPECT_EQ(each[0]->size, 7u) << "b1's copy, first in branch order";
    EXPECT_EQ(each[2].error(), ENOENT);
    EXPECT_TRUE(S_ISLNK(each[4]->permissions)) << "never followed";
    EXPECT_EQ(static_cast<bool>(each[3]), down != 0) << "b0 down: its file is not there";
  }
  Union one(1);
  one.b[0]->put_file("/f", "x");
  one.b[0]->set_down(true);
  auto each = one.layout->getattr_each({"/f", "/g"});
  EXPECT_EQ(each[0].error(), EIO) << "one branch down: EIO, as getattr";
  EXPECT_EQ(each[1].error(), EIO);
}

// A lower branch's file where the union's directory is says ENOTDIR for every name below it;
// that is about its own path, not the union's: the name is simply not there.
TEST(UnionLayout, AFileOnALowerBranchDoesNotHideNamesBelowTheUnionsDirectory) {
  Union u(2);
  u.b[0]->put_dir("/d");
  u.b[1]->put_file("/d", "a file where b0 has a directory");
  u.b[1]->put_symlink("/l", "/d");
  u.b[0]->put_dir("/l");
  EXPECT_EQ(u.layout->getattr("/d/x").error(), ENOENT) << "not ENOTDIR from b1";
  EXPECT_EQ(u.layout->getattr("/l/x").error(), ENOENT) << "not ELOOP from b1";
  EXPECT_EQ(u.layout->getattr_each({"/d/x"})[0].error(), ENOENT);
  auto c = u.layout->create("/d/x", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(c) << strerror(c.error());
  EXPECT_EQ(u.holders("/d/x"), (Holders{0}));
  auto m = u.layout->mkdir("/l/y", 0755);
  ASSERT_TRUE(m) << strerror(m.error());
  EXPECT_EQ(u.holders("/l/y"), (Holders{0}));
}

TEST(UnionLayout, AOneBranchUnionThatIsDownAnswersEio) {
  Union u(1);
  u.b[0]->put_file("/f", "x");
  u.b[0]->set_down(true);
  EXPECT_EQ(u.layout->getattr("/f").error(), EIO);
  EXPECT_EQ(u.layout->readdir("/").error(), EIO);
  EXPECT_EQ(u.layout->mkdir("/d", 0755).error(), EIO);
  EXPECT_EQ(u.layout->create("/g", O_WRONLY, 0644).error(), EIO);
}

TEST(UnionLayout, ASymlinkIsShownAsOneAndNeverFollowed) {
  Union u(2);
  u.b[0]->put_dir("/real");
  u.b[0]->put_file("/real/f", "x");
  u.b[1]->put_symlink("/link", "/real");
  auto a = u.layout->getattr("/link");
  ASSERT_TRUE(a);
  EXPECT_TRUE(S_ISLNK(a->permissions));
  EXPECT_EQ(*u.layout->readlink("/link"), "/real");
  EXPECT_EQ(u.layout->readlink("/real/f").error(), EINVAL);
  EXPECT_EQ(u.layout->create("/link/new", O_WRONLY, 0644).error(), ELOOP)
      << "a new entry's directory is never a symlink";
  AttrChange chmod;
  chmod.mode = 0600;
  EXPECT_EQ(u.layout->setattr("/link", chmod, nullptr).error(), ELOOP);
}

// --- Create policies and placement.

TEST(UnionLayout, FirstFoundCreatesOnTheFirstBranchThatTakesNewFiles) {
  Union u(3, "ff");
  ASSERT_TRUE(u.layout->create("/a", O_WRONLY, 0644));
  EXPECT_EQ(u.holders("/a"), (Holders{0}));
  u.b[0]->set_draining(true);
  ASSERT_TRUE(u.layout->create("/b", O_WRONLY, 0644));
  EXPECT_EQ(u.holders("/b"), (Holders{1})) << "a draining branch takes no new files";
  u.b[1]->set_min_free_bytes(static_cast<uint64_t>(2) << 30);
  ASSERT_TRUE(u.layout->mkdir("/c", 0755));
  EXPECT_EQ(u.holders("/c"), (Holders{2})) << "nor one below its minimum free space";
}

TEST(UnionLayout, MostFreeSpacePicksTheBranchWithTheMostAvailable) {
  Union u(3, "mfs");
  u.b[0]->set_space(100 << 20, 10 << 20);
  u.b[1]->set_space(100 << 20, 70 << 20);
  u.b[2]->set_space(100 << 20, 40 << 20);
  ASSERT_TRUE(u.layout->create("/f", O_WRONLY, 0644));
  EXPECT_EQ(u.holders("/f"), (Holders{1}));
  u.b[1]->set_space(100 << 20, 5 << 20);
  ASSERT_TRUE(u.layout->mkdir("/d", 0755));
  EXPECT_EQ(u.holders("/d"), (Holders{2}));
}

TEST(UnionLayout, HashOfPathPutsAPathOnTheSameBranchEveryTime) {
  std::set<size_t> used;
  for (int i = 0; i < 20; ++i) {
    const std::string name = "/file" + std::to_string(i);
    Union one(3, "hash"), other(3, "hash");
    ASSERT_TRUE(one.layout->create(name, O_WRONLY, 0644));
    ASSERT_TRUE(other.layout->create(name, O_WRONLY, 0644));
    ASSERT_EQ(one.holders(name).size(), 1u);
    EXPECT_EQ(one.holders(name), other.holders(name)) << name;
    used.insert(one.holders(name)[0]);
  }
  EXPECT_EQ(used.size(), 3u) << "twenty names spread over every branch";
}

TEST(UnionLayout, RandomPlacesOnlyOnBranchesThatTakeNewFiles) {
  Union u(3, "rand", {BranchMode::read_write, BranchMode::read_only, BranchMode::no_create});
  for (int i = 0; i < 10; ++i) {
    const std::string name = "/r" + std::to_string(i);
    ASSERT_TRUE(u.layout->create(name, O_WRONLY, 0644));
    EXPECT_EQ(u.holders(name), (Holders{0})) << "neither RO nor NC takes a new file";
  }
}

TEST(UnionLayout, WhenNoBranchTakesNewFilesTheErrorSaysWhy) {
  {
    Union u(2, "ff", {BranchMode::read_only, BranchMode::read_only});
    EXPECT_EQ(u.layout->create("/f", O_WRONLY, 0644).error(), EROFS);
    EXPECT_EQ(u.layout->mkdir("/d", 0755).error(), EROFS);
  }
  {
    Union u(2);
    u.b[0]->set_min_free_bytes(1);
    u.b[1]->set_min_free_bytes(1);
    u.b[0]->set_full(true);
    u.b[1]->set_full(true);
    EXPECT_EQ(u.layout->create("/f", O_WRONLY, 0644).error(), ENOSPC);
    EXPECT_EQ(u.layout->symlink("/l", "target").error(), ENOSPC);
  }
  {
    Union u(2);
    u.b[0]->set_down(true);
    u.b[1]->set_down(true);
    EXPECT_EQ(u.layout->create("/f", O_WRONLY, 0644).error(), EIO);
  }
}

TEST(UnionLayout, ANewEntryGetsItsParentDirectoriesClonedOntoItsBranch) {
  Union u(2, "ff", {BranchMode::no_create, BranchMode::read_write});
  u.b[0]->put_dir("/a", 0750);
  u.b[0]->put_dir("/a/b", 0700);
  sftp::Attrs owner;
  owner.flags = sftp::ATTR_UIDGID | sftp::ATTR_ACMODTIME;
  owner.uid = 4242;
  owner.gid = 4343;
  owner.atime = owner.mtime = 1234567;
  ASSERT_TRUE(u.b[0]->setstat("/a/b", owner));
  auto c = u.layout->create("/a/b/new", O_WRONLY | O_EXCL, 0640);
  ASSERT_TRUE(c) << strerror(c.error());
  EXPECT_EQ(u.holders("/a/b/new"), (Holders{1}));
  auto cloned = u.b[1]->attrs("/a/b");
  ASSERT_TRUE(cloned);
  EXPECT_TRUE(S_ISDIR(cloned->permissions));
  EXPECT_EQ(cloned->permissions & 07777, 0700u);
  EXPECT_EQ(cloned->uid, 4242u);
  EXPECT_EQ(cloned->gid, 4343u);
  EXPECT_EQ(cloned->atime, 1234567u) << "times copied (the create moved the mtime since)";
  EXPECT_EQ(u.b[1]->attrs("/a")->permissions & 07777, 0750u);
  EXPECT_EQ(u.layout->create("/a/missing/new", O_WRONLY, 0644).error(), ENOENT);
}

TEST(UnionLayout, CreateOfAnExistingNameOpensItWhereItIs) {
  Union u(2);
  u.b[1]->put_file("/f", "old");
  auto c = u.layout->create("/f", O_RDWR, 0644);
  ASSERT_TRUE(c) << strerror(c.error());
  EXPECT_EQ(u.holders("/f"), (Holders{1}));
  EXPECT_EQ(c->file->read(0, 10)->flatten(), "old");
  EXPECT_EQ(u.layout->create("/f", O_RDWR | O_EXCL, 0644).error(), EEXIST);
  u.b[0]->put_dir("/d");
  EXPECT_EQ(u.layout->create("/d", O_RDWR, 0644).error(), EISDIR);
}

TEST(UnionLayout, AOneBranchCreateReturnsTheFileAndItsDirectoryFromTheOpen) {
  Union u(1);
  u.b[0]->put_dir("/d");
  const size_t before = u.b[0]->calls("lstat");
  auto c = u.layout->create("/d/f", O_WRONLY | O_EXCL, 0640);
  ASSERT_TRUE(c) << strerror(c.error());
  EXPECT_EQ(u.b[0]->calls("lstat"), before) << "no lookups before a one-branch create";
  EXPECT_EQ(c->attrs.permissions & 07777, 0640u);
  ASSERT_TRUE(c->parent_attrs);
  EXPECT_TRUE(S_ISDIR(c->parent_attrs->permissions));
}

// --- Changes to every copy, and ranked errors.

TEST(UnionLayout, ChangesActOnEveryCopy) {
  Union u(3);
  u.b[0]->put_file("/f", "aaaa");
  u.b[2]->put_file("/f", "bbbbbbbb");
  AttrChange ch;
  ch.mode = 0600;
  ch.size = 2;
  const size_t looks = u.b[1]->calls("lstat");
  auto a = u.layout->setattr("/f", ch, nullptr);
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(u.b[1]->calls("lstat"), looks + 1) << "one look at a branch without the file";
  EXPECT_EQ(a->size, 2u);
  EXPECT_EQ(*u.b[0]->contents("/f"), "aa");
  EXPECT_EQ(*u.b[2]->contents("/f"), "bb");
  EXPECT_EQ(u.b[2]->attrs("/f")->permissions & 07777, 0600u);
  ASSERT_TRUE(u.layout->unlink("/f"));
  EXPECT_TRUE(u.holders("/f").empty());
}

TEST(UnionLayout, AnySuccessWinsOverARefusalOnAnotherBranch) {
  Union u(2, "ff", {BranchMode::read_write, BranchMode::read_only});
  u.b[0]->put_file("/f", "");
  u.b[1]->put_file("/f", "");
  ASSERT_TRUE(u.layout->unlink("/f"));
  EXPECT_EQ(u.holders("/f"), (Holders{1})) << "the read-only branch keeps its copy";
  EXPECT_EQ(u.layout->unlink("/f").error(), EROFS) << "now only a read-only copy is left";
}

TEST(UnionLayout, TheMostTellingErrorWinsAcrossBranches) {
  // A specific answer beats a read-only branch, which beats "not there", which beats a server
  // that could not be asked.
  EXPECT_EQ(most_telling_error(EIO, ENOENT), ENOENT);
  EXPECT_EQ(most_telling_error(ENOENT, EROFS), EROFS);
  EXPECT_EQ(most_telling_error(EROFS, EACCES), EACCES);
  EXPECT_EQ(most_telling_error(EACCES, EIO), EACCES);
  EXPECT_EQ(most_telling_error(0, EIO), EIO);

  Union u(3, "ff", {BranchMode::read_write, BranchMode::read_only, BranchMode::read_write});
  for (auto& b : u.b) b->put_dir("/d");  // empty everywhere: a copy holding entries is ENOTEMPTY
  u.b[0]->fail("rmdir", "/d", EIO);
  u.b[2]->set_read_only(true);  // its server refuses every change (EACCES)
  EXPECT_EQ(u.layout->rmdir("/d").error(), EACCES)
      << "EACCES from b2 beats EROFS from the RO branch and EIO from b0";
  u.b[2]->set_read_only(false);
  EXPECT_TRUE(u.layout->rmdir("/d")) << "b2's copy went: a success";
  EXPECT_EQ(u.holders("/d"), (Holders{0, 1}));
}

// The merged directory is empty only when every copy is: removing the empty copies of a
// directory that still shows entries would report success while it is still there.
TEST(UnionLayout, RmdirOfADirectoryNotEmptyOnAnyBranchIsEnotemptyAndRemovesNothing) {
  for (size_t full : {1, 0}) {
    Union u(2);
    u.b[1 - full]->put_dir("/d");
    u.b[full]->put_file("/d/x", "");
    EXPECT_EQ(u.layout->rmdir("/d").error(), ENOTEMPTY) << "x on b" << full;
    EXPECT_EQ(u.holders("/d"), (Holders{0, 1})) << "x on b" << full;
    EXPECT_EQ(u.holders("/d/x"), (Holders{full}));
  }
}

TEST(UnionLayout, ReadOnlyBranchesRefuseWritesButServeReads) {
  Union u(2, "ff", {BranchMode::read_only, BranchMode::read_write});
  u.b[0]->put_file("/f", "ro data");
  auto r = u.layout->open("/f", O_RDONLY);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)->read(0, 100)->flatten(), "ro data");
  EXPECT_EQ(u.layout->open("/f", O_WRONLY).error(), EROFS);
  EXPECT_EQ(u.layout->open("/f", O_RDONLY | O_TRUNC).error(), EROFS);
  EXPECT_EQ(u.layout->create("/f", O_WRONLY, 0644).error(), EROFS);
  u.b[0]->put_dir("/dir");
  EXPECT_EQ(u.layout->open("/dir", O_WRONLY).error(), EISDIR);
}

TEST(UnionLayout, AOneBranchMkdirAsksNothingFirstAndSaysWhyItCannot) {
  {
    Union u(1);
    ASSERT_TRUE(u.layout->mkdir("/d", 0750));
    EXPECT_EQ(u.b[0]->calls("lstat"), 1u) << "only the new directory's attributes";
    EXPECT_EQ(u.layout->mkdir("/d", 0750).error(), EEXIST) << "the backend's own answer";
  }
  {
    Union u(1, "ff", {BranchMode::read_only});
    EXPECT_EQ(u.layout->mkdir("/d", 0755).error(), EROFS);
  }
  {
    Union u(1, "ff", {BranchMode::no_create});
    EXPECT_EQ(u.layout->mkdir("/d", 0755).error(), ENOSPC);
  }
}

// A union of one read-only branch (`backends = ["d=RO"]`, or what is left of a union once its
// other branches are removed) changes nothing on it: a rename, over another file or to a new
// name, is refused as every other change is (it once went straight to the backend).
TEST(UnionLayout, AOneBranchReadOnlyUnionRefusesEveryChange) {
  Union u(1, "ff", {BranchMode::read_only});
  u.b[0]->put_file("/a", "a");
  u.b[0]->put_file("/b", "b");
  EXPECT_EQ(u.layout->rename("/a", "/b", 0).error(), EROFS);
  EXPECT_EQ(u.layout->rename("/a", "/new", 0).error(), EROFS);
  EXPECT_EQ(u.layout->rename_reporting_parents("/a", "/b", 0).error(), EROFS);
  EXPECT_EQ(u.layout->unlink("/a").error(), EROFS);
  EXPECT_EQ(u.layout->create("/c", O_WRONLY, 0644).error(), EROFS);
  EXPECT_EQ(u.layout->open("/a", O_WRONLY).error(), EROFS);
  EXPECT_EQ(u.layout->symlink("/l", "a").error(), EROFS);
  EXPECT_EQ(u.layout->link("/a", "/h").error(), EROFS);
  EXPECT_TRUE(u.b[0]->has("/a"));
  EXPECT_TRUE(u.b[0]->has("/b"));
  EXPECT_FALSE(u.b[0]->has("/new"));
  EXPECT_EQ(u.b[0]->calls("rename"), 0u);
}

// Picks b0 for the first new entry, running `meanwhile` while it picks (another call on its way
// between the look for the name and the create), and the last branch for every other.
class RacingPolicy final : public CreatePolicy {
 public:
  std::string_view name() const override { return "racing"; }
  size_t pick(const std::vector<const Branch*>& candidates, std::string_view) override {
    if (picks_.fetch_add(1) > 0) return candidates.size() - 1;
    if (meanwhile) meanwhile();
    return 0;
  }
  std::function<void()> meanwhile;

 private:
  std::atomic<int> picks_{0};
};

// Two creates of one name through the gateway, each placed on another branch (rand, mfs): the
// second must see the first's entry, or both succeed, O_EXCL included, and one hides the other.
TEST(UnionLayout, TwoCreatesOfOneNameAtOnceMakeOneEntry) {
  using Make = std::function<int(UnionLayout&)>;
  const std::vector<std::pair<std::string, Make>> makes{
      {"create",
       [](UnionLayout& u) { return u.create("/n", O_WRONLY | O_CREAT | O_EXCL, 0644).error(); }},
      {"mkdir", [](UnionLayout& u) { return u.mkdir("/n", 0755).error(); }},
      {"symlink", [](UnionLayout& u) { return u.symlink("/n", "target").error(); }},
  };
  for (auto& [what, make] : makes) {
    auto policy = std::make_shared<RacingPolicy>();
    auto b0 = FakeBackend::make("b0"), b1 = FakeBackend::make("b1");
    UnionLayout u({{b0, BranchMode::read_write}, {b1, BranchMode::read_write}}, policy);
    std::thread other;
    int other_err = -1;
    policy->meanwhile = [&] {
      std::promise<void> done;
      auto finished = done.get_future();
      other = std::thread([&, done = std::move(done)]() mutable {
        other_err = make(u);
        done.set_value();
      });
      // Long enough for the other call to finish when nothing holds it back; held back (as it
      // should be, by this one), it goes on after this one.
      finished.wait_for(std::chrono::milliseconds(200));
    };
    const int first_err = make(u);
    other.join();
    EXPECT_EQ(first_err, 0) << what;
    EXPECT_EQ(other_err, EEXIST) << what;
    EXPECT_EQ(b0->has("/n") + b1->has("/n"), 1) << what << ": one entry";
  }
}

// A hard link made while a create of its new name chooses a branch: one of them is EEXIST, and
// the name is on one branch only.
TEST(UnionLayout, ALinkToANameBeingCreatedIsEexist) {
  auto policy = std::make_shared<RacingPolicy>();
  auto b0 = FakeBackend::make("b0"), b1 = FakeBackend::make("b1");
  b1->put_file("/src", "linked");
  UnionLayout u({{b0, BranchMode::read_write}, {b1, BranchMode::read_write}}, policy);
  std::thread other;
  int link_err = -1;
  policy->meanwhile = [&] {
    std::promise<void> done;
    auto finished = done.get_future();
    other = std::thread([&, done = std::move(done)]() mutable {
      link_err = u.link("/src", "/n").error();
      done.set_value();
    });
    finished.wait_for(std::chrono::milliseconds(200));
  };
  EXPECT_EQ(u.create("/n", O_WRONLY | O_CREAT | O_EXCL, 0644).error(), 0);
  other.join();
  EXPECT_EQ(link_err, EEXIST);
  EXPECT_EQ(b0->has("/n") + b1->has("/n"), 1) << "one entry";
}

TEST(UnionLayout, MkdirOfANameAnotherBranchHasIsEexist) {
  Union u(2);
  u.b[1]->put_dir("/d");
  EXPECT_EQ(u.layout->mkdir("/d", 0755).error(), EEXIST);
  EXPECT_EQ(u.layout->symlink("/d", "x").error(), EEXIST);
}

// --- Renames and links.

TEST(UnionLayout, RenameMovesEveryCopyOnItsOwnBranch) {
  Union u(2);
  u.b[0]->put_file("/a", "zero");
  u.b[1]->put_file("/a", "one");
  u.b[1]->put_dir("/dst");
  ASSERT_TRUE(u.layout->rename("/a", "/dst/b", 0));
  EXPECT_TRUE(u.holders("/a").empty());
  EXPECT_EQ(u.holders("/dst/b"), (Holders{0, 1}));
  EXPECT_EQ(*u.b[0]->contents("/dst/b"), "zero");
  EXPECT_TRUE(u.b[0]->attrs("/dst")) << "the target's directory cloned onto b0";
}

TEST(UnionLayout, RenameRemovesAnOldTargetOnABranchWithoutTheSource) {
  Union u(2);
  u.b[0]->put_file("/src", "new");
  u.b[1]->put_file("/dst", "old");
  ASSERT_TRUE(u.layout->rename("/src", "/dst", 0));
  EXPECT_EQ(u.holders("/dst"), (Holders{0}));
  EXPECT_EQ(*u.b[0]->contents("/dst"), "new");
  auto f = u.layout->open("/dst", O_RDONLY);
  ASSERT_TRUE(f);
  EXPECT_EQ((*f)->read(0, 10)->flatten(), "new") << "the old target does not resurface";
}

// An old target that stays would show instead of the file moved over it (its branch comes
// first): the rename failed, and says so, with the file moved back where it was.
TEST(UnionLayout, RenameWhoseOldTargetCannotBeRemovedFailsAndIsUndone) {
  Union u(2);
  u.b[0]->put_file("/dst", "old");
  u.b[1]->put_file("/src", "new");
  u.b[0]->fail("unlink", "/dst", EIO);
  EXPECT_EQ(u.layout->rename("/src", "/dst", 0).error(), EIO);
  EXPECT_EQ(u.holders("/src"), (Holders{1})) << "moved back";
  EXPECT_EQ(u.holders("/dst"), (Holders{0}));
  auto f = u.layout->open("/src", O_RDONLY);
  ASSERT_TRUE(f) << strerror(f.error());
  EXPECT_EQ((*f)->read(0, 10)->flatten(), "new");
}

TEST(UnionLayout, RenameThatFailsOnOneBranchIsUndoneOnTheOthers) {
  Union u(2);
  u.b[0]->put_file("/src", "zero");
  u.b[1]->put_file("/src", "one");
  u.b[1]->fail("rename", "/src", EACCES);
  EXPECT_EQ(u.layout->rename("/src", "/dst", 0).error(), EACCES);
  EXPECT_EQ(u.holders("/src"), (Holders{0, 1})) << "b0's copy moved back";
  EXPECT_TRUE(u.holders("/dst").empty());
}

// The merged target is empty only when every copy is: a directory renamed over one whose entries
// are on another branch would merge with them.
TEST(UnionLayout, RenameOfADirectoryOverOneNotEmptyOnAnotherBranchIsEnotempty) {
  Union u(2);
  u.b[0]->put_dir("/a");
  u.b[0]->put_file("/a/mine", "");
  u.b[1]->put_dir("/b");
  u.b[1]->put_file("/b/theirs", "");
  EXPECT_EQ(u.layout->rename("/a", "/b", 0).error(), ENOTEMPTY);
  EXPECT_EQ(u.b[0]->calls("rename"), 0u) << "refused before anything moved";
  EXPECT_EQ(u.holders("/a/mine"), (Holders{0}));
  EXPECT_EQ(u.holders("/b"), (Holders{1}));
  EXPECT_EQ(u.holders("/b/theirs"), (Holders{1}));
  EXPECT_TRUE(u.layout->rename("/b", "/b", 0)) << "onto itself: nothing to do";
  u.b[1]->put_dir("/c");  // empty: replaced
  ASSERT_TRUE(u.layout->rename("/a", "/c", 0));
  EXPECT_EQ(u.holders("/c"), (Holders{0}));
  EXPECT_EQ(u.holders("/c/mine"), (Holders{0}));
}

// rename(2) refuses a file over a directory (EISDIR) and a directory over a file (ENOTDIR), also
// where the target is on a branch without the source, which would not say so itself: nothing
// moves, and the target (an empty directory here, which would have been removed) stays.
TEST(UnionLayout, RenameBetweenAFileAndADirectoryOnAnotherBranchIsRefused) {
  Union u(2);
  u.b[0]->put_file("/file", "data");
  u.b[1]->put_dir("/emptydir");
  EXPECT_EQ(u.layout->rename("/file", "/emptydir", 0).error(), EISDIR);
  u.b[0]->put_dir("/dir");
  u.b[1]->put_file("/other", "x");
  EXPECT_EQ(u.layout->rename("/dir", "/other", 0).error(), ENOTDIR);
  EXPECT_EQ(u.b[0]->calls("rename") + u.b[1]->calls("rename"), 0u)
      << "refused before anything moved";
  EXPECT_EQ(u.holders("/file"), (Holders{0}));
  EXPECT_EQ(u.holders("/emptydir"), (Holders{1}));
  EXPECT_EQ(u.holders("/dir"), (Holders{0}));
  EXPECT_EQ(u.holders("/other"), (Holders{1}));
}

// A read-only branch's copy of the target cannot go: it would still show where its branch comes
// first, and come back once the new file went. The rename is refused and nothing moves.
TEST(UnionLayout, RenameOntoANameAReadOnlyBranchHoldsIsErofs) {
  for (size_t ro : {0, 1}) {
    std::vector<BranchMode> modes{BranchMode::read_write, BranchMode::read_write};
    modes[ro] = BranchMode::read_only;
    Union u(2, "ff", modes);
    u.b[ro]->put_file("/dst", "old");
    u.b[1 - ro]->put_file("/src", "new");
    EXPECT_EQ(u.layout->rename("/src", "/dst", 0).error(), EROFS) << "read-only b" << ro;
    EXPECT_EQ(u.holders("/src"), (Holders{1 - ro}));
    EXPECT_EQ(*u.b[ro]->contents("/dst"), "old");
    EXPECT_FALSE(u.b[1 - ro]->has("/dst"));
  }
}

TEST(UnionLayout, RenameThatCannotStayOnItsBranchIsExdev) {
  Union u(2, "ff", {BranchMode::read_only, BranchMode::read_write});
  u.b[0]->put_file("/ro", "x");
  EXPECT_EQ(u.layout->rename("/ro", "/moved", 0).error(), EXDEV) << "mv then copies";
  EXPECT_TRUE(u.b[0]->has("/ro"));

  Union v(2);
  v.b[0]->put_file("/f", "x");
  v.b[1]->put_dir("/d");
  v.b[0]->put_file("/d", "a file where b1 has a directory");
  // The union's /d is b0's file: the file cannot go below it on its own branch.
  EXPECT_EQ(v.layout->rename("/f", "/d/f", 0).error(), EXDEV);
}

TEST(UnionLayout, RenameWithoutReplaceRefusesAnExistingTarget) {
  Union u(2);
  u.b[0]->put_file("/a", "");
  u.b[1]->put_file("/b", "");
  EXPECT_EQ(u.layout->rename("/a", "/b", 1).error(), EEXIST);
  EXPECT_TRUE(u.b[1]->has("/b"));
  EXPECT_EQ(u.layout->rename("/missing", "/c", 0).error(), ENOENT);
}

TEST(UnionLayout, AHardLinkLivesOnTheBranchOfItsFile) {
  Union u(2);
  u.b[1]->put_file("/f", "data");
  u.b[0]->put_dir("/other");
  auto a = u.layout->link("/f", "/other/alias");
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(u.holders("/other/alias"), (Holders{1}));
  EXPECT_TRUE(u.b[1]->attrs("/other")) << "its directory cloned onto b1";
  EXPECT_EQ(*u.b[1]->contents("/other/alias"), "data");
  u.b[0]->put_dir("/dir");
  EXPECT_EQ(u.layout->link("/dir", "/dir2").error(), EPERM);
  EXPECT_EQ(u.layout->link("/f", "/other/alias").error(), EEXIST);
}

TEST(UnionLayout, StatfsAddsUpTheBranchesAndOffersOnlyWritableSpace) {
  Union u(2, "ff", {BranchMode::read_write, BranchMode::read_only});
  u.b[0]->set_space(400 << 20, 100 << 20);
  u.b[1]->set_space(800 << 20, 200 << 20);
  auto v = u.layout->statfs("/");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->blocks * v->frsize, static_cast<uint64_t>(1200) << 20);
  EXPECT_EQ(v->bfree * v->frsize, static_cast<uint64_t>(300) << 20);
  EXPECT_EQ(v->bavail * v->frsize, static_cast<uint64_t>(100) << 20)
      << "the read-only branch takes nothing";
  u.b[0]->set_down(true);
  u.b[1]->set_down(true);
  EXPECT_EQ(u.layout->statfs("/").error(), EIO);
}

TEST(UnionLayout, WritesThroughAnOpenFileReachItsBranch) {
  Union u(2);
  u.b[1]->put_file("/f", "0123456789");
  auto f = u.layout->open("/f", O_RDWR);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(2, bytes("ab")));
  EXPECT_EQ(*u.b[1]->contents("/f"), "01ab456789");
  AttrChange cut;
  cut.size = 4;
  ASSERT_TRUE(u.layout->setattr("/f", cut, f->get()));
  EXPECT_EQ(*u.b[1]->contents("/f"), "01ab");
}

TEST(UnionLayout, DescribeNamesBranchesModesAndPolicy) {
  Union u(2, "mfs", {BranchMode::read_write, BranchMode::no_create});
  EXPECT_EQ(u.layout->describe(), "union(b0, b1=NC; create mfs)");
  Union one(1);
  EXPECT_EQ(one.layout->describe(), "b0");
}

}  // namespace
}  // namespace skein
