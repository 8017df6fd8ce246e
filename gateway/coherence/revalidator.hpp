// Revalidation: finds changes made directly on storage servers by re-reading, at a fixed
// interval, the attributes of every path that some mount caches, and invalidating the mounts
// whose copy no longer matches. Bounded work per round; it rotates through large interest sets.
#pragma once

#include <chrono>
#include <condition_variable>
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

 private:
  void run();
  InvalidationBroker& broker_;
  const NamespaceRegistry& registry_;
  std::chrono::milliseconds interval_;
  size_t paths_per_round_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace skein
