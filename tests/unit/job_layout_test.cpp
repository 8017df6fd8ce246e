// JobLayout over a striped layout of in-memory backends: the job's owner on every file, chown to
// another refused, and the quota counted over all parts, refused before anything is written,
// given back by unlink, truncate, O_TRUNC and a rename's replaced target; two handles of one file
// count its growth once.
#include "jobs/job_layout.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <future>
#include <mutex>

#include "fake_backend.hpp"
#include "jobs/tree_remover.hpp"
#include "namespace/striped_layout.hpp"

namespace skein {
namespace {

using test::FakeBackend;

SharedBytes bytes(const std::string& s) {
  auto keep = std::make_shared<std::string>(s);
  return SharedBytes({std::string_view(*keep)}, keep);
}

struct Job {
  explicit Job(uint64_t quota_bytes = 100, uint64_t quota_inodes = 10) {
    std::vector<std::shared_ptr<Backend>> bs;
    for (int i = 0; i < 3; ++i) {
      b.push_back(FakeBackend::make("b" + std::to_string(i)));
      bs.push_back(b.back());
    }
    quota = std::make_shared<Quota>(quota_bytes, quota_inodes);
    layout = std::make_unique<JobLayout>(std::make_shared<StripedLayout>(std::move(bs), 8), 1234,
                                         567, quota);
  }
  std::shared_ptr<OpenFile> create(const std::string& rel) {
    auto c = layout->create(rel, O_RDWR, 0644);
    EXPECT_TRUE(c) << strerror(c.error());
    return c ? c->file : nullptr;
  }
  uint64_t used() const { return quota->usage().bytes; }
  uint64_t inodes() const { return quota->usage().inodes; }
  std::vector<std::shared_ptr<FakeBackend>> b;
  std::shared_ptr<Quota> quota;
  std::unique_ptr<JobLayout> layout;
};

TEST(JobLayout, EveryFileShowsTheJobsOwner) {
  Job j;
  j.create("/f");
  auto a = j.layout->getattr("/f");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->uid, 1234u);
  EXPECT_EQ(a->gid, 567u);
  auto list = j.layout->readdir("/");
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].attrs.uid, 1234u);
  // And what an open file reports of itself (an open for writing is counted by the layout).
  auto f = j.layout->open("/f", O_RDWR);
  ASSERT_TRUE(f);
  auto fa = (*f)->fstat();
  ASSERT_TRUE(fa);
  EXPECT_EQ(fa->uid, 1234u);
  EXPECT_EQ(fa->gid, 567u);
  auto w = (*f)->write_reporting_attrs(0, bytes("abc"));
  ASSERT_TRUE(w);
  if (w->attrs) {
    EXPECT_EQ(w->attrs->uid, 1234u);
  }
  // An open for reading too, and the attributes of what it read, and whole files read together:
  // other users are judged by them (OpenRequest.as_user, ReadFilesRequest.attrs_of_files).
  auto r = j.layout->open("/f", O_RDONLY);
  ASSERT_TRUE(r);
  auto ra = (*r)->fstat();
  ASSERT_TRUE(ra);
  EXPECT_EQ(ra->uid, 1234u);
  EXPECT_EQ(ra->gid, 567u);
  auto read = (*r)->read_reporting_attrs(0, 16);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->data.size(), 3u);
  EXPECT_EQ(read->attrs.uid, 1234u);
  EXPECT_EQ(read->attrs.gid, 567u);
  for (bool attrs_of_files : {false, true}) {
    auto whole = j.layout->read_whole_files({"/f"}, 16, attrs_of_files);
    ASSERT_EQ(whole.size(), 1u);
    ASSERT_TRUE(whole[0]) << attrs_of_files;
    EXPECT_EQ(whole[0]->attrs.uid, 1234u) << attrs_of_files;
    EXPECT_EQ(whole[0]->attrs.gid, 567u) << attrs_of_files;
  }
}

// A file judged for a user the gateway does not trust (OpenRequest.as_user) is judged by the
// attributes it shows, the job's owner's, on every part; its parts get judges that see the same,
// and "no handle by path" (an empty judge) stays empty.
TEST(JobLayout, AJudgedFilesPartsAreJudgedAsTheJobsOwnersFile) {
  Job j;
  auto made = j.create("/f");
  ASSERT_TRUE(made);
  ASSERT_TRUE(made->write(0, bytes(std::string(20, 'x'))));  // on all three parts
  auto r = j.layout->open("/f", O_RDONLY);
  ASSERT_TRUE(r);
  std::mutex mu;  // the parts are judged at once, each on a thread of its own
  std::vector<uint32_t> seen;
  auto owners_only = [&](const sftp::Attrs& a) {
    std::lock_guard lock(mu);
    seen.push_back(a.uid);
    return a.uid == 1234u && a.gid == 567u;
  };
  auto judged = (*r)->judge_handles(owners_only);
  ASSERT_TRUE(judged) << strerror(judged.error());
  EXPECT_EQ(judged->uid, 1234u);
  EXPECT_EQ(seen, (std::vector<uint32_t>{1234u, 1234u, 1234u})) << "each part, as the job's";
  sftp::Attrs servers;  // as a server shows a part: its own account's
  servers.uid = servers.gid = 0;
  for (auto& b : j.b) {
    auto judges = b->judges();
    ASSERT_FALSE(judges.empty());
    ASSERT_TRUE(judges.back()) << b->name();
    EXPECT_TRUE(judges.back()(servers)) << "a part's judge sees the job's owner";
  }
  auto refused = (*r)->judge_handles([](const sftp::Attrs& a) { return a.uid != 1234u; });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), EACCES);
  EXPECT_TRUE((*r)->judge_handles({}));
  for (auto& b : j.b) EXPECT_FALSE(b->judges().back()) << "no handle by path became some";
}

TEST(JobLayout, AChownToAnybodyElseIsRefusedAndToTheOwnerIsANoOp) {
  Job j;
  j.create("/f");
  AttrChange other;
  other.uid = 0;
  EXPECT_EQ(j.layout->setattr("/f", other, nullptr).error(), EPERM);
  AttrChange group;
  group.gid = 999;
  EXPECT_EQ(j.layout->setattr("/f", group, nullptr).error(), EPERM);
  AttrChange self;
  self.uid = 1234;
  self.gid = 567;
  auto calls = j.b[0]->calls("setstat");
  EXPECT_TRUE(j.layout->setattr("/f", self, nullptr));
  EXPECT_EQ(j.b[0]->calls("setstat"), calls) << "nothing was sent for a chown to the owner";
}

TEST(JobLayout, WritesPastTheQuotaAreRefusedBeforeTheyAreSent) {
  Job j(40);
  auto f = j.create("/f");
  ASSERT_TRUE(f->write(0, bytes(std::string(30, 'a'))));
  EXPECT_EQ(j.used(), 30u);
  auto writes = j.b[0]->calls("write") + j.b[1]->calls("write") + j.b[2]->calls("write");
  EXPECT_EQ(f->write(30, bytes(std::string(11, 'b'))).error(), EDQUOT);
  EXPECT_EQ(j.b[0]->calls("write") + j.b[1]->calls("write") + j.b[2]->calls("write"), writes);
  EXPECT_EQ(j.used(), 30u);
  // An overwrite adds nothing; a write up to the limit fits.
  ASSERT_TRUE(f->write(0, bytes(std::string(30, 'c'))));
  ASSERT_TRUE(f->write(30, bytes(std::string(10, 'd'))));
  EXPECT_EQ(j.used(), 40u);
  auto a = j.layout->getattr("/f");
  EXPECT_EQ(a->size, 40u) << "what was written stays";
}

TEST(JobLayout, TwoHandlesOfOneFileCountItsGrowthOnce) {
  Job j(100);
  auto f = j.create("/f");
  auto g = j.layout->open("/f", O_RDWR);
  ASSERT_TRUE(g);
  ASSERT_TRUE(f->write(0, bytes(std::string(20, 'a'))));
  ASSERT_TRUE((*g)->write(10, bytes(std::string(20, 'b'))));  // 10 more, not 20
  EXPECT_EQ(j.used(), 30u);
}

TEST(JobLayout, UnlinkTruncateOTruncAndAReplacingRenameGiveSpaceBack) {
  Job j(100);
  ASSERT_TRUE(j.create("/a")->write(0, bytes(std::string(40, 'a'))));
  ASSERT_TRUE(j.create("/b")->write(0, bytes(std::string(30, 'b'))));
  EXPECT_EQ(j.used(), 70u);
  EXPECT_EQ(j.inodes(), 2u);
  AttrChange cut;
  cut.size = 10;
  ASSERT_TRUE(j.layout->setattr("/a", cut, nullptr));
  EXPECT_EQ(j.used(), 40u);
  ASSERT_TRUE(j.layout->open("/b", O_WRONLY | O_TRUNC));
  EXPECT_EQ(j.used(), 10u);
  ASSERT_TRUE(j.create("/c")->write(0, bytes(std::string(25, 'c'))));
  ASSERT_TRUE(j.layout->rename("/c", "/a", 0));  // the old /a (10) goes
  EXPECT_EQ(j.used(), 25u);
  EXPECT_EQ(j.inodes(), 2u);
  ASSERT_TRUE(j.layout->unlink("/a"));
  EXPECT_EQ(j.used(), 0u);
  EXPECT_EQ(j.inodes(), 1u);
}

// A file with two names counts twice (each name as a copy would): what it grows or shrinks by
// through one name counts for both, and the removal of a name gives back one copy. (Before,
// growth through one name was taken once and the removal of the other gave it back: the data
// stayed, uncounted.)
TEST(JobLayout, AFileWithTwoNamesCountsTwiceWhicheverNameItGrowsThrough) {
  Job j(100, 10);
  auto a = j.create("/a");
  ASSERT_TRUE(j.layout->link("/a", "/b"));
  EXPECT_EQ(j.used(), 0u);
  EXPECT_EQ(j.inodes(), 2u);
  ASSERT_TRUE(a->write(0, bytes(std::string(30, 'a'))));
  EXPECT_EQ(j.used(), 60u);
  ASSERT_TRUE(a->truncate(20));
  EXPECT_EQ(j.used(), 40u);
  EXPECT_FALSE(a->write(20, bytes(std::string(40, 'a')))) << "80 more would pass the quota";
  ASSERT_TRUE(j.layout->unlink("/b"));
  EXPECT_EQ(j.used(), 20u);
  EXPECT_EQ(j.inodes(), 1u);
  ASSERT_TRUE(a->write(20, bytes(std::string(10, 'a'))));  // one name left: once
  EXPECT_EQ(j.used(), 30u);
  ASSERT_TRUE(j.layout->unlink("/a"));
  EXPECT_EQ(j.used(), 30u) << "open: its bytes stay on the server until the last close";
  EXPECT_EQ(j.inodes(), 0u);
  a.reset();
  EXPECT_EQ(j.used(), 0u);
}

// A file removed while a handle holds it open stays on the server until its last close, and
// counts until then: what the handle writes meanwhile counts, and all of it goes back with the
// last close (before, the growth after the removal stayed counted for good). So for a file
// replaced by a rename while open.
TEST(JobLayout, AFileRemovedWhileOpenCountsUntilItsLastClose) {
  Job j(100, 10);
  auto f = j.create("/f");
  ASSERT_TRUE(f->write(0, bytes(std::string(20, 'f'))));
  ASSERT_TRUE(j.layout->unlink("/f"));
  EXPECT_EQ(j.used(), 20u);
  EXPECT_EQ(j.inodes(), 0u);
  ASSERT_TRUE(f->write(20, bytes(std::string(10, 'f'))));
  EXPECT_EQ(j.used(), 30u);
  f.reset();
  EXPECT_EQ(j.used(), 0u);
  auto t = j.create("/t");
  ASSERT_TRUE(t->write(0, bytes(std::string(15, 't'))));
  ASSERT_TRUE(j.create("/x")->write(0, bytes(std::string(5, 'x'))));
  ASSERT_TRUE(j.layout->rename("/x", "/t", 0));
  EXPECT_EQ(j.used(), 20u) << "the old /t is still open";
  EXPECT_EQ(j.inodes(), 1u);
  t.reset();
  EXPECT_EQ(j.used(), 5u);
}

// Two names of one file that this gateway did not link (made before it started: a recount counted
// each name): a rename of one to the other does nothing on the server, and gives nothing back
// (before, it gave back the file's size and an inode each time, and a loop of `mv` and writes
// grew the storage without end).
TEST(JobLayout, ARenameBetweenTwoNamesOfOneFileGivesNothingBack) {
  Job j(100, 10);
  ASSERT_TRUE(j.create("/a")->write(0, bytes(std::string(20, 'a'))));
  ASSERT_TRUE(j.layout->inner()->link("/a", "/b"));  // behind the job layout's back
  j.quota->set_used(40, 2);                          // as the recount at a start counts it
  ASSERT_TRUE(j.layout->rename("/a", "/b", 0));
  EXPECT_TRUE(j.layout->getattr("/a")) << "rename(2) of two names of one file leaves both";
  EXPECT_EQ(j.used(), 40u);
  EXPECT_EQ(j.inodes(), 2u);
}

// A shrink waits for the writes of the file's handles that are on their way: one that landed
// after the shrink gave its bytes back would leave the file past the size counted (here a write
// of one byte at 59, held at the server while another node opens the file with O_TRUNC).
TEST(JobLayout, AShrinkWaitsForTheWritesOnTheirWay) {
  Job j(100, 10);
  auto f = j.create("/f");
  ASSERT_TRUE(f);
  std::promise<void> write_sent;
  std::shared_future<void> release = std::async(std::launch::deferred, [] {}).share();
  std::atomic<bool> truncated_during_write{false};
  std::future<Result<std::shared_ptr<OpenFile>>> truncating;
  std::once_flag once;
  for (auto& b : j.b)
    b->on_next("write", [&] {
      std::call_once(once, [&] {
        truncating = std::async(std::launch::async,
                                [&] { return j.layout->open("/f", O_WRONLY | O_TRUNC); });
        // The truncating open, if nothing holds it back, ends within this wait.
        truncated_during_write =
            truncating.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready;
      });
    });
  ASSERT_TRUE(f->write(59, bytes("x")));
  ASSERT_TRUE(truncating.valid());
  ASSERT_TRUE(truncating.get());
  EXPECT_FALSE(truncated_during_write) << "the shrink did not wait for the write";
  EXPECT_EQ(j.used(), j.layout->getattr("/f")->size) << "the quota counts what the server holds";
}

// An unlink that races a rename onto its name gives back what it removed, not what it looked at
// before the rename replaced it: the look and the change are one hold of the name.
TEST(JobLayout, AnUnlinkRacingARenameOntoItsNameGivesBackWhatItRemoved) {
  Job j(100, 10);
  ASSERT_TRUE(j.create("/t")->write(0, bytes(std::string(10, 't'))));
  ASSERT_TRUE(j.create("/x")->write(0, bytes(std::string(30, 'x'))));
  std::future<Status> unlinking;
  std::once_flag once;
  for (auto& b : j.b)
    b->on_next("rename", [&] {
      std::call_once(once, [&] {
        unlinking = std::async(std::launch::async, [&] { return j.layout->unlink("/t"); });
        unlinking.wait_for(std::chrono::milliseconds(300));
      });
    });
  ASSERT_TRUE(j.layout->rename("/x", "/t", 0));
  ASSERT_TRUE(unlinking.valid());
  EXPECT_TRUE(unlinking.get());
  uint64_t held = 0;
  for (const char* name : {"/t", "/x"})
    if (auto a = j.layout->getattr(name)) held += a->size;
  EXPECT_EQ(j.used(), held) << "the quota counts what the server holds";
  EXPECT_EQ(j.inodes(), 0u);
}

// An unlink of a name that a batch of whole files (WriteFiles: a stage-in run again) is replacing
// waits for the batch: the batch counts each file against what it found at its name, and an
// unlink in between gave that back too (the new file left uncounted, the usage below what the
// servers hold).
TEST(JobLayout, AnUnlinkRacingAWholeFileOverItsNameGivesBackWhatItRemoved) {
  Job j(100, 10);
  ASSERT_TRUE(j.create("/f")->write(0, bytes(std::string(60, 'o'))));
  ASSERT_EQ(j.used(), 60u);
  std::future<Status> unlinking;
  std::atomic<bool> unlinked_during_write{false};
  std::once_flag once;
  for (auto& b : j.b)
    b->on_next("write", [&] {
      std::call_once(once, [&] {
        unlinking = std::async(std::launch::async, [&] { return j.layout->unlink("/f"); });
        unlinked_during_write =
            unlinking.wait_for(std::chrono::milliseconds(300)) == std::future_status::ready;
      });
    });
  auto made = j.layout->write_whole_files(
      {NewWholeFile{"/f", "/.f.part", bytes(std::string(20, 'n')), 0640, 1, 2}});
  ASSERT_EQ(made.size(), 1u);
  ASSERT_TRUE(unlinking.valid()) << "no write: the test proves nothing";
  EXPECT_FALSE(unlinked_during_write) << "the unlink did not wait for the batch";
  const Status st = unlinking.get();
  uint64_t held = 0, names = 0;
  for (const char* name : {"/f", "/.f.part"})
    if (auto a = j.layout->getattr(name)) {
      held += a->size;
      ++names;
    }
  EXPECT_EQ(j.used(), held) << "the quota counts what the server holds (unlink: "
                            << (st ? "done" : strerror(st.error())) << ")";
  EXPECT_EQ(j.inodes(), names);
}

// A file with two names whose size one name changed: the other name's handles ask the server
// for the size at their next change, and their writes count what they add to it (before, each
// name kept the size it had seen, and a shrink through one name let the other write that much
// back uncounted).
TEST(JobLayout, AShrinkThroughOneNameIsSeenByTheOtherNamesHandles) {
  Job j(200, 10);
  auto a = j.create("/a");
  ASSERT_TRUE(a->write(0, bytes(std::string(30, 'a'))));
  ASSERT_TRUE(j.layout->link("/a", "/b"));
  auto b = j.layout->open("/b", O_RDWR);
  ASSERT_TRUE(b);
  ASSERT_TRUE((*b)->write(0, bytes("B")));  // b's handle knows the size: 30
  EXPECT_EQ(j.used(), 60u);
  ASSERT_TRUE(a->truncate(0));
  EXPECT_EQ(j.used(), 0u);
  ASSERT_TRUE((*b)->write(0, bytes(std::string(30, 'b'))));
  EXPECT_EQ(j.used(), 60u) << "30 bytes through either of two names count twice";
}

// A file with three names grown by a third of 2^64 bytes counts for more than any quota, not for
// the few bytes that the product leaves modulo 2^64; sizes past off_t's are EFBIG.
TEST(JobLayout, AGrowthTimesTheNamesThatPassesSixtyFourBitsIsRefused) {
  Job j(100, 10);
  auto f = j.create("/f");
  ASSERT_TRUE(j.layout->link("/f", "/g"));
  ASSERT_TRUE(j.layout->link("/f", "/h"));
  const uint64_t third = 6148914691236517206ull;  // 3 * third == 2 (mod 2^64)
  EXPECT_EQ(f->truncate(third).error(), EDQUOT);
  AttrChange grow;
  grow.size = third;
  EXPECT_EQ(j.layout->setattr("/g", grow, nullptr).error(), EDQUOT);
  EXPECT_EQ(f->write(third - 1, bytes("x")).error(), EDQUOT);
  EXPECT_EQ(j.used(), 0u);
  EXPECT_EQ(f->truncate(uint64_t(INT64_MAX) + 1).error(), EFBIG);
  EXPECT_EQ(f->write(UINT64_MAX - 1, bytes("xyz")).error(), EFBIG);
  grow.size = UINT64_MAX;
  EXPECT_EQ(j.layout->setattr("/f", grow, nullptr).error(), EFBIG);
  ASSERT_TRUE(f->write(0, bytes("abc")));
  EXPECT_EQ(j.used(), 9u);
}

// A write or a truncation the servers refuse leaves the count as it was: nothing stays taken
// for bytes that never came (before, they stayed counted until the gateway's next start).
TEST(JobLayout, WritesAndTruncationsThatFailCountNothing) {
  Job j(100);
  auto f = j.create("/f");
  ASSERT_TRUE(f->write(0, bytes(std::string(20, 'a'))));
  EXPECT_EQ(j.used(), 20u);
  for (auto& b : j.b) b->fail("write", "", EIO);
  EXPECT_FALSE(f->write(20, bytes(std::string(30, 'b'))));
  EXPECT_EQ(j.used(), 20u);
  for (auto& b : j.b) b->fail("truncate", "", EIO);
  EXPECT_FALSE(f->truncate(60));
  EXPECT_FALSE(f->truncate(5));
  EXPECT_EQ(j.used(), 20u);
  AttrChange cut;
  cut.size = 5;
  for (auto& b : j.b) b->fail("setstat", "", EIO);
  EXPECT_FALSE(j.layout->setattr("/f", cut, nullptr));
  EXPECT_EQ(j.used(), 20u);
  for (auto& b : j.b) b->clear_failures();
  // The file's size as counted is still 20: 10 more past it take 10.
  ASSERT_TRUE(f->write(20, bytes(std::string(10, 'c'))));
  EXPECT_EQ(j.used(), 30u);
}

// A write that fails in part (one server of a striped file refuses its stripe, the next server
// takes its own): what it grew the file by stays counted, and only that.
TEST(JobLayout, AWriteThatFailsInPartCountsWhatLanded) {
  Job j(100);
  auto f = j.create("/f");
  j.b[1]->fail("write", "", EIO);  // stripe 1 ([8, 16)) is b1's, stripe 2 ([16, 24)) b2's
  EXPECT_FALSE(f->write(8, bytes(std::string(16, 'x'))));
  const uint64_t size = j.layout->getattr("/f")->size;
  EXPECT_EQ(size, 24u) << "b2 took its stripe";
  EXPECT_EQ(j.used(), size) << "the quota counts what the server holds";
  j.b[1]->clear_failures();
  ASSERT_TRUE(f->write(24, bytes(std::string(6, 'y'))));
  EXPECT_EQ(j.used(), 30u);
}

// A growing truncate that fails in part (one server of a striped file refuses to grow its part,
// another grew its own): what it grew the file by stays counted, and only that.
TEST(JobLayout, AGrowingTruncateThatFailsInPartCountsWhatItGrew) {
  Job j(100);
  auto f = j.create("/f");
  j.b[1]->fail("truncate", "", EIO);
  EXPECT_FALSE(f->truncate(30));
  const uint64_t size = j.layout->getattr("/f")->size;
  EXPECT_EQ(j.used(), size) << "the quota counts what the server holds";
  j.b[1]->clear_failures();
  ASSERT_TRUE(f->truncate(40));
  EXPECT_EQ(j.used(), 40u);
  // By path (truncate(2)), as much.
  auto g = j.create("/g");
  g.reset();
  j.b[1]->fail("setstat", "", EIO);
  AttrChange grow;
  grow.size = 30;
  EXPECT_FALSE(j.layout->setattr("/g", grow, nullptr));
  EXPECT_EQ(j.used(), 40u + j.layout->getattr("/g")->size);
}

// An appending write counts where it lands, the file's end, not at the offset it was given (a
// node whose kernel has an old idea of the size, another node having appended since).
TEST(JobLayout, AnAppendingWriteCountsAtTheFilesEnd) {
  Job j(100);
  ASSERT_TRUE(j.create("/log"));
  auto f = j.layout->open("/log", O_WRONLY | O_APPEND);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(0, bytes(std::string(10, 'a'))));
  ASSERT_TRUE((*f)->write(0, bytes(std::string(10, 'b'))));  // lands at 10
  EXPECT_EQ(j.layout->getattr("/log")->size, 20u);
  EXPECT_EQ(j.used(), 20u);
}

// Another file's name found at a partial's name (a hard link left there) is removed, and the
// file made in its place has one name: its growth counts once.
TEST(JobLayout, AWholeFileMadeOverALinkAtItsPartialsNameCountsOnce) {
  Job j(100, 10);
  ASSERT_TRUE(j.create("/f")->write(0, bytes("12345")));
  ASSERT_TRUE(j.layout->link("/f", "/.x.part"));
  auto made =
      j.layout->write_whole_files({NewWholeFile{"/x", "/.x.part", bytes("abc"), 0640, 1, 2}});
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_EQ(j.layout->getattr("/f")->size, 5u) << "the linked file was written over";
  auto x = j.layout->open("/x", O_WRONLY);
  ASSERT_TRUE(x);
  const uint64_t before = j.used();
  ASSERT_TRUE((*x)->write(3, bytes("defg")));
  EXPECT_EQ(j.used(), before + 4);
}

// A partial a killed copy left at a whole file's partial name is removed by the write, and what it
// counted goes with it: the usage is the file made, nothing more.
TEST(JobLayout, APartialAKilledCopyLeftGivesItsCountBackWhenTheFileIsMade) {
  Job j(100, 10);
  ASSERT_TRUE(j.create("/.x.part")->write(0, bytes("half a copy")));
  EXPECT_EQ(j.used(), 11u);
  EXPECT_EQ(j.inodes(), 1u);
  auto made =
      j.layout->write_whole_files({NewWholeFile{"/x", "/.x.part", bytes("abc"), 0640, 1, 2}});
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_FALSE(j.layout->getattr("/.x.part"));
  EXPECT_EQ(j.used(), 3u);
  EXPECT_EQ(j.inodes(), 1u);
}

TEST(JobLayout, AGrowingTruncatePastTheQuotaIsRefused) {
  Job j(50);
  j.create("/f");
  AttrChange grow;
  grow.size = 51;
  EXPECT_EQ(j.layout->setattr("/f", grow, nullptr).error(), EDQUOT);
  EXPECT_EQ(j.layout->getattr("/f")->size, 0u);
  grow.size = 50;
  EXPECT_TRUE(j.layout->setattr("/f", grow, nullptr));
  EXPECT_EQ(j.used(), 50u);
}

TEST(JobLayout, TheInodeQuotaCountsFilesDirectoriesAndSymlinks) {
  Job j(100, 3);
  EXPECT_TRUE(j.layout->mkdir("/d", 0755));
  j.create("/d/f");
  EXPECT_TRUE(j.layout->symlink("/l", "target"));
  EXPECT_EQ(j.layout->create("/g", O_RDWR, 0644).error(), EDQUOT);
  EXPECT_EQ(j.layout->mkdir("/e", 0755).error(), EDQUOT);
  EXPECT_FALSE(j.b[0]->has("/g")) << "a refused create sends nothing";
  EXPECT_TRUE(j.layout->rmdir("/d").error() == ENOTEMPTY);
  ASSERT_TRUE(j.layout->unlink("/d/f"));
  ASSERT_TRUE(j.layout->rmdir("/d"));
  EXPECT_EQ(j.inodes(), 1u);
  // A create of a name that exists takes no inode.
  j.create("/g");
  auto again = j.layout->create("/g", O_RDWR, 0644);
  ASSERT_TRUE(again);
  EXPECT_EQ(j.inodes(), 2u);
}

TEST(JobLayout, WholeFilesTakeTheirQuotaFirstAndGiveBackWhatTheyReplace) {
  // WriteFiles through a job's namespace: each file's inode and bytes are taken before anything
  // is sent (EDQUOT for one that would pass the quota, the others made), a file replaced by a
  // rename gives its own back, and every file shows the job's owner.
  Job j(100, 10);
  auto f = j.create("/old");
  ASSERT_TRUE(f->write(0, bytes(std::string(30, 'o'))));
  ASSERT_TRUE(f->close());
  EXPECT_EQ(j.used(), 30u);
  EXPECT_EQ(j.inodes(), 1u);
  auto whole = [](std::string path, const std::string& data) {
    std::string partial = "/." + path.substr(1) + ".part";
    return NewWholeFile{std::move(path), std::move(partial), bytes(data), 0640, 1, 2};
  };
  auto made = j.layout->write_whole_files({whole("/a", std::string(20, 'a')),
                                           whole("/old", std::string(10, 'n')),
                                           whole("/big", std::string(90, 'b')), whole("/c", "")});
  ASSERT_EQ(made.size(), 4u);
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_EQ(made[0]->attrs.uid, 1234u);
  EXPECT_EQ(made[0]->attrs.gid, 567u);
  EXPECT_EQ(made[0]->attrs.size, 20u);
  ASSERT_TRUE(made[1]) << made[1].error();
  EXPECT_EQ(made[2].error(), EDQUOT);
  ASSERT_TRUE(made[3]) << made[3].error();
  // The old file's 30 bytes came back: 20 + 10 + 0, and /a, /old, /c.
  EXPECT_EQ(j.used(), 30u);
  EXPECT_EQ(j.inodes(), 3u);
  EXPECT_EQ(j.layout->getattr("/big").error(), ENOENT);
  EXPECT_EQ(j.layout->getattr("/.big.part").error(), ENOENT);
  EXPECT_EQ(j.layout->getattr("/old")->size, 10u);
  // A path named twice in one call: the second file replaces the first, and what was there
  // before is given back once.
  made = j.layout->write_whole_files(
      {whole("/old", std::string(15, 'x')),
       NewWholeFile{"/old", "/.old.again", bytes(std::string(25, 'y')), 0640, 1, 2}});
  ASSERT_TRUE(made[0]) << made[0].error();
  ASSERT_TRUE(made[1]) << made[1].error();
  EXPECT_EQ(j.layout->getattr("/old")->size, 25u);
  EXPECT_EQ(j.used(), 20u + 25u);
  EXPECT_EQ(j.inodes(), 3u);
}

// A file copied again over itself (a stage-in run again) takes only what it adds to the file it
// replaces, so that a namespace near its quota can be staged again: the same size takes nothing,
// a larger file the difference, a smaller one gives the rest back.
TEST(JobLayout, AWholeFileOverAnOlderCopyTakesOnlyWhatItAdds) {
  Job j(100, 2);
  auto whole = [](std::string path, const std::string& data) {
    std::string partial = "/." + path.substr(1) + ".part";
    return NewWholeFile{std::move(path), std::move(partial), bytes(data), 0640, 1, 2};
  };
  auto made = j.layout->write_whole_files({whole("/f", std::string(90, 'a'))});
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_EQ(j.used(), 90u);
  made = j.layout->write_whole_files({whole("/f", std::string(90, 'b'))});
  ASSERT_TRUE(made[0]) << "the same size again refused: " << made[0].error();
  EXPECT_EQ(j.used(), 90u);
  EXPECT_EQ(j.inodes(), 1u);
  made = j.layout->write_whole_files({whole("/f", std::string(95, 'c'))});
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_EQ(j.used(), 95u);
  made = j.layout->write_whole_files({whole("/f", std::string(120, 'd'))});
  EXPECT_EQ(made[0].error(), EDQUOT) << "25 more would pass the quota";
  EXPECT_EQ(j.layout->getattr("/f")->size, 95u) << "the refused copy replaced nothing";
  made = j.layout->write_whole_files({whole("/f", std::string(50, 'e'))});
  ASSERT_TRUE(made[0]) << made[0].error();
  EXPECT_EQ(j.used(), 50u);
  EXPECT_EQ(j.inodes(), 1u);
}

TEST(JobLayout, DfShowsTheQuota) {
  Job j(8 << 20, 1000);
  ASSERT_TRUE(j.create("/f")->write(0, bytes(std::string(1 << 20, 'x'))));
  auto v = j.layout->statfs("/");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->blocks * v->frsize, 8u << 20);
  EXPECT_EQ(v->bavail * v->frsize, 7u << 20);
  EXPECT_EQ(v->files, 1000u);
  EXPECT_EQ(v->favail, 999u);
}

}  // namespace
// A job's tree with directories their owner may not write, search or list (a user's chmod 555, a
// stage-in that kept a read-only directory's mode): removed whole by a storage account that is
// not root, which opens each up before emptying it. A symlink at the top is removed, not followed.
TEST(TreeRemover, DirectoriesTheirOwnerMayNotWriteAreOpenedUpAndRemoved) {
  auto b = test::FakeBackend::make("srv0");
  b->put_dir("/job-1");
  b->put_dir("/job-1/ro", 0555);
  b->put_file("/job-1/ro/f", "x");
  b->put_dir("/job-1/ro/none", 0000);
  b->put_file("/job-1/ro/none/g", "y");
  b->put_dir("/job-2", 0500);
  b->put_file("/job-2/h", "z");
  b->put_dir("/elsewhere");
  b->put_file("/elsewhere/kept", "k");
  b->put_symlink("/job-3", "/elsewhere");
  b->set_owner_modes_checked(true);
  ASSERT_EQ(b->unlink("/job-1/ro/f").error(), EACCES) << "the fake judges owner bits";
  EXPECT_TRUE(remove_tree(*b, "/job-1"));
  EXPECT_FALSE(b->has("/job-1"));
  EXPECT_TRUE(remove_tree(*b, "/job-2")) << "the top directory itself read-only";
  EXPECT_FALSE(b->has("/job-2"));
  EXPECT_TRUE(remove_tree(*b, "/job-3"));
  EXPECT_FALSE(b->has("/job-3"));
  EXPECT_TRUE(b->has("/elsewhere/kept")) << "the symlink was followed";
  EXPECT_TRUE(remove_tree(*b, "/job-4")) << "already gone";
}

// A removal that runs out of time stops between entries and says so; what it removed stays
// removed, and a later call removes the rest.
TEST(TreeRemover, ARemovalPastItsTimeStopsAndALaterOneFinishes) {
  auto b = test::FakeBackend::make("srv0");
  for (int i = 0; i < 50; ++i) b->put_file("/job-1/d/f" + std::to_string(i), "x");
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(remove_tree(*b, "/job-1", past).error(), ETIMEDOUT);
  EXPECT_TRUE(b->has("/job-1/d/f0"));
  EXPECT_TRUE(remove_tree(*b, "/job-1"));
  EXPECT_FALSE(b->has("/job-1"));
}

}  // namespace skein
