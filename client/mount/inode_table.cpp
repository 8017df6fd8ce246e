// Synthetic inode numbers mapped to virtual paths; see inode_table.hpp.
#include "inode_table.hpp"

#include <algorithm>

#include "skein/path.hpp"

namespace skein::client {
namespace {

// Numbers are never reused while mounted, so one generation makes every (ino, generation) unique.
constexpr uint64_t kGeneration = 1;

// The paths strictly below `path` are exactly those starting with this prefix.
std::string child_prefix(const std::string& path) { return path == "/" ? "/" : path + "/"; }

}  // namespace

InodeTable::InodeTable() {
  // The kernel never looks the root up nor forgets it; count one lookup so it is never dropped.
  inodes_.emplace(kRootInode, Inode{"/", 1, kGeneration, true, kRootInode});
  by_path_.emplace("/", kRootInode);
}

InodeRef InodeTable::lookup_add(const std::string& path) {
  std::lock_guard lock(mu_);
  auto [it, inserted] = by_path_.try_emplace(path, next_ino_);
  if (inserted) {
    uint64_t file_id = next_ino_;
    if (auto kept = remembered_.find(path); kept != remembered_.end()) {
      file_id = kept->second;
      remembered_.erase(kept);
    }
    inodes_.emplace(next_ino_, Inode{path, 0, kGeneration, true, file_id});
    ++next_ino_;
  }
  Inode& inode = inodes_.at(it->second);
  ++inode.nlookup;
  return InodeRef{it->second, inode.generation, inode.file_id};
}

bool InodeTable::forget(InodeNumber ino, uint64_t n) {
  if (ino == kRootInode) return false;
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return false;
  Inode& inode = it->second;
  inode.nlookup = n >= inode.nlookup ? 0 : inode.nlookup - n;
  if (inode.nlookup > 0) return false;
  if (inode.attached) {
    auto p = by_path_.find(inode.path);
    if (p != by_path_.end() && p->second == ino) {
      by_path_.erase(p);
      remember_locked(inode.path, inode.file_id);
    }
  }
  inodes_.erase(it);
  return true;
}

void InodeTable::remember_locked(const std::string& path, uint64_t file_id) {
  remembered_[path] = file_id;
  remembered_order_.push_back(path);
  while (remembered_.size() > kRemembered && !remembered_order_.empty()) {
    remembered_.erase(remembered_order_.front());
    remembered_order_.pop_front();
  }
  if (remembered_order_.size() > 2 * kRemembered) {  // mostly paths taken back since
    remembered_order_.clear();
    for (const auto& [p, id] : remembered_) remembered_order_.push_back(p);
  }
}

void InodeTable::erase_remembered_locked(const std::string& path, bool below) {
  remembered_.erase(path);
  if (!below) return;
  const std::string prefix = child_prefix(path);
  auto it = remembered_.lower_bound(prefix);
  while (it != remembered_.end() && it->first.compare(0, prefix.size(), prefix) == 0)
    it = remembered_.erase(it);
}

void InodeTable::move_remembered_locked(const std::string& from, const std::string& to) {
  std::vector<std::pair<std::string, uint64_t>> moving;
  if (auto it = remembered_.find(from); it != remembered_.end()) moving.emplace_back(*it);
  const std::string prefix = child_prefix(from);
  for (auto it = remembered_.lower_bound(prefix);
       it != remembered_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    moving.emplace_back(*it);
  erase_remembered_locked(from, true);
  for (auto& [p, id] : moving) remember_locked(to + p.substr(from.size()), id);
}

uint64_t InodeTable::file_id(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? ino : it->second.file_id;
}

std::optional<uint64_t> InodeTable::file_id_at(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return std::nullopt;
  return inodes_.at(it->second).file_id;
}

void InodeTable::changed(const std::string& path, bool below) {
  std::lock_guard lock(mu_);
  erase_remembered_locked(path, below);
}

std::optional<std::string> InodeTable::path_of(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end() || !it->second.attached) return std::nullopt;
  return it->second.path;
}

std::optional<std::string> InodeTable::last_path_of(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return std::nullopt;
  return it->second.path;
}

std::optional<InodeNumber> InodeTable::find(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, InodeNumber> InodeTable::take_subtree_locked(const std::string& path) {
  std::map<std::string, InodeNumber> taken;
  if (auto it = by_path_.find(path); it != by_path_.end()) {
    taken.insert(by_path_.extract(it));
  }
  const std::string prefix = child_prefix(path);
  auto it = by_path_.lower_bound(prefix);
  while (it != by_path_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    taken.insert(by_path_.extract(it++));
  }
  return taken;
}

void InodeTable::place_subtree_locked(const std::map<std::string, InodeNumber>& subtree,
                                      const std::string& from, const std::string& to) {
  for (const auto& [old_path, ino] : subtree) {
    std::string new_path = to + old_path.substr(from.size());
    inodes_.at(ino).path = new_path;
    by_path_[std::move(new_path)] = ino;
  }
}

void InodeTable::rename(const std::string& from, const std::string& to) {
  if (from == to || from == "/" || to == "/") return;
  std::lock_guard lock(mu_);
  auto moving = take_subtree_locked(from);
  for (const auto& [path, ino] : take_subtree_locked(to)) inodes_.at(ino).attached = false;
  place_subtree_locked(moving, from, to);
  erase_remembered_locked(to, true);  // what was there is gone
  move_remembered_locked(from, to);
}

void InodeTable::exchange(const std::string& a, const std::string& b) {
  if (a == b || a == "/" || b == "/") return;
  std::lock_guard lock(mu_);
  auto at_a = take_subtree_locked(a);
  auto at_b = take_subtree_locked(b);
  place_subtree_locked(at_a, a, b);
  place_subtree_locked(at_b, b, a);
  const std::string parked = "\n";  // no path starts with it
  move_remembered_locked(a, parked);
  move_remembered_locked(b, a);
  move_remembered_locked(parked, b);
}

void InodeTable::unlink(const std::string& path) {
  if (path == "/") return;
  std::lock_guard lock(mu_);
  for (const auto& [p, ino] : take_subtree_locked(path)) inodes_.at(ino).attached = false;
  erase_remembered_locked(path, true);
}

std::optional<CachedName> InodeTable::name_at(const std::string& path) const {
  if (path == "/") return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = by_path_.find(path);
  if (it == by_path_.end()) return std::nullopt;
  auto parent = by_path_.find(parent_path(path));
  if (parent == by_path_.end()) return std::nullopt;
  return CachedName{parent->second, it->second, std::string(base_name(path))};
}

std::vector<CachedName> InodeTable::names_at_or_below(const std::string& path) const {
  std::vector<CachedName> names;
  std::lock_guard lock(mu_);
  auto add = [&](const std::string& p, InodeNumber ino) {
    if (p == "/") return;
    auto parent = by_path_.find(parent_path(p));
    if (parent != by_path_.end()) {
      names.push_back(CachedName{parent->second, ino, std::string(base_name(p))});
    }
  };
  if (auto it = by_path_.find(path); it != by_path_.end()) add(it->first, it->second);
  const std::string prefix = child_prefix(path);
  for (auto it = by_path_.lower_bound(prefix);
       it != by_path_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
    add(it->first, it->second);
  }
  // A path sorts before the paths below it, so the reverse of map order is deepest first.
  std::reverse(names.begin(), names.end());
  return names;
}

std::vector<InodeNumber> InodeTable::all_inodes() const {
  std::vector<InodeNumber> out;
  std::lock_guard lock(mu_);
  out.reserve(inodes_.size());
  for (const auto& [ino, inode] : inodes_) out.push_back(ino);
  return out;
}

uint64_t InodeTable::lookup_count(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? 0 : it->second.nlookup;
}

std::size_t InodeTable::size() const {
  std::lock_guard lock(mu_);
  return inodes_.size();
}

}  // namespace skein::client
