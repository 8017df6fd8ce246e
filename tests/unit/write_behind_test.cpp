// WriteBehind: writes return before the gateway has them, gathered into large requests, several
// in flight; overlapping writes keep their order, appends go one at a time, writers wait when the
// file holds too much, and every error of an acknowledged write reaches its writer once, with its
// own errno, at the next write or at settle.
#include "write_behind.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <thread>
#include <vector>

namespace skein::client {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kKiB = 1 << 10;

// A pretend gateway that holds every request until the test answers it.
class FakeGateway {
 public:
  struct Request {
    uint64_t offset;
    std::string data;
    bool append;
    WriteBehind::SendDone done;
  };

  WriteBehind::Send send() {
    return [this](const FileRef& file, uint64_t offset, std::string data,
                  WriteBehind::SendDone done) {
      std::lock_guard lock(mu_);
      sent_.push_back({offset, data, (file.flags & O_APPEND) != 0, nullptr});
      pending_.push_back({offset, std::move(data), (file.flags & O_APPEND) != 0, std::move(done)});
      cv_.notify_all();
    };
  }

  // Answers the oldest request still pending with `result` (default: all of it written).
  void answer(std::optional<Result<uint32_t>> result = std::nullopt) {
    std::unique_lock lock(mu_);
    ASSERT_FALSE(pending_.empty());
    Request r = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    r.done(result ? *result : Result<uint32_t>(static_cast<uint32_t>(r.data.size())));
  }
  void answer_all() {
    while (pending()) answer();
  }
  // Answers everything, now and later, from a thread of its own until stopped.
  void keep_answering() {
    answerer_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        if (pending())
          answer();
        else
          std::this_thread::sleep_for(100us);
      }
    });
  }
  void stop_answering() {
    if (answerer_.joinable()) {
      answerer_.request_stop();
      answerer_.join();
    }
  }

  std::size_t pending() {
    std::lock_guard lock(mu_);
    return pending_.size();
  }
  std::vector<Request> sent() {
    std::lock_guard lock(mu_);
    return sent_;
  }
  bool wait_for_sent(std::size_t n, std::chrono::milliseconds within = 2s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, within, [&] { return sent_.size() >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> pending_;
  std::vector<Request> sent_;
  std::jthread answerer_;
};

struct WriteBehindTest : ::testing::Test {
  FakeGateway gw;
  std::shared_ptr<ByteBudget> budget = std::make_shared<ByteBudget>(64 * kMiB);
  std::atomic<int> changes{0};
  WriteBehind::Limits limits{.request = kMiB, .file_bytes = 8 * kMiB, .file_requests = 16};

  std::unique_ptr<WriteBehind> make() {
    return std::make_unique<WriteBehind>(gw.send(), budget, limits, [this] { ++changes; });
  }
  static FileRef file(uint32_t flags = O_WRONLY) { return FileRef{"/f", 7, flags}; }
  ~WriteBehindTest() override { gw.stop_answering(); }
};

// Random writes: small ones go one to a call while fewer than two calls are in flight; the writes
// queued behind them go several to a call (in the order they were made), and each lands where it
// was written.
TEST_F(WriteBehindTest, RandomWritesQueuedBehindTheCallsInFlightGoSeveralToACall) {
  struct Many {
    std::vector<GatewayClient::Extent> extents;
    WriteBehind::SendDone done;
  };
  std::mutex mu;
  std::vector<Many> calls;
  auto wb = make();
  wb->batch_with(
      [&](const FileRef&, std::vector<GatewayClient::Extent> extents, WriteBehind::SendDone done) {
        std::lock_guard lock(mu);
        calls.push_back({std::move(extents), std::move(done)});
      });
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::map<uint64_t, std::string> want;
  for (uint64_t i = 0; i < 40; ++i) {
    const uint64_t off = (i * 7919 % 1000) * 4 * kKiB;  // scattered, none continues another
    std::string data(4 * kKiB, static_cast<char>('a' + i % 26));
    want[off] = data;
    ASSERT_TRUE(wb->write(w, file(), off, data));
  }
  ASSERT_TRUE(gw.wait_for_sent(2));
  EXPECT_EQ(gw.sent().size(), 2u) << "small writes: one request per call, two calls at most";
  EXPECT_TRUE(calls.empty()) << "the rest waits for a free call";
  gw.answer();  // a call is free: the 37 queued go in one (the last write is still gathering)
  std::size_t batched = 0;
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(calls.size(), 1u);
    batched = calls[0].extents.size();
    EXPECT_EQ(batched, 37u);
    calls[0].done(static_cast<uint32_t>(batched * 4 * kKiB));
  }
  gw.keep_answering();
  wb->settle();
  EXPECT_TRUE(wb->idle());
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::fsync));
  std::map<uint64_t, std::string> got;
  for (const auto& r : gw.sent()) got[r.offset] = r.data;
  for (const auto& e : calls[0].extents) got[e.offset] = e.data;
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "a write landed elsewhere or with other bytes";
}

// Scattered writes of 64 KiB and more are not held back: up to the file's calls are in flight.
TEST_F(WriteBehindTest, LargeScatteredWritesFillEveryCall) {
  std::atomic<int> many{0};
  auto wb = make();
  wb->batch_with(
      [&](const FileRef&, std::vector<GatewayClient::Extent>, WriteBehind::SendDone) { ++many; });
  auto w = std::make_shared<WriteBehind::Writer>(false);
  const std::string data(64 * kKiB, 'l');
  for (uint64_t i = 0; i < 17; ++i) ASSERT_TRUE(wb->write(w, file(), (17 - i) * kMiB, data));
  EXPECT_EQ(gw.pending(), 16u);
  EXPECT_EQ(many.load(), 0);
  gw.keep_answering();
  wb->settle();
  EXPECT_EQ(gw.sent().size(), 17u);
}

TEST_F(WriteBehindTest, AFailedCallOfSeveralWritesFailsTheirWriter) {
  std::vector<WriteBehind::SendDone> many;
  auto wb = make();
  wb->batch_with([&](const FileRef&, std::vector<GatewayClient::Extent>,
                     WriteBehind::SendDone done) { many.push_back(std::move(done)); });
  auto w = std::make_shared<WriteBehind::Writer>(false);
  for (uint64_t i = 0; i < 20; ++i)
    ASSERT_TRUE(wb->write(w, file(), i * 64 * kKiB, std::string(4 * kKiB, 'x')));
  ASSERT_TRUE(gw.wait_for_sent(2));
  gw.answer();
  ASSERT_EQ(many.size(), 1u);
  many[0](Result<uint32_t>::failure(ENOSPC));
  gw.keep_answering();
  Status settled = wb->settle(*w, WriteBehind::Report::fsync);
  ASSERT_FALSE(settled);
  EXPECT_EQ(settled.error(), ENOSPC);
}

TEST_F(WriteBehindTest, WriteReturnsBeforeTheGatewayAnswers) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::string data(kMiB, 'a');
  ASSERT_TRUE(wb->write(w, file(), 0, data));
  EXPECT_EQ(gw.pending(), 1u);
  EXPECT_FALSE(wb->idle());
  gw.answer_all();
  EXPECT_TRUE(wb->idle());
}

TEST_F(WriteBehindTest, WriterIsLetGoBeforeItsRequestIsSent) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::size_t sent_when_taken = 99;
  ASSERT_TRUE(
      wb->write(w, file(), 0, std::string(kMiB, 'a'), [&] { sent_when_taken = gw.sent().size(); }));
  EXPECT_EQ(sent_when_taken, 0u);
  EXPECT_EQ(gw.sent().size(), 1u);
  gw.answer_all();
}

TEST_F(WriteBehindTest, SmallSequentialWritesAreGatheredWhileTheGatewayIsBusy) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::string chunk(4 * kKiB, 'x');
  // The first goes at once (nothing was in flight); the next ones gather behind it.
  for (uint64_t off = 0; off < kMiB; off += chunk.size())
    ASSERT_TRUE(wb->write(w, file(), off, chunk));
  ASSERT_EQ(gw.sent().size(), 1u);
  EXPECT_EQ(gw.sent()[0].data.size(), 4 * kKiB);
  gw.answer();  // the gateway is idle again: what was gathered goes as one request
  ASSERT_EQ(gw.sent().size(), 2u);
  EXPECT_EQ(gw.sent()[1].offset, 4 * kKiB);
  EXPECT_EQ(gw.sent()[1].data.size(), kMiB - 4 * kKiB);
  gw.answer_all();
  wb->settle();
  EXPECT_TRUE(wb->idle());
}

TEST_F(WriteBehindTest, GatheredRequestIsSentWhenFull) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::string chunk(64 * kKiB, 'x');
  for (uint64_t off = 0; off < 3 * kMiB; off += chunk.size())
    ASSERT_TRUE(wb->write(w, file(), off, chunk));
  // First 64 KiB at once, then full 1 MiB requests without waiting for an answer.
  auto sent = gw.sent();
  ASSERT_GE(sent.size(), 3u);
  EXPECT_EQ(sent[1].data.size(), kMiB);
  EXPECT_EQ(sent[2].data.size(), kMiB);
  gw.answer_all();
  wb->settle();
  uint64_t total = 0;
  for (const auto& r : gw.sent()) total += r.data.size();
  EXPECT_EQ(total, 3 * kMiB);
}

TEST_F(WriteBehindTest, SeveralRequestsAreInFlightAtOnce) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::string data(kMiB, 'b');
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(wb->write(w, file(), i * kMiB, data));
  EXPECT_EQ(gw.pending(), 6u);
  gw.answer_all();
}

TEST_F(WriteBehindTest, WriterWaitsOnlyWhenTheFileHoldsItsLimit) {
  limits.file_bytes = 4 * kMiB;
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::string data(kMiB, 'c');
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(wb->write(w, file(), i * kMiB, data));
  auto fifth = std::async(std::launch::async, [&] { return wb->write(w, file(), 4 * kMiB, data); });
  EXPECT_EQ(fifth.wait_for(100ms), std::future_status::timeout) << "the fifth MiB should wait";
  gw.answer();
  ASSERT_EQ(fifth.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(fifth.get());
  gw.answer_all();
}

TEST_F(WriteBehindTest, MountBudgetMakesWritersWait) {
  budget = std::make_shared<ByteBudget>(2 * kMiB);
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  std::string data(kMiB, 'c');
  ASSERT_TRUE(wb->write(w, file(), 0, data));
  ASSERT_TRUE(wb->write(w, file(), kMiB, data));
  auto third = std::async(std::launch::async, [&] { return wb->write(w, file(), 2 * kMiB, data); });
  EXPECT_EQ(third.wait_for(100ms), std::future_status::timeout);
  gw.answer();
  ASSERT_EQ(third.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(third.get());
  gw.answer_all();
  wb->settle();
  EXPECT_EQ(budget->used(), 0u);
}

TEST_F(WriteBehindTest, OverlappingWriteWaitsForTheOneInFlight) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, '1')));
  // Overlaps the first: must not reach the gateway before the first is answered.
  ASSERT_TRUE(wb->write(w, file(), kMiB / 2, std::string(kMiB, '2')));
  // Does not overlap either: may go at once.
  ASSERT_TRUE(wb->write(w, file(), 8 * kMiB, std::string(kMiB, '3')));
  ASSERT_EQ(gw.sent().size(), 1u) << "the overlapping write went before the first was answered";
  gw.answer();
  ASSERT_TRUE(gw.wait_for_sent(3));
  auto sent = gw.sent();
  EXPECT_EQ(sent[1].offset, kMiB / 2);
  EXPECT_EQ(sent[1].data[0], '2');
  EXPECT_EQ(sent[2].offset, 8 * kMiB);
  gw.answer_all();
}

TEST_F(WriteBehindTest, RewritesOfTheSameRangeReachTheGatewayInOrder) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  gw.keep_answering();
  for (char c = 'a'; c <= 'z'; ++c) ASSERT_TRUE(wb->write(w, file(), 100, std::string(kMiB, c)));
  wb->settle();
  gw.stop_answering();
  auto sent = gw.sent();
  ASSERT_EQ(sent.size(), 26u);
  for (std::size_t i = 0; i < sent.size(); ++i)
    EXPECT_EQ(sent[i].data[0], static_cast<char>('a' + i));
}

TEST_F(WriteBehindTest, AppendsGoOneAtATimeInOrder) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(true);
  ASSERT_TRUE(wb->write(w, file(O_WRONLY | O_APPEND), 0, std::string(kMiB, 'a')));
  ASSERT_TRUE(wb->write(w, file(O_WRONLY | O_APPEND), 0, std::string(kMiB, 'b')));
  ASSERT_TRUE(wb->write(w, file(O_WRONLY | O_APPEND), 0, std::string(kMiB, 'c')));
  for (char expected : {'a', 'b', 'c'}) {
    ASSERT_EQ(gw.pending(), 1u) << "more than one append in flight";
    EXPECT_EQ(gw.sent().back().data[0], expected);
    gw.answer();
  }
  wb->settle();
}

TEST_F(WriteBehindTest, ErrorOfAnAcknowledgedWriteComesBackAtTheNextWrite) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, 'a')));
  gw.answer(Result<uint32_t>::failure(ENOSPC));
  Status next = wb->write(w, file(), kMiB, std::string(kMiB, 'b'));
  ASSERT_FALSE(next);
  EXPECT_EQ(next.error(), ENOSPC);
  EXPECT_EQ(gw.sent().size(), 1u) << "a failed write queued its data";
  // Reported once to writes: the writer may carry on.
  EXPECT_TRUE(wb->write(w, file(), kMiB, std::string(kMiB, 'b')));
  gw.answer_all();
  // And again at the flush: the kernel may have dropped the write's report (a write(2) split into
  // several writes returns the short count of those before it), and then at the fsync.
  EXPECT_EQ(wb->settle(*w, WriteBehind::Report::flush).error(), ENOSPC);
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::flush));
  EXPECT_EQ(wb->settle(*w, WriteBehind::Report::fsync).error(), ENOSPC);
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::fsync));
}

// A flush of the open file by another process that shares it (a close at its exec) reports the
// error, and the fsync of the process that wrote still gets it; an fsync reports it to the
// flushes too, once.
TEST_F(WriteBehindTest, AFlushDoesNotTakeAnErrorFromTheNextFsync) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, 'a')));
  gw.answer(Result<uint32_t>::failure(EDQUOT));
  EXPECT_EQ(wb->settle(*w, WriteBehind::Report::flush).error(), EDQUOT);
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::flush));
  EXPECT_TRUE(wb->write(w, file(), kMiB, std::string(kMiB, 'b'))) << "the flush reported it";
  gw.answer_all();
  EXPECT_EQ(wb->settle(*w, WriteBehind::Report::fsync).error(), EDQUOT);
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::fsync));
  ASSERT_TRUE(wb->write(w, file(), 2 * kMiB, std::string(kMiB, 'c')));
  gw.answer(Result<uint32_t>::failure(EIO));
  EXPECT_EQ(wb->settle(*w, WriteBehind::Report::fsync).error(), EIO);
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::flush)) << "the fsync reported it";
  EXPECT_TRUE(wb->write(w, file(), 3 * kMiB, std::string(kMiB, 'd'))) << "the fsync reported it";
  gw.answer_all();
}

TEST_F(WriteBehindTest, ErrorComesBackAtSettleWithItsErrnoOnce) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, 'a')));
  ASSERT_TRUE(wb->write(w, file(), kMiB, std::string(kMiB, 'b')));
  gw.answer();
  gw.answer(Result<uint32_t>::failure(EDQUOT));
  Status flushed = wb->settle(*w, WriteBehind::Report::flush);
  ASSERT_FALSE(flushed);
  EXPECT_EQ(flushed.error(), EDQUOT);
  EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::flush));
}

TEST_F(WriteBehindTest, ErrorGoesToTheWriterWhoseWriteFailed) {
  auto wb = make();
  auto mine = std::make_shared<WriteBehind::Writer>(false);
  auto other = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(mine, file(), 0, std::string(kMiB, 'a')));
  ASSERT_TRUE(wb->write(other, file(), 4 * kMiB, std::string(kMiB, 'b')));
  gw.answer(Result<uint32_t>::failure(ENOSPC));
  gw.answer();
  EXPECT_TRUE(wb->settle(*other, WriteBehind::Report::fsync));
  EXPECT_EQ(wb->settle(*mine, WriteBehind::Report::fsync).error(), ENOSPC);
}

// The file's errors for fsync, whoever wrote (errseq): each mark taken before a failure gets the
// last failure's errno once; a mark taken after it, nothing.
TEST_F(WriteBehindTest, AFilesWriteErrorIsReportedOnceToEachMarkTakenBeforeIt) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  uint64_t first = wb->error_mark(), second = wb->error_mark();
  EXPECT_TRUE(wb->error_since(first));
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, 'a')));
  gw.answer(Result<uint32_t>::failure(EDQUOT));
  wb->settle();
  uint64_t after = wb->error_mark();
  EXPECT_EQ(wb->error_since(first).error(), EDQUOT);
  EXPECT_TRUE(wb->error_since(first)) << "reported twice to one mark";
  EXPECT_TRUE(wb->error_since(after)) << "reported to a mark taken after it";
  ASSERT_FALSE(wb->write(w, file(), kMiB, std::string(kMiB, 'b')));  // the writer's own
  ASSERT_TRUE(wb->write(w, file(), kMiB, std::string(kMiB, 'b')));
  gw.answer(Result<uint32_t>::failure(ENOSPC));
  wb->settle();
  EXPECT_EQ(wb->error_since(second).error(), ENOSPC) << "the last failure's errno";
  EXPECT_EQ(wb->error_since(first).error(), ENOSPC);
  EXPECT_EQ(wb->error_since(after).error(), ENOSPC);
  EXPECT_TRUE(wb->error_since(second));
}

TEST_F(WriteBehindTest, ShortWriteIsAnError) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, 'a')));
  gw.answer(Result<uint32_t>(uint32_t{100}));
  EXPECT_EQ(wb->settle(*w, WriteBehind::Report::fsync).error(), EIO);
}

TEST_F(WriteBehindTest, SettleWaitsForEveryEarlierWrite) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(wb->write(w, file(), i * 4 * kKiB, std::string(4 * kKiB, 'a')));
  auto settled = std::async(std::launch::async, [&] { wb->settle(); });
  EXPECT_EQ(settled.wait_for(100ms), std::future_status::timeout);
  gw.keep_answering();
  ASSERT_EQ(settled.wait_for(2s), std::future_status::ready);
  gw.stop_answering();
  EXPECT_TRUE(wb->idle());
  uint64_t total = 0;
  for (const auto& r : gw.sent()) total += r.data.size();
  EXPECT_EQ(total, 16 * kKiB);
}

TEST_F(WriteBehindTest, ChangeIsSignalledWhenQueuedAndWhenAcknowledged) {
  auto wb = make();
  auto w = std::make_shared<WriteBehind::Writer>(false);
  ASSERT_TRUE(wb->write(w, file(), 0, std::string(kMiB, 'a')));
  EXPECT_EQ(changes.load(), 1);
  gw.answer();
  EXPECT_EQ(changes.load(), 2);
}

// Four writers of one file at once, interleaved: each writes runs of two 64 KiB pieces (gathered
// into one request) with the other writers' runs in between. What reaches the gateway, put
// together by offset, is exactly what they wrote, every byte once, where it was written. Each
// piece's bytes are its own (piece, position), so a piece sent at another's offset, gathered
// across a gap, cut, doubled or mixed up shows.
TEST_F(WriteBehindTest, ManyConcurrentWritersLoseNothing) {
  constexpr int kWriters = 4, kRuns = 32, kRun = 2;
  constexpr uint64_t kPiece = 64 * kKiB;
  constexpr uint64_t kPieces = kWriters * kRuns * kRun, kTotal = kPieces * kPiece;
  auto piece = [](uint64_t n) {
    std::string data(kPiece, '\0');
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = static_cast<char>(n * 7 + k % 251);
    return data;
  };
  auto wb = make();
  gw.keep_answering();
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      auto w = std::make_shared<WriteBehind::Writer>(false);
      for (int r = 0; r < kRuns; ++r) {
        for (int j = 0; j < kRun; ++j) {
          const uint64_t n = static_cast<uint64_t>(r * kWriters + t) * kRun + j;
          ASSERT_TRUE(wb->write(w, file(), n * kPiece, piece(n)));
        }
      }
      EXPECT_TRUE(wb->settle(*w, WriteBehind::Report::fsync));
    });
  }
  for (auto& t : writers) t.join();
  wb->settle();
  gw.stop_answering();

  std::string image(kTotal, '\0');
  std::vector<int> written(kTotal, 0);
  for (const auto& r : gw.sent()) {
    ASSERT_LE(r.offset + r.data.size(), kTotal) << "a request beyond what was written";
    image.replace(r.offset, r.data.size(), r.data);
    for (uint64_t k = r.offset; k < r.offset + r.data.size(); ++k) ++written[k];
  }
  EXPECT_EQ(std::count(written.begin(), written.end(), 1), std::ptrdiff_t(kTotal))
      << "every byte must reach the gateway exactly once";
  for (uint64_t n = 0; n < kPieces; ++n) {
    ASSERT_TRUE(image.compare(n * kPiece, kPiece, piece(n)) == 0)
        << "piece " << n << " did not land at " << n * kPiece;
  }
  EXPECT_EQ(budget->used(), 0u);
}

}  // namespace
}  // namespace skein::client
