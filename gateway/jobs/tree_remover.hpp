// Removing a whole directory tree on one backend (a job's directory at destroy, an orphan), and
// walking a layout's tree to count what a namespace holds. Both go through the confined Backend
// and Layout operations: a symlink inside is removed, never followed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "backend/backend.hpp"
#include "namespace/layout.hpp"

namespace skein {

// Removes `rel` and everything below it; ENOENT is success (already gone). Stops at the first
// error, which it returns (EIO for a backend that is down), and with ETIMEDOUT once `until` has
// passed, leaving the rest for a later call (what was removed stays removed).
Status remove_tree(
    Backend& backend, const std::string& rel,
    std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());

struct TreeCount {
  uint64_t bytes = 0;   // sizes of the regular files
  uint64_t inodes = 0;  // files, directories and symlinks, the root not counted
};
// Walks the tree below `rel` through `layout`; ECANCELED as soon as `stop()` says so (asked at
// each directory).
Result<TreeCount> count_tree(Layout& layout, const std::string& rel = "/",
                             const std::function<bool()>& stop = {});

}  // namespace skein
