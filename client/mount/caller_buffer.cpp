// Mapping a control-socket client's buffer; see caller_buffer.hpp.
#include "caller_buffer.hpp"

#include <fcntl.h>
#include <linux/kcmp.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

namespace skein::client {
namespace {

// Checks that `fd` is a buffer sealed against shrinking that holds [offset, offset + length),
// and may be written where `writable` (as mmap would: not sealed against writing, opened for
// it); "" or the failure.
std::string check_buffer(const std::string& command, int fd, uint64_t offset, uint64_t length,
                         bool writable, struct stat& st) {
  if (fd < 0)
    return command + ": no buffer (its file descriptor goes with the command, SCM_RIGHTS)";
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return command + ": the buffer must be a memfd sealed against shrinking (F_SEAL_SHRINK)";
  if (::fstat(fd, &st) != 0) return command + ": buffer: " + std::strerror(errno);
  // Plain shared memory only: a page of a hugetlbfs memfd whose range the caller punched out may
  // have no huge page to come back as, and the mount's access of it would be a SIGBUS.
  struct statfs sfs;
  if (::fstatfs(fd, &sfs) != 0 || sfs.f_type != TMPFS_MAGIC)
    return command + ": the buffer must be a memfd of plain memory (not of huge pages)";
  if (offset > static_cast<uint64_t>(st.st_size) ||
      length > static_cast<uint64_t>(st.st_size) - offset)
    return command + ": range beyond the buffer's size";
  if (writable) {
    if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0)
      return command + ": map the buffer: " + std::strerror(EPERM);
    const int access = ::fcntl(fd, F_GETFL);
    if (access < 0 || (access & O_ACCMODE) != O_RDWR)
      return command + ": map the buffer: " + std::strerror(EACCES);
  }
  return "";
}

// Whether descriptors `a` and `b` of this process are of the same open file; -1 where the
// kernel does not say (kcmp not built in, or refused by a seccomp filter).
int same_open_file(int a, int b) {
  const pid_t self = ::getpid();
  const long r = ::syscall(SYS_kcmp, self, self, KCMP_FILE, a, b);
  return r < 0 ? -1 : r == 0 ? 1 : 0;
}

// Whether `km` is a kept mapping of the open file `fd` (of `st`) is of: 1 yes, 0 no, -1 where the
// kernel does not say.
int kept_for(const CallerMapping& km, int fd, const struct stat& st) {
  if (km.dev != st.st_dev || km.ino != st.st_ino) return 0;
  return same_open_file(km.fd, fd);
}

// Maps `length` bytes of `fd` from `offset` (rounded down to a page) into `m`; "" or the failure.
std::string map_range(const std::string& command, int fd, uint64_t offset, uint64_t length,
                      bool writable, int flags, CallerMapping& m) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  m.offset = offset / page * page;
  m.size = static_cast<std::size_t>(offset - m.offset + length);
  m.writable = writable;
  m.base = ::mmap(nullptr, m.size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                  MAP_SHARED | flags, fd, static_cast<off_t>(m.offset));
  if (m.base == MAP_FAILED) return command + ": map the buffer: " + std::strerror(errno);
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
  if (std::string e = check_buffer(command, fd, offset, length, writable, st); !e.empty()) return e;
  if (st.st_size == 0) return command + ": the buffer is empty";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const bool keepable = size <= kMaxKeptSize && st.st_blksize == ::sysconf(_SC_PAGESIZE);
  auto give = [&](std::shared_ptr<const CallerMapping> mapping) {
    m.data = static_cast<char*>(mapping->base) + (offset - mapping->offset);
    m.mapping = std::move(mapping);
    return std::string();
  };
  auto mapping = std::make_shared<CallerMapping>();
  {
    std::vector<Kept> dropped;  // unmapped after the lock is let go: munmap takes a while
    std::lock_guard lock(mu_);
    if (keepable && kcmp_allowed_ != 0) {
      const auto now = std::chrono::steady_clock::now();
      // The kept mapping of this open file, if any (there is at most one): used if it serves,
      // else replaced (too small, or read-only).
      auto stale = kept_.end();
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        const int same = kept_for(*it->mapping, fd, st);
        if (same < 0) kcmp_allowed_ = 0;
        if (same != 1) continue;
        const CallerMapping& km = *it->mapping;
        if (km.size >= offset + length && (km.writable || !writable)) {
          it->used = now;
          return give(it->mapping);
        }
        stale = it;
        break;
      }
      if (kcmp_allowed_ < 0) kcmp_allowed_ = same_open_file(fd, fd) == 1 ? 1 : 0;
      if (kcmp_allowed_ == 1) {
        mapping->dev = st.st_dev;
        mapping->ino = st.st_ino;
        mapping->fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (mapping->fd < 0) return command + ": buffer: " + std::strerror(errno);
        if (std::string e = map_range(command, fd, 0, size, writable, 0, *mapping); !e.empty())
          return e;
        // The one it replaces goes; so do the least recently used beyond the limits. Commands
        // still using them keep them mapped until they finish.
        if (stale != kept_.end()) drop(stale, dropped);
        while (!kept_.empty() &&
               (kept_.size() >= kMaxKept || kept_bytes_ + mapping->size > kMaxKeptBytes))
          drop(std::min_element(kept_.begin(), kept_.end(),
                                [](const Kept& a, const Kept& b) { return a.used < b.used; }),
               dropped);
        kept_.push_back({mapping, now, caller});
        kept_bytes_ += mapping->size;
        if (!reaper_.joinable()) reaper_ = std::thread([this] { drop_idle(); });
        cv_.notify_all();
        return give(std::move(mapping));
      }
    }
  }
  // Not to be kept: this command's range alone, as it needs it.
  if (std::string e = map_range(command, fd, offset, length, writable, MAP_POPULATE, *mapping);
      !e.empty())
    return e;
  return give(std::move(mapping));
}

std::size_t CallerBuffers::forget(int fd) {
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return 0;
  std::vector<Kept> dropped;  // unmapped after the lock is let go
  std::lock_guard lock(mu_);
  for (auto it = kept_.begin(); it != kept_.end();)
    it = kept_for(*it->mapping, fd, st) == 1 ? drop(it, dropped) : std::next(it);
  return dropped.size();
}

std::vector<CallerBuffers::Kept>::iterator CallerBuffers::drop(std::vector<Kept>::iterator it,
                                                               std::vector<Kept>& dropped) {
  kept_bytes_ -= it->mapping->size;
  dropped.push_back(std::move(*it));
  return kept_.erase(it);
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
      it = owner_gone || now - it->used >= idle_ ? drop(it, idle) : std::next(it);
    }
    lock.unlock();
    idle.clear();
    lock.lock();
  }
}

}  // namespace skein::client
