// The invalidation broker: keeps one session per mount's Watch stream and one InterestSet per
// namespace, and turns changes into invalidations for exactly the mounts that cache what changed.
// Changes made through the gateway wait (up to the lease timeout) until every other interested
// mount has acknowledged, so that a reply means "every cache is clean". A mount that misses the
// lease loses it: its stream is ended, its interest dropped, and the caller goes on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "coherence/interest_set.hpp"
#include "skein/v1/watch.pb.h"

namespace skein {

class InvalidationBroker {
 public:
  struct Options {
    std::chrono::milliseconds lease{1000};
    size_t interest_limit = 200000;  // paths per namespace
    // A server's remote watcher reports changes made through the gateway too (it cannot tell who
    // made them). For this long after a mount changed a path, the watcher's report of that path
    // is not sent back to that mount: it knows, and it would drop what it just cached.
    std::chrono::milliseconds echo_window{1000};
  };
  explicit InvalidationBroker(Options options);

  // What the broker needs of a Watch stream. Both calls must return at once; they are made with
  // the broker's lock held, so an implementation must never call back into the broker from them.
  class Stream {
   public:
    virtual ~Stream() = default;
    virtual void send(const v1::WatchEvent& event) = 0;
    virtual void end(const std::string& why) = 0;
  };
  // A mount subscribed. A second subscription with the same mount id in the same namespace
  // replaces the first; mounts are told apart by namespace and id, so that a client of one
  // namespace can neither end nor stand in for a mount of another by taking its id. With
  // `welcome`, it is sent first (no event comes before it), with servers_watched filled in.
  SessionId attach(const std::string& ns, const std::string& mount_id, Stream* stream,
                   v1::WatchEvent* welcome = nullptr);
  // Whether the remote watchers report every change on a namespace's servers (set once, before
  // the first attach; without it, never), and the call to make when that may have changed: each
  // stream whose namespace's answer changed gets an event of seq 0 saying so.
  using ServersWatched = std::function<bool(const std::string& ns)>;
  void set_servers_watched(ServersWatched servers_watched) {
    servers_watched_ = std::move(servers_watched);
  }
  void servers_watched_changed();
  bool servers_watched(const std::string& ns) const {
    return servers_watched_ && servers_watched_(ns);
  }
  // Its stream ended; `stream` must not be used after this returns.
  void detach(SessionId id);
  void acked(SessionId id, uint64_t seq);

  // The gateway served `path` to the mount `mount_id`, which may now cache it. `seen` is what the
  // gateway saw; if that differs from what it saw before, the path changed behind its back and the
  // other mounts that cache it are told. With `entry`, the mount also caches the name in its
  // parent directory (a lookup).
  void served(const std::string& ns, const std::string& mount_id, const std::string& path,
              std::optional<SeenAttrs> seen, bool entry);
  // A listing served to `mount_id` gave it these entries' attributes (path, as read), which its
  // kernel keeps without looking them up (readdirplus): the mount counts among those that cache
  // each of them, as served() without `entry`. For subdirectories, since a name made or removed
  // in a directory is announced to the mounts that cache that directory, not its parent's; for
  // files while the servers are not watched, so that revalidation looks at them.
  void served_listed(const std::string& ns, const std::string& mount_id,
                     const std::vector<std::pair<std::string, SeenAttrs>>& entries);
  // The mount `mount_id` is about to be served `path` (with `entry`, its name too): it counts
  // among those that cache them from now on, so that a change another mount makes while the call
  // reads the server reaches it (served() after the read would be too late for that change).
  // What it added is returned for not_served().
  struct Reading {
    std::string ns, path;
    SessionId session = 0;                      // 0: not subscribed, nothing noted
    uint64_t path_added = 0, parent_added = 0;  // InterestSet::note's marks; 0: not added
  };
  Reading will_serve(const std::string& ns, const std::string& mount_id, const std::string& path,
                     bool entry);
  // The call found nothing the mount may cache (an absent name, an error): takes back what
  // will_serve() added, unless the path was served since, so that lookups of absent names do not
  // fill the interest set.
  void not_served(const Reading& r);
  // The mount `mount_id` is about to rename `from` to `to` through the gateway, and keeps what it
  // cached there under the new names (its kernel moves the names): it now counts among those that
  // cache the new paths, before anybody can change them. If the rename fails, the extra interest
  // costs at most an invalidation the mount did not need.
  void renaming(const std::string& ns, const std::string& mount_id, const std::string& from,
                const std::string& to);
  // The gateway changed these paths for `origin_mount`: invalidate every other interested mount
  // and wait for their acknowledgements, at most one lease.
  void changed(const std::string& ns, const std::vector<v1::Invalidation>& items,
               const std::string& origin_mount);
  // A change found behind the gateway's back: invalidate every interested mount; nobody waits.
  // With `maybe_echo` (the remote watcher's reports), a mount that changed one of these paths
  // through the gateway within the echo window is not told of that path. Where the gateway knows
  // the version that mount holds (what it served last), the path is checked once the window has
  // passed (due_echo_checks): a change made on the server within the window is reported the same
  // way as the echo. Until then the path is known as that version, for revalidation too.
  void changed_elsewhere(const std::string& ns, const std::vector<v1::Invalidation>& items,
                         bool maybe_echo = false);
  // Paths whose reports were taken for a mount's own change, now older than the echo window, at
  // most `max` of them, each with the version the gateway served last (as it was when the report
  // came, or as served since); they are handed out once, for revalidated().
  struct EchoCheck {
    std::string ns, path;
    std::optional<SeenAttrs> seen;
  };
  std::vector<EchoCheck> due_echo_checks(size_t max = SIZE_MAX);

  // For revalidation.
  std::vector<std::string> namespaces() const;
  std::vector<std::pair<std::string, std::optional<SeenAttrs>>> next_batch(const std::string& ns,
                                                                           size_t max);
  void set_seen(const std::string& ns, const std::string& path, SeenAttrs seen);
  // Revalidation read `now` for `path`, which had been seen as `before`. Records it and, when it
  // differs, invalidates every interested mount. Does neither when the path changed meanwhile
  // (what was seen is no longer `before`) or was changed through the gateway within the echo
  // window: the gateway knows better, and its own change may be what the server shows. Returns
  // whether it invalidated.
  bool revalidated(const std::string& ns, const std::string& path,
                   const std::optional<SeenAttrs>& before, const SeenAttrs& now);
  // Whether `path` was changed through the gateway within the echo window.
  bool recently_changed(const std::string& ns, const std::string& path);

  // The namespace went away (a job namespace destroyed): every mount of it loses its stream, so
  // that it drops its caches at once, and what it cached is forgotten.
  void end_namespace(const std::string& ns, const std::string& why);

  // A mount of a namespace: (namespace, mount id).
  using MountKey = std::pair<std::string, std::string>;
  // Mounts whose Watch stream ended before `before` and that have not subscribed again since,
  // each handed out once (OrphanReaper).
  std::vector<MountKey> take_gone(std::chrono::steady_clock::time_point before);
  // Whether the mount `mount_id` of `ns` has a Watch stream now.
  bool subscribed(const std::string& ns, const std::string& mount_id) const;

  size_t session_count() const;
  // How many mounts of `ns` have a Watch stream now.
  size_t mounts(const std::string& ns) const;
  std::chrono::milliseconds lease() const { return options_.lease; }

  static v1::Invalidation item(v1::Invalidation::Kind kind, const std::string& path);

 private:
  struct Session {
    SessionId id = 0;
    std::string ns;
    std::string mount_id;
    Stream* stream = nullptr;
    uint64_t next_seq = 1;
    uint64_t acked = 0;
    bool servers_watched = false;  // as the stream was last told
    // The TREE invalidations sent for paths this mount's interest lost to the set's limit, not
    // yet known acknowledged (seq, path), oldest first: until it acknowledges one, a change
    // through the gateway at, above or below that path waits for it as for an interested mount.
    std::deque<std::pair<uint64_t, std::string>> evictions;
  };
  void served_locked(const std::string& ns, SessionId id, const std::string& path,
                     std::optional<SeenAttrs> seen, bool entry);
  InterestSet& interest(const std::string& ns);
  // The namespace's set if it has one (nullptr: none yet, or it ended), without making one.
  InterestSet* existing_interest(const std::string& ns);
  // Sessions to tell about `items` (caller holds mu_).
  std::vector<SessionId> targets(const std::string& ns, const std::vector<v1::Invalidation>& items);
  // Sends `items` to a session; returns the seq to wait for, or 0 when it has no stream.
  uint64_t send_locked(Session& s, const std::vector<v1::Invalidation>& items);
  void drop_locked(SessionId id, const std::string& why);
  // Tells the mounts that cached evicted paths to drop them (never silently forgotten).
  void invalidate_evicted_locked(const std::vector<InterestSet::Evicted>& evicted);
  // For changed(): the sessions of `ns` other than `origin` and those in `waits` that have not
  // yet acknowledged the eviction of a path at, above or below one of `items`, added to `waits`
  // with the seq to wait for (the interest set no longer names them, but they may still hold it).
  void add_unacked_evictions_locked(const std::string& ns,
                                    const std::vector<v1::Invalidation>& items, SessionId origin,
                                    std::vector<std::pair<SessionId, uint64_t>>& waits);
  // Remembers that `origin` changed `path` now; forgets what is older than the echo window.
  void note_recent_locked(const std::string& ns, const std::string& path, SessionId origin);

  Options options_;
  ServersWatched servers_watched_;
  mutable std::mutex mu_;
  std::condition_variable acked_cv_;
  SessionId next_id_ = 1;
  std::unordered_map<SessionId, Session> sessions_;
  std::set<SessionId> evicting_;  // sessions whose `evictions` may hold unacknowledged ones
  std::map<MountKey, SessionId> by_mount_;
  // Mounts whose stream ended, and when (until they subscribe again or take_gone hands them out).
  std::map<MountKey, std::chrono::steady_clock::time_point> gone_;
  // The session of a subscribed mount, or 0 (caller holds mu_).
  SessionId session_of_locked(const std::string& ns, const std::string& mount_id) const;
  std::map<std::string, InterestSet> interest_;
  struct Recent {
    SessionId origin;
    std::chrono::steady_clock::time_point at;
  };
  // Who changed `path` through the gateway within the echo window, if anybody.
  const Recent* recent_locked(const std::string& ns, const std::string& path) const;
  std::unordered_map<std::string, Recent> recent_;  // key: namespace '\0' path
  // Reports taken for echoes, to check after the window, by namespace '\0' path: when the last
  // came, and the version served before the first (a report forgets what was seen of its path).
  struct PendingEcho {
    std::chrono::steady_clock::time_point at;
    std::optional<SeenAttrs> served;
  };
  std::unordered_map<std::string, PendingEcho> echo_checks_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, std::string>> recent_order_;
};

}  // namespace skein
