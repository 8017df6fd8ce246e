// Revalidation: finds changes made directly on storage servers by re-reading, at a fixed
// interval, the attributes of every path that some mount caches, and invalidating the mounts
// whose copy no longer matches. Bounded work per round; it rotates through large interest sets.
// A namespace whose servers are all watched (the remote watchers report their changes) is
// revalidated only every kWatchedRounds rounds: a safety net for a report the watcher lost.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "coherence/invalidation_broker.hpp"
#include "service/namespace_registry.hpp"

namespace skein {

class Revalidator {
 public:
  Revalidator(InvalidationBroker& broker, const NamespaceRegistry& registry,
              std::chrono::milliseconds interval, size_t paths_per_round);
  ~Revalidator();
  // One round over every namespace (exposed for tests and for the loop).
  void round();
  static constexpr uint64_t kWatchedRounds = 30;

 private:
  void run();
  // Reads `path`'s attributes and hands them to the broker (revalidated), `seen` being what was
  // last served of it.
  void check(NamespaceFs& ns, const std::string& ns_name, const std::string& path,
             const std::optional<SeenAttrs>& seen);
  InvalidationBroker& broker_;
  const NamespaceRegistry& registry_;
  std::chrono::milliseconds interval_;
  size_t paths_per_round_;
  uint64_t rounds_ = 0;  // rounds begun; only round()'s thread touches it
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace skein
