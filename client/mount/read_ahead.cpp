// ReadWindow and ReadAhead; see read_ahead.hpp.
// Lock order: ReadAhead's mutex (Shared::mu) is never held while a fetch is started, since a fetch
// may complete at once, on the calling thread, and its completion takes that mutex.
#include "read_ahead.hpp"

#include <algorithm>
#include <cerrno>

namespace skein::client {

bool ReadWindow::record(std::uint64_t offset, std::uint64_t size) {
  // A fresh file counts as positioned at 0, so a stream starting there (its first reads arriving
  // in any order) is sequential from its first read.
  const std::uint64_t s = slack();
  sequential_ = offset + s >= next_ && offset <= next_ + s;
  if (sequential_) {
    streamed_ += size;
    next_ = std::max(next_, offset + size);
  } else {
    streamed_ = 0;
    next_ = offset + size;
  }
  return sequential_;
}

std::uint64_t ReadWindow::ahead() const {
  if (!sequential_) return 0;
  return std::clamp<std::uint64_t>(2 * streamed_, limits_.min, limits_.max);
}

struct ReadAhead::Block {
  Block(std::uint64_t off, std::uint32_t len, std::uint64_t gen, std::shared_ptr<ByteBudget> b)
      : offset(off), asked(len), generation(gen), budget(std::move(b)) {}
  ~Block() {
    if (budget) budget->release(asked);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  const std::uint64_t offset;
  const std::uint32_t asked;
  const std::uint64_t generation;
  const std::shared_ptr<ByteBudget> budget;  // charged `asked` while the block lives; null: none
  // Guarded by Shared::mu until `done`; `data` and `error` never change after it.
  bool done = false;
  int error = 0;
  SharedBytes data;
  std::uint64_t served = 0;  // bytes handed to readers; guarded by Shared::mu
};

// What the completions of fetches in flight need, which may outlive the ReadAhead.
struct ReadAhead::Shared {
  std::mutex mu;
  std::condition_variable done;  // a block finished
};

ReadAhead::ReadAhead(std::shared_ptr<ByteBudget> budget,
                     const std::atomic<std::uint64_t>& generation, std::uint64_t size_hint,
                     Options options)
    : budget_(std::move(budget)),
      generation_(generation),
      options_(options),
      shared_(std::make_shared<Shared>()),
      window_(options.window),
      size_hint_(size_hint) {}

ReadAhead::~ReadAhead() { drop(); }

void ReadAhead::drop() {
  std::map<std::uint64_t, std::shared_ptr<Block>> dropped;  // freed once the lock is released
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

Result<ReadData> ReadAhead::read(std::uint64_t offset, std::uint32_t size, const Fetch& fetch) {
  ReadData out;
  if (size == 0) return out;
  const std::uint64_t end = offset + size;
  const std::uint64_t block = options_.block;
  std::vector<std::shared_ptr<Block>> starting;
  std::vector<std::shared_ptr<Block>> unused;  // freed once the lock is released
  std::unique_lock lock(shared_->mu);
  const std::uint64_t generation = generation_.load(std::memory_order_acquire);
  const bool sequential = window_.record(offset, size);

  // Blocks from before a change, far behind the reader, or of a stream it left, are of no use.
  const std::uint64_t behind = offset > window_.slack() ? offset - window_.slack() : 0;
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    const Block& b = *it->second;
    if (!sequential || b.generation != generation || b.offset + b.asked <= behind) {
      unused.push_back(std::move(it->second));
      it = blocks_.erase(it);
    } else {
      ++it;
    }
  }

  // Keep the window full: every block from the one holding `offset` to `ahead` past the read,
  // but nothing beyond what is known to exist. Without room in the budget, read less ahead.
  if (!sequential || generation != fetched_generation_) {
    fetched_to_ = 0;
    fetched_generation_ = generation;
  }
  if (sequential) {
    const std::uint64_t limit = std::min(end + window_.ahead(), size_hint_);
    for (std::uint64_t at = offset / block * block; at < limit; at += block) {
      if (blocks_.count(at)) continue;
      // The kernel's reads come on several threads, out of order: one may arrive after reads
      // beyond it have used up and let go the blocks ahead of it. Those are not fetched again
      // (they were: 3% of a stream's bytes fetched twice).
      if (at >= end && at < fetched_to_) continue;
      const auto len = static_cast<std::uint32_t>(std::min<std::uint64_t>(block, limit - at));
      if (len < block && at + len < size_hint_) break;  // partial block: wait until it can be whole
      // Without room, a block this read needs is still fetched whole, uncharged: the read would
      // fetch its part directly anyway, and the block serves the reads after it too (fetching
      // the part, then the block once there is room, fetched those bytes twice).
      const bool room = budget_->try_acquire(len);
      if (!room && at >= end) break;
      auto b = std::make_shared<Block>(at, len, generation, room ? budget_ : nullptr);
      blocks_.emplace(at, b);
      starting.push_back(std::move(b));
      fetched_to_ = std::max(fetched_to_, at + len);
    }
  }
  if (!starting.empty()) {
    lock.unlock();
    for (const auto& b : starting) start(shared_, b, fetch);
    lock.lock();
  }

  // Serve what the blocks hold.
  std::uint64_t pos = offset;
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
    const std::uint64_t in_block = pos - b->offset;
    if (b->data.size() < b->asked) size_hint_ = b->offset + b->data.size();  // the file ends here
    if (in_block >= b->data.size()) {
      eof = true;
      break;
    }
    const std::uint64_t n = std::min<std::uint64_t>(b->data.size() - in_block, end - pos);
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
  auto direct = std::make_shared<Block>(pos, static_cast<std::uint32_t>(end - pos), 0, nullptr);
  lock.unlock();
  start(shared_, direct, fetch);
  lock.lock();
  shared_->done.wait(lock, [&] { return direct->done; });
  // A short read must mean end of file, so a part that failed fails the whole read.
  if (direct->error != 0) return Result<ReadData>::failure(direct->error);
  size_hint_ = std::max(size_hint_, pos + direct->data.size());
  if (!direct->data.empty()) {
    direct->data.view(0, direct->data.size(), out.pieces);
    out.held.push_back(direct);
    out.size += direct->data.size();
  }
  return out;
}

}  // namespace skein::client
