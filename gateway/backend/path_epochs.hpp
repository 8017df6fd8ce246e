// Which version of a path on one server a file was opened at. A path whose file may have been
// replaced (renamed over or away, removed, through the gateway or on the server) gets a new
// epoch, and so does everything below it. An open file whose path's epoch is no longer the one
// it was opened at must not be opened again by that path (the path may name another file now,
// or none), and its reads are never shared with those of files opened since (ReadCollapser keys
// reads by epoch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace skein {

class PathEpochs {
 public:
  // The epoch of `path` (absolute, normalised): the latest of its own and its ancestors'.
  uint64_t of(std::string_view path) const;
  // The file at `path`, or any below it, may not be the one opened there before.
  void replaced(std::string_view path);

  // Paths remembered at most; beyond it every path starts a new epoch together (open files then
  // keep their handles but open no more by path).
  static constexpr std::size_t kMaxPaths = 1 << 16;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, uint64_t> epochs_;  // guarded by mu_
  uint64_t latest_ = 0;                               // guarded by mu_
  uint64_t floor_ = 0;  // every path's epoch is at least this; guarded by mu_
};

}  // namespace skein
