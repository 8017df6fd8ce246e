// PathEpochs; see path_epochs.hpp.
#include "backend/path_epochs.hpp"

#include <algorithm>

#include "skein/path.hpp"

namespace skein {

namespace {
// Unique epochs count down from the top, paths' up from 1: the two never meet.
constexpr uint64_t kUniqueTop = ~uint64_t{0};
}  // namespace

uint64_t PathEpochs::of_locked(const std::string& path) const {
  uint64_t epoch = 0;
  if (nodes_.empty()) return epoch;
  std::string p = path;
  for (;;) {
    if (auto it = nodes_.find(p); it != nodes_.end()) epoch = std::max(epoch, it->second.epoch);
    if (p.empty() || p == "/") break;
    p = parent_path(p);
  }
  return epoch;
}

uint64_t PathEpochs::of(std::string_view path) const {
  std::lock_guard lock(mu_);
  return of_locked(std::string(path));
}

bool PathEpochs::open_at_or_below(const std::string& path) const {
  if (auto it = nodes_.find(path); it != nodes_.end() && it->second.open > 0) return true;
  const std::string below = path == "/" ? "/" : path + "/";
  for (auto it = nodes_.lower_bound(below); it != nodes_.end() && it->first.starts_with(below);
       ++it)
    if (it->second.open > 0) return true;
  return false;
}

uint64_t PathEpochs::opened(std::string_view path) {
  std::lock_guard lock(mu_);
  const std::string p(path);
  const uint64_t epoch = of_locked(p);
  ++nodes_[p].open;
  return epoch;
}

void PathEpochs::closed(std::string_view path) {
  std::lock_guard lock(mu_);
  const std::string p(path);
  auto it = nodes_.find(p);
  if (it == nodes_.end() || it->second.open == 0) return;
  --it->second.open;
  prune(p);
}

void PathEpochs::prune(std::string p) {
  for (;;) {
    if (auto it = nodes_.find(p); it != nodes_.end() && !open_at_or_below(p)) nodes_.erase(it);
    if (p.empty() || p == "/") break;
    p = parent_path(p);
  }
}

void PathEpochs::expire_echoes_locked() {
  const auto now = Clock::now();
  while (!own_.empty() && now - own_.front().first > kEcho) {
    if (auto it = own_at_.find(own_.front().second);
        it != own_at_.end() && it->second == own_.front().first)
      own_at_.erase(it);
    own_.pop_front();
  }
}

void PathEpochs::move_locked(const std::string& path) {
  if (!open_at_or_below(path)) return;  // files opened from now on take what is there now
  nodes_[path].epoch = ++latest_;
}

void PathEpochs::replaced(std::string_view path, bool by_gateway) {
  std::lock_guard lock(mu_);
  const std::string p(path);
  expire_echoes_locked();
  if (!by_gateway) {
    if (auto it = own_at_.find(p); it != own_at_.end()) {
      own_at_.erase(it);  // the echo of the gateway's own; only one report is
      return;
    }
  }
  move_locked(p);
}

void PathEpochs::expect_echo(std::string_view path) {
  std::lock_guard lock(mu_);
  expire_echoes_locked();
  const auto now = Clock::now();
  own_.emplace_back(now, std::string(path));
  own_at_[std::string(path)] = now;
}

void PathEpochs::no_echo(std::string_view path) {
  std::lock_guard lock(mu_);
  own_at_.erase(std::string(path));
}

uint64_t PathEpochs::unique() {
  std::lock_guard lock(mu_);
  return kUniqueTop - unique_++;
}

}  // namespace skein
