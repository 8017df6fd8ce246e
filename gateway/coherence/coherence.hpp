// Cache coherence, assembled: the invalidation broker, the Watch service mounts subscribe to,
// revalidation by polling, and a remote watcher per backend. The filesystem services report
// what they serve and change through broker().
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "coherence/invalidation_broker.hpp"
#include "coherence/orphan_reaper.hpp"
#include "coherence/remote_watcher.hpp"
#include "coherence/revalidator.hpp"
#include "coherence/watch_service.hpp"
#include "namespace/namespace_builder.hpp"
#include "service/namespace_registry.hpp"

namespace skein {

struct CoherenceOptions {
  std::chrono::milliseconds lease{1000};
  std::chrono::milliseconds revalidate_interval{1000};
  size_t revalidate_batch = 1000;
  size_t interest_limit = 200000;
  bool remote_watch = true;
  std::chrono::milliseconds orphan_timeout{600000};  // OrphanReaper
};

class Coherence {
 public:
  Coherence(CoherenceOptions options, const NamespaceRegistry& registry);
  ~Coherence();
  InvalidationBroker& broker() { return broker_; }
  WatchService& service() { return service_; }
  // Runs one remote watcher per backend in `backends` that a namespace's table names (starting
  // new ones, stopping those of backends removed or no longer named), and has every mount drop
  // what it cached of a backend that comes back up after it was down. A backend of a [jobs] pool
  // alone is not watched: job namespaces reach it through views (scratch0:/job-42), whose
  // changes on the server its reports would not name, and a watch of every job's tree (inotify
  // watches, and a report of each file a staging or a job makes) would be paid for nothing.
  void watch_backends(const BackendMap& backends);

 private:
  // watch_backends' work on the watchers, under watchers_mu_; those of backends gone go to
  // `ended`, to end once the lock is let go.
  void start_watchers(const BackendMap& backends,
                      std::vector<std::unique_ptr<RemoteWatcher>>& ended);
  // A path changed on `backend`'s server: invalidate it wherever a namespace shows it.
  void changed_on_server(const std::string& backend, const std::string& rel, bool new_dir,
                         bool dir_gone);
  // `visit(ns, vpath)` for every namespace mount that uses `backend`, with the virtual path of
  // `rel` on it.
  void for_each_use(const std::string& backend, const std::string& rel,
                    const std::function<void(NamespaceFs&, const std::string&)>& visit);
  // `backend` came back up, or its remote watcher watches again: what mounts cached of it
  // meanwhile may be stale (a union listing served while the server was down left its names out,
  // and changes made while it was not watched were not reported), so every mount drops all of it.
  void drop_cached_of(const std::string& backend);
  // Whether every backend of namespace `ns` has a remote watcher that is watching now.
  bool servers_watched(const std::string& ns) const;

  CoherenceOptions options_;
  const NamespaceRegistry& registry_;
  InvalidationBroker broker_;
  WatchService service_;
  std::mutex watchers_mu_;
  std::map<std::string, std::unique_ptr<RemoteWatcher>> watchers_;
  // The backends whose watcher is watching. A leaf lock: a watcher's thread takes it, and is
  // joined with watchers_mu_ held.
  mutable std::mutex watched_mu_;
  std::set<std::string> watched_;
  std::set<std::string> was_watched_;  // backends whose watcher has watched once; by watched_mu_
  // The backends told to report coming back up (by watchers_mu_), and the Coherence their
  // listeners reach, null once it is gone (a listener runs on the backend's thread).
  std::map<std::string, std::weak_ptr<Backend>> told_back_up_;
  struct Alive {
    explicit Alive(Coherence* c) : self(c) {}
    std::mutex mu;
    Coherence* self;
  };
  std::shared_ptr<Alive> alive_ = std::make_shared<Alive>(this);
  std::unique_ptr<OrphanReaper> orphan_reaper_;
  std::unique_ptr<Revalidator> revalidator_;  // last: stops first
};

}  // namespace skein
