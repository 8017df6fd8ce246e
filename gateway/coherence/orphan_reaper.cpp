// Releasing the files of mounts that went away; see orphan_reaper.hpp.
#include "coherence/orphan_reaper.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace skein {

OrphanReaper::OrphanReaper(InvalidationBroker& broker, const NamespaceRegistry& registry,
                           std::chrono::milliseconds timeout)
    : broker_(broker), registry_(registry), timeout_(timeout) {
  thread_ = std::thread([this] { run(); });
}

OrphanReaper::~OrphanReaper() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void OrphanReaper::run() {
  // A mount's files go at most a tenth of the timeout (and 30 s) after it is due.
  const auto period = std::clamp<std::chrono::milliseconds>(
      timeout_ / 10, std::chrono::milliseconds(100), std::chrono::milliseconds(30000));
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    sweep();
    lock.lock();
  }
}

size_t OrphanReaper::sweep() {
  size_t total = 0;
  for (const auto& [ns_name, mount] :
       broker_.take_gone(std::chrono::steady_clock::now() - timeout_)) {
    if (broker_.subscribed(ns_name, mount)) continue;  // back a moment ago
    auto ns = registry_.find(ns_name);
    if (!ns) continue;  // destroyed, and its files with it
    if (const size_t n = ns->release_all_of(mount)) {
      spdlog::info(
          "namespace {}: mount {} has had no Watch stream for {} s: released the {} files it "
          "left open",
          ns->name(), mount, std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(), n);
      total += n;
    }
  }
  return total;
}

}  // namespace skein
