// NamespaceFs over in-memory backends: paths go to the mount with the longest prefix, the
// directories above mount points are answered by the namespace itself, operations that would
// cross mounts are EXDEV, open files are handles that follow renames and are re-opened by path
// when the gateway no longer knows them, and a new mount table swapped in serves the next call.
#include "namespace/namespace_fs.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attrs_each.hpp"
#include "backend/backend_file.hpp"
#include "fake_backend.hpp"
#include "namespace/create_policy.hpp"
#include "namespace/striped_layout.hpp"
#include "namespace/union_layout.hpp"

namespace skein {
namespace {

using test::FakeBackend;

SharedBytes bytes(const std::string& s) {
  auto keep = std::make_shared<std::string>(s);
  return SharedBytes({std::string_view(*keep)}, keep);
}

std::shared_ptr<Layout> single(std::shared_ptr<FakeBackend> b) {
  return std::make_shared<UnionLayout>(std::vector<Branch>{{std::move(b), BranchMode::read_write}},
                                       make_create_policy("ff"));
}

// Namespace "ns" with /srv0 and /srv1 on one backend each, and /data/striped striped over s0, s1.
struct Namespace {
  Namespace() {
    srv0 = FakeBackend::make("srv0");
    srv1 = FakeBackend::make("srv1");
    s0 = FakeBackend::make("s0");
    s1 = FakeBackend::make("s1");
    auto striped = std::make_shared<StripedLayout>(std::vector<std::shared_ptr<Backend>>{s0, s1},
                                                   static_cast<uint64_t>(4096));
    fs = std::make_unique<NamespaceFs>(
        "ns", TokenSet::of("secret"),
        std::make_shared<const MountTable>(std::vector<Mount>{
            {"/srv0", single(srv0)}, {"/srv1", single(srv1)}, {"/data/striped", striped}}));
  }
  std::shared_ptr<FakeBackend> srv0, srv1, s0, s1;
  std::unique_ptr<NamespaceFs> fs;
};

std::set<std::string> names_of(const std::vector<DirEntryAttrs>& entries) {
  std::set<std::string> out;
  for (auto& e : entries) out.insert(e.name);
  return out;
}

TEST(NamespaceFs, PathsGoToTheMountWithTheLongestPrefix) {
  Namespace n;
  n.srv0->put_file("/a/f", "zero");
  n.srv1->put_file("/a/f", "one!!");
  EXPECT_EQ(n.fs->getattr("/srv0/a/f")->size, 4u);
  EXPECT_EQ(n.fs->getattr("/srv1/a/f")->size, 5u);
  ASSERT_TRUE(n.fs->mkdir("/srv1/new", 0755));
  EXPECT_TRUE(n.srv1->has("/new"));
  EXPECT_FALSE(n.srv0->has("/new"));
  ASSERT_TRUE(n.fs->mkdir("/data/striped/dir", 0755));
  EXPECT_TRUE(n.s0->has("/dir"));
  EXPECT_TRUE(n.s1->has("/dir"));
  EXPECT_EQ(n.fs->getattr("/srv2").error(), ENOENT);
}

TEST(NamespaceFs, DirectoriesAboveMountPointsAreTheNamespacesOwn) {
  Namespace n;
  auto root = n.fs->getattr("/");
  ASSERT_TRUE(root);
  EXPECT_TRUE(S_ISDIR(root->permissions));
  auto l = n.fs->readdir("/");
  ASSERT_TRUE(l);
  EXPECT_EQ(names_of(*l), (std::set<std::string>{"data", "srv0", "srv1"}));
  EXPECT_EQ(names_of(*n.fs->readdir("/data")), (std::set<std::string>{"striped"}));
  EXPECT_EQ(n.fs->mkdir("/data", 0755).error(), EEXIST);
  EXPECT_EQ(n.fs->mkdir("/elsewhere", 0755).error(), EACCES) << "no mount holds it";
  EXPECT_EQ(n.fs->create("/file", O_WRONLY, 0644).error(), EACCES);
  EXPECT_EQ(n.fs->rmdir("/srv0").error(), EBUSY) << "a mount point stays";
  EXPECT_EQ(n.fs->unlink("/data").error(), EISDIR);
  EXPECT_EQ(n.fs->rename("/srv0", "/srv9", 0).error(), EBUSY);
  EXPECT_EQ(n.fs->open("/data", O_RDONLY).error(), EISDIR);
}

TEST(NamespaceFs, AMountPointShowsItsBackendsRootAndAStandInWhenItIsDown) {
  Namespace n;
  sftp::Attrs mode;
  mode.flags = sftp::ATTR_PERMISSIONS;
  mode.permissions = 0700;
  ASSERT_TRUE(n.srv0->setstat("/", mode));
  EXPECT_EQ(n.fs->getattr("/srv0")->permissions & 07777, 0700u);
  auto entry_of = [](const std::vector<DirEntryAttrs>& entries, const std::string& name) {
    for (auto& e : entries)
      if (e.name == name) return e.attrs.permissions & 07777;
    return 0u;
  };
  auto listed = n.fs->readdir("/");
  ASSERT_TRUE(listed);
  EXPECT_EQ(entry_of(*listed, "srv0"), 0700u)
      << "the listing shows the mount point as getattr does";
  EXPECT_EQ(entry_of(*listed, "data"), 0555u) << "a directory above the mount points";
  n.srv0->set_down(true);
  auto stand_in = n.fs->getattr("/srv0");
  ASSERT_TRUE(stand_in) << "the mount point still shows while its backend is down";
  EXPECT_EQ(stand_in->permissions & 07777, 0555u) << "nothing can be made in it";
  auto l = n.fs->readdir("/");
  ASSERT_TRUE(l);
  EXPECT_EQ(names_of(*l).count("srv0"), 1u);
  EXPECT_EQ(entry_of(*l, "srv0"), 0555u);
}

// getattr_each answers each path as getattr does, whichever mount holds it, in the order asked:
// paths of several mounts, the directories above them, a mount point whose server is down.
TEST(NamespaceFs, AttributesOfManyPathsAreThoseOfEachAlone) {
  Namespace n;
  n.srv0->put_file("/a/f", "zero");
  n.srv1->put_file("/a/f", "one!!");
  ASSERT_TRUE(n.fs->mkdir("/data/striped/dir", 0755));
  auto c = n.fs->create("/data/striped/dir/s", O_WRONLY, 0644);
  ASSERT_TRUE(c);
  auto f = n.fs->file(c->handle, "/data/striped/dir/s", O_WRONLY);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(0, bytes(std::string(10000, 's'))));
  ASSERT_TRUE(n.fs->release(c->handle));
  n.srv1->set_down(true);
  const std::vector<std::string> paths{"/srv1/a/f",           "/",      "/srv0/a/f",  "/data",
                                       "/srv0/none",          "/srv1",  "/elsewhere", "/srv0",
                                       "/data/striped/dir/s", "/srv0/a"};
  auto each = n.fs->getattr_each(paths);
  test::expect_each_as_alone(each, paths, [&](const std::string& p) { return n.fs->getattr(p); });
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(each[0].error(), EIO) << "its server is down";
  EXPECT_EQ(each[2]->size, 4u);
  EXPECT_EQ(each[4].error(), ENOENT);
  EXPECT_EQ(each[5]->permissions & 07777, 0555u) << "the stand-in of a mount point that is down";
  EXPECT_EQ(each[6].error(), ENOENT);
  EXPECT_EQ(each[8]->size, 10000u) << "striped: the size from every part";
  EXPECT_TRUE(n.fs->getattr_each({}).empty());
}

TEST(NamespaceFs, RenamesAndLinksAcrossMountsAreExdev) {
  Namespace n;
  n.srv0->put_file("/f", "x");
  EXPECT_EQ(n.fs->rename("/srv0/f", "/srv1/f", 0).error(), EXDEV) << "mv copies instead";
  EXPECT_EQ(n.fs->link("/srv0/f", "/srv1/f").error(), EXDEV);
  EXPECT_EQ(n.fs->rename("/srv0/f", "/srv0/g", 2).error(), EINVAL)
      << "RENAME_EXCHANGE cannot be done over SFTP";
  ASSERT_TRUE(n.fs->rename("/srv0/f", "/srv0/g", 0));
  EXPECT_TRUE(n.srv0->has("/g"));
  EXPECT_TRUE(n.srv1->names("/").empty());
}

TEST(NamespaceFs, StatfsAboveTheMountsAddsUpEveryBackendOnce) {
  Namespace n;
  for (auto& b : {n.srv0, n.srv1, n.s0, n.s1}) b->set_space(100 << 20, 10 << 20);
  auto all = n.fs->statfs("/");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->blocks * all->frsize, static_cast<uint64_t>(400) << 20);
  auto data = n.fs->statfs("/data");
  ASSERT_TRUE(data);
  EXPECT_EQ(data->blocks * data->frsize, static_cast<uint64_t>(200) << 20)
      << "only what lies below /data";
  auto one = n.fs->statfs("/srv1/x");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->blocks * one->frsize, static_cast<uint64_t>(100) << 20);
}

TEST(NamespaceFs, OpenFilesAreHandlesThatFollowRenames) {
  Namespace n;
  auto c = n.fs->create("/srv0/f", O_RDWR, 0644);
  ASSERT_TRUE(c) << strerror(c.error());
  EXPECT_NE(c->handle, 0u);
  EXPECT_EQ(n.fs->open_files(), 1u);
  auto f = n.fs->file(c->handle, "/srv0/f", O_RDWR);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(0, bytes("hello")));
  ASSERT_TRUE(n.fs->rename("/srv0/f", "/srv0/g", 0));
  auto again = n.fs->file(c->handle, "/srv0/g", O_RDWR);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), f->get()) << "the same open file, by its new name";
  EXPECT_EQ((*again)->rel_path(), "/g");
  EXPECT_EQ(n.fs->path_of(c->handle), "/srv0/g");
  ASSERT_TRUE(n.fs->release(c->handle));
  EXPECT_EQ(n.fs->open_files(), 0u);
  EXPECT_FALSE(n.fs->path_of(c->handle));
  EXPECT_EQ(*n.srv0->contents("/g"), "hello");
}

// The renames are the gateway's to follow: a client whose mount saw the file before another
// mount renamed it (or a directory above it) names it by its old path, which moves nothing back,
// and its ftruncate changes the file, not whatever is at the old path.
TEST(NamespaceFs, OpenFilesFollowRenamesMadeByOthersNotTheirClientsOldPaths) {
  Namespace n;
  n.srv0->put_file("/d/f", "0123456789");
  n.srv0->put_file("/other", "unrelated");
  auto o = n.fs->open("/srv0/d/f", O_RDWR);
  ASSERT_TRUE(o);
  EXPECT_EQ(n.fs->path_of(o->handle), "/srv0/d/f");
  ASSERT_TRUE(n.fs->rename("/srv0/d", "/srv0/e", 0));
  EXPECT_EQ(n.fs->path_of(o->handle), "/srv0/e/f") << "moved with its directory";
  ASSERT_TRUE(n.fs->rename("/srv0/e/f", "/srv0/e/g", 0));
  EXPECT_EQ(n.fs->path_of(o->handle), "/srv0/e/g");
  ASSERT_TRUE(n.fs->rename("/srv0/other", "/srv0/e/g2", 0));
  ASSERT_TRUE(n.fs->rename("/srv0/e/g2", "/srv0/e/g3", 0));
  EXPECT_EQ(n.fs->path_of(o->handle), "/srv0/e/g") << "another file's renames move it not";
  auto f = n.fs->file(o->handle, "/srv0/d/f", O_RDWR);  // the client's old path
  ASSERT_TRUE(f);
  EXPECT_EQ((*f)->rel_path(), "/e/g");
  EXPECT_EQ(n.fs->path_of(o->handle), "/srv0/e/g");
  n.srv0->put_file("/d/f", "another file at the old path");
  AttrChange cut;
  cut.size = 3;
  auto a = n.fs->setattr("/srv0/d/f", cut, o->handle);
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(*n.srv0->contents("/e/g"), "012");
  EXPECT_EQ(*n.srv0->contents("/d/f"), "another file at the old path");
  ASSERT_TRUE(n.fs->release(o->handle));
}

// The hard links made through the namespace are known by name (SFTP tells nobody two names are
// one file): a link joins the names, a rename moves one (a directory's, those below it), a
// rename of one name onto another of the same file leaves both, and an unlink, a rename over a
// name or a whole file made at a name takes that name out.
TEST(NamespaceFs, TheHardLinksMadeThroughItAreFollowedByName) {
  Namespace n;
  n.srv0->put_file("/d/f", "data");
  using Names = std::vector<std::string>;
  ASSERT_TRUE(n.fs->link("/srv0/d/f", "/srv0/d/g"));
  EXPECT_EQ(n.fs->links().others("/srv0/d/f"), Names{"/srv0/d/g"});
  EXPECT_EQ(n.fs->links().others("/srv0/d/g"), Names{"/srv0/d/f"});
  ASSERT_TRUE(n.fs->rename("/srv0/d", "/srv0/e", 0));
  EXPECT_EQ(n.fs->links().others("/srv0/e/f"), Names{"/srv0/e/g"});
  ASSERT_TRUE(n.fs->rename("/srv0/e/g", "/srv0/e/f", 0));  // one file: rename(2) does nothing
  EXPECT_EQ(n.fs->links().others("/srv0/e/f"), Names{"/srv0/e/g"});
  ASSERT_TRUE(n.fs->link("/srv0/e/f", "/srv0/h"));
  EXPECT_EQ(n.fs->links().others("/srv0/h").size(), 2u);
  ASSERT_TRUE(n.fs->unlink("/srv0/e/g"));
  EXPECT_EQ(n.fs->links().others("/srv0/h"), Names{"/srv0/e/f"});
  n.srv0->put_file("/other", "another file");
  ASSERT_TRUE(n.fs->rename("/srv0/other", "/srv0/h", 0));  // over a name: it goes
  EXPECT_TRUE(n.fs->links().others("/srv0/e/f").empty());
  ASSERT_TRUE(n.fs->link("/srv0/e/f", "/srv0/i"));
  auto made =
      n.fs->write_whole_files({NewWholeFile{"/srv0/i", "/srv0/.i.part", bytes("new"), 0644, 1, 2}});
  ASSERT_TRUE(made[0]) << strerror(made[0].error());
  EXPECT_TRUE(n.fs->links().others("/srv0/e/f").empty()) << "a new file at the name";
}

TEST(NamespaceFs, AnUnknownHandleIsReopenedByPathNeverCreatingOrTruncating) {
  Namespace n;
  n.srv0->put_file("/f", "kept");
  constexpr uint64_t kFromBeforeARestart = 0x1234;
  auto f = n.fs->file(kFromBeforeARestart, "/srv0/f", O_RDWR | O_CREAT | O_TRUNC);
  ASSERT_TRUE(f) << strerror(f.error());
  EXPECT_EQ(*n.srv0->contents("/f"), "kept");
  EXPECT_EQ((*f)->read(0, 10)->flatten(), "kept");
  EXPECT_EQ(n.fs->open_files(), 1u) << "registered under the number the client had";
  EXPECT_EQ(n.fs->file(0x5678, "/srv0/gone", O_RDWR | O_CREAT).error(), ENOENT);
  EXPECT_FALSE(n.srv0->has("/gone"));
}

// A namespace holds at most its max_open_files open: an open, a create and a re-open of a handle
// it does not know fail with EMFILE past it (nothing made or left open), and a release makes room.
TEST(NamespaceFs, OpensPastTheNamespacesLimitOfOpenFilesFailWithEmfile) {
  auto srv = FakeBackend::make("srv");
  NamespaceFs fs("ns", TokenSet::of("secret"),
                 std::make_shared<const MountTable>(std::vector<Mount>{{"/srv", single(srv)}}),
                 /*max_open_files=*/2);
  srv->put_file("/a", "a");
  auto a = fs.open("/srv/a", O_RDONLY);
  ASSERT_TRUE(a) << strerror(a.error());
  auto b = fs.create("/srv/b", O_RDWR, 0644);
  ASSERT_TRUE(b) << strerror(b.error());
  EXPECT_EQ(fs.open("/srv/a", O_RDONLY).error(), EMFILE);
  EXPECT_EQ(fs.create("/srv/c", O_RDWR, 0644).error(), EMFILE);
  EXPECT_FALSE(srv->has("/c")) << "made though refused";
  EXPECT_EQ(fs.file(0x4242, "/srv/a", O_RDONLY).error(), EMFILE) << "a handle it never gave";
  EXPECT_EQ(fs.open_files(), 2u);
  ASSERT_TRUE(fs.file(a->handle, "/srv/a", O_RDONLY)) << "a held handle is served as before";
  ASSERT_TRUE(fs.release(a->handle));
  EXPECT_TRUE(fs.file(0x4242, "/srv/a", O_RDONLY)) << "room after a release";
  EXPECT_EQ(fs.open_files(), 2u);
}

// The files a mount holds (opened, created, or re-opened by path under its own handle) are
// released together when it has gone away; another mount's, and those opened without a mount
// id, stay.
TEST(NamespaceFs, TheFilesOfAMountThatWentAwayAreReleasedTogether) {
  Namespace n;
  n.srv0->put_file("/f", "kept");
  auto opened = n.fs->open("/srv0/f", O_RDONLY, "gone");
  ASSERT_TRUE(opened);
  ASSERT_TRUE(n.fs->create("/srv0/made", O_WRONLY, 0644, "gone"));
  ASSERT_TRUE(n.fs->file(0x91, "/srv0/f", O_RDONLY, nullptr, "gone"));
  auto other = n.fs->open("/srv0/f", O_RDONLY, "alive");
  ASSERT_TRUE(other);
  ASSERT_TRUE(n.fs->open("/srv0/f", O_RDONLY));
  ASSERT_TRUE(n.fs->release(opened->handle));  // released by the mount itself before it went
  EXPECT_EQ(n.fs->open_files(), 4u);
  EXPECT_EQ(n.fs->release_all_of("gone"), 2u);
  EXPECT_EQ(n.fs->open_files(), 2u);
  EXPECT_EQ(n.fs->file(0x91, "/srv0/f", O_RDONLY).error(), EBADF) << "never opened again";
  EXPECT_EQ(n.fs->release_all_of("gone"), 0u);
  EXPECT_EQ((*n.fs->file(other->handle, "/srv0/f", O_RDONLY))->read(0, 10)->flatten(), "kept");
}

// A released handle is never opened again: a call that comes after the release (a read-ahead the
// release overtook, a fill of a version the mount let go) is EBADF, where a re-open by path would
// have left the file open at the gateway for good.
TEST(NamespaceFs, AReleasedHandleIsNeverOpenedAgain) {
  Namespace n;
  n.srv0->put_file("/f", "kept");
  auto opened = n.fs->open("/srv0/f", O_RDONLY);
  ASSERT_TRUE(opened);
  ASSERT_TRUE(n.fs->release(opened->handle));
  EXPECT_EQ(n.fs->file(opened->handle, "/srv0/f", O_RDONLY).error(), EBADF);
  bool just_opened = false;
  EXPECT_EQ(n.fs->file_for_one_read(opened->handle, "/srv0/f", just_opened).error(), EBADF);
  // A mount's handle of its own, released before any read of it came here.
  constexpr uint64_t kOpenedWithoutACall = 0x77;
  ASSERT_TRUE(n.fs->release(kOpenedWithoutACall));
  EXPECT_EQ(n.fs->file(kOpenedWithoutACall, "/srv0/f", O_RDONLY).error(), EBADF);
  EXPECT_EQ(n.fs->open_files(), 0u);
  // Another handle of the same file is not concerned.
  auto f = n.fs->file(0x78, "/srv0/f", O_RDONLY);
  ASSERT_TRUE(f);
  EXPECT_EQ((*f)->read(0, 10)->flatten(), "kept");
  EXPECT_EQ(n.fs->open_files(), 1u);
}

// A mount's deferred open: several first reads at once share one open, and a file out of reach
// on a down server is EIO (the client holds it open), not ENOENT.
TEST(NamespaceFs, FirstUsesOfAClientsHandleShareOneOpenAndADownServerIsEio) {
  Namespace n;
  n.srv0->put_file("/f", "kept");
  const size_t opens = n.srv0->calls("open");
  std::vector<std::thread> readers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    readers.emplace_back([&] {
      auto f = n.fs->file(0xabc, "/srv0/f", O_RDONLY);
      if (f && (*f)->read(0, 10)->flatten() == "kept") ++ok;
    });
  for (auto& t : readers) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(n.srv0->calls("open") - opens, 1u);
  EXPECT_EQ(n.fs->open_files(), 1u);
  n.srv0->set_down(true);
  EXPECT_EQ(n.fs->file(0xdef, "/srv0/f", O_RDONLY).error(), EIO);
}

TEST(NamespaceFs, SetattrTruncatesThroughTheCallersHandle) {
  Namespace n;
  n.srv0->put_file("/f", "0123456789");
  auto o = n.fs->open("/srv0/f", O_RDWR);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->attrs.size, 10u);
  // The path is refused (as a server refuses a file whose mode no longer lets anyone write);
  // the caller's open file is not asked for its path again.
  n.srv0->fail("setstat", "/f", EACCES);
  AttrChange cut;
  cut.size = 3;
  EXPECT_EQ(n.fs->setattr("/srv0/f", cut, 0).error(), EACCES);
  auto a = n.fs->setattr("/srv0/f", cut, o->handle);
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(a->size, 3u);
  EXPECT_EQ(*n.srv0->contents("/f"), "012");
  EXPECT_EQ(n.fs->setattr("/data", cut, 0).error(), EPERM) << "above the mounts";
}

TEST(NamespaceFs, OpenWithOTruncReportsTheEmptiedFile) {
  Namespace n;
  n.srv1->put_file("/f", "0123456789");
  auto o = n.fs->open("/srv1/f", O_WRONLY | O_TRUNC);
  ASSERT_TRUE(o) << strerror(o.error());
  EXPECT_EQ(o->attrs.size, 0u);
  EXPECT_EQ(*n.srv1->contents("/f"), "");
}

TEST(NamespaceFs, WholeFilesOfSeveralMountsAreAnsweredInTheOrderAsked) {
  // Each mount's files go to its layout together; the answers come back in the caller's order,
  // with the namespace's own directories and paths under no mount answered by the namespace.
  Namespace n;
  n.srv0->put_file("/a", "zero a");
  n.srv1->put_file("/b", "one b");
  n.srv0->put_file("/big", std::string(100, 'x'));
  ASSERT_TRUE(n.srv0->mkdir("/dir", 0755));
  ASSERT_TRUE(n.fs->mkdir("/data/striped/d", 0755));
  auto f = n.fs->create("/data/striped/d/s", O_WRONLY, 0644);
  ASSERT_TRUE(f);
  auto w = n.fs->file(f->handle, "/data/striped/d/s", O_WRONLY);
  ASSERT_TRUE(w);
  ASSERT_TRUE((*w)->write(0, bytes("striped")));
  ASSERT_TRUE(n.fs->release(f->handle));
  auto got = n.fs->read_whole_files({"/srv1/b", "/srv0/a", "/data", "/srv0/big", "/srv1/none",
                                     "/data/striped/d/s", "/srv0/dir", "/elsewhere/x", "/srv1/b"},
                                    64);
  ASSERT_EQ(got.size(), 9u);
  auto text = [](const Result<WholeFile>& w) {
    std::string out;
    for (auto p : w->data.pieces()) out.append(p);
    return out;
  };
  ASSERT_TRUE(got[0]);
  EXPECT_EQ(text(got[0]), "one b");
  EXPECT_EQ(got[0]->attrs.size, 5u);
  ASSERT_TRUE(got[1]);
  EXPECT_EQ(text(got[1]), "zero a");
  EXPECT_EQ(got[2].error(), EISDIR) << "a directory above the mounts";
  EXPECT_EQ(got[3].error(), EFBIG);
  EXPECT_EQ(got[4].error(), ENOENT);
  ASSERT_TRUE(got[5]) << got[5].error();
  EXPECT_EQ(text(got[5]), "striped");
  EXPECT_EQ(got[6].error(), EISDIR);
  EXPECT_EQ(got[7].error(), ENOENT) << "under no mount";
  ASSERT_TRUE(got[8]);
  EXPECT_EQ(text(got[8]), "one b");
}

TEST(NamespaceFs, WholeFilesAreMadeUnderTheirPartialsAndRenamedIntoPlace) {
  // WriteFiles: each mount's files go to its layout together (to the backend's batch where it
  // has one; these fake backends have none, so both layouts make each file their own way),
  // answered in the caller's order. A file ends with its bytes, mode and times at its name, its
  // partial gone; an existing file there is replaced; a failed file leaves its name as it was
  // and no partial.
  Namespace n;
  n.srv0->put_file("/old", "the old contents", 0600);
  ASSERT_TRUE(n.fs->mkdir("/data/striped/d", 0755));
  auto whole = [](std::string path, std::string partial, const std::string& data, uint32_t mode) {
    return NewWholeFile{std::move(path), std::move(partial), bytes(data), mode,
                        1500000000,      1600000000};
  };
  auto made = n.fs->write_whole_files({
      whole("/srv0/a", "/srv0/.a.part", "zero a", 0640),
      whole("/data/striped/d/s", "/data/striped/d/.s.part", std::string(10000, 's'), 0604),
      whole("/srv0/old", "/srv0/.old.part", "new", 04755),
      whole("/srv1/none/f", "/srv1/none/.f.part", "x", 0644),
      whole("/srv0/b", "/srv1/.b.part", "x", 0644),
      whole("/srv0/c", "/srv0/c", "x", 0644),
      whole("/data/x", "/data/.x.part", "x", 0644),
  });
  ASSERT_EQ(made.size(), 7u);
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_EQ(made[0]->attrs.size, 6u);
  EXPECT_EQ(made[0]->attrs.permissions & 07777, 0640u);
  EXPECT_EQ(made[0]->attrs.mtime, 1600000000u);
  EXPECT_EQ(made[0]->attrs.atime, 1500000000u);
  ASSERT_TRUE(made[1]) << made[1].error();
  EXPECT_EQ(made[1]->attrs.size, 10000u);
  EXPECT_EQ(made[1]->attrs.permissions & 07777, 0604u);
  ASSERT_TRUE(made[2]) << made[2].error();
  EXPECT_EQ(made[2]->attrs.permissions & 07777, 04755u);
  EXPECT_EQ(made[3].error(), ENOENT);
  EXPECT_EQ(made[4].error(), EINVAL) << "a partial in another directory";
  EXPECT_EQ(made[5].error(), EINVAL) << "a partial that is the file itself";
  EXPECT_EQ(made[6].error(), EACCES) << "a directory above the mounts";
  auto text = [&](const std::string& path) {
    auto got = n.fs->read_whole_files({path}, 1 << 20);
    if (!got[0]) return "error " + std::to_string(got[0].error());
    std::string out;
    for (auto p : got[0]->data.pieces()) out.append(p);
    return out;
  };
  EXPECT_EQ(text("/srv0/a"), "zero a");
  EXPECT_EQ(text("/data/striped/d/s"), std::string(10000, 's'));
  EXPECT_EQ(text("/srv0/old"), "new");
  for (const char* partial :
       {"/srv0/.a.part", "/data/striped/d/.s.part", "/srv0/.old.part", "/srv1/none/.f.part"})
    EXPECT_EQ(n.fs->getattr(partial).error(), ENOENT) << partial;
  EXPECT_FALSE(n.srv0->has("/b"));
  EXPECT_FALSE(n.srv0->has("/c"));
}

TEST(NamespaceFs, ANewMountTableServesTheNextCall) {
  Namespace n;
  n.srv0->put_file("/f", "x");
  auto old_table = n.fs->table();
  n.fs->set_table(std::make_shared<const MountTable>(
      std::vector<Mount>{{"/moved", single(n.srv0)}, {"/srv1", single(n.srv1)}}));
  EXPECT_EQ(n.fs->getattr("/srv0/f").error(), ENOENT);
  EXPECT_TRUE(n.fs->getattr("/moved/f"));
  EXPECT_TRUE(old_table->place("/srv0/f")) << "whoever holds the old table still has it";
}

TEST(NamespaceFs, TheCredentialIsCheckedAsGiven) {
  Namespace n;
  EXPECT_TRUE(n.fs->credential_ok("secret"));
  EXPECT_FALSE(n.fs->credential_ok("secret2"));
  EXPECT_FALSE(n.fs->credential_ok(""));
}

}  // namespace
}  // namespace skein
