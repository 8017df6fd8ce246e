// MountSession against the in-memory fake gateway, without a kernel: lookup counts and their
// rollback when a reply never reaches the kernel, the listing of an open directory (what fits,
// what is taken back, when it is fetched again), silly rename of open files, the attributes of an
// open file whose name is gone, the order of steps (writes settle before attributes are asked
// for) and errors as errnos.
#include "mount_session.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio.h>  // RENAME_NOREPLACE
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fake_gateway.hpp"
#include "skein/path.hpp"

namespace skein::client {
namespace {

using namespace std::chrono_literals;
using test::FakeGateway;

class MountSessionTest : public ::testing::Test {
 protected:
  // What one readdir offered and what the reply took.
  struct Filled {
    std::vector<std::string> names;
    std::vector<MountSession::ListItem> items;
  };

  // A reply with room for `room` entries.
  MountSession::ListFill room_for(std::size_t room, Filled& filled) {
    return [room, &filled](const MountSession::ListItem& item) {
      if (filled.names.size() == room) return false;
      filled.names.emplace_back(item.name);
      filled.items.push_back(item);
      return true;
    };
  }

  InodeNumber looked_up(const std::string& name, InodeNumber parent = kRootInode) {
    auto entry = session.lookup(parent, name);
    EXPECT_TRUE(entry) << name << ": errno " << entry.error();
    return entry ? entry->ref.ino : 0;
  }

  // Opens `ino` as the kernel would, returning the handle the kernel keeps.
  std::unique_ptr<FileHandle> opened(InodeNumber ino, uint32_t flags = O_RDWR) {
    auto opened = session.open(ino, flags);
    EXPECT_TRUE(opened) << "errno " << opened.error();
    return opened ? std::move(opened->file) : nullptr;
  }

  // A whole-file read as `cat` makes it: the lookup of `name` in `dir`, an open for reading, one
  // read of up to `size` bytes from 0, the release. Sending the read's reply (running its
  // ReadData::after_reply) is the caller's.
  Result<ReadData> read_whole(InodeNumber dir, const std::string& name, size_t size = 4096) {
    auto entry = session.lookup(dir, name);
    if (!entry) return Result<ReadData>::failure(entry.error());
    auto file = opened(entry->ref.ino, O_RDONLY);
    if (!file) return Result<ReadData>::failure(EIO);
    auto read = session.read(entry->ref.ino, *file, 0, size);
    session.release(entry->ref.ino, std::move(file));
    return read;
  }

  // A file "/f", looked up and held open for reading as a fill's caller holds it, with the
  // version its open saw (no file on failure).
  struct HeldForFill {
    InodeNumber ino = 0;
    int64_t mtime = 0;
    uint64_t size = 0;
    std::unique_ptr<FileHandle> file;
  };
  HeldForFill open_to_fill() {
    gw.put_file("/f", "contents");
    HeldForFill f;
    f.ino = looked_up("f");
    auto attrs = session.getattr(f.ino);
    if (!attrs) return f;
    f.mtime = attrs->attr.mtime_ns;
    f.size = attrs->attr.size;
    f.file = opened(f.ino, O_RDONLY);
    return f;
  }

  // Asynchronous creates on, the Watch stream healthy and the root's attributes current: what
  // the mount needs to answer a create in the root itself.
  void async_creates_in_root() {
    session.set_async_creates(true);
    cache.set_healthy(true);
    ASSERT_TRUE(session.getattr(kRootInode));
  }

  // What keeping the content of a file this mount wrote whole needs: asynchronous creates in the
  // root, and every server watched.
  void whole_files_kept() {
    ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
    cache.set_servers_watched(true);
  }

  // The bytes of a read, joined.
  static std::string text(const ReadData& d) {
    std::string out;
    for (auto piece : d.pieces) out += piece;
    return out;
  }

  // File "f" created in the root through the gateway, written by nobody yet, with the Watch
  // stream healthy and every server watched; its `file` is null if the create failed.
  MountSession::Created created_f() {
    cache.set_healthy(true);
    cache.set_servers_watched(true);
    auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY, 0644);
    EXPECT_TRUE(created) << "errno " << created.error();
    return created ? created.take() : MountSession::Created{};
  }

  // close(2) of a created file: its flush succeeds, then the release.
  void close_created(MountSession::Created& created) {
    const InodeNumber ino = created.entry.ref.ino;
    ASSERT_TRUE(session.flush(ino, *created.file));
    session.release(ino, std::move(created.file));
  }

  std::vector<std::string> listing_of(InodeNumber dir) {
    auto opened = session.opendir(dir);
    EXPECT_TRUE(opened);
    if (!opened) return {};
    Filled filled;
    auto listing = session.readdir(dir, *opened->dir, 0, false, room_for(100, filled));
    EXPECT_TRUE(listing);
    session.releasedir(std::move(opened->dir));
    return filled.names;
  }

  FakeGateway gw;
  GatewayClient gateway{gw.channel(), GatewayOptions{"default", "", 5000ms}};
  DataPath data;
  InodeTable inodes;
  CachePolicy cache;
  OpenInodes open_inodes;
  MountSession session{gateway, data, inodes, cache, open_inodes};
};

// ---- lookups and forgets ----

TEST_F(MountSessionTest, EveryEntryReplyCountsOneLookupAndForgetTakesThemBack) {
  gw.put_file("/a", "x");
  InodeNumber a = looked_up("a");
  EXPECT_EQ(looked_up("a"), a) << "one inode per path";
  EXPECT_EQ(inodes.lookup_count(a), 2u);
  session.forget(a, 1);
  EXPECT_EQ(inodes.lookup_count(a), 1u);
  EXPECT_EQ(inodes.find("/a"), a);
  session.forget(a, 1);
  EXPECT_EQ(inodes.lookup_count(a), 0u);
  EXPECT_FALSE(inodes.find("/a")) << "an inode the kernel forgot is dropped";
  EXPECT_EQ(inodes.size(), 1u);
}

TEST_F(MountSessionTest, AnEntryTheKernelNeverReceivedIsTakenBack) {
  gw.put_file("/a", "x");
  auto entry = session.lookup(kRootInode, "a");
  ASSERT_TRUE(entry);
  session.entry_not_received(*entry);
  EXPECT_EQ(inodes.lookup_count(entry->ref.ino), 0u);
  EXPECT_EQ(inodes.size(), 1u);
}

TEST_F(MountSessionTest, EntryRepliesOfChangesCountALookupToo) {
  auto dir = session.mkdir(kRootInode, "d", 040755);
  ASSERT_TRUE(dir);
  EXPECT_EQ(inodes.lookup_count(dir->ref.ino), 1u);
  EXPECT_TRUE(S_ISDIR(dir->attr.mode));
  EXPECT_EQ(dir->attr.mode & 07777, 0755u) << "only permission bits go to the gateway";
  auto link = session.symlink("/target", dir->ref.ino, "l");
  ASSERT_TRUE(link);
  EXPECT_EQ(inodes.lookup_count(link->ref.ino), 1u);
  EXPECT_EQ(*session.readlink(link->ref.ino), "/target");
  gw.put_file("/d/f", "data");
  auto hard = session.link(looked_up("f", dir->ref.ino), kRootInode, "g");
  ASSERT_TRUE(hard);
  EXPECT_EQ(inodes.find("/g"), hard->ref.ino) << "a hard link is a path of its own";
  EXPECT_EQ(hard->attr.nlink, 2u);
  EXPECT_EQ(gw.content("/g"), "data");
}

TEST_F(MountSessionTest, LookupErrorsCountNothing) {
  EXPECT_EQ(session.lookup(kRootInode, "missing").error(), ENOENT);
  EXPECT_EQ(session.lookup(kRootInode, "a/b").error(), EINVAL);
  EXPECT_EQ(session.lookup(kRootInode, "..").error(), EINVAL);
  EXPECT_EQ(session.lookup(12345, "x").error(), ESTALE) << "an inode this mount never gave out";
  gw.fail("GetAttr", "/denied", EACCES);
  EXPECT_EQ(session.lookup(kRootInode, "denied").error(), EACCES);
  EXPECT_EQ(inodes.size(), 1u);
}

// ---- listings ----

TEST_F(MountSessionTest, ReaddirplusCountsLookupsOnlyForTheEntriesThatFit) {
  gw.put_dir("/d");
  for (const char* name : {"f0", "f1", "f2", "f3"}) gw.put_file(std::string("/d/") + name, "x");
  InodeNumber d = looked_up("d");
  auto opened = session.opendir(d);
  ASSERT_TRUE(opened);
  Filled filled;
  auto listing = session.readdir(d, *opened->dir, 0, true, room_for(4, filled));
  ASSERT_TRUE(listing);
  EXPECT_EQ(filled.names, (std::vector<std::string>{".", "..", "f0", "f1"}));
  EXPECT_FALSE(filled.items[0].entry) << "the kernel takes no lookup for \".\"";
  ASSERT_TRUE(filled.items[2].entry);
  EXPECT_EQ(listing->counted.size(), 2u);
  EXPECT_EQ(inodes.lookup_count(*inodes.find("/d/f0")), 1u);
  EXPECT_EQ(inodes.lookup_count(*inodes.find("/d/f1")), 1u);
  EXPECT_FALSE(inodes.find("/d/f2")) << "f2 did not fit: its lookup was taken back";
  EXPECT_FALSE(listing->complete);
  session.listing_replied(d, *listing, /*received=*/true);
  EXPECT_EQ(inodes.lookup_count(*inodes.find("/d/f1")), 1u);

  // The next call goes on where the reply stopped, from the listing already fetched.
  Filled rest;
  auto more = session.readdir(d, *opened->dir, filled.items.back().next, true, room_for(10, rest));
  ASSERT_TRUE(more);
  EXPECT_EQ(rest.names, (std::vector<std::string>{"f2", "f3"}));
  EXPECT_EQ(gw.calls("ReadDir"), 1);
  session.releasedir(std::move(opened->dir));
}

TEST_F(MountSessionTest, AReaddirplusReplyTheKernelNeverReceivedTakesItsLookupsBack) {
  gw.put_dir("/d");
  gw.put_file("/d/a", "x");
  gw.put_file("/d/b", "x");
  InodeNumber d = looked_up("d");
  InodeNumber a = looked_up("a", d);  // the kernel already holds one lookup of a
  auto opened = session.opendir(d);
  ASSERT_TRUE(opened);
  Filled filled;
  auto listing = session.readdir(d, *opened->dir, 0, true, room_for(10, filled));
  ASSERT_TRUE(listing);
  EXPECT_EQ(inodes.lookup_count(a), 2u);
  session.listing_replied(d, *listing, /*received=*/false);
  EXPECT_EQ(inodes.lookup_count(a), 1u) << "only the reply's own lookup goes";
  EXPECT_FALSE(inodes.find("/d/b"));
  session.releasedir(std::move(opened->dir));
}

TEST_F(MountSessionTest, PlainReaddirCountsNothingAndGivesKnownInodes) {
  gw.put_file("/a", "x");
  gw.put_file("/b", "x");
  InodeNumber a = looked_up("a");
  auto opened = session.opendir(kRootInode);
  ASSERT_TRUE(opened);
  Filled filled;
  auto listing = session.readdir(kRootInode, *opened->dir, 0, false, room_for(10, filled));
  ASSERT_TRUE(listing);
  EXPECT_TRUE(listing->counted.empty());
  ASSERT_EQ(filled.items.size(), 4u);
  EXPECT_EQ(filled.items[2].known, a);
  EXPECT_FALSE(filled.items[3].known) << "b has no inode yet";
  EXPECT_EQ(inodes.lookup_count(a), 1u);
  session.releasedir(std::move(opened->dir));
}

TEST_F(MountSessionTest, TheListingIsFetchedAtOpendirAndAgainOnlyAtARewind) {
  gw.put_file("/a", "x");
  auto opened = session.opendir(kRootInode);
  ASSERT_TRUE(opened);
  EXPECT_EQ(gw.calls("ReadDir"), 1) << "opendir fetches, so that its errors come from it";
  Filled first;
  ASSERT_TRUE(session.readdir(kRootInode, *opened->dir, 0, false, room_for(10, first)));
  EXPECT_EQ(gw.calls("ReadDir"), 1);
  gw.put_file("/b", "x");
  Filled end;
  auto last = session.readdir(kRootInode, *opened->dir, 3, false, room_for(10, end));
  ASSERT_TRUE(last);
  EXPECT_TRUE(end.names.empty());
  EXPECT_TRUE(last->complete);
  Filled again;
  ASSERT_TRUE(session.readdir(kRootInode, *opened->dir, 0, false, room_for(10, again)));
  EXPECT_EQ(gw.calls("ReadDir"), 2) << "rewinddir shows what is there now";
  EXPECT_EQ(again.names, (std::vector<std::string>{".", "..", "a", "b"}));
  session.releasedir(std::move(opened->dir));
}

TEST_F(MountSessionTest, AKeptListingIsNotFetchedAgainWhileNothingChanged) {
  cache.set_healthy(true);
  gw.put_file("/a", "x");
  auto opened = session.opendir(kRootInode);
  ASSERT_TRUE(opened);
  EXPECT_TRUE(opened->dir->cache_readdir);
  EXPECT_FALSE(opened->keep_cache);
  Filled filled;
  auto listing = session.readdir(kRootInode, *opened->dir, 0, false, room_for(10, filled));
  Filled end;
  auto last = session.readdir(kRootInode, *opened->dir, 3, false, room_for(10, end));
  ASSERT_TRUE(listing && last && last->complete);
  session.listing_replied(kRootInode, *last, true);
  session.releasedir(std::move(opened->dir));

  gw.reset_calls();
  auto again = session.opendir(kRootInode);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->keep_cache) << "the kernel keeps the listing it has";
  EXPECT_EQ(gw.calls("ReadDir"), 0);
  session.releasedir(std::move(again->dir));

  cache.invalidating(kRootInode);  // an invalidation for the directory
  auto changed = session.opendir(kRootInode);
  ASSERT_TRUE(changed);
  EXPECT_FALSE(changed->keep_cache);
  EXPECT_EQ(gw.calls("ReadDir"), 1);
  session.releasedir(std::move(changed->dir));
}

// The kernel looks every name up before it creates it: after two misses the mount lists the
// directory once and answers the lookups of absent names itself, following its own creates; an
// invalidation of the directory (another mount's change) sends lookups to the gateway again.
TEST_F(MountSessionTest, LookupsOfAbsentNamesAreAnsweredFromTheDirectorysKnownNames) {
  cache.set_options({3600, 1, CachePolicy::Options::KnowNames::kAlways});  // --know-names always
  cache.set_healthy(true);
  gw.put_dir("/d");
  const InodeNumber d = looked_up("d");
  gw.reset_calls();
  for (int i = 0; i < 20; ++i) {
    const std::string name = "f" + std::to_string(i);
    auto miss = session.lookup(d, name);
    ASSERT_FALSE(miss);
    EXPECT_EQ(miss.error(), ENOENT);
    auto created = session.create(d, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
    ASSERT_TRUE(created) << created.error();
    session.release(created->entry.ref.ino, std::move(created->file));
    auto found = session.lookup(d, name);  // what this mount made is not taken for absent
    ASSERT_TRUE(found) << name;
  }
  EXPECT_EQ(gw.calls("ReadDir"), 1);
  EXPECT_LE(gw.calls("GetAttr"), 2 + 20) << "misses after the listing asked the gateway";

  gw.put_file("/d/made-elsewhere", "x");
  cache.invalidating(d);  // what the Watch stream does for another mount's create there
  EXPECT_TRUE(session.lookup(d, "made-elsewhere"));
  // In safe mode nothing is answered from what the mount knew.
  gw.put_file("/d/later", "y");
  cache.set_healthy(false);
  EXPECT_TRUE(session.lookup(d, "later"));
}

// --know-names made (the default): a directory this mount made answers lookups of absent names
// itself from its mkdir on; one it renames, and everything below it, asks the gateway again (the
// gateway does not yet count this mount among those that cache the new paths).
TEST_F(MountSessionTest, ADirectoryThisMountMadeAnswersAbsentNamesUntilItIsRenamed) {
  cache.set_options({3600, 1, CachePolicy::Options::KnowNames::kMadeDirs});
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  auto d = session.mkdir(kRootInode, "d", 0755);
  ASSERT_TRUE(d);
  auto sub = session.mkdir(d->ref.ino, "sub", 0755);
  ASSERT_TRUE(sub);
  gw.reset_calls();
  for (auto [dir, name] : {std::pair{d->ref.ino, "x"}, std::pair{sub->ref.ino, "y"}}) {
    auto miss = session.lookup(dir, name);
    ASSERT_FALSE(miss);
    EXPECT_EQ(miss.error(), ENOENT);
  }
  EXPECT_EQ(gw.calls("GetAttr"), 0) << "a made directory's absent names asked the gateway";
  ASSERT_TRUE(session.rename(kRootInode, "d", kRootInode, "e", 0));
  gw.put_file("/e/sub/z", "made elsewhere");
  gw.put_file("/e/w", "made elsewhere");
  EXPECT_TRUE(session.lookup(sub->ref.ino, "z")) << "names kept below a renamed directory";
  EXPECT_TRUE(session.lookup(d->ref.ino, "w")) << "names kept of a renamed directory";
}

// Files of one directory read whole one after another: after CachePolicy::kAheadAfter of them,
// the directory is read ahead (a listing, and a ReadFiles call for its small files), and the
// next files' lookups, opens and reads make no call. A change reported in the directory, whether
// the kernel has the changed file's inode or not, drops what was read ahead of that file, and
// the rest stays; a change of this mount's there drops it all.
TEST_F(MountSessionTest, ADirectoryWhoseFilesAreReadOneAfterAnotherIsReadAhead) {
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  // INODE and ENTRY invalidations as KernelCache applies them (the FUSE side is not in these
  // tests).
  const auto invalidate_inode = [&](const std::string& path) {
    cache.invalidating();
    if (auto ino = inodes.find(path)) cache.invalidating(*ino);
    if (auto dir = inodes.find(parent_path(path))) cache.drop_ahead_name(*dir, base_name(path));
  };
  const auto invalidate_entry = [&](const std::string& path) {
    cache.invalidating();
    if (auto dir = inodes.find(parent_path(path))) cache.invalidating_entry(*dir, base_name(path));
  };
  // What fuse_ops does with a read's reply: sends it, then runs its after_reply.
  const auto replied = [](ReadData& read) {
    std::string sent = text(read);
    if (read.after_reply) read.after_reply();
    return sent;
  };
  gw.put_dir("/d");
  const auto content = [](int i) { return "content of " + std::to_string(i); };
  for (int i = 0; i < 30; ++i) gw.put_file("/d/f" + std::to_string(i), content(i));
  gw.put_file("/d/big", std::string(CachePolicy::kContentFileBytes + 1, 'b'));
  const InodeNumber d = looked_up("d");
  const auto cat = [&](const std::string& name) -> std::string {
    auto read = read_whole(d, name, 128 << 10);
    return read ? replied(*read) : "errno " + std::to_string(read.error());
  };
  for (int i = 0; i < CachePolicy::kAheadAfter; ++i)
    EXPECT_EQ(cat("f" + std::to_string(i)), content(i));
  EXPECT_EQ(gw.calls("ReadDir"), 1);
  EXPECT_EQ(gw.calls("ReadFiles"), 1) << "26 small files in one call";
  gw.reset_calls();
  for (int i = CachePolicy::kAheadAfter; i < 10; ++i)
    EXPECT_EQ(cat("f" + std::to_string(i)), content(i));
  EXPECT_EQ(gw.total_calls(), 0) << "lookups, opens and reads answered from what was read ahead";
  // A file too large to be read ahead: its attributes were, its contents were not.
  const InodeNumber big = looked_up("big", d);
  EXPECT_EQ(gw.total_calls(), 0);
  auto file = opened(big, O_RDONLY);
  ASSERT_TRUE(file);
  ASSERT_TRUE(session.read(big, *file, 0, 4096));
  session.release(big, std::move(file));
  EXPECT_EQ(gw.calls("Read"), 1);

  // Another mount rewrites f10 (the kernel has no inode for it): the invalidation drops what was
  // read ahead of f10, whose lookup asks the gateway, and f11 is still answered here. So with an
  // invalidation of an entry (another mount renamed a file over f12).
  gw.put_file("/d/f10", "changed 10");
  invalidate_inode("/d/f10");
  gw.reset_calls();
  EXPECT_EQ(cat("f10"), "changed 10");
  EXPECT_EQ(gw.calls("GetAttr"), 1);
  gw.reset_calls();
  EXPECT_EQ(cat("f11"), content(11));
  EXPECT_EQ(gw.total_calls(), 0) << "another file's change dropped what was read ahead";
  gw.put_file("/d/f12", "changed 12");
  invalidate_entry("/d/f12");
  gw.reset_calls();
  EXPECT_EQ(cat("f12"), "changed 12");
  EXPECT_EQ(gw.calls("GetAttr"), 1);
  gw.reset_calls();
  EXPECT_EQ(cat("f13"), content(13));
  EXPECT_EQ(gw.total_calls(), 0) << "another entry's change dropped what was read ahead";

  // This mount removes a file there, and another mount makes one again behind the mount's back
  // (no invalidation reaches the mount for its own change): the lookup asks the gateway.
  ASSERT_TRUE(session.unlink(d, "f17"));
  gw.put_file("/d/f18", "changed 18");
  gw.reset_calls();
  EXPECT_EQ(cat("f18"), "changed 18");
  EXPECT_EQ(gw.calls("GetAttr"), 1);

  // A directory listed first (cp -r, rsync, grep -r): the kernel has every name from the
  // listing, so only the contents are read ahead, and the reads after the fourth make no call.
  gw.put_dir("/listed");
  for (int i = 0; i < 12; ++i) gw.put_file("/listed/g" + std::to_string(i), content(i));
  const InodeNumber listed = looked_up("listed");
  {
    auto dir = session.opendir(listed);
    ASSERT_TRUE(dir);
    Filled filled;
    auto listing = session.readdir(listed, *dir->dir, 0, true, room_for(100, filled));
    ASSERT_TRUE(listing);
    session.listing_replied(listed, *listing, true);
    session.releasedir(std::move(dir->dir));
  }
  const auto read_listed = [&](int i) -> std::string {
    const auto ino = inodes.find("/listed/g" + std::to_string(i));
    if (!ino) return "no inode";
    auto file = opened(*ino, O_RDONLY);
    if (!file) return "open failed";
    auto read = session.read(*ino, *file, 0, 128 << 10);
    session.release(*ino, std::move(file));
    return read ? replied(*read) : "read: errno " + std::to_string(read.error());
  };
  gw.reset_calls();
  for (int i = 0; i < CachePolicy::kAheadAfter; ++i) EXPECT_EQ(read_listed(i), content(i));
  EXPECT_EQ(gw.calls("ReadFiles"), 1);
  gw.reset_calls();
  for (int i = CachePolicy::kAheadAfter; i < 12; ++i) EXPECT_EQ(read_listed(i), content(i));
  EXPECT_EQ(gw.total_calls(), 0) << "the reads of files listed before were not read ahead";

  // Nothing is read ahead while the servers are not watched.
  cache.set_servers_watched(false);
  gw.reset_calls();
  for (int i = 19; i < 30; ++i) EXPECT_EQ(cat("f" + std::to_string(i)), content(i));
  EXPECT_EQ(gw.calls("ReadDir"), 0);
  EXPECT_EQ(gw.calls("ReadFiles"), 0);
}

// The read that makes a directory's read-ahead due returns before the read-ahead asks the gateway
// for anything: fuse_ops runs it once the reply is sent (ReadData::after_reply), since the kernel
// holds the pages that read fills locked until the reply, and an invalidation of the file (or a
// lease) would wait for the whole read-ahead. One that the directory's change overtook between
// the reply and its start fetches nothing.
TEST_F(MountSessionTest, ADirectorysReadAheadWaitsForTheReplyOfTheReadThatSetItOff) {
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  gw.put_dir("/d");
  for (int i = 0; i < 12; ++i) gw.put_file("/d/f" + std::to_string(i), "f" + std::to_string(i));
  const InodeNumber d = looked_up("d");
  const auto read_f = [&](int i) -> Result<ReadData> {
    const std::string name = "f" + std::to_string(i);
    auto read = read_whole(d, name);
    if (read) {
      EXPECT_EQ(text(*read), name);
    }
    return read;
  };
  for (int i = 0; i + 1 < CachePolicy::kAheadAfter; ++i) {
    auto read = read_f(i);
    ASSERT_TRUE(read);
    EXPECT_FALSE(read->after_reply) << "read ahead after " << i + 1 << " whole reads";
  }
  gw.reset_calls();
  auto due = read_f(CachePolicy::kAheadAfter - 1);
  ASSERT_TRUE(due);
  ASSERT_TRUE(due->after_reply) << "the read-ahead was not set off";
  EXPECT_EQ(gw.calls("ReadDir") + gw.calls("ReadFiles"), 0) << "read ahead before the reply";
  // Another mount's change of the directory (its mode) comes before the read-ahead starts.
  cache.invalidating(d);
  due->after_reply();
  EXPECT_EQ(gw.calls("ReadDir") + gw.calls("ReadFiles"), 0) << "read ahead what a change dropped";
  // The next whole reads set it off again, and then it fetches.
  for (int i = CachePolicy::kAheadAfter; i < 2 * CachePolicy::kAheadAfter; ++i) {
    auto read = read_f(i);
    ASSERT_TRUE(read);
    if (read->after_reply) read->after_reply();
  }
  EXPECT_EQ(gw.calls("ReadDir"), 1);
  EXPECT_EQ(gw.calls("ReadFiles"), 1);
  gw.reset_calls();
  auto after = read_f(2 * CachePolicy::kAheadAfter);
  ASSERT_TRUE(after);
  EXPECT_EQ(gw.total_calls(), 0) << "not answered from what was read ahead";
}

// The lookup of the next file, which comes while the directory's read-ahead listing is on its way
// (the read-ahead runs after the reply of the read that set it off), waits for the listing rather
// than asking the gateway for the name itself.
TEST_F(MountSessionTest, ALookupWhileADirectorysReadAheadIsBeingListedWaitsForTheListing) {
  using namespace std::chrono_literals;
  CachePolicy::Options options = cache.options();
  options.ahead_listing_wait = 60;  // longer than this test may take
  cache.set_options(options);
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  gw.put_dir("/d");
  for (int i = 0; i < 12; ++i) gw.put_file("/d/f" + std::to_string(i), "f" + std::to_string(i));
  const InodeNumber d = looked_up("d");
  std::function<void()> read_ahead;
  for (int i = 0; i < CachePolicy::kAheadAfter; ++i) {
    auto read = read_whole(d, "f" + std::to_string(i));
    ASSERT_TRUE(read);
    if (read->after_reply) read_ahead = read->after_reply;
  }
  ASSERT_TRUE(read_ahead) << "the read-ahead was not set off";
  gw.hold_listings(true);
  gw.reset_calls();
  auto reading_ahead = std::async(std::launch::async, read_ahead);
  for (int i = 0; i < 10000 && gw.calls("ReadDir") == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(gw.calls("ReadDir"), 1);
  const std::string next = "f" + std::to_string(CachePolicy::kAheadAfter);
  auto looking_up = std::async(std::launch::async, [&] { return session.lookup(d, next); });
  for (int i = 0; i < 10000 && cache.ahead_counts().waits == 0; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(cache.ahead_counts().waits, 1u) << "the lookup did not wait for the listing";
  gw.hold_listings(false);
  ASSERT_EQ(looking_up.wait_for(30s), std::future_status::ready);
  reading_ahead.get();
  auto entry = looking_up.get();
  ASSERT_TRUE(entry) << "errno " << entry.error();
  EXPECT_EQ(gw.calls("GetAttr"), 0) << "the lookup asked the gateway";
  EXPECT_EQ(cache.ahead_counts().names, 1u);
  auto file = opened(entry->ref.ino, O_RDONLY);
  ASSERT_TRUE(file);
  auto read = session.read(entry->ref.ino, *file, 0, 4096);
  session.release(entry->ref.ino, std::move(file));
  ASSERT_TRUE(read);
  EXPECT_EQ(text(*read), next);
}

// A read-ahead whose listing fails holds nothing and stops no later one: the next whole reads in
// the directory set off another.
TEST_F(MountSessionTest, ADirectoryWhoseReadAheadListingFailedIsReadAheadAgainLater) {
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  gw.put_dir("/d");
  for (int i = 0; i < 12; ++i) gw.put_file("/d/f" + std::to_string(i), "f" + std::to_string(i));
  const InodeNumber d = looked_up("d");
  const auto read_f = [&](int i) {
    const std::string name = "f" + std::to_string(i);
    auto read = read_whole(d, name);
    ASSERT_TRUE(read) << name << ": errno " << read.error();
    EXPECT_EQ(text(*read), name);
    if (read->after_reply) read->after_reply();
  };
  gw.fail("ReadDir", "/d", EIO);
  for (int i = 0; i < CachePolicy::kAheadAfter; ++i) read_f(i);
  EXPECT_EQ(gw.calls("ReadDir"), 1) << "the read-ahead was not set off";
  gw.fail("ReadDir", "/d", 0);
  for (int i = CachePolicy::kAheadAfter; i < 2 * CachePolicy::kAheadAfter; ++i) read_f(i);
  EXPECT_EQ(gw.calls("ReadDir"), 2) << "not read ahead again after a failed listing";
  gw.reset_calls();
  read_f(2 * CachePolicy::kAheadAfter);
  EXPECT_EQ(gw.total_calls(), 0) << "not answered from what was read ahead";
}

// An open for reading of a file whose attributes the mount holds as current (Watch stream up, no
// invalidation since) makes no call: the first read names the mount's own handle, and the gateway
// opens the file by path. Nothing is released for an open that never reached the gateway.
TEST_F(MountSessionTest, OpensForReadingOfCurrentFilesAreDeferredToTheFirstRead) {
  using namespace std::chrono_literals;
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  gw.put_file("/f", "contents");
  gw.put_file("/private", "secret", 0600);
  const InodeNumber f = looked_up("f");
  const InodeNumber p = looked_up("private");
  gw.reset_calls();

  auto unread = opened(f, O_RDONLY);
  ASSERT_TRUE(unread);
  EXPECT_EQ(gw.calls("Open"), 0);
  EXPECT_NE(unread->gw_handle, 0u);
  session.release(f, std::move(unread));

  // Read whole from offset 0: one call in which the gateway opens, reads and closes the file.
  auto file = opened(f, O_RDONLY);
  ASSERT_TRUE(file);
  EXPECT_EQ(gw.calls("Open"), 0);
  auto read = session.read(f, *file, 0, 100);
  ASSERT_TRUE(read) << read.error();
  EXPECT_EQ(read->size, 8u);
  EXPECT_EQ(gw.calls("Read"), 1);
  EXPECT_EQ(gw.calls("Read.whole_file"), 1);
  session.release(f, std::move(file));

  // Read in part: the call names the handle, which the gateway then holds until the release.
  auto part = opened(f, O_RDONLY);
  ASSERT_TRUE(part);
  auto some = session.read(f, *part, 2, 3);
  ASSERT_TRUE(some) << some.error();
  EXPECT_EQ(some->size, 3u);
  EXPECT_EQ(gw.calls("Read.whole_file"), 1);
  session.release(f, std::move(part));
  for (int i = 0; i < 500 && gw.calls("Release") < 1; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(100ms);  // an unread open's release would have come by now
  EXPECT_EQ(gw.calls("Release"), 1)
      << "only the open the gateway holds is released: not the unread one, nor the one read whole";

  // Not for a file some server user might not be allowed to read, nor for writing.
  auto priv = opened(p, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 1);
  session.release(p, std::move(priv));
  auto rw = opened(f, O_RDWR);
  EXPECT_EQ(gw.calls("Open"), 2);
  session.release(f, std::move(rw));
  // Nor once the file may have changed: another mount's change, or this mount's write.
  cache.invalidating(f);
  auto after = opened(f, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 3);
  session.release(f, std::move(after));
  ASSERT_TRUE(session.getattr(f));  // current again
  auto again = opened(f, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 3);
  session.release(f, std::move(again));
  // Nor while a server's change could go unreported.
  cache.set_servers_watched(false);
  ASSERT_TRUE(session.getattr(f));
  auto unwatched = opened(f, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 4);
  session.release(f, std::move(unwatched));
  cache.set_servers_watched(true);
  ASSERT_TRUE(session.getattr(f));
  cache.set_healthy(false);
  auto unhealthy = opened(f, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 5);
  session.release(f, std::move(unhealthy));
}

TEST_F(MountSessionTest, ADeferredOpenOfAFileRemovedElsewhereFailsAtTheFirstRead) {
  cache.set_healthy(true);
  cache.set_servers_watched(true);
  gw.put_file("/f", "contents");
  const InodeNumber f = looked_up("f");
  auto file = opened(f, O_RDONLY);
  ASSERT_TRUE(file);
  gw.remove("/f");  // another mount removed it; its invalidation comes after the open
  auto read = session.read(f, *file, 0, 100);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.error(), ENOENT);
  session.release(f, std::move(file));
}

TEST_F(MountSessionTest, ListingErrorsComeFromOpendir) {
  gw.put_dir("/d");
  InodeNumber d = looked_up("d");
  gw.fail("ReadDir", "/d", EACCES);
  EXPECT_EQ(session.opendir(d).error(), EACCES);
  gw.remove("/d");
  gw.fail("ReadDir", "/d", 0);
  EXPECT_EQ(session.opendir(d).error(), ENOENT);
}

// ---- silly rename and open files whose name is gone ----

TEST_F(MountSessionTest, UnlinkOfAnOpenFileHidesItUntilItsLastClose) {
  gw.put_file("/f", "contents");
  InodeNumber f = looked_up("f");
  auto file = opened(f);
  ASSERT_TRUE(file);
  ASSERT_TRUE(session.unlink(kRootInode, "f"));
  EXPECT_FALSE(gw.exists("/f"));
  std::vector<std::string> names = gw.names("/");
  ASSERT_EQ(names.size(), 1u);
  EXPECT_TRUE(OpenInodes::is_hidden_name(names[0])) << names[0];
  EXPECT_EQ(listing_of(kRootInode), (std::vector<std::string>{".", ".."}))
      << "listings leave hidden names out";
  EXPECT_EQ(session.lookup(kRootInode, "f").error(), ENOENT);

  auto attr = session.getattr(f);  // fstat of the open descriptor
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 8u);
  auto read = session.read(f, *file, 0, 100);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->size, 8u);

  session.release(f, std::move(file));
  EXPECT_TRUE(gw.names("/").empty()) << "the last close removes it for good";
}

TEST_F(MountSessionTest, UnlinkOfAFileNotOpenRemovesIt) {
  gw.put_file("/f", "x");
  InodeNumber f = looked_up("f");
  ASSERT_TRUE(session.unlink(kRootInode, "f"));
  EXPECT_TRUE(gw.names("/").empty());
  EXPECT_FALSE(inodes.path_of(f)) << "the inode is detached from the name";
  EXPECT_EQ(session.getattr(f).error(), ENOENT);
  EXPECT_EQ(session.unlink(kRootInode, "f").error(), ENOENT);
}

TEST_F(MountSessionTest, AnOpenFileRemovedBehindTheMountsBackKeepsItsLastAttributes) {
  gw.put_file("/f", "12345");
  gw.put_file("/g", "x");
  InodeNumber f = looked_up("f");
  InodeNumber g = looked_up("g");
  auto file = opened(f);
  gw.remove("/f");  // through another mount, or on the server
  gw.remove("/g");
  auto attr = session.getattr(f);
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 5u);
  EXPECT_EQ(attr->timeout, 0) << "not to be cached";
  EXPECT_EQ(session.getattr(g).error(), ENOENT) << "a file not open is simply gone";
  session.release(f, std::move(file));
  EXPECT_EQ(session.getattr(f).error(), ENOENT) << "closed: gone too";
}

TEST_F(MountSessionTest, AnOpenTheKernelNeverReceivedIsReleased) {
  gw.put_file("/f", "x");
  InodeNumber f = looked_up("f");
  auto opened = session.open(f, O_RDONLY);
  ASSERT_TRUE(opened);
  EXPECT_EQ(gw.open_handles(), 1u);
  EXPECT_TRUE(open_inodes.is_open(f));
  session.open_not_received(f, std::move(opened->file));
  EXPECT_EQ(gw.open_handles(), 0u);
  EXPECT_FALSE(open_inodes.is_open(f));
}

TEST_F(MountSessionTest, ACreateTheKernelNeverReceivedTakesBackItsLookupAndItsOpen) {
  auto created = session.create(kRootInode, "new", O_CREAT | O_RDWR, 0100640);
  ASSERT_TRUE(created);
  const InodeNumber ino = created->entry.ref.ino;
  EXPECT_EQ(inodes.lookup_count(ino), 1u);
  EXPECT_TRUE(open_inodes.is_open(ino));
  EXPECT_EQ(created->entry.attr.mode & 07777, 0640u);
  session.create_not_received(created.take());
  EXPECT_EQ(gw.open_handles(), 0u);
  EXPECT_FALSE(open_inodes.is_open(ino));
  EXPECT_EQ(inodes.lookup_count(ino), 0u);
  EXPECT_TRUE(gw.exists("/new")) << "the file itself was made";
}

// ---- order of steps ----

TEST_F(MountSessionTest, AttributesWaitForTheWritesAcknowledgedBeforeThem) {
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(created);
  const InodeNumber ino = created->entry.ref.ino;
  gw.hold_writes(true);
  int taken = 0;
  ASSERT_TRUE(session.write(ino, *created->file, 0, "hello world", [&] { ++taken; }));
  EXPECT_EQ(taken, 1) << "acknowledged once the bytes are taken, before the gateway has them";
  auto getattr = std::async(std::launch::async, [&] { return session.getattr(ino); });
  EXPECT_EQ(getattr.wait_for(200ms), std::future_status::timeout)
      << "getattr must wait for the write the kernel was told is done";
  gw.hold_writes(false);
  auto attr = getattr.get();
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 11u);
  EXPECT_EQ(gw.content("/f"), "hello world");
  ASSERT_TRUE(session.flush(ino, *created->file));
  session.release(ino, std::move(created->file));
}

// cat or cp of a file this mount wrote, whose attributes are not current after the write (here:
// written while the servers were not watched): the open goes to the gateway, the kernel was told
// other attributes (at create), so it drops them and asks again at once (fstat); the open's
// fresh attributes answer that.
TEST_F(MountSessionTest, AnOpenOfAFileWrittenHereAnswersTheGetattrThatFollowsIt) {
  cache.set_healthy(true);
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  ASSERT_TRUE(session.write(f, *created->file, 0, "hello", [] {}));
  ASSERT_TRUE(session.flush(f, *created->file));
  session.release(f, std::move(created->file));
  cache.set_servers_watched(true);
  gw.reset_calls();

  auto reading = session.open(f, O_RDONLY);
  ASSERT_TRUE(reading);
  EXPECT_EQ(gw.calls("Open"), 1);
  EXPECT_TRUE(reading->refresh_attrs) << "the kernel was told size 0 at create";
  auto attr = session.getattr(f);
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 5u);
  EXPECT_EQ(gw.calls("GetAttr"), 0) << "answered from the open's attributes";
  session.release(f, std::move(reading->file));
  auto again = opened(f, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 1) << "the next open needs no call";
  session.release(f, std::move(again));

  // A write on its way while another open asks the gateway: the attributes that open gets may
  // predate the write, so the getattr after it waits for the write and asks.
  auto writer = opened(f, O_WRONLY);
  gw.hold_writes(true);
  ASSERT_TRUE(session.write(f, *writer, 5, " world", [] {}));
  auto racing = session.open(f, O_RDONLY);
  ASSERT_TRUE(racing);
  EXPECT_EQ(gw.calls("Open"), 3);  // the writer's and this one
  auto getattr = std::async(std::launch::async, [&] { return session.getattr(f); });
  EXPECT_EQ(getattr.wait_for(200ms), std::future_status::timeout);
  gw.hold_writes(false);
  auto after = getattr.get();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->attr.size, 11u);
  EXPECT_EQ(gw.calls("GetAttr"), 1);
  ASSERT_TRUE(session.flush(f, *writer));
  session.release(f, std::move(writer));
  session.release(f, std::move(racing->file));

  // A change of this mount's (a link: the link count) makes what was kept stale.
  auto fresh = opened(f, O_RDONLY);
  session.release(f, std::move(fresh));
  ASSERT_TRUE(session.getattr(f));
  const int asked = gw.calls("GetAttr");
  ASSERT_TRUE(session.link(f, kRootInode, "g"));
  auto linked = session.getattr(f);
  ASSERT_TRUE(linked);
  EXPECT_EQ(gw.calls("GetAttr"), asked + 1);
  EXPECT_EQ(linked->attr.nlink, 2u);

  // Nor without the servers watched (a server's change could go unreported).
  cache.set_servers_watched(false);
  auto unwatched = session.open(f, O_RDONLY);
  ASSERT_TRUE(unwatched);
  ASSERT_TRUE(session.getattr(f));
  EXPECT_EQ(gw.calls("GetAttr"), asked + 2);
  session.release(f, std::move(unwatched->file));
}

// A file written here and closed (rsync, cp, a compiler's output): the last write brought the
// file's attributes back, so the kernel's getattr after the close, and the next open, make no
// call. A write of another open file on its way, or one after, is not taken for kept.
TEST_F(MountSessionTest, TheLastWriteBeforeACloseBringsTheAttributesBack) {
  auto created = created_f();
  ASSERT_TRUE(created.file);
  const InodeNumber f = created.entry.ref.ino;
  gw.reset_calls();
  ASSERT_TRUE(session.write(f, *created.file, 0, "hello", [] {}));
  ASSERT_TRUE(session.flush(f, *created.file));
  EXPECT_EQ(gw.calls("Write.report_attrs"), 1);
  auto attr = session.getattr(f);
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 5u);
  EXPECT_EQ(gw.calls("GetAttr"), 0) << "answered from the write's attributes";
  session.release(f, std::move(created.file));
  auto reading = opened(f, O_RDONLY);
  EXPECT_EQ(gw.calls("Open"), 0) << "the file is current: its open needs no call";
  session.release(f, std::move(reading));

  // Two open files writing at once: a call's attributes are taken only where nothing else was
  // sent while it was on its way (answers may come in another order than the writes landed).
  auto one = opened(f, O_WRONLY);
  auto two = opened(f, O_WRONLY);
  gw.hold_writes(true);
  ASSERT_TRUE(session.write(f, *one, 5, " one", [] {}));  // on its way, held
  ASSERT_TRUE(session.write(f, *two, 9, " two", [] {}));  // gathered behind it
  // The flush sends the second beside the first (both held), then waits for both.
  auto flushing = std::async(std::launch::async, [&] { return session.flush(f, *two); });
  EXPECT_EQ(flushing.wait_for(200ms), std::future_status::timeout);
  gw.hold_writes(false);
  ASSERT_TRUE(flushing.get());
  const int asked = gw.calls("GetAttr");
  auto after = session.getattr(f);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->attr.size, 13u);
  EXPECT_EQ(gw.calls("GetAttr"), asked + 1) << "no write was alone on its way: asked";
  ASSERT_TRUE(session.flush(f, *one));
  session.release(f, std::move(one));
  session.release(f, std::move(two));
  EXPECT_EQ(gw.content("/f"), "hello one two");
}

TEST_F(MountSessionTest, AWriteUsesNothingOfItsFileOnceItsReplyHasGone) {
  // The reply to a write lets the kernel close the file at once: on another of the mount's
  // threads, the release may free the file's handle while the write's thread is still on its way
  // out (a use after free that crashed the mount). What the write keeps in the handle is
  // recorded before the reply; here the release comes within the reply itself.
  auto created = created_f();
  ASSERT_TRUE(created.file);
  const InodeNumber f = created.entry.ref.ino;
  ASSERT_TRUE(session.write(f, *created.file, 0, "hello", [] {}));
  ASSERT_TRUE(session.flush(f, *created.file));  // nothing on its way but what follows
  auto other = opened(f, O_WRONLY);              // keeps the file's write-behind past the release
  gw.hold_writes(true);
  ASSERT_TRUE(session.write(f, *other, 5, " one", [] {}));  // on its way, held
  const FileHandle* handle = created.file.get();
  bool recorded_before_reply = false;
  bool released = false;
  // Gathered behind the held write, so that the release's flush sends it (when the reply comes
  // from another thread than the release, the write's thread sends it).
  ASSERT_TRUE(session.write(f, *created.file, 9, " two", [&] {
    recorded_before_reply = handle->last_write && handle->last_write->second == cache.writes(f);
    gw.hold_writes(false);
    ASSERT_TRUE(session.flush(f, *created.file));  // close(2), as soon as the reply is in
    session.release(f, std::move(created.file));   // frees the handle
    released = true;
  }));
  EXPECT_TRUE(released);
  EXPECT_TRUE(recorded_before_reply) << "the write's count is recorded before the reply";
  ASSERT_TRUE(session.flush(f, *other));
  session.release(f, std::move(other));
  EXPECT_EQ(gw.content("/f"), "hello one two");
}

TEST_F(MountSessionTest, TruncateThroughAnOpenFileUsesItsHandle) {
  gw.put_file("/f", "0123456789");
  InodeNumber f = looked_up("f");
  auto file = opened(f);
  SetAttrArgs change;
  change.fields = SetAttrArgs::kSize;
  change.size = 4;
  auto attr = session.setattr(f, change, file.get());
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 4u);
  EXPECT_EQ(gw.content("/f"), "0123");
  session.release(f, std::move(file));
}

TEST_F(MountSessionTest, AnUnchangedDirectorysAttributesAreAnsweredByTheMount) {
  cache.set_healthy(true);
  gw.put_dir("/d");
  InodeNumber d = looked_up("d");
  gw.reset_calls();
  ASSERT_TRUE(session.getattr(d));
  EXPECT_EQ(gw.calls("GetAttr"), 0) << "the kernel asks after every readdir: no round trip";
  ASSERT_TRUE(session.mkdir(d, "sub", 0755));  // a change of an entry in it
  ASSERT_TRUE(session.getattr(d));
  EXPECT_EQ(gw.calls("GetAttr"), 1);
}

TEST_F(MountSessionTest, AfterAnUnlinkTheDirectorysAttributesComeFromItsReply) {
  cache.set_healthy(true);
  gw.put_dir("/d");
  gw.put_file("/d/f", "x");
  InodeNumber d = looked_up("d");
  ASSERT_TRUE(session.lookup(d, "f"));
  auto before = session.getattr(d);
  ASSERT_TRUE(before);
  gw.reset_calls();
  ASSERT_TRUE(session.unlink(d, "f"));
  auto after = session.getattr(d);
  ASSERT_TRUE(after);
  EXPECT_EQ(gw.calls("GetAttr"), 0) << "the unlink's reply said how it left the directory";
  EXPECT_NE(after->attr.mtime_ns, before->attr.mtime_ns) << "and that is what the kernel is told";
}

TEST_F(MountSessionTest, RenameMovesTheInodesOfTheSubtree) {
  gw.put_dir("/a");
  gw.put_file("/a/x", "x");
  InodeNumber a = looked_up("a");
  InodeNumber x = looked_up("x", a);
  gw.put_dir("/b");
  ASSERT_TRUE(session.rename(kRootInode, "a", kRootInode, "c", 0));
  EXPECT_EQ(inodes.path_of(x), "/c/x");
  EXPECT_EQ(session.rename(kRootInode, "c", kRootInode, "b", RENAME_NOREPLACE).error(), EEXIST);
  EXPECT_EQ(inodes.path_of(a), "/c") << "a refused rename moves nothing";
  EXPECT_EQ(session.rename(kRootInode, "c", kRootInode, "b", 0x80).error(), EINVAL);
  EXPECT_EQ(gw.calls("Rename"), 2) << "unknown flags never reach the gateway";
}

// ---- errors ----

TEST_F(MountSessionTest, TheGatewaysErrorsComeBackAsTheirErrno) {
  gw.put_dir("/d");
  gw.put_file("/d/f", "x");
  gw.put_file("/f", "x");
  InodeNumber d = looked_up("d");
  InodeNumber f = looked_up("f");
  EXPECT_EQ(session.mkdir(kRootInode, "d", 0755).error(), EEXIST);
  EXPECT_EQ(session.rmdir(kRootInode, "d").error(), ENOTEMPTY);
  EXPECT_EQ(session.unlink(kRootInode, "d").error(), EISDIR);
  EXPECT_EQ(session.readlink(f).error(), EINVAL);
  EXPECT_EQ(session.create(kRootInode, "f", O_CREAT | O_EXCL | O_WRONLY, 0644).error(), EEXIST);
  gw.fail("Open", "/f", EACCES);
  EXPECT_EQ(session.open(f, O_RDONLY).error(), EACCES);
  EXPECT_FALSE(open_inodes.is_open(f)) << "a failed open leaves nothing open";
  EXPECT_EQ(gw.open_handles(), 0u);
  gw.fail("Mkdir", "/d/sub", ENOSPC);
  EXPECT_EQ(session.mkdir(d, "sub", 0755).error(), ENOSPC);
  EXPECT_FALSE(inodes.find("/d/sub"));
}

TEST_F(MountSessionTest, AWriteErrorReachesTheNextFlushOnce) {
  gw.put_file("/f", "");
  InodeNumber f = looked_up("f");
  auto file = opened(f, O_WRONLY);
  gw.fail("Write", "/f", ENOSPC);
  Status written = session.write(f, *file, 0, "data", [] {});
  if (!written) {
    EXPECT_EQ(written.error(), ENOSPC);
  }
  // At the flush whether or not the write had it (the kernel may have dropped that report).
  EXPECT_EQ(session.flush(f, *file).error(), ENOSPC);
  EXPECT_TRUE(session.flush(f, *file)) << "reported once to flushes";
  session.release(f, std::move(file));
}

// Pages of a shared mapping, which the kernel writes back through whichever open file of the inode
// it picks: through to the gateway before the reply, so that the error goes to the kernel (which
// keeps it for the mapping's msync, fsync and close) and not to that open file's writer.
TEST_F(MountSessionTest, AWriteOfMappedPagesGoesThroughAndReturnsItsError) {
  gw.put_file("/f", "");
  InodeNumber f = looked_up("f");
  auto file = opened(f, O_RDWR);
  gw.hold_writes(true);  // write-behind would acknowledge before the gateway answers
  std::atomic<bool> taken{false};
  auto page = std::async(std::launch::async, [&] {
    return session.write(
        f, *file, 0, "page", [&] { taken = true; }, /*from_pages=*/true);
  });
  EXPECT_EQ(page.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "acknowledged before the gateway had it";
  EXPECT_FALSE(taken);
  gw.hold_writes(false);
  EXPECT_TRUE(page.get());
  EXPECT_TRUE(taken);
  EXPECT_EQ(gw.content("/f"), "page");
  gw.fail("Write", "/f", ENOSPC);
  taken = false;
  EXPECT_EQ(session
                .write(
                    f, *file, 0, "more", [&] { taken = true; }, true)
                .error(),
            ENOSPC);
  EXPECT_FALSE(taken);
  EXPECT_TRUE(session.flush(f, *file)) << "the error was the kernel's to keep";
  session.release(f, std::move(file));
}

TEST_F(MountSessionTest, StatfsOfAnInodeWhoseNameIsGoneAsksForTheRoot) {
  gw.put_file("/f", "x");
  InodeNumber f = looked_up("f");
  ASSERT_TRUE(session.unlink(kRootInode, "f"));
  auto stats = session.statfs(f);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->blocks, 1000u);
}

// ---- asynchronous creates ----

// echo > f: the create is answered without a call; the first write makes the file with its bytes
// in one call, and close then has nothing left to send.
TEST_F(MountSessionTest, AnAsynchronousCreateIsMadeByItsFirstWrite) {
  session.set_async_creates(true);
  cache.set_healthy(true);
  auto root = session.getattr(kRootInode);  // the directory's attributes, current
  ASSERT_TRUE(root);
  gw.reset_calls();
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY | O_TRUNC, 0640);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  EXPECT_EQ(gw.calls("Create") + gw.calls("Write") + gw.calls("GetAttr"), 0);
  EXPECT_FALSE(gw.exists("/f")) << "not made before it is used";
  EXPECT_EQ(created->entry.attr.mode, S_IFREG | 0640u);
  EXPECT_EQ(created->entry.attr.uid, root->attr.uid) << "its directory's";
  EXPECT_EQ(created->entry.timeout, 0) << "the mount's guess of the attributes is not kept";
  int taken = 0;
  ASSERT_TRUE(session.write(f, *created->file, 0, "tiny file\n", [&] { ++taken; }));
  EXPECT_EQ(taken, 1);
  EXPECT_EQ(gw.calls("Write.create"), 1);
  EXPECT_EQ(gw.content("/f"), "tiny file\n");
  ASSERT_TRUE(session.write(f, *created->file, 10, "more", [] {}));
  ASSERT_TRUE(session.flush(f, *created->file));
  EXPECT_EQ(gw.calls("Write.create"), 1) << "made once";
  EXPECT_EQ(gw.calls("Create"), 0);
  EXPECT_EQ(gw.content("/f"), "tiny file\nmore");
  session.release(f, std::move(created->file));
}

// echo > f; cat f: a file this mount wrote whole is read back without a call (no open, no
// attributes, no read) while nothing changes it; once another mount's change of it is announced,
// the read asks the gateway again.
TEST_F(MountSessionTest, AFileAnAsynchronousCreateWroteWholeIsReadBackWithoutACall) {
  ASSERT_NO_FATAL_FAILURE(whole_files_kept());
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  ASSERT_TRUE(session.write(f, *created->file, 0, "tiny file\n", [] {}));
  ASSERT_NO_FATAL_FAILURE(close_created(*created));
  // The release goes without waiting: let it arrive before counting.
  for (int i = 0; i < 500 && gw.calls("Release") < 1; ++i) std::this_thread::sleep_for(10ms);
  gw.reset_calls();

  auto found = session.lookup(kRootInode, "f");  // the kernel did not keep the created entry
  ASSERT_TRUE(found);
  EXPECT_EQ(found->ref.ino, f);
  EXPECT_GT(found->timeout, 0) << "the entry may be kept now";
  session.forget(f, 1);
  auto attrs = session.getattr(f);
  ASSERT_TRUE(attrs);
  EXPECT_EQ(attrs->attr.size, 10u) << "the server's, from the write";
  auto file = opened(f, O_RDONLY);
  ASSERT_TRUE(file);
  auto read = session.read(f, *file, 0, 4096);
  ASSERT_TRUE(read) << read.error();
  EXPECT_EQ(text(*read), "tiny file\n");
  auto part = session.read(f, *file, 5, 3);
  ASSERT_TRUE(part);
  EXPECT_EQ(text(*part), "fil");
  auto past = session.read(f, *file, 10, 100);
  ASSERT_TRUE(past);
  EXPECT_EQ(past->size, 0u);
  session.release(f, std::move(file));
  EXPECT_EQ(gw.calls("Open") + gw.calls("GetAttr") + gw.calls("Read"), 0);
  EXPECT_EQ(gw.total_calls(), 0);

  gw.put_file("/f", "rewritten elsewhere");
  cache.invalidating(f);  // what the Watch stream does for it
  file = opened(f, O_RDONLY);
  ASSERT_TRUE(file);
  read = session.read(f, *file, 0, 4096);
  ASSERT_TRUE(read) << read.error();
  EXPECT_EQ(text(*read), "rewritten elsewhere");
  EXPECT_GE(gw.calls("Read"), 1);
  session.release(f, std::move(file));
}

// echo > f in a shell: the redirection closes a duplicate of the descriptor before the write, so
// a flush makes the file empty; the first write, from offset 0, then asks for the attributes
// after it, and the file is read back without a call as above.
TEST_F(MountSessionTest, TheFirstWriteOfAFileAFlushMadeEmptyBringsItsAttributesBack) {
  ASSERT_NO_FATAL_FAILURE(whole_files_kept());
  for (const std::string name : {"echo", "again"}) {
    auto created = session.create(kRootInode, name, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_TRUE(created);
    const InodeNumber f = created->entry.ref.ino;
    ASSERT_TRUE(session.flush(f, *created->file));  // the duplicate's close
    EXPECT_TRUE(gw.exists("/" + name));
    gw.reset_calls();
    int taken = 0;
    ASSERT_TRUE(session.write(f, *created->file, 0, name + " text\n", [&] { ++taken; }));
    EXPECT_EQ(taken, 1);
    EXPECT_EQ(gw.calls("Write.report_attrs"), 1) << name;
    EXPECT_EQ(gw.content("/" + name), name + " text\n") << "on the server once write returns";
    ASSERT_NO_FATAL_FAILURE(close_created(*created));
    gw.reset_calls();
    auto file = opened(f, O_RDONLY);
    ASSERT_TRUE(file);
    auto attrs = session.getattr(f);  // the kernel's, after the open told it to drop its own
    ASSERT_TRUE(attrs);
    EXPECT_EQ(attrs->attr.size, name.size() + 6);
    auto read = session.read(f, *file, 0, 4096);
    ASSERT_TRUE(read) << read.error();
    EXPECT_EQ(text(*read), name + " text\n");
    session.release(f, std::move(file));
    EXPECT_EQ(gw.calls("Open") + gw.calls("Read") + gw.calls("GetAttr"), 0) << name;
  }
}

// Another write of this mount's to the file (through another handle) while the first one is on
// its way: what the first write's reply says need not be all of the file, and is not kept.
TEST_F(MountSessionTest, AWriteMeanwhileKeepsTheFirstWriteFromBeingTakenForTheWholeFile) {
  ASSERT_NO_FATAL_FAILURE(whole_files_kept());
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  ASSERT_TRUE(session.flush(f, *created->file));  // a shell's duplicate closed: made empty
  gw.reset_calls();
  gw.hold_writes(true);
  std::thread first([&] { EXPECT_TRUE(session.write(f, *created->file, 0, "mine", [] {})); });
  for (int i = 0; i < 500 && gw.calls("Write") < 1; ++i) std::this_thread::sleep_for(10ms);
  cache.wrote(f);  // another handle's write, counted as MountSession::write counts it
  gw.hold_writes(false);
  first.join();
  EXPECT_EQ(gw.calls("Write.report_attrs"), 1);
  EXPECT_FALSE(cache.whole_content(f));
  EXPECT_FALSE(cache.current_attrs(f).has_value());
  ASSERT_NO_FATAL_FAILURE(close_created(*created));
}

// Only what the mount knows whole: a file written in more than one piece is read from the
// gateway, whether its first write made it or came after a flush had (the second goes as any
// write).
TEST_F(MountSessionTest, AFileNotWrittenWholeInOnePieceIsReadFromTheGateway) {
  ASSERT_NO_FATAL_FAILURE(whole_files_kept());
  for (const bool flushed_first : {false, true}) {
    const std::string name = flushed_first ? "flushed" : "two";
    auto created = session.create(kRootInode, name, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ASSERT_TRUE(created);
    const InodeNumber two = created->entry.ref.ino;
    if (flushed_first) {
      ASSERT_TRUE(session.flush(two, *created->file));
    }
    ASSERT_TRUE(session.write(two, *created->file, 0, "first ", [] {}));
    ASSERT_TRUE(session.write(two, *created->file, 6, "second", [] {}));
    ASSERT_NO_FATAL_FAILURE(close_created(*created));
    gw.reset_calls();
    auto file = opened(two, O_RDONLY);
    ASSERT_TRUE(file);
    auto read = session.read(two, *file, 0, 4096);
    ASSERT_TRUE(read) << read.error();
    EXPECT_EQ(read->size, 12u) << name;
    EXPECT_EQ(text(*read), "first second") << name;
    EXPECT_GE(gw.calls("Read"), 1) << name;
    session.release(two, std::move(file));
  }
}

// The kernel asks for the directory's attributes at the next path walk (a create changed its
// mtime): the directory as the create left it answers, as after a create that waited.
TEST_F(MountSessionTest, TheCallThatMakesAnAsynchronousCreateBringsItsDirectorysAttributes) {
  cache.set_healthy(true);
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  gw.put_dir("/d");
  const InodeNumber d = looked_up("d");
  auto created = session.create(d, "f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  ASSERT_TRUE(session.write(f, *created->file, 0, "x", [] {}));
  ASSERT_TRUE(session.flush(f, *created->file));
  session.release(f, std::move(created->file));
  gw.reset_calls();
  auto dir = session.getattr(d);
  ASSERT_TRUE(dir);
  EXPECT_EQ(gw.calls("GetAttr"), 0);
}

// cp of a large file: the create goes alone, and the first write, like the rest, is taken at
// once and sent by write-behind.
TEST_F(MountSessionTest, ALargeFirstWriteOfAnAsynchronousCreateGoesAfterTheCreate) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  auto created = session.create(kRootInode, "big", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  const std::string data(256 << 10, 'b');
  ASSERT_TRUE(session.write(f, *created->file, 0, data, [] {}));
  EXPECT_EQ(gw.calls("Write.create"), 1);
  EXPECT_TRUE(gw.exists("/big"));
  ASSERT_TRUE(session.flush(f, *created->file));
  EXPECT_EQ(gw.content("/big"), data);
  session.release(f, std::move(created->file));
}

// touch f: no write; close(2) makes the file before it returns.
TEST_F(MountSessionTest, AnAsynchronousCreateWithoutWritesIsMadeByTheFlush) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  EXPECT_FALSE(gw.exists("/f"));
  ASSERT_TRUE(session.flush(f, *created->file));
  EXPECT_TRUE(gw.exists("/f"));
  EXPECT_EQ(gw.content("/f"), "");
  session.release(f, std::move(created->file));
  EXPECT_EQ(gw.calls("Write.create"), 1);
}

// A create the server refuses (permissions, quota, a full disk): the first write returns the
// error, and so does close; nothing is made.
TEST_F(MountSessionTest, AnAsynchronousCreateThatFailsReportsItsErrorAtWriteAndClose) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  gw.fail("Create", "/f", EDQUOT);
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  int taken = 0;
  Status written = session.write(f, *created->file, 0, "data", [&] { ++taken; });
  EXPECT_EQ(written.error(), EDQUOT);
  EXPECT_EQ(taken, 0);
  EXPECT_EQ(session.flush(f, *created->file).error(), EDQUOT) << "close reports it too";
  EXPECT_EQ(session.write(f, *created->file, 0, "data", [] {}).error(), EDQUOT);
  EXPECT_EQ(gw.calls("Write.create"), 1) << "not tried again";
  EXPECT_FALSE(gw.exists("/f"));
  session.release(f, std::move(created->file));
  // Released all the same: a gateway that made the file and then refused its write (a quota)
  // holds its handle until then.
  for (int i = 0; i < 500 && gw.calls("Release") < 1; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(gw.calls("Release"), 1);
}

TEST_F(MountSessionTest, AnAsynchronousCreateWithoutWritesThatFailsReportsItsErrorAtClose) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  gw.fail("Create", "/f", EACCES);
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(created);
  EXPECT_EQ(session.flush(created->entry.ref.ino, *created->file).error(), EACCES);
  session.release(created->entry.ref.ino, std::move(created->file));
}

// Anything that might see the file or its directory at the gateway (stat, ls, rename, another
// open) first makes the creates still to go.
TEST_F(MountSessionTest, CallsThatMightSeeAnAsynchronousCreateMakeItFirst) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  gw.put_dir("/d");
  const InodeNumber d = looked_up("d");
  auto created = session.create(d, "f", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(created);
  const InodeNumber f = created->entry.ref.ino;
  EXPECT_FALSE(gw.exists("/d/f"));
  auto told = session.getattr(f);  // the kernel's check of the open's permissions
  ASSERT_TRUE(told);
  EXPECT_EQ(told->attr.mode, S_IFREG | 0644u);
  EXPECT_EQ(told->timeout, 0);
  EXPECT_FALSE(gw.exists("/d/f")) << "the file's own attributes, as told, need no call";
  EXPECT_EQ(listing_of(d), (std::vector<std::string>{".", "..", "f"}));
  EXPECT_TRUE(gw.exists("/d/f"));
  const int asked = gw.calls("GetAttr");
  auto attr = session.getattr(f);
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->attr.size, 0u);
  EXPECT_EQ(gw.calls("GetAttr"), asked + 1) << "made: the gateway's attributes now";
  ASSERT_TRUE(session.flush(f, *created->file));
  EXPECT_EQ(gw.calls("Write.create"), 1);
  session.release(f, std::move(created->file));

  auto second = session.create(d, "g", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(second);
  ASSERT_TRUE(session.rename(d, "g", d, "h", 0));
  EXPECT_TRUE(gw.exists("/d/h"));
  EXPECT_FALSE(gw.exists("/d/g"));
  ASSERT_NO_FATAL_FAILURE(close_created(*second));
  EXPECT_EQ(gw.calls("Write.create"), 2);
}

// O_EXCL must fail at open when the name exists, and a file open for reading must be there to
// read: those creates wait for the server.
TEST_F(MountSessionTest, ExclusiveAndReadableCreatesWaitForTheServer) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  auto excl = session.create(kRootInode, "e", O_CREAT | O_EXCL | O_WRONLY, 0644);
  ASSERT_TRUE(excl);
  auto rw = session.create(kRootInode, "r", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(rw);
  EXPECT_EQ(gw.calls("Create"), 2);
  EXPECT_TRUE(gw.exists("/e"));
  EXPECT_TRUE(gw.exists("/r"));
  ASSERT_NO_FATAL_FAILURE(close_created(*excl));
  ASSERT_NO_FATAL_FAILURE(close_created(*rw));
  EXPECT_EQ(gw.calls("Write.create"), 0);
}

// Where the directory's attributes are not current (the Watch stream is down, or the directory
// changed), or say nobody may write there (a directory the gateway synthesises), the create waits
// for the server, so that its error comes at open.
TEST_F(MountSessionTest, CreatesWaitForTheServerWhereTheDirectoryIsNotKnownWritable) {
  session.set_async_creates(true);
  gw.put_dir("/ro", 0555);
  auto unknown = session.create(kRootInode, "f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(gw.calls("Create"), 1) << "no current attributes of the directory (not healthy)";
  cache.set_healthy(true);
  const InodeNumber ro = looked_up("ro");
  auto refused = session.create(ro, "f", O_CREAT | O_WRONLY | O_TRUNC, 0644);
  EXPECT_EQ(gw.calls("Create"), 2) << "a directory nobody may write";
  ASSERT_NO_FATAL_FAILURE(close_created(*unknown));
  if (refused) {
    ASSERT_NO_FATAL_FAILURE(close_created(*refused));
  }
  EXPECT_EQ(gw.calls("Write.create"), 0);
}

// A create reply the kernel never received (an interrupted open): nothing is made.
TEST_F(MountSessionTest, AnAsynchronousCreateTheKernelNeverReceivedMakesNothing) {
  ASSERT_NO_FATAL_FAILURE(async_creates_in_root());
  auto created = session.create(kRootInode, "f", O_CREAT | O_WRONLY, 0644);
  ASSERT_TRUE(created);
  session.create_not_received(created.take());
  EXPECT_EQ(session.getattr(kRootInode).error(), 0);
  EXPECT_FALSE(gw.exists("/f"));
  EXPECT_EQ(gw.calls("Write") + gw.calls("Release") + gw.calls("Create"), 0);
}

// ---- the control socket's cache fills ----

// The fill command's fetches of one file share one gateway handle while the kernel has the file
// open here: opened at the first, released at the last close, and opened afresh for another
// version.
TEST_F(MountSessionTest, AFileFilledChunkByChunkIsOpenedAtTheGatewayOnce) {
  HeldForFill held = open_to_fill();
  auto& [ino, mtime, size, file] = held;
  ASSERT_TRUE(file);
  gw.reset_calls();
  const std::size_t before = gw.open_handles();

  auto first = session.fill_handle(ino, "/f", mtime, size, false);
  ASSERT_TRUE(first);
  EXPECT_TRUE(first->kept);
  for (int chunk = 1; chunk < 8; ++chunk) {
    auto next = session.fill_handle(ino, "/f", mtime, size, false);
    ASSERT_TRUE(next);
    EXPECT_EQ(next->handle, first->handle);
  }
  EXPECT_EQ(gw.calls("Open"), 1);
  EXPECT_EQ(gw.open_handles(), before + 1);

  // A fetch for a version the gateway does not have: refused, and the kept handle goes.
  EXPECT_EQ(session.fill_handle(ino, "/f", mtime + 1, size, false).error(), ESTALE);
  auto again = session.fill_handle(ino, "/f", mtime, size, false);
  ASSERT_TRUE(again);
  EXPECT_EQ(gw.calls("Open"), 3);

  // The last close releases it (and the open's own handle); a fill of a file not open here keeps
  // nothing.
  session.release(ino, std::move(file));
  for (int i = 0; i < 200 && gw.open_handles() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(gw.open_handles(), 0u);
  auto unkept = session.fill_handle(ino, "/f", mtime, size, false);
  ASSERT_TRUE(unkept);
  EXPECT_FALSE(unkept->kept);
  EXPECT_TRUE(gateway.release(FileRef{"/f", unkept->handle, O_RDONLY}));
  EXPECT_EQ(gw.open_handles(), 0u);
}

// A caller who is not privileged is judged by the attributes of the file the handle opened
// (OpenRequest.attrs_of_file). A handle kept for privileged callers, opened without them, does not
// serve it: it gets one of its own, not kept. One kept with them serves every caller.
TEST_F(MountSessionTest, AFillHandleForAJudgedCallerCarriesTheAttributesOfTheFileItOpened) {
  HeldForFill held = open_to_fill();
  auto& [ino, mtime, size, file] = held;
  ASSERT_TRUE(file);
  gw.reset_calls();

  auto plain = session.fill_handle(ino, "/f", mtime, size, false);
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->kept);
  EXPECT_FALSE(plain->attr);
  auto judged = session.fill_handle(ino, "/f", mtime, size, true);
  ASSERT_TRUE(judged);
  EXPECT_FALSE(judged->kept);
  EXPECT_NE(judged->handle, plain->handle);
  ASSERT_TRUE(judged->attr);
  EXPECT_EQ(judged->attr->size, size);
  EXPECT_TRUE(gateway.release(FileRef{"/f", judged->handle, O_RDONLY}));
  EXPECT_EQ(session.fill_handle(ino, "/f", mtime, size, false)->handle, plain->handle);
  EXPECT_EQ(gw.calls("Open"), 2);
  session.release(ino, std::move(file));

  // Kept with the attributes: every caller's.
  file = opened(ino, O_RDONLY);
  ASSERT_TRUE(file);
  auto with = session.fill_handle(ino, "/f", mtime, size, true);
  ASSERT_TRUE(with);
  EXPECT_TRUE(with->kept);
  ASSERT_TRUE(with->attr);
  EXPECT_EQ(session.fill_handle(ino, "/f", mtime, size, false)->handle, with->handle);
  EXPECT_EQ(session.fill_handle(ino, "/f", mtime, size, true)->handle, with->handle);
  session.release(ino, std::move(file));
}

}  // namespace
}  // namespace skein::client
