// ReadWindow and ReadAhead: how far ahead a file reads (growing on sequential reads, nothing on a
// random one), which gateway reads it makes (aligned blocks, never past the known size, within
// the mount's budget), and that readers always get exactly the file's bytes: out of order, after
// a change, at end of file, when a read fails.
#include "read_ahead.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace skein::client {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kKiB = 1 << 10;

char byte_at(uint64_t offset, uint64_t version) {
  return static_cast<char>((offset * 131 + offset / 4096 + version * 7) & 0xff);
}

std::string bytes_of(uint64_t offset, uint64_t size, uint64_t version = 0) {
  std::string s(size, '\0');
  for (uint64_t i = 0; i < size; ++i) s[i] = byte_at(offset + i, version);
  return s;
}

std::string joined(const ReadData& data) {
  std::string out;
  for (std::string_view piece : data.pieces) out.append(piece);
  return out;
}

// A file on a pretend gateway: answers reads at once, or holds them until released.
class FakeFile {
 public:
  explicit FakeFile(uint64_t size) : size_(size) {}

  struct Call {
    uint64_t offset;
    uint32_t size;
  };

  ReadAhead::Fetch fetch() {
    return [this](uint64_t offset, uint32_t size, ReadAhead::FetchDone done) {
      std::unique_lock lock(mu_);
      calls_.push_back({offset, size});
      if (hold_) {
        held_.push_back({offset, size, std::move(done)});
        return;
      }
      auto answer = answer_for(offset, size);
      lock.unlock();
      done(std::move(answer));
    };
  }

  // Answers every held read (and those held meanwhile) in an order of the caller's choice.
  void release_all(bool reverse = false) {
    for (;;) {
      std::unique_lock lock(mu_);
      if (held_.empty()) return;
      Held h = std::move(reverse ? held_.back() : held_.front());
      if (reverse)
        held_.pop_back();
      else
        held_.pop_front();
      auto answer = answer_for(h.offset, h.size);
      lock.unlock();
      h.done(std::move(answer));
    }
  }

  bool release_one() {
    std::unique_lock lock(mu_);
    if (held_.empty()) return false;
    Held h = std::move(held_.front());
    held_.pop_front();
    auto answer = answer_for(h.offset, h.size);
    lock.unlock();
    h.done(std::move(answer));
    return true;
  }
  void set_hold(bool hold) {
    std::lock_guard lock(mu_);
    hold_ = hold;
  }
  void set_version(uint64_t v) {
    std::lock_guard lock(mu_);
    version_ = v;
  }
  void fail_with(int err) {
    std::lock_guard lock(mu_);
    error_ = err;
  }
  std::vector<Call> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  uint64_t bytes_asked() {
    uint64_t n = 0;
    for (const Call& c : calls()) n += c.size;
    return n;
  }

 private:
  struct Held {
    uint64_t offset;
    uint32_t size;
    ReadAhead::FetchDone done;
  };
  // The bytes come in uneven pieces of one buffer, as a received gRPC message's slices do.
  Result<SharedBytes> answer_for(uint64_t offset, uint32_t size) {
    if (error_) return Result<SharedBytes>::failure(error_);
    if (offset >= size_) return SharedBytes();
    auto whole = std::make_shared<const std::string>(
        bytes_of(offset, std::min<uint64_t>(size, size_ - offset), version_));
    std::vector<std::string_view> pieces;
    const std::string_view all(*whole);
    for (std::size_t at = 0, n = 1000; at < all.size(); at += n, n = n * 3 % 7919 + 1)
      pieces.push_back(all.substr(at, n));
    return SharedBytes(std::move(pieces), whole);
  }

  std::mutex mu_;
  const uint64_t size_;
  uint64_t version_ = 0;
  int error_ = 0;
  bool hold_ = false;
  std::vector<Call> calls_;
  std::deque<Held> held_;
};

struct ReadAheadTest : ::testing::Test {
  std::shared_ptr<ByteBudget> budget = std::make_shared<ByteBudget>(64 * kMiB);
  std::atomic<uint64_t> generation{0};
};

// ---- ReadWindow ----

TEST(ReadWindow, StreamFromOffsetZeroStartsWithTheMinimumWindow) {
  ReadWindow w({.min = 1 * kMiB, .max = 8 * kMiB, .slack = 32 * kMiB});
  EXPECT_TRUE(w.record(0, 128 * kKiB));
  EXPECT_EQ(w.ahead(), 1 * kMiB);
}

TEST(ReadWindow, GrowsToTwiceWhatWasStreamedUpToTheMaximum) {
  ReadWindow w({.min = 1 * kMiB, .max = 8 * kMiB, .slack = 32 * kMiB});
  uint64_t off = 0;
  for (; off < 2 * kMiB; off += 128 * kKiB) EXPECT_TRUE(w.record(off, 128 * kKiB));
  EXPECT_EQ(w.ahead(), 4 * kMiB);
  for (; off < 64 * kMiB; off += kMiB) EXPECT_TRUE(w.record(off, kMiB));
  EXPECT_EQ(w.ahead(), 8 * kMiB);
}

TEST(ReadWindow, RandomReadClosesTheWindowAndAStreamInOrderReopensIt) {
  ReadWindow w({.min = 1 * kMiB, .max = 8 * kMiB, .slack = 32 * kMiB});
  for (uint64_t off = 0; off < 16 * kMiB; off += kMiB) w.record(off, kMiB);
  ASSERT_EQ(w.ahead(), 8 * kMiB);
  EXPECT_FALSE(w.record(900 * kMiB, 4 * kKiB));
  EXPECT_EQ(w.ahead(), 0u);
  EXPECT_FALSE(w.record(100 * kMiB, 4 * kKiB));
  EXPECT_EQ(w.ahead(), 0u);
  // Small reads in order: a stream once it has read `confirm` (256 KiB) bytes, not before.
  uint64_t off = 100 * kMiB + 4 * kKiB;
  for (; off < 100 * kMiB + 256 * kKiB; off += 4 * kKiB)
    EXPECT_FALSE(w.record(off, 4 * kKiB)) << off;
  EXPECT_TRUE(w.record(off, 4 * kKiB));
  EXPECT_EQ(w.ahead(), 1 * kMiB);
}

TEST(ReadWindow, ReadsOfOneStreamArrivingOutOfOrderStaySequential) {
  ReadWindow w({.min = 1 * kMiB, .max = 8 * kMiB, .slack = 32 * kMiB});
  // The kernel's read-ahead sends 4 MiB at once; FUSE threads pick the reads up in any order.
  for (uint64_t off : {3 * kMiB, 0 * kMiB, 2 * kMiB, 1 * kMiB, 7 * kMiB, 5 * kMiB, 4 * kMiB})
    EXPECT_TRUE(w.record(off, kMiB)) << off;
  EXPECT_GT(w.ahead(), 0u);
}

TEST(ReadWindow, FirstReadFarIntoTheFileIsRandom) {
  ReadWindow w({.min = 1 * kMiB, .max = 8 * kMiB, .slack = 32 * kMiB});
  EXPECT_FALSE(w.record(512 * kMiB, 4 * kKiB));
  EXPECT_EQ(w.ahead(), 0u);
}

// Random 4 KiB reads of a 256 MiB file (fio's randread): never a window, however close two of
// them land (a quarter of them land within 32 MiB of the one before).
TEST(ReadWindow, RandomSmallReadsNeverOpenAWindow) {
  ReadWindow w;
  std::mt19937_64 rng(19);
  int sequential = 0;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t off = rng() % (256 * kMiB / (4 * kKiB)) * 4 * kKiB;
    sequential += w.record(off, 4 * kKiB) ? 1 : 0;
  }
  EXPECT_EQ(sequential, 0);
}

// 4 KiB every 64 KiB, and 4 KiB every 8 KiB: the gaps are never read, so nothing is read ahead.
TEST(ReadWindow, StridedReadsAreNotAStream) {
  for (uint64_t stride : {64 * kKiB, 8 * kKiB}) {
    ReadWindow w;
    for (uint64_t off = 10 * kMiB; off < 50 * kMiB; off += stride)
      EXPECT_FALSE(w.record(off, 4 * kKiB)) << "stride " << stride << " at " << off;
    EXPECT_EQ(w.ahead(), 0u);
  }
}

TEST(ReadWindow, BackwardsReadsAreNotAStream) {
  ReadWindow w;
  for (uint64_t off = 64 * kMiB; off >= 32 * kMiB; off -= 4 * kKiB)
    EXPECT_FALSE(w.record(off, 4 * kKiB)) << off;
  // Large reads going backwards, too, once they are further than the slack from the start.
  ReadWindow big({.min = 1 * kMiB, .max = 8 * kMiB, .slack = 4 * kMiB});
  for (uint64_t off = 512 * kMiB; off >= 256 * kMiB; off -= 8 * kMiB)
    EXPECT_FALSE(big.record(off, kMiB)) << off;
}

TEST(ReadWindow, ReReadsAddNothingToAStream) {
  ReadWindow w;
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(w.record(40 * kMiB, 4 * kKiB)) << i;
  // ... but do not break a stream either.
  ReadWindow s;
  for (uint64_t off = 0; off < 4 * kMiB; off += 128 * kKiB) ASSERT_TRUE(s.record(off, 128 * kKiB));
  const uint64_t ahead = s.ahead();
  EXPECT_TRUE(s.record(4 * kMiB - 128 * kKiB, 128 * kKiB));
  EXPECT_EQ(s.ahead(), ahead);
  EXPECT_TRUE(s.record(4 * kMiB, 128 * kKiB));
}

// Two readers of one file (or one reader at two places), reads alternating: both are streams.
TEST(ReadWindow, TwoInterleavedStreamsAreBothReadAhead) {
  ReadWindow w;
  const uint64_t a = 0, b = 200 * kMiB;
  int both = 0;
  for (uint64_t i = 0; i < 256; ++i) {
    const bool sa = w.record(a + i * 4 * kKiB, 4 * kKiB);
    EXPECT_TRUE(sa) << i;  // stream A started at 0
    const bool sb = w.record(b + i * 4 * kKiB, 4 * kKiB);
    if (i >= 64) {
      EXPECT_TRUE(sb) << i;  // B once it has read 256 KiB in order
    }
    both += sa && sb;
  }
  EXPECT_GT(both, 150);
  // Large reads of two streams, each out of order within itself.
  ReadWindow k;
  for (uint64_t i = 0; i < 32; i += 2) {
    for (uint64_t j : {i + 1, i}) {
      EXPECT_TRUE(k.record(j * kMiB, kMiB));
      const bool sb = k.record(b + j * kMiB, kMiB);
      if (i >= 2) {
        EXPECT_TRUE(sb) << j;
      }
    }
  }
}

// ---- ReadAhead ----

TEST_F(ReadAheadTest, SequentialReadsAreServedFromAlignedBlocksFetchedAhead) {
  FakeFile file(64 * kMiB);
  ReadAhead ra(budget, generation, 64 * kMiB, {});
  for (uint64_t off = 0; off < 16 * kMiB; off += 128 * kKiB) {
    auto got = ra.read(off, 128 * kKiB, file.fetch());
    ASSERT_TRUE(got) << got.error();
    ASSERT_EQ(joined(*got), bytes_of(off, 128 * kKiB)) << "at " << off;
  }
  for (const auto& c : file.calls()) {
    EXPECT_EQ(c.offset % kMiB, 0u);
    EXPECT_EQ(c.size, kMiB);
  }
  // Everything read came from blocks, each fetched once, and the window is ahead of the reader.
  EXPECT_GE(file.bytes_asked(), 16 * kMiB);
  EXPECT_LE(file.bytes_asked(), 16 * kMiB + 8 * kMiB + kMiB);
  EXPECT_GT(ra.blocks(), 0u);
}

TEST_F(ReadAheadTest, NothingIsReadAheadPastTheKnownSize) {
  const uint64_t size = kMiB + 300 * kKiB;
  FakeFile file(size);
  ReadAhead ra(budget, generation, size, {});
  std::string all;
  for (uint64_t off = 0; off < size; off += 128 * kKiB) {
    auto got = ra.read(off, 128 * kKiB, file.fetch());
    ASSERT_TRUE(got);
    all += joined(*got);
  }
  EXPECT_EQ(all, bytes_of(0, size));
  for (const auto& c : file.calls()) EXPECT_LE(c.offset + c.size, size + 128 * kKiB) << c.offset;
  EXPECT_EQ(file.calls().front().size, kMiB);
  EXPECT_EQ(file.calls()[1].offset, kMiB);
  EXPECT_EQ(file.calls()[1].size, 300 * kKiB);
}

TEST_F(ReadAheadTest, RandomReadIsFetchedAloneAndKeepsTheStreamItLeft) {
  FakeFile file(1024 * kMiB);
  ReadAhead ra(budget, generation, 1024 * kMiB, {});
  for (uint64_t off = 0; off < 4 * kMiB; off += kMiB) ASSERT_TRUE(ra.read(off, kMiB, file.fetch()));
  const std::size_t held = ra.blocks();
  ASSERT_GT(held, 0u);
  const auto before = file.calls().size();
  auto got = ra.read(700 * kMiB + 123, 4000, file.fetch());
  ASSERT_TRUE(got);
  EXPECT_EQ(joined(*got), bytes_of(700 * kMiB + 123, 4000));
  auto calls = file.calls();
  ASSERT_EQ(calls.size(), before + 1);
  EXPECT_EQ(calls.back().offset, 700 * kMiB + 123);
  EXPECT_EQ(calls.back().size, 4000u);
  // The stream's blocks stay for it: back there, the reader is served from them.
  EXPECT_EQ(ra.blocks(), held);
  ASSERT_EQ(joined(*ra.read(4 * kMiB, kMiB, file.fetch())), bytes_of(4 * kMiB, kMiB));
  // Once random reads have taken the place of the stream, its blocks and their budget go.
  for (uint64_t i = 1; i <= 8; ++i) ASSERT_TRUE(ra.read(i * 100 * kMiB, 4000, file.fetch()));
  EXPECT_EQ(ra.blocks(), 0u);
  EXPECT_EQ(budget->used(), 0u);
}

// fio's randread: the gateway is asked for exactly the bytes read, nothing more.
TEST_F(ReadAheadTest, RandomSmallReadsFetchExactlyWhatIsRead) {
  FakeFile file(256 * kMiB);
  ReadAhead ra(budget, generation, 256 * kMiB, {});
  std::mt19937_64 rng(7);
  uint64_t read = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t off = 4 * kKiB + rng() % (256 * kMiB / (4 * kKiB) - 1) * 4 * kKiB;
    auto got = ra.read(off, 4 * kKiB, file.fetch());
    ASSERT_TRUE(got);
    ASSERT_EQ(joined(*got), bytes_of(off, 4 * kKiB));
    read += got->size;
  }
  EXPECT_EQ(file.bytes_asked(), read);
  EXPECT_EQ(ra.blocks(), 0u);
}

TEST_F(ReadAheadTest, BlocksFromBeforeAChangeAreNeverServed) {
  FakeFile file(64 * kMiB);
  ReadAhead ra(budget, generation, 64 * kMiB, {});
  ASSERT_EQ(joined(*ra.read(0, 128 * kKiB, file.fetch())), bytes_of(0, 128 * kKiB));
  // The file changes (a write, a truncate, another mount): read-ahead must fetch afresh.
  file.set_version(1);
  generation.fetch_add(1);
  auto got = ra.read(128 * kKiB, 128 * kKiB, file.fetch());
  ASSERT_TRUE(got);
  EXPECT_EQ(joined(*got), bytes_of(128 * kKiB, 128 * kKiB, 1));
}

TEST_F(ReadAheadTest, BlockFetchedAcrossAChangeIsDiscarded) {
  FakeFile file(64 * kMiB);
  ReadAhead ra(budget, generation, 64 * kMiB, {});
  file.set_hold(true);
  std::atomic<bool> finished{false};
  std::thread reader([&] {
    auto got = ra.read(0, 128 * kKiB, file.fetch());
    ASSERT_TRUE(got);
    EXPECT_EQ(joined(*got), bytes_of(0, 128 * kKiB, 1));
    finished = true;
  });
  while (file.calls().empty()) std::this_thread::yield();
  generation.fetch_add(1);  // a write lands while the block is in flight
  file.release_one();       // ... and the block comes back with the old bytes
  file.set_version(1);
  while (!finished) {
    file.release_all();
    std::this_thread::yield();
  }
  reader.join();
}

TEST_F(ReadAheadTest, ShortBlockMeansEndOfFile) {
  FakeFile file(5000);  // smaller than the size the file had when opened
  ReadAhead ra(budget, generation, 10 * kMiB, {});
  auto got = ra.read(0, 128 * kKiB, file.fetch());
  ASSERT_TRUE(got);
  EXPECT_EQ(joined(*got), bytes_of(0, 5000));
  auto past = ra.read(128 * kKiB, 128 * kKiB, file.fetch());
  ASSERT_TRUE(past);
  EXPECT_EQ(past->size, 0u);
}

TEST_F(ReadAheadTest, FailedBlockIsReadAgainDirectlyAndItsErrorReturned) {
  FakeFile file(64 * kMiB);
  ReadAhead ra(budget, generation, 64 * kMiB, {});
  file.fail_with(EIO);
  auto got = ra.read(0, 128 * kKiB, file.fetch());
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error(), EIO);
  // The trouble passes: the same read now succeeds.
  file.fail_with(0);
  auto again = ra.read(0, 128 * kKiB, file.fetch());
  ASSERT_TRUE(again);
  EXPECT_EQ(joined(*again), bytes_of(0, 128 * kKiB));
}

TEST_F(ReadAheadTest, BudgetBoundsWhatIsReadAhead) {
  auto small = std::make_shared<ByteBudget>(2 * kMiB);
  FakeFile file(64 * kMiB);
  ReadAhead ra(small, generation, 64 * kMiB, {});
  file.set_hold(true);
  std::thread reader([&] { ASSERT_TRUE(ra.read(0, 128 * kKiB, file.fetch())); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(small->used(), 2 * kMiB);
  file.set_hold(false);
  file.release_all();
  reader.join();
  for (uint64_t off = 128 * kKiB; off < 16 * kMiB; off += 128 * kKiB) {
    auto got = ra.read(off, 128 * kKiB, file.fetch());
    ASSERT_TRUE(got);
    ASSERT_EQ(joined(*got), bytes_of(off, 128 * kKiB));
    EXPECT_LE(small->used(), 2 * kMiB);
  }
}

TEST_F(ReadAheadTest, WithoutRoomAStreamIsStillFetchedInWholeBlocksOnce) {
  auto full = std::make_shared<ByteBudget>(kMiB);
  full->acquire(kMiB);  // other files hold it all
  FakeFile file(8 * kMiB);
  {
    ReadAhead ra(full, generation, 8 * kMiB, {});
    for (uint64_t off = 0; off < 8 * kMiB; off += 128 * kKiB) {
      auto got = ra.read(off, 128 * kKiB, file.fetch());
      ASSERT_TRUE(got);
      ASSERT_EQ(joined(*got), bytes_of(off, 128 * kKiB));
    }
    EXPECT_EQ(full->used(), kMiB);  // nothing charged beyond the limit
  }
  EXPECT_EQ(file.bytes_asked(), 8 * kMiB);  // every byte once
  EXPECT_EQ(file.calls().size(), 8u);       // in aligned 1 MiB blocks, not 128 KiB pieces
  full->release(kMiB);
}

// Files read a little and left open (a header read by h5py or xarray, the handle kept), while
// other files hold the whole budget: the blocks their reads needed stay within the budget's
// overdraft, however many such files there are; past it, a read fetches just its bytes.
TEST_F(ReadAheadTest, BlocksFetchedWithoutRoomAreBoundedByTheOverdraft) {
  auto full = std::make_shared<ByteBudget>(2 * kMiB);
  full->acquire(2 * kMiB);  // other files hold it all
  FakeFile file(8 * kMiB);
  std::vector<std::unique_ptr<ReadAhead>> open;
  std::size_t held = 0;
  for (int i = 0; i < 64; ++i) {
    open.push_back(std::make_unique<ReadAhead>(full, generation, 8 * kMiB, ReadAhead::Options{}));
    auto got = open.back()->read(0, 4 * kKiB, file.fetch());
    ASSERT_TRUE(got);
    ASSERT_EQ(joined(*got), bytes_of(0, 4 * kKiB));
    held += open.back()->blocks();
  }
  EXPECT_LE(held, 2u) << "blocks of 1 MiB held past a budget of 2 MiB";
  EXPECT_LE(full->overdrawn(), 2 * kMiB);
  open.clear();
  EXPECT_EQ(full->overdrawn(), 0u) << "the overdraft is repaid when the files close";
  EXPECT_EQ(full->used(), 2 * kMiB);
  full->release(2 * kMiB);
}

TEST_F(ReadAheadTest, ReadsArrivingOutOfOrderFetchEveryBlockOnce) {
  // As the kernel's read-ahead does on several FUSE threads: a read now and then arrives after
  // reads beyond it, whose blocks are used up and let go by then.
  FakeFile file(32 * kMiB);
  ReadAhead ra(budget, generation, 32 * kMiB, {});
  std::vector<uint64_t> order;
  for (uint64_t m = 0; m < 32; m += 4) {
    for (uint64_t k : {m + 1, m + 2, m, m + 3}) order.push_back(k);
  }
  for (uint64_t m : order) {
    auto got = ra.read(m * kMiB, kMiB, file.fetch());
    ASSERT_TRUE(got);
    ASSERT_EQ(joined(*got), bytes_of(m * kMiB, kMiB));
  }
  std::map<uint64_t, int> fetched;
  for (const auto& c : file.calls()) ++fetched[c.offset];
  for (const auto& [offset, times] : fetched) EXPECT_EQ(times, 1) << "block at " << offset;
  EXPECT_EQ(file.bytes_asked(), 32 * kMiB);
}

TEST_F(ReadAheadTest, BudgetIsReturnedWhenTheFileCloses) {
  FakeFile file(64 * kMiB);
  {
    ReadAhead ra(budget, generation, 64 * kMiB, {});
    for (uint64_t off = 0; off < 8 * kMiB; off += kMiB)
      ASSERT_TRUE(ra.read(off, kMiB, file.fetch()));
    EXPECT_GT(budget->used(), 0u);
  }
  EXPECT_EQ(budget->used(), 0u);
}

TEST_F(ReadAheadTest, ConcurrentOutOfOrderReadsOfOneStreamGetExactBytes) {
  FakeFile file(256 * kMiB);
  ReadAhead ra(budget, generation, 256 * kMiB, {});
  file.set_hold(true);
  std::atomic<bool> done{false};
  std::thread answerer([&] {
    std::mt19937 rng(7);
    while (!done) {
      file.release_all(rng() % 2);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  // Like the kernel: windows of eight 128 KiB reads, each window's reads on threads of their own.
  std::atomic<int> bad{0};
  for (uint64_t window = 0; window < 64 * kMiB; window += kMiB) {
    std::vector<std::thread> readers;
    for (int i = 7; i >= 0; --i) {
      readers.emplace_back([&, window, i] {
        uint64_t off = window + static_cast<uint64_t>(i) * 128 * kKiB;
        auto got = ra.read(off, 128 * kKiB, file.fetch());
        if (!got || joined(*got) != bytes_of(off, 128 * kKiB)) ++bad;
      });
    }
    for (auto& t : readers) t.join();
  }
  done = true;
  answerer.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(file.bytes_asked(), 64 * kMiB + 16 * kMiB) << "blocks fetched more than once";
}

}  // namespace
}  // namespace skein::client
