// ReadWindow and ReadAhead; see read_ahead.hpp.
// Lock order: ReadAhead's mutex (Shared::mu) is never held while a fetch is started, since a fetch
// may complete at once, on the calling thread, and its completion takes that mutex.
#include "read_ahead.hpp"

#include <algorithm>
#include <cerrno>

namespace skein::client {

ReadWindow::ReadWindow(Limits limits) : limits_(limits) {
  streams_.resize(std::max<std::size_t>(1, limits_.streams));
  // A fresh file counts as positioned at 0, so a stream starting there (its first reads arriving
  // in any order) is read ahead from its first read.
  streams_[0].trusted = true;
}

bool ReadWindow::record(uint64_t offset, uint64_t size) {
  const uint64_t end = offset + size;
  const bool large = size >= limits_.large;
  const uint64_t s = slack();
  // The stream this read continues: the nearest one it may belong to.
  std::size_t best = streams_.size();
  uint64_t best_distance = 0;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    const Stream& st = streams_[i];
    if (st.used == 0 && !st.trusted) continue;  // never used
    bool belongs;
    if (large) {
      belongs = offset + s >= st.next && offset <= st.next + s;
    } else {
      // Where the last read ended, or overlapping what the stream read just before (a re-read,
      // or the kernel's reads of one page range split unevenly).
      belongs = offset <= st.next && offset + size >= st.next;
    }
    if (!belongs) continue;
    const uint64_t distance = offset > st.next ? offset - st.next : st.next - offset;
    if (best == streams_.size() || distance < best_distance) {
      best = i;
      best_distance = distance;
    }
  }
  if (best == streams_.size()) {
    // A stream of its own, in place of the one read longest ago.
    best = 0;
    for (std::size_t i = 1; i < streams_.size(); ++i)
      if (streams_[i].used < streams_[best].used) best = i;
    // Its first read counts for nothing: only reads that continue it show it is a stream.
    streams_[best] = Stream{};
    streams_[best].next = end;
  }
  Stream& st = streams_[best];
  st.used = ++tick_;
  // What the read adds to the stream: bytes beyond its furthest end; a gap is taken as read only
  // for the large reads the kernel sends out of order.
  if (end > st.next && (large || offset <= st.next)) st.streamed += end - std::max(offset, st.next);
  st.next = std::max(st.next, end);
  if (st.streamed >= limits_.confirm) st.trusted = true;
  current_ = best;
  return ahead_of(st) > 0;
}

uint64_t ReadWindow::ahead_of(const Stream& s) const {
  if (!s.trusted) return 0;
  return std::clamp<uint64_t>(2 * s.streamed, limits_.min, limits_.max);
}

uint64_t ReadWindow::ahead() const { return ahead_of(streams_[current_]); }

bool ReadWindow::wanted(uint64_t offset, uint64_t size) const {
  for (const Stream& s : streams_) {
    if (!s.trusted) continue;
    const uint64_t behind = s.next > slack() ? s.next - slack() : 0;
    if (offset + size > behind && offset < s.next + ahead_of(s) + slack()) return true;
  }
  return false;
}

struct ReadAhead::Block {
  Block(uint64_t off, uint32_t len, uint64_t gen, std::shared_ptr<ByteBudget> b,
        bool overdraft = false)
      : offset(off), asked(len), generation(gen), budget(std::move(b)), overdraft(overdraft) {}
  ~Block() {
    if (!budget) return;
    if (overdraft)
      budget->repay(asked);
    else
      budget->release(asked);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  const uint64_t offset;
  const uint32_t asked;
  const uint64_t generation;
  const std::shared_ptr<ByteBudget> budget;  // charged `asked` while the block lives; null: none
  const bool overdraft;                      // charged to the budget's overdraft
  // Guarded by Shared::mu until `done`; `data` and `error` never change after it.
  bool done = false;
  int error = 0;
  SharedBytes data;
  uint64_t served = 0;  // bytes handed to readers; guarded by Shared::mu
};

// What the completions of fetches in flight need, which may outlive the ReadAhead.
struct ReadAhead::Shared {
  std::mutex mu;
  std::condition_variable done;  // a block finished
};

ReadAhead::ReadAhead(std::shared_ptr<ByteBudget> budget, const std::atomic<uint64_t>& generation,
                     uint64_t size_hint, Options options)
    : budget_(std::move(budget)),
      generation_(generation),
      options_(options),
      shared_(std::make_shared<Shared>()),
      window_(options.window),
      size_hint_(size_hint) {}

ReadAhead::~ReadAhead() { drop(); }

void ReadAhead::drop() {
  std::map<uint64_t, std::shared_ptr<Block>> dropped;  // freed once the lock is released
  std::lock_guard lock(shared_->mu);
  dropped.swap(blocks_);
}

std::size_t ReadAhead::blocks() const {
  std::lock_guard lock(shared_->mu);
  return blocks_.size();
}

void ReadAhead::start(const std::shared_ptr<Shared>& shared, const std::shared_ptr<Block>& block,
                      const Fetch& fetch) {
  fetch(block->offset, block->asked, [shared, block](Result<SharedBytes> got) {
    {
      std::lock_guard lock(shared->mu);
      if (got)
        block->data = got.take();
      else
        block->error = got.error();
      block->done = true;
    }
    shared->done.notify_all();
  });
}

Result<ReadData> ReadAhead::read(uint64_t offset, uint32_t size, const Fetch& fetch) {
  return read(offset, size, fetch, nullptr);
}

Result<ReadData> ReadAhead::read(uint64_t offset, uint32_t size, const Fetch& fetch,
                                 const Direct& direct) {
  ReadData out;
  if (size == 0) return out;
  const uint64_t end = offset + size;
  const uint64_t block = options_.block;
  std::vector<std::shared_ptr<Block>> starting;
  std::vector<std::shared_ptr<Block>> unused;  // freed once the lock is released
  std::unique_lock lock(shared_->mu);
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  const bool sequential = window_.record(offset, size);

  // Blocks from before a change, or where no stream that is read ahead will read, are of no use.
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    const Block& b = *it->second;
    if (b.generation != generation || !window_.wanted(b.offset, b.asked)) {
      unused.push_back(std::move(it->second));
      it = blocks_.erase(it);
    } else {
      ++it;
    }
  }

  // Keep the window full: every block from the one holding `offset` to `ahead` past the read,
  // but nothing beyond what is known to exist. Without room in the budget, read less ahead.
  ReadWindow::Stream& stream = window_.current();
  if (!sequential || generation != stream.fetched_generation) {
    stream.fetched_to = 0;
    stream.fetched_generation = generation;
  }
  if (sequential) {
    const uint64_t limit = std::min(end + window_.ahead(), size_hint_);
    for (uint64_t at = offset / block * block; at < limit; at += block) {
      if (blocks_.count(at)) continue;
      // The kernel's reads come on several threads, out of order: one may arrive after reads
      // beyond it have used up and let go the blocks ahead of it. Those are not fetched again
      // (they were: 3% of a stream's bytes fetched twice).
      if (at >= end && at < stream.fetched_to) continue;
      const auto len = static_cast<uint32_t>(std::min<uint64_t>(block, limit - at));
      if (len < block && at + len < size_hint_) break;  // partial block: wait until it can be whole
      // Without room, a block this read needs is still fetched whole, on the budget's overdraft:
      // the read would fetch its part directly anyway, and the block serves the reads after it
      // too (fetching the part, then the block once there is room, fetched those bytes twice).
      // With the overdraft used up too (files left open holding such blocks), the read fetches
      // just its own bytes.
      const bool room = budget_->try_acquire(len);
      const bool overdraft = !room && at < end && budget_->try_overdraw(len);
      if (!room && !overdraft) break;
      auto b = std::make_shared<Block>(at, len, generation, budget_, overdraft);
      blocks_.emplace(at, b);
      starting.push_back(std::move(b));
      stream.fetched_to = std::max(stream.fetched_to, at + len);
    }
  }
  if (!starting.empty()) {
    lock.unlock();
    for (const auto& b : starting) start(shared_, b, fetch);
    lock.lock();
  }

  // Serve what the blocks hold.
  uint64_t pos = offset;
  bool eof = false;
  while (pos < end) {
    auto it = blocks_.upper_bound(pos);
    if (it == blocks_.begin()) break;
    std::shared_ptr<Block> b = std::prev(it)->second;
    if (pos >= b->offset + b->asked) break;
    shared_->done.wait(lock, [&] { return b->done; });
    auto forget = [&] {
      auto at = blocks_.find(b->offset);
      if (at != blocks_.end() && at->second == b) {
        unused.push_back(std::move(at->second));
        blocks_.erase(at);
      }
    };
    // A failed block is read again directly: that gives the real error, or the data after all.
    if (b->error != 0 || b->generation != generation_.load(std::memory_order_acquire)) {
      forget();
      break;
    }
    const uint64_t in_block = pos - b->offset;
    if (b->data.size() < b->asked) size_hint_ = b->offset + b->data.size();  // the file ends here
    if (in_block >= b->data.size()) {
      eof = true;
      break;
    }
    const uint64_t n = std::min<uint64_t>(b->data.size() - in_block, end - pos);
    b->data.view(in_block, n, out.pieces);
    out.held.push_back(b);
    out.size += n;
    pos += n;
    b->served += n;
    if (b->served >= b->data.size()) forget();  // all of it went to readers
    if (pos >= b->offset + b->data.size() && b->data.size() < b->asked) {
      eof = true;
      break;
    }
  }
  if (eof || pos >= end) return out;

  // The rest straight from the gateway: a block of its own, outside the window and the budget.
  auto rest = std::make_shared<Block>(pos, static_cast<uint32_t>(end - pos), 0, nullptr);
  lock.unlock();
  if (direct) {
    Result<SharedBytes> got = direct(rest->offset, rest->asked);
    lock.lock();
    if (got)
      rest->data = got.take();
    else
      rest->error = got.error();
    rest->done = true;
  } else {
    start(shared_, rest, fetch);
    lock.lock();
    shared_->done.wait(lock, [&] { return rest->done; });
  }
  // A short read must mean end of file, so a part that failed fails the whole read.
  if (rest->error != 0) return Result<ReadData>::failure(rest->error);
  size_hint_ = std::max(size_hint_, pos + rest->data.size());
  if (!rest->data.empty()) {
    rest->data.view(0, rest->data.size(), out.pieces);
    out.held.push_back(rest);
    out.size += rest->data.size();
  }
  return out;
}

}  // namespace skein::client
