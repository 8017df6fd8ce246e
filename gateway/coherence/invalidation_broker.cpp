// The invalidation broker; see invalidation_broker.hpp.
#include "coherence/invalidation_broker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "coherence/invalidation_rules.hpp"
#include "skein/path.hpp"

namespace skein {

InvalidationBroker::InvalidationBroker(Options options) : options_(options) {}

v1::Invalidation InvalidationBroker::item(v1::Invalidation::Kind kind, const std::string& path) {
  v1::Invalidation i;
  i.set_kind(kind);
  i.set_path(path);
  return i;
}

InterestSet& InvalidationBroker::interest(const std::string& ns) {
  auto it = interest_.find(ns);
  if (it == interest_.end()) it = interest_.emplace(ns, InterestSet(options_.interest_limit)).first;
  return it->second;
}

InterestSet* InvalidationBroker::existing_interest(const std::string& ns) {
  auto it = interest_.find(ns);
  return it == interest_.end() ? nullptr : &it->second;
}

SessionId InvalidationBroker::attach(const std::string& ns, const std::string& mount_id,
                                     Stream* stream, v1::WatchEvent* welcome) {
  std::lock_guard lock(mu_);
  const MountKey key{ns, mount_id};
  auto old = by_mount_.find(key);
  if (old != by_mount_.end()) drop_locked(old->second, "replaced by a new subscription");
  SessionId id = next_id_++;
  Session& s = sessions_[id];
  s.id = id;
  s.ns = ns;
  s.mount_id = mount_id;
  s.stream = stream;
  s.servers_watched = servers_watched_ && servers_watched_(ns);
  by_mount_[key] = id;
  gone_.erase(key);
  if (welcome) {
    welcome->set_servers_watched(s.servers_watched);
    stream->send(*welcome);
  }
  spdlog::info("watch: mount {} subscribed to namespace {}{}", mount_id, ns,
               s.servers_watched ? " (its servers are watched)" : "");
  return id;
}

void InvalidationBroker::servers_watched_changed() {
  if (!servers_watched_) return;
  std::lock_guard lock(mu_);
  std::map<std::string, bool> now;  // per namespace, asked once
  for (auto& [id, s] : sessions_) {
    if (!s.stream) continue;
    auto it = now.find(s.ns);
    if (it == now.end()) it = now.emplace(s.ns, servers_watched_(s.ns)).first;
    if (it->second == s.servers_watched) continue;
    s.servers_watched = it->second;
    v1::WatchEvent ev;
    ev.set_seq(0);
    ev.set_servers_watched(s.servers_watched);
    s.stream->send(ev);
  }
}

void InvalidationBroker::detach(SessionId id) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  spdlog::info("watch: mount {} unsubscribed", it->second.mount_id);
  it->second.stream = nullptr;
  // Not made anew for a namespace that ended (end_namespace) before its sessions detached.
  if (auto* set = existing_interest(it->second.ns)) set->forget_session(id);
  const MountKey key{it->second.ns, it->second.mount_id};
  if (auto m = by_mount_.find(key); m != by_mount_.end() && m->second == id) {
    by_mount_.erase(m);
    gone_[key] = std::chrono::steady_clock::now();
  }
  sessions_.erase(it);
  acked_cv_.notify_all();
}

void InvalidationBroker::drop_locked(SessionId id, const std::string& why) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (it->second.stream) it->second.stream->end(why);
  it->second.stream = nullptr;  // the reactor detaches later; nothing more is sent meanwhile
  if (auto* set = existing_interest(it->second.ns)) set->forget_session(id);
  const MountKey key{it->second.ns, it->second.mount_id};
  if (auto m = by_mount_.find(key); m != by_mount_.end() && m->second == id) {
    by_mount_.erase(m);
    gone_[key] = std::chrono::steady_clock::now();
  }
}

bool InvalidationBroker::subscribed(const std::string& ns, const std::string& mount_id) const {
  std::lock_guard lock(mu_);
  return by_mount_.count({ns, mount_id}) != 0;
}

SessionId InvalidationBroker::session_of_locked(const std::string& ns,
                                                const std::string& mount_id) const {
  if (mount_id.empty()) return 0;
  auto m = by_mount_.find({ns, mount_id});
  return m == by_mount_.end() ? 0 : m->second;
}

std::vector<InvalidationBroker::MountKey> InvalidationBroker::take_gone(
    std::chrono::steady_clock::time_point before) {
  std::lock_guard lock(mu_);
  std::vector<MountKey> out;
  for (auto it = gone_.begin(); it != gone_.end();) {
    if (it->second < before) {
      out.push_back(it->first);
      it = gone_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void InvalidationBroker::end_namespace(const std::string& ns, const std::string& why) {
  std::lock_guard lock(mu_);
  std::vector<SessionId> ids;
  for (auto& [id, s] : sessions_)
    if (s.ns == ns) ids.push_back(id);
  for (auto id : ids) drop_locked(id, why);
  interest_.erase(ns);
  const std::string prefix = ns + '\0';
  std::erase_if(echo_checks_, [&](const auto& kv) { return kv.first.starts_with(prefix); });
}

void InvalidationBroker::acked(SessionId id, uint64_t seq) {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = it->second;
  s.acked = std::max(s.acked, seq);
  while (!s.evictions.empty() && s.evictions.front().first <= s.acked) s.evictions.pop_front();
  acked_cv_.notify_all();
}

void InvalidationBroker::served(const std::string& ns, const std::string& mount_id,
                                const std::string& path, std::optional<SeenAttrs> seen,
                                bool entry) {
  std::lock_guard lock(mu_);
  const SessionId id = session_of_locked(ns, mount_id);
  if (!id) return;  // not subscribed: it caches nothing for long
  served_locked(ns, id, path, seen, entry);
}

void InvalidationBroker::served_listed(
    const std::string& ns, const std::string& mount_id,
    const std::vector<std::pair<std::string, SeenAttrs>>& entries) {
  if (entries.empty()) return;
  std::lock_guard lock(mu_);
  const SessionId id = session_of_locked(ns, mount_id);
  if (!id) return;
  for (const auto& [path, seen] : entries) served_locked(ns, id, path, seen, false);
}

void InvalidationBroker::served_locked(const std::string& ns, SessionId id, const std::string& path,
                                       std::optional<SeenAttrs> seen, bool entry) {
  auto& set = interest(ns);
  bool changed = false;
  auto evicted = set.note(path, id, seen, &changed);
  if (entry && path != "/") {
    auto more = set.note(parent_path(path), id, std::nullopt);
    evicted.insert(evicted.end(), more.begin(), more.end());
  }
  invalidate_evicted_locked(evicted);
  if (changed) {
    // The server changed under us; the others that cache it must hear of it.
    auto items = invalidations_for(Change::found_changed, path);
    for (SessionId s : targets(ns, items)) {
      if (s == id) continue;
      auto it = sessions_.find(s);
      if (it != sessions_.end()) send_locked(it->second, items);
    }
    // targets() forgot what was seen of the path; this version is what the mount holds now, and
    // the next revalidation compares with it (else it would take whatever it finds, a later
    // change on the server included, for the state already known).
    if (seen) set.set_seen(path, *seen);
  }
}

InvalidationBroker::Reading InvalidationBroker::will_serve(const std::string& ns,
                                                           const std::string& mount_id,
                                                           const std::string& path, bool entry) {
  std::lock_guard lock(mu_);
  const SessionId id = session_of_locked(ns, mount_id);
  if (!id) return {};  // not subscribed: it caches nothing for long
  Reading r{ns, path, id};
  auto& set = interest(ns);
  auto evicted = set.note(path, r.session, std::nullopt, nullptr, &r.path_added);
  if (entry && path != "/") {
    auto more = set.note(parent_path(path), r.session, std::nullopt, nullptr, &r.parent_added);
    evicted.insert(evicted.end(), more.begin(), more.end());
  }
  invalidate_evicted_locked(evicted);
  return r;
}

void InvalidationBroker::not_served(const Reading& r) {
  if (!r.session) return;
  std::lock_guard lock(mu_);
  auto& set = interest(r.ns);
  if (r.path_added) set.take_back(r.path, r.session, r.path_added);
  if (r.parent_added) set.take_back(parent_path(r.path), r.session, r.parent_added);
}

void InvalidationBroker::renaming(const std::string& ns, const std::string& mount_id,
                                  const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  const SessionId id = session_of_locked(ns, mount_id);
  if (!id) return;  // not subscribed: it caches nothing for long
  invalidate_evicted_locked(interest(ns).follow_rename(from, to, id));
}

void InvalidationBroker::invalidate_evicted_locked(
    const std::vector<InterestSet::Evicted>& evicted) {
  for (auto& e : evicted) {
    // A mount whose interest is dropped drops its cache of it.
    for (SessionId s : e.sessions) {
      auto it = sessions_.find(s);
      if (it == sessions_.end()) continue;
      if (uint64_t seq = send_locked(it->second, {item(v1::Invalidation::TREE, e.path)})) {
        it->second.evictions.emplace_back(seq, e.path);
        evicting_.insert(s);
      }
    }
  }
}

void InvalidationBroker::add_unacked_evictions_locked(
    const std::string& ns, const std::vector<v1::Invalidation>& items, SessionId origin,
    std::vector<std::pair<SessionId, uint64_t>>& waits) {
  for (auto id = evicting_.begin(); id != evicting_.end();) {
    auto it = sessions_.find(*id);
    if (it == sessions_.end() || !it->second.stream) {
      id = evicting_.erase(id);
      continue;
    }
    Session& s = it->second;
    if (s.evictions.empty()) {
      id = evicting_.erase(id);
      continue;
    }
    const bool waited =
        std::any_of(waits.begin(), waits.end(), [&](const auto& w) { return w.first == s.id; });
    if (s.ns == ns && s.id != origin && !waited) {
      // Its events are applied in order: waiting for the last related eviction covers the rest.
      uint64_t last = 0;
      for (const auto& [seq, path] : s.evictions)
        for (const auto& i : items)
          if (path_is_under(i.path(), path) || path_is_under(path, i.path())) last = seq;
      if (last) waits.emplace_back(s.id, last);
    }
    ++id;
  }
}

std::vector<SessionId> InvalidationBroker::targets(const std::string& ns,
                                                   const std::vector<v1::Invalidation>& items) {
  std::set<SessionId> out;
  auto& set = interest(ns);
  auto add = [&](const std::string& p) {
    for (SessionId s : set.sessions_of(p)) out.insert(s);
  };
  for (auto& i : items) {
    switch (i.kind()) {
      case v1::Invalidation::ALL:
        for (auto& [id, s] : sessions_)
          if (s.ns == ns) out.insert(id);
        break;
      case v1::Invalidation::TREE:
        // The mounts that cache the path or anything below it (what a mount was served is in
        // the set until evicted, and an eviction invalidates it), and its directory's: a rename
        // waits for their acknowledgements only, not for every mount of the namespace.
        for (SessionId s : set.sessions_at_or_below(i.path())) out.insert(s);
        if (i.path() != "/") add(parent_path(i.path()));
        break;
      default:
        add(i.path());
        add(parent_path(i.path()));
        break;
    }
    set.clear_seen(i.path());
    // A name that came or went changes its directory; a file's contents or attributes (INODE: a
    // write, a truncate) do not. Forgetting the directory's state then would make its next
    // revalidation take whatever it finds, a name made on the server meanwhile included, as the
    // state already known, and tell no one.
    if (i.kind() != v1::Invalidation::INODE) set.clear_seen(parent_path(i.path()));
  }
  return {out.begin(), out.end()};
}

uint64_t InvalidationBroker::send_locked(Session& s, const std::vector<v1::Invalidation>& items) {
  if (!s.stream) return 0;
  v1::WatchEvent ev;
  ev.set_seq(s.next_seq++);
  for (auto& i : items) *ev.add_invalidations() = i;
  s.stream->send(ev);
  return ev.seq();
}

void InvalidationBroker::changed(const std::string& ns, const std::vector<v1::Invalidation>& items,
                                 const std::string& origin_mount) {
  std::unique_lock lock(mu_);
  const SessionId origin_id = session_of_locked(ns, origin_mount);
  if (origin_id) {
    for (auto& i : items) note_recent_locked(ns, i.path(), origin_id);
  }
  std::vector<std::pair<SessionId, uint64_t>> waits;
  for (SessionId id : targets(ns, items)) {
    if (id == origin_id) continue;
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    uint64_t seq = send_locked(it->second, items);
    if (seq) waits.emplace_back(id, seq);
  }
  // A mount whose interest the set's limit just dropped is told to drop the paths, but is no
  // longer among the targets: until it has, it may answer the old version.
  if (!evicting_.empty()) add_unacked_evictions_locked(ns, items, origin_id, waits);
  if (waits.empty()) return;
  auto deadline = std::chrono::steady_clock::now() + options_.lease;
  auto all_acked = [&] {
    for (auto& [id, seq] : waits) {
      auto it = sessions_.find(id);
      if (it != sessions_.end() && it->second.stream && it->second.acked < seq) return false;
    }
    return true;
  };
  if (acked_cv_.wait_until(lock, deadline, all_acked)) return;
  // A mount that did not answer in time loses its lease; the change goes ahead without it.
  for (auto& [id, seq] : waits) {
    auto it = sessions_.find(id);
    if (it != sessions_.end() && it->second.stream && it->second.acked < seq) {
      spdlog::warn("watch: mount {} did not acknowledge within {} ms: lease revoked",
                   it->second.mount_id, options_.lease.count());
      drop_locked(id, "lease lost: no acknowledgement within the lease timeout");
    }
  }
}

void InvalidationBroker::changed_elsewhere(const std::string& ns,
                                           const std::vector<v1::Invalidation>& items,
                                           bool maybe_echo) {
  std::lock_guard lock(mu_);
  // What was served of each path before this report (targets() forgets it), for echo checks.
  std::vector<std::optional<SeenAttrs>> served;
  if (maybe_echo)
    for (auto& i : items) served.push_back(interest(ns).seen_of(i.path()));
  for (SessionId id : targets(ns, items)) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) continue;
    if (!maybe_echo) {
      send_locked(it->second, items);
      continue;
    }
    std::vector<v1::Invalidation> news;
    for (size_t k = 0; k < items.size(); ++k) {
      const auto& i = items[k];
      if (auto* r = recent_locked(ns, i.path()); !r || r->origin != id) {
        news.push_back(i);
        continue;
      }
      // Taken for the mount's own change. Checked after the window where the version it holds
      // is known; a later report of the same path keeps the version of the first.
      auto key = ns + '\0' + i.path();
      auto pending = echo_checks_.find(key);
      if (pending != echo_checks_.end())
        pending->second.at = std::chrono::steady_clock::now();
      else if (served[k])
        pending =
            echo_checks_.emplace(key, PendingEcho{std::chrono::steady_clock::now(), served[k]})
                .first;
      else
        continue;
      // Until its check, the path stays known as the version the mount holds (targets() forgot
      // it): a revalidation round that reads it meanwhile compares with it. Forgotten, the round
      // would take whatever the server shows, a change made there within the window included,
      // for the state already known, and the check after it would find nothing to tell.
      interest(ns).set_seen(i.path(), served[k] ? *served[k] : *pending->second.served);
    }
    if (!news.empty()) send_locked(it->second, news);
  }
}

std::vector<InvalidationBroker::EchoCheck> InvalidationBroker::due_echo_checks(size_t max) {
  std::lock_guard lock(mu_);
  std::vector<EchoCheck> due;
  const auto now = std::chrono::steady_clock::now();
  for (auto it = echo_checks_.begin(); it != echo_checks_.end() && due.size() < max;) {
    if (now - it->second.at <= options_.echo_window) {
      ++it;
      continue;
    }
    const size_t zero = it->first.find('\0');
    auto* set = existing_interest(it->first.substr(0, zero));
    if (!set) {  // the namespace ended
      it = echo_checks_.erase(it);
      continue;
    }
    // Known since the report (kept from it, or served since): that version is the one mounts
    // hold now. Forgotten only by a change through the gateway meanwhile: the report's, then.
    const std::string path = it->first.substr(zero + 1);
    if (!set->seen_of(path)) set->set_seen(path, *it->second.served);
    due.push_back({it->first.substr(0, zero), path, set->seen_of(path)});
    it = echo_checks_.erase(it);
  }
  return due;
}

void InvalidationBroker::note_recent_locked(const std::string& ns, const std::string& path,
                                            SessionId origin) {
  const auto now = std::chrono::steady_clock::now();
  std::string key = ns + '\0' + path;
  recent_[key] = Recent{origin, now};
  recent_order_.emplace_back(now, std::move(key));
  while (!recent_order_.empty() && now - recent_order_.front().first > options_.echo_window) {
    auto it = recent_.find(recent_order_.front().second);
    // A newer note of the same path stays.
    if (it != recent_.end() && it->second.at == recent_order_.front().first) recent_.erase(it);
    recent_order_.pop_front();
  }
}

const InvalidationBroker::Recent* InvalidationBroker::recent_locked(const std::string& ns,
                                                                    const std::string& path) const {
  auto it = recent_.find(ns + '\0' + path);
  if (it == recent_.end() ||
      std::chrono::steady_clock::now() - it->second.at > options_.echo_window)
    return nullptr;
  return &it->second;
}

bool InvalidationBroker::recently_changed(const std::string& ns, const std::string& path) {
  std::lock_guard lock(mu_);
  return recent_locked(ns, path) != nullptr;
}

bool InvalidationBroker::revalidated(const std::string& ns, const std::string& path,
                                     const std::optional<SeenAttrs>& before, const SeenAttrs& now) {
  std::lock_guard lock(mu_);
  if (recent_locked(ns, path)) return false;
  auto* found = existing_interest(ns);
  if (!found) return false;  // the namespace ended while it was revalidated
  auto& set = *found;
  if (set.seen_of(path) != before) return false;  // seen anew meanwhile: that is fresher
  if (!before || *before == now) {
    set.set_seen(path, now);
    return false;
  }
  auto items = invalidations_for(Change::found_changed, path);
  for (SessionId id : targets(ns, items)) {  // (which forgets what was seen of path and parent)
    auto it = sessions_.find(id);
    if (it != sessions_.end()) send_locked(it->second, items);
  }
  set.set_seen(path, now);
  return true;
}

std::vector<std::string> InvalidationBroker::namespaces() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (auto& [ns, _] : interest_) out.push_back(ns);
  return out;
}

std::vector<std::pair<std::string, std::optional<SeenAttrs>>> InvalidationBroker::next_batch(
    const std::string& ns, size_t max) {
  std::lock_guard lock(mu_);
  auto* set = existing_interest(ns);
  if (!set) return {};
  return set->next_batch(max);
}

void InvalidationBroker::set_seen(const std::string& ns, const std::string& path, SeenAttrs seen) {
  std::lock_guard lock(mu_);
  if (auto* set = existing_interest(ns)) set->set_seen(path, seen);
}

size_t InvalidationBroker::session_count() const {
  std::lock_guard lock(mu_);
  return sessions_.size();
}

size_t InvalidationBroker::mounts(const std::string& ns) const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto it = by_mount_.lower_bound({ns, ""}); it != by_mount_.end() && it->first.first == ns;
       ++it)
    ++n;
  return n;
}

}  // namespace skein
