// Open counts and silly renames; see open_inodes.hpp.
#include "open_inodes.hpp"

#include <cstdio>
#include <ctime>
#include <random>

namespace skein::client {

std::string OpenInodes::hidden_name(InodeNumber ino) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llx-%08llx", static_cast<unsigned long long>(ino),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return std::string(kHiddenPrefix) + buf;
}

bool OpenInodes::is_hidden_name(std::string_view name) {
  return name.substr(0, kHiddenPrefix.size()) == kHiddenPrefix;
}

void OpenInodes::opened(InodeNumber ino, const FileAttr& attr) {
  std::lock_guard lock(mu_);
  Open& open = open_[ino];
  ++open.count;
  open.attr = attr;
}

void OpenInodes::seen(InodeNumber ino, const FileAttr& attr) {
  std::lock_guard lock(mu_);
  auto it = open_.find(ino);
  if (it != open_.end()) it->second.attr = attr;
}

void OpenInodes::wrote(InodeNumber ino, uint64_t end) {
  std::lock_guard lock(mu_);
  auto it = open_.find(ino);
  if (it == open_.end()) return;
  FileAttr& attr = it->second.attr;
  if (end > attr.size) {
    attr.size = end;
    attr.blocks = (end + 511) / 512;
  }
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  attr.mtime_ns = attr.ctime_ns = int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

std::optional<FileAttr> OpenInodes::last_seen(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  auto it = open_.find(ino);
  if (it == open_.end()) return std::nullopt;
  return it->second.attr;
}

std::optional<std::string> OpenInodes::closed(InodeNumber ino) {
  std::lock_guard lock(mu_);
  auto it = open_.find(ino);
  if (it == open_.end()) return std::nullopt;
  if (--it->second.count > 0) return std::nullopt;
  std::string hidden = std::move(it->second.hidden_path);
  open_.erase(it);
  if (hidden.empty()) return std::nullopt;
  return hidden;
}

bool OpenInodes::is_open(InodeNumber ino) const {
  std::lock_guard lock(mu_);
  return open_.contains(ino);
}

bool OpenInodes::hide(InodeNumber ino, std::string hidden_path) {
  std::lock_guard lock(mu_);
  auto it = open_.find(ino);
  if (it == open_.end()) return false;
  it->second.hidden_path = std::move(hidden_path);
  return true;
}

std::size_t OpenInodes::count() const {
  std::lock_guard lock(mu_);
  return open_.size();
}

}  // namespace skein::client
