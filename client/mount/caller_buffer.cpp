// Mapping a control-socket client's buffer; see caller_buffer.hpp.
#include "caller_buffer.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace skein::client {
namespace {

// Checks that `fd` is a buffer sealed against shrinking that holds [offset, offset + length);
// "" or the failure.
std::string check_buffer(const std::string& command, int fd, uint64_t offset, uint64_t length,
                         struct stat& st) {
  if (fd < 0)
    return command + ": no buffer (its file descriptor goes with the command, SCM_RIGHTS)";
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return command + ": the buffer must be a memfd sealed against shrinking (F_SEAL_SHRINK)";
  if (::fstat(fd, &st) != 0) return command + ": buffer: " + std::strerror(errno);
  if (offset > static_cast<uint64_t>(st.st_size) ||
      length > static_cast<uint64_t>(st.st_size) - offset)
    return command + ": range beyond the buffer's size";
  return "";
}

}  // namespace

CallerMapping::~CallerMapping() {
  if (base != MAP_FAILED) ::munmap(base, size);
  if (fd >= 0) ::close(fd);
}

CallerBuffers::~CallerBuffers() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (reaper_.joinable()) reaper_.join();
}

std::string CallerBuffers::map(const std::string& command, int fd, uint64_t offset, uint64_t length,
                               bool writable, pid_t caller, CallerBuffer& m) {
  struct stat st;
  if (std::string e = check_buffer(command, fd, offset, length, st); !e.empty()) return e;
  if (st.st_size == 0) return command + ": the buffer is empty";
  const uint64_t end = offset + length;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  for (Kept& k : kept_) {
    const CallerMapping& km = *k.mapping;
    if (km.dev == st.st_dev && km.ino == st.st_ino && km.size >= end &&
        (km.writable || !writable)) {
      k.used = now;
      m.data = static_cast<char*>(km.base) + offset;
      m.mapping = k.mapping;
      return "";
    }
  }
  // The whole buffer, writable where the caller's descriptor allows it, so that one mapping
  // serves every command; a read-only descriptor asked for writing fails as a mapping of its own
  // would.
  const int access = ::fcntl(fd, F_GETFL);
  const bool can_write = access >= 0 && (access & O_ACCMODE) == O_RDWR;
  if (writable && !can_write) return command + ": map the buffer: " + std::strerror(EACCES);
  auto mapping = std::make_shared<CallerMapping>();
  mapping->dev = st.st_dev;
  mapping->ino = st.st_ino;
  mapping->fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (mapping->fd < 0) return command + ": buffer: " + std::strerror(errno);
  mapping->size = static_cast<std::size_t>(st.st_size);
  mapping->writable = can_write;
  mapping->base = ::mmap(nullptr, mapping->size, can_write ? PROT_READ | PROT_WRITE : PROT_READ,
                         MAP_SHARED, fd, 0);
  if (mapping->base == MAP_FAILED && can_write && !writable) {
    // A buffer sealed against writing (F_SEAL_WRITE) maps for reading only.
    mapping->writable = false;
    mapping->base = ::mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd, 0);
  }
  if (mapping->base == MAP_FAILED) return command + ": map the buffer: " + std::strerror(errno);
  // The one it replaces (of a buffer since grown, or read-only) goes; so does the least recently
  // used beyond kMaxKept. Commands still using them keep them mapped until they finish.
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(),
                             [&](const Kept& k) {
                               return k.mapping->dev == st.st_dev && k.mapping->ino == st.st_ino;
                             }),
              kept_.end());
  if (kept_.size() >= kMaxKept)
    kept_.erase(std::min_element(kept_.begin(), kept_.end(),
                                 [](const Kept& a, const Kept& b) { return a.used < b.used; }));
  kept_.push_back({mapping, now, caller});
  if (!reaper_.joinable()) reaper_ = std::thread([this] { drop_idle(); });
  cv_.notify_all();
  m.data = static_cast<char*>(mapping->base) + offset;
  m.mapping = std::move(mapping);
  return "";
}

std::size_t CallerBuffers::kept() const {
  std::lock_guard lock(mu_);
  return kept_.size();
}

void CallerBuffers::drop_idle() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (kept_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !kept_.empty(); });
      continue;
    }
    cv_.wait_for(lock, std::min<std::chrono::milliseconds>(kCheckEvery, idle_ / 2),
                 [&] { return stopping_; });
    const auto now = std::chrono::steady_clock::now();
    // Unmapped outside the lock: munmap of a large mapping takes a while.
    std::vector<Kept> idle;
    for (auto it = kept_.begin(); it != kept_.end();) {
      const bool owner_gone = it->owner > 0 && ::kill(it->owner, 0) != 0 && errno == ESRCH;
      if (owner_gone || now - it->used >= idle_) {
        idle.push_back(std::move(*it));
        it = kept_.erase(it);
      } else {
        ++it;
      }
    }
    lock.unlock();
    idle.clear();
    lock.lock();
  }
}

}  // namespace skein::client
