// Releases the files that mounts which went away left open at the gateway. A mount that is
// killed (at a job's end, by the OOM killer, with its node) sends no Release for the files it
// had open, and each of them held an SFTP handle on its servers (a descriptor of an
// sftp-server, which has at most its RLIMIT_NOFILE of them) until the gateway restarted. Every
// mount keeps a Watch stream open, and subscribes again within seconds when it breaks; a mount
// whose stream has been gone for the orphan timeout (`[gateway] orphan_timeout_ms`, 10 minutes
// by default) without a new subscription is taken for gone, and the files it holds in every
// namespace are released. A call it makes with one of them afterwards gets EBADF for a minute
// (NamespaceFs::kReleasedFor); after that the file is opened again by its path, as after a
// restart of the gateway. A mount stopped for longer than the timeout (SIGSTOP, a frozen job)
// meets the same.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "coherence/invalidation_broker.hpp"
#include "service/namespace_registry.hpp"

namespace skein {

class OrphanReaper {
 public:
  OrphanReaper(InvalidationBroker& broker, const NamespaceRegistry& registry,
               std::chrono::milliseconds timeout);
  ~OrphanReaper();
  // One round: releases the files of the mounts gone for longer than the timeout; how many.
  size_t sweep();

 private:
  void run();

  InvalidationBroker& broker_;
  const NamespaceRegistry& registry_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace skein
