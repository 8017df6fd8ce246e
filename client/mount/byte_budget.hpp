// ByteBudget: how many bytes of file data a mount may hold in its buffers at once, shared by all
// its open files, so read-ahead and write-behind stay within the mount's memory bound however many
// files stream at the same time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace skein::client {

class ByteBudget {
 public:
  explicit ByteBudget(uint64_t limit) : limit_(limit) {}
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Takes `bytes` if they fit now. Read-ahead asks this way: without room it simply reads less
  // ahead.
  bool try_acquire(uint64_t bytes) {
    std::lock_guard lock(mu_);
    if (used_ + bytes > limit_ && used_ > 0) return false;
    used_ += bytes;
    return true;
  }
  // Takes `bytes`, waiting until they fit. Write-behind asks this way: a writer that is ahead of
  // the gateway waits. One request larger than the whole budget still passes, alone.
  void acquire(uint64_t bytes) {
    std::unique_lock lock(mu_);
    freed_.wait(lock, [&] { return used_ + bytes <= limit_ || used_ == 0; });
    used_ += bytes;
  }
  void release(uint64_t bytes) {
    {
      std::lock_guard lock(mu_);
      used_ -= bytes;
    }
    freed_.notify_all();
  }

  uint64_t used() const {
    std::lock_guard lock(mu_);
    return used_;
  }
  uint64_t limit() const { return limit_; }

  // An overdraft of as much again as the limit, for what must be fetched without room: a block
  // a read needs (ReadAhead), which then serves the reads after it too. Bounded, so that files
  // left open with such blocks cannot hold more; without it, the read fetches just its bytes.
  bool try_overdraw(uint64_t bytes) {
    std::lock_guard lock(mu_);
    if (overdrawn_ + bytes > limit_ && overdrawn_ > 0) return false;
    overdrawn_ += bytes;
    return true;
  }
  void repay(uint64_t bytes) {
    std::lock_guard lock(mu_);
    overdrawn_ -= bytes;
  }
  uint64_t overdrawn() const {
    std::lock_guard lock(mu_);
    return overdrawn_;
  }

 private:
  const uint64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  uint64_t used_ = 0;       // guarded by mu_
  uint64_t overdrawn_ = 0;  // guarded by mu_
};

}  // namespace skein::client
