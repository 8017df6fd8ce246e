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
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  // A path to check, with what was last served of it.
  using Ask = std::pair<std::string, std::optional<SeenAttrs>>;
  // Reads the attributes of the paths of `asks` and hands each to the broker (revalidated). They
  // are read kPathsPerCall at a time (NamespaceFs::getattr_each): a round trip per server for
  // all of them, where one at a time cost each path a round trip and the wake-ups of the
  // gateway's threads and the server's processes around it.
  void check_each(NamespaceFs& ns, const std::string& ns_name, std::vector<Ask> asks);
  static constexpr size_t kPathsPerCall = 64;
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
