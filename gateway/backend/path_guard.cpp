// Per-server path confinement state; see path_guard.hpp.
#include "backend/path_guard.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace skein {
namespace {

std::atomic<int64_t> ttl_ms{1000};
// Verified directories kept per server at most; past that the set starts again empty.
constexpr size_t kMaxVerified = 200000;

// The guards this thread holds, with its mode and how many holds of it are alive.
struct Held {
  PathGuard* guard;
  PathGuard::Mode mode;
  int depth;
};
thread_local std::vector<Held> held_by_thread;

Held* find_held(PathGuard* g) {
  for (auto& h : held_by_thread)
    if (h.guard == g) return &h;
  return nullptr;
}

}  // namespace

std::shared_ptr<PathGuard> PathGuard::of(const std::string& host, int port) {
  static std::mutex registry_mu;
  static std::map<std::string, std::weak_ptr<PathGuard>> registry;
  std::string key;
  for (char c : host) key += static_cast<char>(tolower(static_cast<unsigned char>(c)));
  key += ":" + std::to_string(port);
  std::lock_guard lock(registry_mu);
  auto& slot = registry[key];
  auto g = slot.lock();
  if (!g) {
    g = std::make_shared<PathGuard>();
    slot = g;
  }
  return g;
}

void PathGuard::set_ttl(std::chrono::milliseconds ttl) { ttl_ms = ttl.count(); }

PathGuard::Hold& PathGuard::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    release();
    guard_ = other.guard_;
    other.guard_ = nullptr;
  }
  return *this;
}

void PathGuard::Hold::release() {
  if (!guard_) return;
  Held* h = find_held(guard_);
  if (h && --h->depth == 0) {
    PathGuard* g = guard_;
    held_by_thread.erase(held_by_thread.begin() + (h - held_by_thread.data()));
    g->unlock();
  }
  guard_ = nullptr;
}

PathGuard::Hold PathGuard::hold(Mode mode) {
  if (Held* h = find_held(this)) {
    if (mode == Mode::exclusive && h->mode == Mode::shared) {
      // Upgrading would deadlock against another thread doing the same: a bug in the caller.
      spdlog::critical("path guard: exclusive hold asked for under a shared one");
      std::abort();
    }
    ++h->depth;
    return Hold(this);
  }
  lock(mode);
  held_by_thread.push_back({this, mode, 1});
  return Hold(this);
}

std::vector<PathGuard::Hold> PathGuard::hold_all(std::vector<PathGuard*> guards) {
  std::sort(guards.begin(), guards.end(), std::less<PathGuard*>());
  guards.erase(std::unique(guards.begin(), guards.end()), guards.end());
  std::vector<Hold> out;
  for (auto* g : guards) out.push_back(g->hold(Mode::shared));
  return out;
}

void PathGuard::lock(Mode mode) {
  std::unique_lock lock(mu_);
  if (mode == Mode::shared) {
    cv_.wait(lock, [&] { return !writer_ && writers_waiting_ == 0; });
    ++readers_;
  } else {
    ++writers_waiting_;
    cv_.wait(lock, [&] { return !writer_ && readers_ == 0; });
    --writers_waiting_;
    writer_ = true;
  }
}

void PathGuard::unlock() {
  {
    std::lock_guard lock(mu_);
    if (writer_)
      writer_ = false;
    else
      --readers_;
  }
  cv_.notify_all();
}

bool PathGuard::verified(std::string_view dir) {
  std::lock_guard lock(mu_);
  auto it = verified_.find(dir);
  if (it == verified_.end()) return false;
  if (std::chrono::steady_clock::now() - it->second > std::chrono::milliseconds(ttl_ms.load())) {
    verified_.erase(it);
    return false;
  }
  return true;
}

void PathGuard::mark_verified(const std::string& dir) {
  std::lock_guard lock(mu_);
  if (verified_.size() >= kMaxVerified) verified_.clear();
  verified_[dir] = std::chrono::steady_clock::now();
}

void PathGuard::forget_tree(const std::string& path) {
  std::lock_guard lock(mu_);
  if (path.empty() || path == "/") {
    verified_.clear();
    return;
  }
  verified_.erase(path);
  // Everything below `path` sorts between "path/" and "path0" ('0' follows '/').
  auto first = verified_.lower_bound(path + "/");
  auto last = verified_.lower_bound(path + "0");
  verified_.erase(first, last);
}

}  // namespace skein
