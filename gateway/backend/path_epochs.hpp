// Which version of a path on one server a file was opened at. When a path's file may have been
// replaced (removed, renamed over or away: by the gateway, or on the server as its watcher
// reports) while files are open at it or below it, the path gets a new epoch. An open file whose
// path's epoch is no longer the one it was opened at must not be opened again by that path (the
// path may name another file now, or none), and its reads are never shared with those of files
// opened since (ReadCollapser keys reads by epoch). Only paths with files open at or below them
// are remembered, so that what is kept is bounded by the open files.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace skein {

class PathEpochs {
 public:
  // A file is being opened at `path` (absolute, normalised): its epoch, and the file counted as
  // open there until closed(). Replacements from then on count for it.
  uint64_t opened(std::string_view path);
  void closed(std::string_view path);
  // The epoch of `path` now: the latest of its own and its ancestors'.
  uint64_t of(std::string_view path) const;
  // The file at `path`, or any below it, may not be the one opened there before: `by_gateway`
  // when the gateway removed or renamed it, otherwise the server's watcher reported it. A report
  // that finds the path marked by expect_echo() within kEcho is taken for the echo of the
  // gateway's own change, which a file opened at the path in between has seen: it takes the
  // mark and changes nothing. The next report moves the epoch.
  void replaced(std::string_view path, bool by_gateway);
  // The gateway is about to remove or rename `path`: the watcher's report of it is its echo.
  // Marked before the request goes out, since the report can come before the answer.
  void expect_echo(std::string_view path);
  // The change expected at `path` was refused, or its outcome is unknown: a report of `path` is
  // not taken for an echo.
  void no_echo(std::string_view path);
  // An epoch that no path has or will have: for a file that cannot tell which file a path it
  // moved to names (it then opens nothing by path again).
  uint64_t unique();

  // How long a mark of expect_echo() waits for the watcher's report.
  static constexpr std::chrono::seconds kEcho{5};

 private:
  struct Node {
    uint64_t epoch = 0;  // since the last replacement of the path itself
    uint64_t open = 0;   // files open at the path
  };
  uint64_t of_locked(const std::string& path) const;
  bool open_at_or_below(const std::string& path) const;
  // Drops the nodes of `path` and its ancestors that nothing open needs any more.
  void prune(std::string path);
  void expire_echoes_locked();
  void move_locked(const std::string& path);

  mutable std::mutex mu_;
  std::map<std::string, Node> nodes_;  // guarded by mu_; ordered: a path's subtree is a range
  uint64_t latest_ = 0;                // guarded by mu_
  uint64_t unique_ = 0;                // guarded by mu_
  using Clock = std::chrono::steady_clock;
  std::deque<std::pair<Clock::time_point, std::string>> own_;  // guarded by mu_; oldest first
  std::unordered_map<std::string, Clock::time_point> own_at_;  // guarded by mu_
};

}  // namespace skein
