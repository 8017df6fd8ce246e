// LinkNames; see link_names.hpp.
#include "namespace/link_names.hpp"

namespace skein {

uint64_t LinkNames::names(const std::string& rel) {
  std::lock_guard lock(mu_);
  auto it = groups_.find(rel);
  return it == groups_.end() ? 1 : *it->second;
}

void LinkNames::linked(const std::string& existing, const std::string& rel) {
  std::lock_guard lock(mu_);
  auto& group = groups_[existing];
  if (!group) group = std::make_shared<uint64_t>(1);
  ++*group;
  groups_[rel] = group;
}

void LinkNames::removed(const std::string& rel) {
  std::lock_guard lock(mu_);
  auto it = groups_.find(rel);
  if (it == groups_.end()) return;
  --*it->second;
  groups_.erase(it);
}

void LinkNames::renamed(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  if (auto old = groups_.find(to); old != groups_.end()) {  // the name replaced
    --*old->second;
    groups_.erase(old);
  }
  std::vector<std::pair<std::string, std::shared_ptr<uint64_t>>> moved;
  if (auto it = groups_.find(from); it != groups_.end()) {
    moved.emplace_back(to, std::move(it->second));
    groups_.erase(it);
  }
  const std::string below = from + "/";  // a directory's names: a range of the map
  for (auto it = groups_.lower_bound(below); it != groups_.end() && it->first.starts_with(below);) {
    moved.emplace_back(to + it->first.substr(from.size()), std::move(it->second));
    it = groups_.erase(it);
  }
  for (auto& [name, group] : moved) groups_[name] = std::move(group);
}

std::vector<std::string> LinkNames::others(const std::string& rel) {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  auto it = groups_.find(rel);
  if (it == groups_.end() || *it->second <= 1) return out;
  for (const auto& [name, group] : groups_)
    if (group == it->second && name != rel) out.push_back(name);
  return out;
}

bool LinkNames::same_file(const std::string& a, const std::string& b) {
  std::lock_guard lock(mu_);
  auto x = groups_.find(a), y = groups_.find(b);
  return x != groups_.end() && y != groups_.end() && x->second == y->second;
}

}  // namespace skein
