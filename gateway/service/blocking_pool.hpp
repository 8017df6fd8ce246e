// Threads for work that blocks (an SFTP round trip) on behalf of gRPC callback handlers, which
// must not block gRPC's own threads. A thread is started when none is idle, up to a limit past
// which work waits; idle threads beyond a few end after a while.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace skein {

class BlockingPool {
 public:
  explicit BlockingPool(std::size_t max_threads, std::size_t keep_idle = 4)
      : max_threads_(max_threads), keep_idle_(keep_idle) {}
  ~BlockingPool() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return threads_ == 0; });
  }
  BlockingPool(const BlockingPool&) = delete;
  BlockingPool& operator=(const BlockingPool&) = delete;

  void run(std::function<void()> work) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
    if (idle_ >= queue_.size() || threads_ >= max_threads_) {
      cv_.notify_one();
      return;
    }
    ++threads_;
    std::thread([this] { worker(); }).detach();
  }

 private:
  void worker() {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      const bool woke = cv_.wait_for(lock, std::chrono::seconds(30),
                                     [&] { return stopping_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty() && (stopping_ || (!woke && idle_ >= keep_idle_))) break;
      if (queue_.empty()) continue;
      auto work = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
    if (--threads_ == 0) done_.notify_all();
  }

  const std::size_t max_threads_;
  const std::size_t keep_idle_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_;
  std::deque<std::function<void()>> queue_;
  std::size_t threads_ = 0;
  std::size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace skein
