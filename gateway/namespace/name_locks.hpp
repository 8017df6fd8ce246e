// Locks by name, for a change of one name that takes several requests or servers (a union's look
// for a name and its create on the branch chosen; a striped file's name on backend 0 and its
// parts on the others): two such changes of one name are made one after the other. One lock per
// shard of names, by hash, so that the set stays small. Another gateway's calls are not held back.
#pragma once

#include <algorithm>
#include <array>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace skein {

class NameLocks {
 public:
  std::mutex& of(const std::string& rel) {
    return locks_[std::hash<std::string>{}(rel) % locks_.size()];
  }
  // The locks of two names (a rename's), taken in one order whatever the names, so that two
  // renames cannot each wait for the other; one lock where both names share a shard.
  struct Pair {
    std::unique_lock<std::mutex> first, second;
  };
  Pair both(const std::string& a, const std::string& b) {
    std::mutex* x = &of(a);
    std::mutex* y = &of(b);
    if (x == y) return {std::unique_lock(*x), {}};
    if (std::less<std::mutex*>{}(y, x)) std::swap(x, y);
    std::unique_lock first(*x);
    std::unique_lock second(*y);
    return {std::move(first), std::move(second)};
  }
  // The locks of many names (a batch of whole files'), in the same order as both() takes them.
  std::vector<std::unique_lock<std::mutex>> all(const std::vector<std::string>& names) {
    std::vector<std::mutex*> shards;
    for (const auto& n : names) shards.push_back(&of(n));
    std::sort(shards.begin(), shards.end(), std::less<std::mutex*>{});
    shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
    std::vector<std::unique_lock<std::mutex>> held;
    held.reserve(shards.size());
    for (std::mutex* m : shards) held.emplace_back(*m);
    return held;
  }

 private:
  std::array<std::mutex, 64> locks_;
};

}  // namespace skein
