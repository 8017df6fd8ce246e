// InterestSet; see interest_set.hpp.
#include "coherence/interest_set.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace skein {

std::vector<InterestSet::Evicted> InterestSet::note(const std::string& path, SessionId session,
                                                    std::optional<SeenAttrs> seen, bool* changed,
                                                    uint64_t* added) {
  if (changed) *changed = false;
  auto it = entries_.find(path);
  if (it == entries_.end()) {
    lru_.push_front(path);
    it = entries_.emplace(path, Entry{{}, std::nullopt, lru_.begin()}).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  Entry& e = it->second;
  e.last_note = ++notes_;
  const bool is_new = std::find(e.sessions.begin(), e.sessions.end(), session) == e.sessions.end();
  if (is_new) e.sessions.push_back(session);
  if (added) *added = is_new ? e.last_note : 0;
  if (seen) {
    if (changed && e.seen && !(*e.seen == *seen)) *changed = true;
    e.seen = seen;
  }
  return evict_over_limit();
}

std::vector<InterestSet::Evicted> InterestSet::evict_over_limit() {
  std::vector<Evicted> evicted;
  while (entries_.size() > limit_) {
    std::string victim = lru_.back();
    lru_.pop_back();
    auto v = entries_.find(victim);
    evicted.push_back({victim, std::move(v->second.sessions)});
    entries_.erase(v);
  }
  return evicted;
}

std::vector<SessionId> InterestSet::sessions_of(const std::string& path) const {
  auto it = entries_.find(path);
  if (it == entries_.end()) return {};
  return it->second.sessions;
}

std::vector<SessionId> InterestSet::sessions_at_or_below(const std::string& path) const {
  std::set<SessionId> out;
  if (auto it = entries_.find(path); it != entries_.end())
    out.insert(it->second.sessions.begin(), it->second.sessions.end());
  const std::string below = path == "/" ? path : path + '/';
  for (auto it = entries_.lower_bound(below);
       it != entries_.end() && it->first.compare(0, below.size(), below) == 0; ++it)
    out.insert(it->second.sessions.begin(), it->second.sessions.end());
  return {out.begin(), out.end()};
}

void InterestSet::clear_seen(const std::string& path) {
  auto it = entries_.find(path);
  if (it != entries_.end()) it->second.seen.reset();
}

void InterestSet::set_seen(const std::string& path, SeenAttrs seen) {
  auto it = entries_.find(path);
  if (it != entries_.end()) it->second.seen = seen;
}

std::optional<SeenAttrs> InterestSet::seen_of(const std::string& path) const {
  auto it = entries_.find(path);
  return it == entries_.end() ? std::nullopt : it->second.seen;
}

void InterestSet::take_back(const std::string& path, SessionId session, uint64_t mark) {
  auto it = entries_.find(path);
  if (it == entries_.end() || it->second.seen || it->second.last_note != mark) return;
  auto& s = it->second.sessions;
  s.erase(std::remove(s.begin(), s.end(), session), s.end());
  if (s.empty()) {
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
}

void InterestSet::forget_session(SessionId session) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto& s = it->second.sessions;
    s.erase(std::remove(s.begin(), s.end(), session), s.end());
    if (s.empty()) {
      lru_.erase(it->second.lru);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<InterestSet::Evicted> InterestSet::follow_rename(const std::string& from,
                                                             const std::string& to,
                                                             SessionId session) {
  if (from == to) return {};
  // What the session caches at `from` and below it (a range of the ordered map), as it will be
  // named after the rename; gathered first, since the new names may fall inside the range.
  std::vector<std::pair<std::string, std::optional<SeenAttrs>>> moved;
  const auto caches = [&](const Entry& e) {
    return std::find(e.sessions.begin(), e.sessions.end(), session) != e.sessions.end();
  };
  if (auto it = entries_.find(from); it != entries_.end() && caches(it->second))
    moved.emplace_back(to, it->second.seen);
  const std::string below = from == "/" ? from : from + '/';
  for (auto it = entries_.lower_bound(below);
       it != entries_.end() && it->first.compare(0, below.size(), below) == 0; ++it)
    if (caches(it->second))
      moved.emplace_back((to == "/" ? std::string() : to) + '/' + it->first.substr(below.size()),
                         it->second.seen);
  for (auto& [path, seen] : moved) {
    auto it = entries_.find(path);
    if (it == entries_.end()) {
      lru_.push_front(path);
      it = entries_.emplace(path, Entry{{}, seen, lru_.begin()}).first;
    } else {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
    }
    it->second.last_note = ++notes_;
    auto& s = it->second.sessions;
    if (std::find(s.begin(), s.end(), session) == s.end()) s.push_back(session);
  }
  return evict_over_limit();
}

std::vector<std::pair<std::string, std::optional<SeenAttrs>>> InterestSet::next_batch(size_t max) {
  std::vector<std::pair<std::string, std::optional<SeenAttrs>>> out;
  if (entries_.empty()) return out;
  // Walk the paths in their order from the first after the cursor, wrapping once. Not the LRU
  // list: a path noted again moves to its front, and one taken back leaves it, so a walk that
  // continued from the cursor's place there kept coming back to the paths in use and never
  // reached the rest; the cursor's place in path order holds whatever moves or goes.
  auto it = entries_.upper_bound(cursor_);
  for (size_t n = 0; n < std::min(max, entries_.size()); ++n) {
    if (it == entries_.end()) it = entries_.begin();
    out.emplace_back(it->first, it->second.seen);
    cursor_ = it->first;
    ++it;
  }
  return out;
}

}  // namespace skein
