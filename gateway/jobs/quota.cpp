// Quota counting; see quota.hpp.
#include "jobs/quota.hpp"

#include "skein/path.hpp"

namespace skein {

bool Quota::take_bytes(uint64_t n) {
  std::lock_guard lock(mu_);
  if (n > bytes_limit_ || bytes_ > bytes_limit_ - n) return false;
  bytes_ += n;
  ++generation_;
  return true;
}

bool Quota::take_inodes(uint64_t n) {
  std::lock_guard lock(mu_);
  if (n > inodes_limit_ || inodes_ > inodes_limit_ - n) return false;
  inodes_ += n;
  ++generation_;
  return true;
}

void Quota::give_bytes(uint64_t n) {
  std::lock_guard lock(mu_);
  bytes_ = n > bytes_ ? 0 : bytes_ - n;
  ++generation_;
}

void Quota::give_inodes(uint64_t n) {
  std::lock_guard lock(mu_);
  inodes_ = n > inodes_ ? 0 : inodes_ - n;
  ++generation_;
}

Quota::Usage Quota::usage() const {
  std::lock_guard lock(mu_);
  return {bytes_, inodes_, bytes_limit_, inodes_limit_};
}

uint64_t Quota::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

void Quota::set_used(uint64_t bytes, uint64_t inodes) {
  std::lock_guard lock(mu_);
  bytes_ = bytes;
  inodes_ = inodes;
  ++generation_;
}

bool Quota::set_used_if(uint64_t generation, uint64_t bytes, uint64_t inodes) {
  std::lock_guard lock(mu_);
  if (generation_ != generation) return false;
  bytes_ = bytes;
  inodes_ = inodes;
  ++generation_;
  return true;
}

OpenSizes::Cell::~Cell() {
  if (orphan_of) orphan_of->give_bytes(size);
}

std::shared_ptr<OpenSizes::Cell> OpenSizes::acquire(const std::string& rel) {
  std::lock_guard lock(mu_);
  auto& slot = cells_[rel];
  auto cell = slot.lock();
  if (!cell) {
    cell = std::make_shared<Cell>();
    slot = cell;
  }
  // Forget cells no handle holds any more, now and then.
  if (cells_.size() % 1024 == 0)
    std::erase_if(cells_, [](auto& kv) { return kv.second.expired(); });
  return cell;
}

std::shared_ptr<OpenSizes::Cell> OpenSizes::find(const std::string& rel) {
  std::lock_guard lock(mu_);
  auto it = cells_.find(rel);
  return it == cells_.end() ? nullptr : it->second.lock();
}

void OpenSizes::renamed(const std::string& from, const std::string& to) {
  std::lock_guard lock(mu_);
  cells_.erase(to);
  std::map<std::string, std::weak_ptr<Cell>> moved;
  for (auto it = cells_.begin(); it != cells_.end();) {
    if (path_is_under(it->first, from)) {
      moved[to + it->first.substr(from.size())] = it->second;
      it = cells_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [k, v] : moved) cells_[k] = v;
}

void OpenSizes::removed(const std::string& rel) {
  std::lock_guard lock(mu_);
  cells_.erase(rel);
}

}  // namespace skein
