// Revalidation by polling; see revalidator.hpp.
#include "coherence/revalidator.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

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

void Revalidator::check_each(NamespaceFs& ns, const std::string& ns_name, std::vector<Ask> asks) {
  // Just changed through the gateway: it told everyone, and will note what it made.
  std::erase_if(asks, [&](const Ask& a) { return broker_.recently_changed(ns_name, a.first); });
  for (size_t from = 0; from < asks.size(); from += kPathsPerCall) {
    const size_t to = std::min(asks.size(), from + kPathsPerCall);
    std::vector<std::string> paths;
    paths.reserve(to - from);
    for (size_t i = from; i < to; ++i) paths.push_back(asks[i].first);
    auto answers = ns.getattr_each(paths);
    for (size_t i = from; i < to; ++i) {
      const auto& a = answers[i - from];
      if (!a && a.error() != ENOENT) continue;  // a server that is down tells us nothing
      const SeenAttrs now = a ? SeenAttrs::of(*a) : SeenAttrs::missing();
      if (broker_.revalidated(ns_name, asks[i].first, asks[i].second, now))
        spdlog::debug("revalidate: {}:{} changed on the server", ns_name, asks[i].first);
    }
  }
}

void Revalidator::round() {
  const bool safety_net = rounds_++ % kWatchedRounds == 0;
  // Reports taken for a mount's own change: the server shows either the version that mount holds,
  // or a change made on the server meanwhile, which every mount that caches the path is told of.
  // At most a round's worth at a time: the rest stay due for the next round.
  std::map<std::string, std::vector<Ask>> echoes;  // by namespace
  for (auto& c : broker_.due_echo_checks(paths_per_round_))
    echoes[c.ns].emplace_back(std::move(c.path), std::move(c.seen));
  for (auto& [ns_name, asks] : echoes)
    if (auto ns = registry_.find(ns_name)) check_each(*ns, ns_name, std::move(asks));
  for (auto& ns_name : broker_.namespaces()) {
    auto ns = registry_.find(ns_name);
    if (!ns) continue;
    if (!safety_net && broker_.servers_watched(ns_name)) continue;
    check_each(*ns, ns_name, broker_.next_batch(ns_name, paths_per_round_));
  }
}

}  // namespace skein
