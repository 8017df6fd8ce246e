// Coherence assembly; see coherence.hpp.
#include "coherence/coherence.hpp"

#include <set>

#include "coherence/invalidation_rules.hpp"
#include "skein/path.hpp"

namespace skein {

Coherence::Coherence(CoherenceOptions options, const NamespaceRegistry& registry)
    : options_(options),
      registry_(registry),
      broker_({.lease = options.lease, .interest_limit = options.interest_limit}),
      service_(broker_, registry) {
  broker_.set_servers_watched([this](const std::string& ns) { return servers_watched(ns); });
  orphan_reaper_ = std::make_unique<OrphanReaper>(broker_, registry_, options_.orphan_timeout);
  revalidator_ = std::make_unique<Revalidator>(broker_, registry_, options_.revalidate_interval,
                                               options_.revalidate_batch);
}

Coherence::~Coherence() {
  {
    std::lock_guard lock(alive_->mu);
    alive_->self = nullptr;
  }
  revalidator_.reset();
  std::lock_guard lock(watchers_mu_);
  watchers_.clear();
}

void Coherence::watch_backends(const BackendMap& backends) {
  // Watchers of backends gone end after the lock is let go: one may be waiting for its server.
  std::vector<std::unique_ptr<RemoteWatcher>> ended;
  start_watchers(backends, ended);
  // A backend added to a namespace whose servers were all watched is not watched yet (its
  // watcher reports the change only once it watches: never, for a server that is down or has no
  // inotifywait): the mounts hear now that the namespace is no longer all watched, and stop
  // trusting what they hold as they did (coherence.md, "Opens for reading without a call").
  broker_.servers_watched_changed();
}

void Coherence::start_watchers(const BackendMap& backends,
                               std::vector<std::unique_ptr<RemoteWatcher>>& ended) {
  std::lock_guard lock(watchers_mu_);
  for (auto& [name, backend] : backends) {
    auto& told = told_back_up_[name];
    if (told.lock() == backend) continue;
    told = backend;
    backend->on_back_up([alive = alive_, name = name] {
      std::lock_guard lock(alive->mu);
      if (alive->self) alive->self->drop_cached_of(name);
    });
  }
  if (!options_.remote_watch) return;
  // The backends that namespaces' tables name (a job namespace's views have names of their own).
  std::set<std::string> named;
  for (auto& ns : registry_.all())
    for (auto& m : ns->table()->mounts())
      for (auto& b : m.layout->backends()) named.insert(b->name());
  const auto watched = [&](const std::string& name) {
    return backends.count(name) != 0 && named.count(name) != 0;
  };
  for (auto it = watchers_.begin(); it != watchers_.end();) {
    if (!watched(it->first)) {
      ended.push_back(std::move(it->second));
      it = watchers_.erase(it);
    } else
      ++it;
  }
  for (auto& [name, backend] : backends) {
    if (watchers_.count(name) || !watched(name)) continue;
    watchers_[name] = std::make_unique<RemoteWatcher>(
        backend,
        [this, name = name, b = std::weak_ptr<Backend>(backend)](
            const std::string& rel, const RemoteWatcher::Report& report) {
          // A directory may now be a symlink: the backend looks at it again before it trusts it.
          if (auto live = b.lock()) live->changed_on_server(rel, report.replaced);
          changed_on_server(name, rel, report.new_dir, report.dir_gone);
        },
        [this, name = name](bool watching) {
          bool again = false;
          {
            std::lock_guard lock(watched_mu_);
            if (watching)
              again = watched_.insert(name).second && !was_watched_.insert(name).second;
            else
              watched_.erase(name);
          }
          if (again) drop_cached_of(name);
          broker_.servers_watched_changed();
        });
  }
}

bool Coherence::servers_watched(const std::string& ns) const {
  if (!options_.remote_watch) return false;
  auto fs = registry_.find(ns);
  if (!fs) return false;
  auto table = fs->table();
  std::lock_guard lock(watched_mu_);
  for (auto& m : table->mounts())
    for (auto& b : m.layout->backends())
      if (!watched_.count(b->name())) return false;
  return true;
}

void Coherence::for_each_use(const std::string& backend, const std::string& rel,
                             const std::function<void(NamespaceFs&, const std::string&)>& visit) {
  for (auto& ns : registry_.all()) {
    auto table = ns->table();
    for (auto& m : table->mounts()) {
      bool uses = false;
      for (auto& b : m.layout->backends()) uses |= b->name() == backend;
      if (!uses) continue;
      visit(*ns, m.path == "/" ? rel : (rel == "/" ? m.path : m.path + rel));
    }
  }
}

void Coherence::changed_on_server(const std::string& backend, const std::string& rel, bool new_dir,
                                  bool dir_gone) {
  for_each_use(backend, rel, [&](NamespaceFs& ns, const std::string& vpath) {
    // A directory removed or moved away takes its subtree with it: a mount that still holds
    // names below it (an inode in use, attributes held as current) drops them all, or it would
    // answer them from the old directory once another is made at its name.
    std::vector<v1::Invalidation> items;
    if (dir_gone) {
      items.push_back(InvalidationBroker::item(v1::Invalidation::TREE, vpath));
    } else {
      items = invalidations_for(Change::found_changed, vpath);
      // The file's other names linked through the gateway (the watcher reports the name written).
      auto others = invalidations_for_other_names(Change::found_changed, ns.links().others(vpath));
      items.insert(items.end(), others.begin(), others.end());
    }
    broker_.changed_elsewhere(ns.name(), items,
                              // A new directory is never taken for an echo: inotifywait
                              // watches it only once it has seen it appear, and what was
                              // made in it before then is reported by nobody. Every mount
                              // that caches it (its maker too) drops what it holds of it.
                              /*maybe_echo=*/!new_dir);
  });
}

void Coherence::drop_cached_of(const std::string& backend) {
  for_each_use(backend, "/", [&](NamespaceFs& ns, const std::string& vpath) {
    broker_.changed_elsewhere(ns.name(), {InvalidationBroker::item(v1::Invalidation::TREE, vpath)});
  });
}

}  // namespace skein
