// InterestSet: which mounts cache which paths of one namespace, and what each path looked like
// when the gateway last served it (for revalidation). Bounded: when full, the least recently
// noted path is evicted and handed back to the caller, whose mounts must then be invalidated —
// a mount is never silently forgotten. Pure logic; the broker adds locking and messaging.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sftp/protocol.hpp"

namespace skein {

using SessionId = uint64_t;

// What revalidation compares: a path's type, permissions, owner, size and modification time.
struct SeenAttrs {
  bool exists = false;
  uint32_t permissions = 0, uid = 0, gid = 0, mtime = 0;
  uint64_t size = 0;
  bool operator==(const SeenAttrs&) const = default;
  static SeenAttrs of(const sftp::Attrs& a) {
    return {true, a.permissions, a.uid, a.gid, a.mtime, a.size};
  }
  static SeenAttrs missing() { return {}; }
};

class InterestSet {
 public:
  explicit InterestSet(size_t limit) : limit_(limit ? limit : 1) {}

  struct Evicted {
    std::string path;
    std::vector<SessionId> sessions;
  };
  // Records that `session` caches `path`. When `seen` is given and differs from what was seen
  // before, `*changed` is set: the path changed behind the gateway's back. Returns what had to go
  // to stay within the limit. `*added`, when `session` was not counted for `path` before, is set
  // to a mark of this note for take_back(), else to 0.
  std::vector<Evicted> note(const std::string& path, SessionId session,
                            std::optional<SeenAttrs> seen, bool* changed = nullptr,
                            uint64_t* added = nullptr);
  // Takes back the note() that added `session` to `path` and gave `mark`, if the path was noted
  // by nobody since and nothing was seen of it: the call it was made for found nothing the
  // session may cache. A note since (a listing of the same directory served meanwhile) keeps the
  // session, which may now cache what that call gave it.
  void take_back(const std::string& path, SessionId session, uint64_t mark);
  // Sessions that cache `path`.
  std::vector<SessionId> sessions_of(const std::string& path) const;
  // Sessions that cache `path` or anything below it (a range of the ordered map).
  std::vector<SessionId> sessions_at_or_below(const std::string& path) const;
  // Forgets what was seen of `path` (after the gateway changed it), keeping who caches it.
  void clear_seen(const std::string& path);
  void set_seen(const std::string& path, SeenAttrs seen);
  // What was last seen of `path` (nothing if it is not in the set or nothing was seen).
  std::optional<SeenAttrs> seen_of(const std::string& path) const;
  // Drops a session from every path (its stream ended); paths nobody caches go.
  void forget_session(SessionId session);
  // A rename of `from` to `to` that `session` makes: it keeps what it cached at and below `from`
  // under the new names, so it comes to count among those that cache each of them at `to` (and
  // keeps its old ones until they are evicted). A new path takes over what was seen at the old
  // one, for revalidation. Returns what had to go to stay within the limit.
  std::vector<Evicted> follow_rename(const std::string& from, const std::string& to,
                                     SessionId session);

  // Up to `max` paths with what was last seen of them, continuing round-robin from the last call.
  std::vector<std::pair<std::string, std::optional<SeenAttrs>>> next_batch(size_t max);

  size_t size() const { return entries_.size(); }
  size_t limit() const { return limit_; }

 private:
  // Drops the least recently noted paths while there are more than the limit.
  std::vector<Evicted> evict_over_limit();
  struct Entry {
    std::vector<SessionId> sessions;  // few per path: a small vector beats a set
    std::optional<SeenAttrs> seen;
    std::list<std::string>::iterator lru;
    uint64_t last_note = 0;  // the mark of the last note() of the path
  };
  size_t limit_;
  uint64_t notes_ = 0;                    // marks given so far
  std::map<std::string, Entry> entries_;  // ordered: the paths below a directory are a range
  std::list<std::string> lru_;            // front: most recently noted
  std::string cursor_;                    // where next_batch continues
};

}  // namespace skein
