// Revalidation by polling; see revalidator.hpp.
#include "coherence/revalidator.hpp"

#include <spdlog/spdlog.h>

#include <future>

namespace skein {

Revalidator::Revalidator(InvalidationBroker& broker, const NamespaceRegistry& registry,
                         std::chrono::milliseconds interval, size_t paths_per_round)
    : broker_(broker), registry_(registry), interval_(interval), paths_per_round_(paths_per_round) {
  thread_ = std::thread([this] { run(); });
}

Revalidator::~Revalidator() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Revalidator::run() {
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    round();
    lock.lock();
  }
}

void Revalidator::check(NamespaceFs& ns, const std::string& ns_name, const std::string& path,
                        const std::optional<SeenAttrs>& seen) {
  // Just changed through the gateway: it told everyone, and will note what it made.
  if (broker_.recently_changed(ns_name, path)) return;
  auto a = ns.getattr(path);
  if (!a && a.error() != ENOENT) return;  // a server that is down tells us nothing
  SeenAttrs now = a ? SeenAttrs::of(*a) : SeenAttrs::missing();
  if (broker_.revalidated(ns_name, path, seen, now))
    spdlog::debug("revalidate: {}:{} changed on the server", ns_name, path);
}

void Revalidator::round() {
  constexpr size_t kWorkers = 8;
  const bool safety_net = rounds_++ % kWatchedRounds == 0;
  // Reports taken for a mount's own change: the server shows either the version that mount holds,
  // or a change made on the server meanwhile, which every mount that caches the path is told of.
  // At most a round's worth at a time: the rest stay due for the next round.
  for (auto& c : broker_.due_echo_checks(paths_per_round_))
    if (auto ns = registry_.find(c.ns)) check(*ns, c.ns, c.path, c.seen);
  for (auto& ns_name : broker_.namespaces()) {
    auto ns = registry_.find(ns_name);
    if (!ns) continue;
    if (!safety_net && broker_.servers_watched(ns_name)) continue;
    auto batch = broker_.next_batch(ns_name, paths_per_round_);
    // A few workers, each taking every kWorkers-th path: the server answers them in parallel.
    std::vector<std::future<void>> workers;
    for (size_t w = 0; w < std::min(kWorkers, batch.size()); ++w) {
      workers.push_back(std::async(std::launch::async, [&, w] {
        for (size_t i = w; i < batch.size(); i += kWorkers)
          check(*ns, ns_name, batch[i].first, batch[i].second);
      }));
    }
    for (auto& w : workers) w.get();
  }
}

}  // namespace skein
