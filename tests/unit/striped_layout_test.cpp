// StripedLayout against in-memory backends, with 8-byte stripes over three backends so that the
// parts can be read by eye: where each stripe of a write lands, reads and writes spanning
// stripes, holes and missing parts, truncation through a path and through a handle, O_APPEND at
// the logical end, names kept on backend 0 and parts on every backend, all-or-nothing creates,
// renames undone when a part backend refuses, a backend that is down, and the stripe records
// that refuse a configuration no longer fitting the files.
#include "namespace/striped_layout.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "attrs_each.hpp"
#include "backend/backend_file.hpp"
#include "fake_backend.hpp"
#include "namespace/stripe_record.hpp"

namespace skein {
namespace {

using test::FakeBackend;

SharedBytes bytes(const std::string& s) {
  auto keep = std::make_shared<std::string>(s);
  return SharedBytes({std::string_view(*keep)}, keep);
}

constexpr uint64_t kStripe = 8;
const std::string kRecord = "/" + std::string(kStripeRecordName);

struct Stripes {
  explicit Stripes(size_t width = 3) {
    for (size_t i = 0; i < width; ++i) b.push_back(FakeBackend::make("b" + std::to_string(i)));
    layout = over({0, 1, 2}, kStripe, width);
  }
  // Another layout over some of the same backends, in the order given.
  std::unique_ptr<StripedLayout> over(std::vector<size_t> order, uint64_t stripe,
                                      size_t width) const {
    std::vector<std::shared_ptr<Backend>> bs;
    for (size_t i = 0; i < width; ++i) bs.push_back(b[order[i]]);
    return std::make_unique<StripedLayout>(std::move(bs), stripe);
  }
  // Creates `rel` through the layout and writes `data` at `offset`.
  void write(const std::string& rel, uint64_t offset, const std::string& data) {
    auto c = layout->create(rel, O_RDWR, 0644);
    ASSERT_TRUE(c) << strerror(c.error());
    auto w = c->file->write(offset, bytes(data));
    ASSERT_TRUE(w) << strerror(w.error());
    ASSERT_EQ(*w, data.size());
    ASSERT_TRUE(c->file->close());
  }
  std::string read(const std::string& rel, uint64_t offset, uint32_t size) {
    auto f = layout->open(rel, O_RDONLY);
    EXPECT_TRUE(f) << strerror(f.error());
    if (!f) return "<open failed>";
    auto r = (*f)->read(offset, size);
    EXPECT_TRUE(r) << strerror(r.error());
    return r ? r->flatten() : "<read failed>";
  }
  std::string part(size_t i, const std::string& rel) const {
    return b[i]->contents(rel).value_or("<no part>");
  }
  std::vector<std::shared_ptr<FakeBackend>> b;
  std::unique_ptr<StripedLayout> layout;
};

const std::string kFourStripes = "AAAAAAAABBBBBBBBCCCCCCCCDDDDDDDD";

// --- Stripe maths through the layout.

TEST(StripedLayout, EachStripeOfAWriteLandsOnItsBackendPackedInItsPart) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  EXPECT_EQ(s.part(0, "/f"), "AAAAAAAADDDDDDDD") << "stripes 0 and 3, one after the other";
  EXPECT_EQ(s.part(1, "/f"), "BBBBBBBB");
  EXPECT_EQ(s.part(2, "/f"), "CCCCCCCC");
  auto a = s.layout->getattr("/f");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size, 32u) << "the logical size from every part's";
}

TEST(StripedLayout, ReadsAndWritesSpanningStripesSeeTheLogicalBytes) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  EXPECT_EQ(s.read("/f", 6, 12), "AABBBBBBBBCC");
  EXPECT_EQ(s.read("/f", 0, 100), kFourStripes) << "short at the logical end only";
  EXPECT_EQ(s.read("/f", 30, 10), "DD");
  EXPECT_EQ(s.read("/f", 40, 10), "");
  // Overwrite across three stripes, from the middle of one to the middle of another.
  auto f = s.layout->open("/f", O_RDWR);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(12, bytes("xxxxxxxxxxxx")));
  EXPECT_EQ(s.read("/f", 0, 32), "AAAAAAAABBBBxxxxxxxxxxxxDDDDDDDD");
  EXPECT_EQ(s.part(1, "/f"), "BBBBxxxx");
  EXPECT_EQ(s.part(2, "/f"), "xxxxxxxx");
  EXPECT_EQ(s.part(0, "/f"), "AAAAAAAADDDDDDDD");
}

TEST(StripedLayout, HolesReadAsZerosUpToTheLogicalSize) {
  Stripes s;
  s.write("/sparse", 50, "X");  // stripe 6: backend 0, local offset 16 + 2
  EXPECT_EQ(s.part(0, "/sparse").size(), 19u);
  EXPECT_EQ(s.part(1, "/sparse"), "");
  auto a = s.layout->getattr("/sparse");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->size, 51u);
  EXPECT_EQ(s.read("/sparse", 0, 100), std::string(50, '\0') + "X");
  EXPECT_EQ(s.read("/sparse", 10, 8), std::string(8, '\0')) << "holes on backends 1 and 2";
}

TEST(StripedLayout, APartMissingOnABackendReadsAsHoles) {
  Stripes s;
  s.layout->prepare();
  s.b[0]->put_file("/f", "AAAAAAAA");
  s.b[2]->put_file("/f", "CCCCCCCC");  // no part on backend 1
  auto a = s.layout->getattr("/f");
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(a->size, 24u);
  s.b[1]->set_read_only(true);  // so the missing part cannot be made either
  EXPECT_EQ(s.read("/f", 0, 24), "AAAAAAAA" + std::string(8, '\0') + "CCCCCCCC");
  EXPECT_FALSE(s.b[1]->has("/f"));
  s.b[1]->set_read_only(false);
  EXPECT_EQ(s.read("/f", 0, 24), "AAAAAAAA" + std::string(8, '\0') + "CCCCCCCC");
  EXPECT_EQ(s.part(1, "/f"), "") << "a read-only open makes the missing part, empty";
}

// A part made after the file (it grew onto another server, or was made by one server alone) is
// owned as part 0 is, so that each part shows the file's owner (a judged open judges each part).
TEST(StripedLayout, APartMadeLaterIsOwnedAsPartZero) {
  Stripes s;
  s.layout->prepare();
  s.b[0]->put_file("/f", "AAAA");  // one stripe: no other part
  sftp::Attrs owner;
  owner.flags = sftp::ATTR_UIDGID;
  owner.uid = 1000;
  owner.gid = 2000;
  ASSERT_TRUE(s.b[0]->setstat("/f", owner));
  auto f = s.layout->open("/f", O_RDWR);
  ASSERT_TRUE(f) << strerror(f.error());
  for (size_t i : {1u, 2u}) {
    auto a = s.b[i]->attrs("/f");
    ASSERT_TRUE(a) << "no part made on backend " << i;
    EXPECT_EQ(a->uid, 1000u) << i;
    EXPECT_EQ(a->gid, 2000u) << i;
  }
  ASSERT_TRUE((*f)->close());
}

TEST(StripedLayout, TruncateThroughThePathSetsEveryPartToItsShare) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  AttrChange cut;
  cut.size = 12;
  auto a = s.layout->setattr("/f", cut, nullptr);
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(a->size, 12u);
  EXPECT_EQ(s.part(0, "/f"), "AAAAAAAA");
  EXPECT_EQ(s.part(1, "/f"), "BBBB");
  EXPECT_EQ(s.part(2, "/f"), "");
  AttrChange grow;
  grow.size = 40;
  ASSERT_TRUE(s.layout->setattr("/f", grow, nullptr));
  EXPECT_EQ(s.part(0, "/f").size(), 16u);
  EXPECT_EQ(s.part(1, "/f").size(), 16u) << "stripes 1 and 4: [32, 40) is its second";
  EXPECT_EQ(s.part(2, "/f").size(), 8u);
  EXPECT_EQ(s.read("/f", 0, 100), "AAAAAAAABBBB" + std::string(28, '\0'));
}

TEST(StripedLayout, TruncateThroughAHandleCutsEveryPart) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  auto f = s.layout->open("/f", O_RDWR);
  ASSERT_TRUE(f);
  AttrChange cut;
  cut.size = 20;
  auto a = s.layout->setattr("/f", cut, f->get());
  ASSERT_TRUE(a) << strerror(a.error());
  EXPECT_EQ(a->size, 20u);
  EXPECT_EQ(s.part(0, "/f"), "AAAAAAAA");
  EXPECT_EQ(s.part(1, "/f"), "BBBBBBBB");
  EXPECT_EQ(s.part(2, "/f"), "CCCC");
  auto st = (*f)->fstat();
  ASSERT_TRUE(st);
  EXPECT_EQ(st->size, 20u);
}

TEST(StripedLayout, OpeningWithOTruncEmptiesEveryPart) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  auto f = s.layout->open("/f", O_WRONLY | O_TRUNC);
  ASSERT_TRUE(f) << strerror(f.error());
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(s.part(i, "/f"), "") << i;
  EXPECT_EQ(s.layout->getattr("/f")->size, 0u);
}

TEST(StripedLayout, AppendWritesAtTheLogicalEndNotAPartsEnd) {
  Stripes s;
  s.write("/log", 0, "0123456789abcdefghij");  // 20 bytes: backend 2's part is the shortest
  auto f = s.layout->open("/log", O_WRONLY | O_APPEND);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(0, bytes("++")));
  ASSERT_TRUE((*f)->write(0, bytes("--")));
  EXPECT_EQ(s.read("/log", 0, 100), "0123456789abcdefghij++--");
}

// --- Names, parts and changes.

TEST(StripedLayout, NamesLiveOnBackendZeroAndPartsOnEveryBackend) {
  Stripes s;
  ASSERT_TRUE(s.layout->mkdir("/d", 0750));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(s.b[i]->has("/d")) << "directories everywhere";
  s.write("/d/f", 0, kFourStripes);
  ASSERT_TRUE(s.layout->symlink("/d/l", "f"));
  EXPECT_TRUE(s.b[0]->has("/d/l"));
  EXPECT_FALSE(s.b[1]->has("/d/l")) << "a symlink has no data to stripe";
  auto l = s.layout->readdir("/d");
  ASSERT_TRUE(l);
  ASSERT_EQ(l->size(), 2u);
  for (auto& e : *l)
    if (e.name == "f") {
      EXPECT_EQ(e.attrs.size, 32u) << "the listing's size is the logical one";
    }

  ASSERT_TRUE(s.layout->rename("/d/f", "/d/g", 0));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_FALSE(s.b[i]->has("/d/f")) << i;
    EXPECT_TRUE(s.b[i]->has("/d/g")) << i;
  }
  EXPECT_EQ(s.read("/d/g", 0, 32), kFourStripes);
  auto linked = s.layout->link("/d/g", "/d/h");
  ASSERT_TRUE(linked) << strerror(linked.error());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(s.b[i]->has("/d/h")) << "every part linked";
  ASSERT_TRUE(s.layout->unlink("/d/g"));
  ASSERT_TRUE(s.layout->unlink("/d/h"));
  ASSERT_TRUE(s.layout->unlink("/d/l"));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(s.b[i]->names("/d").empty()) << i;
  ASSERT_TRUE(s.layout->rmdir("/d"));
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(s.b[i]->has("/d")) << i;
}

TEST(StripedLayout, BackendZeroDecidesWhetherANameExists) {
  Stripes s;
  s.layout->prepare();
  s.b[1]->put_file("/orphan", "left over");
  EXPECT_EQ(s.layout->getattr("/orphan").error(), ENOENT);
  auto l = s.layout->readdir("/");
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->empty()) << "neither the orphan nor the stripe records are listed";
  // A new file of that name truncates the orphan, so it reads as written.
  s.write("/orphan", 0, "new");
  EXPECT_EQ(s.part(1, "/orphan"), "");
  EXPECT_EQ(s.read("/orphan", 0, 100), "new");
}

TEST(StripedLayout, ACreateOfANewFileAsksNothingBeforeOrAfterItsOpens) {
  // The O_EXCL open on backend 0 settles whether the name is new, and brings its attributes: no
  // lookup before it, no fstat after it. A name already there is looked at only then.
  Stripes s;
  const size_t lstats = s.b[0]->calls("lstat"), fstats = s.b[0]->calls("fstat");
  auto c = s.layout->create("/new", O_RDWR, 0640);
  ASSERT_TRUE(c) << strerror(c.error());
  EXPECT_EQ(c->attrs.size, 0u);
  EXPECT_EQ(c->attrs.permissions & 07777, 0640u);
  EXPECT_TRUE(S_ISREG(c->attrs.permissions));
  ASSERT_TRUE(c->file->close());
  EXPECT_EQ(s.b[0]->calls("lstat"), lstats);
  EXPECT_EQ(s.b[0]->calls("fstat"), fstats);
  // An existing file is opened (not truncated without O_TRUNC), O_EXCL refuses it, and a
  // directory is EISDIR.
  s.write("/there", 0, "keep me");
  auto again = s.layout->create("/there", O_RDWR, 0644);
  ASSERT_TRUE(again) << strerror(again.error());
  ASSERT_TRUE(again->file->close());
  EXPECT_EQ(s.read("/there", 0, 100), "keep me");
  EXPECT_EQ(s.layout->create("/there", O_RDWR | O_EXCL, 0644).error(), EEXIST);
  ASSERT_TRUE(s.layout->mkdir("/dir", 0755));
  EXPECT_EQ(s.layout->create("/dir", O_RDWR, 0644).error(), EISDIR);
}

TEST(StripedLayout, ACreateIsAllOrNothing) {
  Stripes s;
  s.layout->prepare();
  s.b[2]->fail("open", "/f", EACCES);
  EXPECT_EQ(s.layout->create("/f", O_RDWR, 0644).error(), EACCES);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(s.b[i]->has("/f")) << "nothing left on b" << i;
  EXPECT_EQ(s.layout->getattr("/f").error(), ENOENT);
}

// An unlink removes the name on backend 0, then the parts: a create of the name in between
// (another mount's, on another gateway thread) must not lose its parts to the unlink. It waits
// for the unlink to end.
TEST(StripedLayout, ACreateRacingAnUnlinkOfTheSameNameKeepsEveryPart) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  std::future<Result<Created>> created;
  s.b[1]->on_next("unlink", [&] {
    // Backend 0's name is gone, the parts are not yet.
    created = std::async(std::launch::async, [&] { return s.layout->create("/f", O_RDWR, 0644); });
    (void)created.wait_for(std::chrono::milliseconds(300));
  });
  ASSERT_TRUE(s.layout->unlink("/f"));
  auto c = created.get();
  ASSERT_TRUE(c) << strerror(c.error());
  ASSERT_TRUE(c->file->write(0, bytes(kFourStripes)));
  ASSERT_TRUE(c->file->close());
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(s.b[i]->has("/f")) << "the new file's part on b" << i;
  EXPECT_EQ(s.read("/f", 0, 32), kFourStripes);
}

TEST(StripedLayout, ARenameAPartBackendRefusesIsUndone) {
  Stripes s;
  s.write("/from", 0, kFourStripes);
  s.b[2]->fail("rename", "/from", EACCES);
  EXPECT_EQ(s.layout->rename("/from", "/to", 0).error(), EACCES);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(s.b[i]->has("/from")) << i;
    EXPECT_FALSE(s.b[i]->has("/to")) << i;
  }
  EXPECT_EQ(s.read("/from", 0, 32), kFourStripes);
}

TEST(StripedLayout, AMkdirAPartBackendRefusesIsUndone) {
  Stripes s;
  s.layout->prepare();
  s.b[1]->fail("mkdir", "/d", EACCES);
  EXPECT_EQ(s.layout->mkdir("/d", 0755).error(), EACCES);
  for (size_t i = 0; i < 3; ++i) EXPECT_FALSE(s.b[i]->has("/d")) << i;
}

TEST(StripedLayout, ABackendThatIsDownFailsEveryChangeAtOnce) {
  Stripes s;
  ASSERT_TRUE(s.layout->mkdir("/d", 0755));
  s.write("/f", 0, kFourStripes);
  s.b[1]->set_down(true);
  const size_t b0_calls = s.b[0]->calls();
  EXPECT_EQ(s.layout->mkdir("/e", 0755).error(), EIO);
  EXPECT_EQ(s.layout->create("/g", O_RDWR, 0644).error(), EIO);
  EXPECT_EQ(s.layout->unlink("/f").error(), EIO);
  EXPECT_EQ(s.layout->rename("/f", "/h", 0).error(), EIO);
  EXPECT_EQ(s.layout->rmdir("/d").error(), EIO);
  EXPECT_EQ(s.b[0]->calls(), b0_calls) << "nothing was even tried on the backends that are up";
  EXPECT_EQ(s.layout->open("/f", O_WRONLY).error(), EIO);
  EXPECT_EQ(s.layout->getattr("/f").error(), EIO) << "a file's size needs every part";
  EXPECT_TRUE(s.layout->getattr("/d")) << "a directory's attributes are backend 0's";
  EXPECT_EQ(s.layout->open("/f", O_RDONLY).error(), EIO) << "its part on b1 cannot be read";
  s.b[1]->set_down(false);
  EXPECT_EQ(s.read("/f", 0, 32), kFourStripes);
}

// WriteFiles into a striped layout: a file of one stripe or less is made on backend 0 by its
// batch, and the parts of the file it replaces are removed from the others (else they would lend
// it their size and bytes); a larger file is made the layout's way, with its parts; a failed
// file leaves its name as it was. A backend that is down fails them all, trying nothing.
// A file of a stripe or less is made on backend 0 alone, in its batch, where the other backends
// hold no bytes under its name (no part, or an empty one). A name whose replaced file has bytes
// elsewhere (larger than a stripe, an orphan) is made the layout's way, every part anew: nothing
// of the old file is left in the new one, and a failure leaves the old one whole.
// A small file made whole over a name whose empty parts are another name's too (a hard link
// links every part): the new file does not take them over, so a write past its first stripe
// does not change the other file.
TEST(StripedLayout, ASmallWholeFileOverAHardLinkSharesNoPartWithIt) {
  Stripes s;
  for (auto& be : s.b) be->set_makes_whole_files(true);
  s.write("/a", 0, "abc");
  ASSERT_TRUE(s.layout->link("/a", "/b"));
  auto made = s.layout->write_whole_files(
      {NewWholeFile{"/b", "/.b.part", bytes("new"), 0644, 1500000000, 1600000000}});
  ASSERT_EQ(made.size(), 1u);
  ASSERT_TRUE(made[0]) << strerror(made[0].error());
  s.write("/b", kStripe, "past the first stripe");
  EXPECT_EQ(s.layout->getattr("/a")->size, 3u) << "/a grew with /b";
  EXPECT_EQ(s.read("/a", 0, 64), "abc");
  EXPECT_EQ(s.read("/b", 0, 3), "new");
}

TEST(StripedLayout, SmallWholeFilesAreMadeOnBackendZeroWhereNoOtherPartHoldsBytes) {
  Stripes s;
  for (auto& be : s.b) be->set_makes_whole_files(true);
  s.write("/old", 0, kFourStripes);
  s.write("/small", 0, "abc");       // its parts on b1 and b2 are empty
  s.b[2]->put_dir("/orphan/below");  // backend 0 has no such name
  auto whole = [](std::string path, std::string partial, const std::string& data) {
    return NewWholeFile{std::move(path), std::move(partial), bytes(data), 0640,
                        1500000000,      1600000000};
  };
  auto made_elsewhere = [&] {  // calls to b1 and b2 other than lookups
    size_t n = 0;
    for (size_t i : {1, 2}) n += s.b[i]->calls() - s.b[i]->calls("lstat");
    return n;
  };
  size_t before = made_elsewhere();
  auto alone = s.layout->write_whole_files(
      {whole("/n", "/.n.part", "12345678"), whole("/small", "/.small.part", "tiny!")});
  ASSERT_TRUE(alone[0] && alone[1]);
  EXPECT_EQ(made_elsewhere(), before + 2) << "both made on b0 alone, /small's empty parts gone";
  EXPECT_FALSE(s.b[1]->has("/small"));
  EXPECT_FALSE(s.b[2]->has("/small"));
  EXPECT_EQ(s.read("/small", 0, 32), "tiny!");
  EXPECT_EQ(s.layout->getattr("/small")->size, 5u);
  EXPECT_EQ(alone[1]->attrs.mtime, 1600000000u);

  const std::string longer = "0123456789abcdefXYZ";
  before = made_elsewhere();
  auto made = s.layout->write_whole_files({
      whole("/old", "/.old.part", "new"),
      whole("/long", "/.long.part", longer),
      whole("/none/x", "/none/.x.part", "x"),
      whole("/orphan", "/.orphan.part", "o"),
      whole(kRecord, "/.record.part", "x"),
  });
  ASSERT_EQ(made.size(), 5u);
  for (size_t i : {0, 1, 3}) ASSERT_TRUE(made[i]) << i << ": " << strerror(made[i].error());
  EXPECT_GT(made_elsewhere(), before) << "the layout's way: every part made anew";
  EXPECT_EQ(made[0]->attrs.size, 3u);
  EXPECT_EQ(made[0]->attrs.permissions & 07777, 0640u);
  EXPECT_EQ(made[0]->attrs.mtime, 1600000000u);
  EXPECT_EQ(made[1]->attrs.size, longer.size());
  EXPECT_EQ(made[2].error(), ENOENT);
  EXPECT_EQ(made[4].error(), EACCES) << "the stripe record's name";

  for (size_t i : {1, 2}) {  // looked at before the reads below, whose opens make empty parts
    EXPECT_EQ(s.part(i, "/old"), "") << "nothing of the replaced file's part on b" << i;
    EXPECT_FALSE(s.b[i]->has("/n")) << "a file of one stripe has no part on b" << i;
  }
  EXPECT_FALSE(s.b[2]->has("/orphan/below"));
  EXPECT_EQ(s.layout->getattr("/old")->size, 3u);
  EXPECT_EQ(s.read("/old", 0, 32), "new");
  EXPECT_EQ(s.part(0, "/old"), "new");
  EXPECT_EQ(s.read("/n", 0, 32), "12345678");
  EXPECT_EQ(s.read("/orphan", 0, 32), "o");
  ASSERT_TRUE(s.b[1]->has("/n")) << "the read's open made the missing parts";
  EXPECT_EQ(s.layout->getattr("/n")->mtime, 1600000000u) << "the empty parts say nothing of it";
  auto listed = s.layout->readdir("/");
  ASSERT_TRUE(listed);
  for (const auto& e : *listed) {
    if (e.name == "n") {
      EXPECT_EQ(e.attrs.mtime, 1600000000u);
    }
  }
  auto opened = s.layout->open("/n", O_RDONLY);
  ASSERT_TRUE(opened);
  EXPECT_EQ((*opened)->fstat()->mtime, 1600000000u);
  EXPECT_EQ(s.read("/long", 0, 32), longer);
  EXPECT_EQ(s.part(1, "/long"), "89abcdef") << "a larger file is striped as any";
  for (size_t i = 0; i < 3; ++i)
    for (const char* partial :
         {"/.old.part", "/.n.part", "/.small.part", "/.long.part", "/.orphan.part"})
      EXPECT_FALSE(s.b[i]->has(partial)) << partial << " on b" << i;

  s.b[2]->set_down(true);
  const size_t b0_calls = s.b[0]->calls();
  made = s.layout->write_whole_files({whole("/n", "/.n.part", "other")});
  EXPECT_EQ(made[0].error(), EIO);
  EXPECT_EQ(s.b[0]->calls(), b0_calls) << "nothing was tried with a backend down";
  EXPECT_EQ(s.b[0]->contents("/n"), "12345678");
}

// getattr_each asks every backend about every path at once, and answers as getattr does.
TEST(StripedLayout, AttributesOfManyPathsAreThoseOfEachAlone) {
  Stripes s;
  ASSERT_TRUE(s.layout->mkdir("/d", 0755));
  s.write("/f", 0, kFourStripes);
  s.write("/d/g", 0, "short");
  const std::vector<std::string> paths{"/f", "/d", "/none", kRecord, "/d/g"};
  auto each = s.layout->getattr_each(paths);
  test::expect_each_as_alone(each, paths,
                             [&](const std::string& p) { return s.layout->getattr(p); });
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(each[0]->size, kFourStripes.size()) << "the size from every part";
  EXPECT_EQ(each[2].error(), ENOENT);
}

TEST(StripedLayout, StatfsAddsUpEveryBackendOnce) {
  Stripes s;
  for (auto& b : s.b) b->set_space(100 << 20, 40 << 20);
  auto v = s.layout->statfs("/");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->blocks * v->frsize, static_cast<uint64_t>(300) << 20);
  EXPECT_EQ(v->bavail * v->frsize, static_cast<uint64_t>(120) << 20);
  s.b[2]->set_down(true);
  EXPECT_EQ(s.layout->statfs("/").error(), EIO);
}

// --- Stripe records.

TEST(StripedLayout, StripeRecordsAreWrittenOnFirstUseAndHiddenFromTheNamespace) {
  Stripes s;
  EXPECT_FALSE(s.b[0]->has(kRecord));
  s.layout->prepare();
  for (size_t i = 0; i < 3; ++i) {
    auto text = s.b[i]->contents(kRecord);
    ASSERT_TRUE(text) << i;
    std::string error;
    auto record = parse_stripe_record(*text, error);
    ASSERT_TRUE(record) << error;
    EXPECT_EQ(record->part, i);
    EXPECT_EQ(record->width, 3u);
    EXPECT_EQ(record->stripe_size, kStripe);
  }
  EXPECT_TRUE(s.layout->problem().empty());
  EXPECT_EQ(s.layout->getattr(kRecord).error(), ENOENT);
  EXPECT_EQ(s.layout->create(kRecord, O_RDWR, 0644).error(), EACCES);
  EXPECT_EQ(s.layout->unlink(kRecord).error(), ENOENT);
}

TEST(StripedLayout, AnotherStripeSizeOverTheSameBackendsIsRefused) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  auto other = s.over({0, 1, 2}, 16, 3);
  EXPECT_EQ(other->getattr("/f").error(), EIO);
  EXPECT_EQ(other->create("/g", O_RDWR, 0644).error(), EIO);
  EXPECT_NE(other->problem().find("16 B stripes"), std::string::npos) << other->problem();
  EXPECT_NE(other->describe().find("refused"), std::string::npos);
  EXPECT_EQ(s.part(0, "/f"), "AAAAAAAADDDDDDDD") << "nothing was read or written";
  EXPECT_FALSE(s.b[0]->has("/g"));
}

TEST(StripedLayout, ReorderedOrFewerBackendsAreRefused) {
  Stripes s;
  s.layout->prepare();
  auto reordered = s.over({1, 0, 2}, kStripe, 3);
  EXPECT_EQ(reordered->getattr("/").error(), EIO);
  EXPECT_NE(reordered->problem().find("position"), std::string::npos) << reordered->problem();
  auto narrower = s.over({0, 1}, kStripe, 2);
  EXPECT_EQ(narrower->getattr("/").error(), EIO);
  EXPECT_NE(narrower->problem().find("over 2 backends"), std::string::npos) << narrower->problem();
  auto same = s.over({0, 1, 2}, kStripe, 3);
  EXPECT_TRUE(same->getattr("/")) << "the same configuration again is served";
  EXPECT_TRUE(same->problem().empty());
}

TEST(StripedLayout, ABackendReplacedByAnEmptyOneIsRefused) {
  Stripes s;
  s.layout->prepare();
  auto fresh = FakeBackend::make("fresh");
  auto replaced = std::make_unique<StripedLayout>(
      std::vector<std::shared_ptr<Backend>>{s.b[0], fresh, s.b[2]}, kStripe);
  EXPECT_EQ(replaced->getattr("/").error(), EIO);
  EXPECT_NE(replaced->problem().find("fresh holds no part"), std::string::npos)
      << replaced->problem();
  EXPECT_FALSE(fresh->has(kRecord)) << "no record is written to a misfit";
}

// Backend 0 without a record reads as a write of the records that did not finish (it is written
// last), but an empty server in backend 0's place has none either: while the others hold parts
// that backend 0 has no name for, it is refused, and creating an old name does not truncate them.
TEST(StripedLayout, BackendZeroReplacedByAnEmptyOneIsRefused) {
  Stripes s;
  s.write("/f", 0, kFourStripes);
  auto fresh = FakeBackend::make("fresh");
  auto replaced = std::make_unique<StripedLayout>(
      std::vector<std::shared_ptr<Backend>>{fresh, s.b[1], s.b[2]}, kStripe);
  EXPECT_EQ(replaced->getattr("/").error(), EIO);
  EXPECT_NE(replaced->problem().find("fresh holds no record"), std::string::npos)
      << replaced->problem();
  EXPECT_FALSE(fresh->has(kRecord)) << "no record is written to a misfit";
  EXPECT_EQ(replaced->create("/f", O_RDWR, 0644).error(), EIO);
  EXPECT_FALSE(fresh->has("/f"));
  EXPECT_EQ(s.part(1, "/f"), "BBBBBBBB") << "the parts are left as they were";
  EXPECT_EQ(s.part(2, "/f"), "CCCCCCCC");
}

// Backend 0's record missing beside the others' is what a first write of the records that did
// not finish leaves: finished with the same layout, for a new layout and for one whose files were
// striped before records were kept (backend 0 holds their names).
TEST(StripedLayout, AnUnfinishedWriteOfTheRecordsIsFinished) {
  for (bool files : {false, true}) {
    Stripes s;
    if (files) s.write("/f", 0, kFourStripes);
    s.layout->prepare();
    ASSERT_TRUE(s.b[0]->unlink(kRecord));
    std::string error;
    const auto before = parse_stripe_record(*s.b[1]->contents(kRecord), error);
    auto again = s.over({0, 1, 2}, kStripe, 3);
    EXPECT_TRUE(again->getattr("/")) << again->problem();
    auto written = s.b[0]->contents(kRecord);
    ASSERT_TRUE(written) << "files " << files;
    EXPECT_EQ(parse_stripe_record(*written, error)->layout, before->layout);
    if (files) {
      EXPECT_EQ(s.read("/f", 0, 64), kFourStripes);
    }
  }
}

}  // namespace
}  // namespace skein
