// PathEpochs; see path_epochs.hpp.
#include "backend/path_epochs.hpp"

#include <algorithm>

#include "skein/path.hpp"

namespace skein {

uint64_t PathEpochs::of(std::string_view path) const {
  std::lock_guard lock(mu_);
  uint64_t epoch = floor_;
  if (epochs_.empty()) return epoch;
  std::string p(path);
  for (;;) {
    if (auto it = epochs_.find(p); it != epochs_.end()) epoch = std::max(epoch, it->second);
    if (p.empty() || p == "/") break;
    p = parent_path(p);
  }
  return epoch;
}

void PathEpochs::replaced(std::string_view path) {
  std::lock_guard lock(mu_);
  ++latest_;
  if (epochs_.size() >= kMaxPaths) {
    epochs_.clear();
    floor_ = latest_;
    return;
  }
  epochs_[std::string(path)] = latest_;
}

}  // namespace skein
