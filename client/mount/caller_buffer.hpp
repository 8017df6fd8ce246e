// A buffer a control-socket client passes with its command (SCM_RIGHTS): a memfd sealed against
// shrinking (F_SEAL_SHRINK), which the mount maps. The mount touches only memory the caller could
// touch itself, and a buffer that cannot shrink cannot make the mapping fault.
//
// skein-mpi passes the same buffer with every command of a run (a bcast's fills, a stage's reads
// and small files), so the mount keeps each buffer mapped between commands (CallerBuffers). A new
// mapping is dear on a VM with shadow page tables: each page's first touch through it costs the
// hypervisor a fault the guest does not see, about 6 µs a page here, so a 4 MiB fill through a
// mapping made for it cost 6 ms of the mount's CPU, and a kept one nothing (docs/benchmarks.md,
// "Callers' buffers kept mapped").
#pragma once

#include <sys/mman.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace skein::client {

// A mapping of a caller's buffer, the whole of it (kept between commands) or one command's range;
// unmapped, and the copy of the buffer's descriptor closed, when the last user lets go of it.
struct CallerMapping {
  CallerMapping() = default;
  CallerMapping(const CallerMapping&) = delete;
  CallerMapping& operator=(const CallerMapping&) = delete;
  ~CallerMapping();

  void* base = MAP_FAILED;
  std::size_t size = 0;
  uint64_t offset = 0;  // of base in the buffer
  bool writable = false;
  dev_t dev = 0;  // the buffer's, where kept
  ino_t ino = 0;
  int fd = -1;  // kept: a copy of the descriptor it was mapped from, so that the same open file
                // (and only it) finds the mapping again, and the buffer lives while it is kept
};

// [offset, offset + length) of the caller's buffer, mapped for one command.
struct CallerBuffer {
  std::shared_ptr<const CallerMapping> mapping;
  char* data = nullptr;
};

// The mappings kept between commands, a buffer's whole length each. A command finds one again
// only with a descriptor of the same open file (kcmp KCMP_FILE): a descriptor passed on from the
// one that was mapped, as skein-mpi's every command is, and not another open of the same memfd,
// which may allow less. Writable only once a command wrote through it, and never where the
// buffer is now sealed against writing. Kept only for buffers of at most kMaxKeptSize on
// ordinary pages; others, and every buffer where kcmp is not allowed, are mapped for each command
// alone, as far as it needs. One is dropped when its caller says it is done with it (forget),
// once the process that passed it first has exited, or when it was not used for `idle` (a thread
// looks every kCheckEvery while any is kept); at most kMaxKept (two buffers for each of 128 ranks
// on a node) and kMaxKeptBytes of them are kept, the least recently used dropped first.
class CallerBuffers {
 public:
  static constexpr std::size_t kMaxKept = 256;
  static constexpr uint64_t kMaxKeptSize = 1ull << 30;
  static constexpr uint64_t kMaxKeptBytes = 16ull << 30;
  static constexpr std::chrono::milliseconds kIdle{5000};
  static constexpr std::chrono::milliseconds kCheckEvery{500};

  explicit CallerBuffers(std::chrono::milliseconds idle = kIdle) : idle_(idle) {}
  ~CallerBuffers();
  CallerBuffers(const CallerBuffers&) = delete;
  CallerBuffers& operator=(const CallerBuffers&) = delete;

  // Gives `m` the range of the buffer `fd` (-1: none was passed) that process `caller` (0: not
  // known) passed, readable and, with `writable`, writable: through a kept mapping of the whole
  // buffer where it may (see above), else through one of the range alone; "" or the failure,
  // starting with `command` ("fill: ...").
  std::string map(const std::string& command, int fd, uint64_t offset, uint64_t length,
                  bool writable, pid_t caller, CallerBuffer& m);
  // Drops the kept mappings of the open file `fd` is of (a caller done with its buffer: skein-mpi
  // says so before it frees one); how many were dropped.
  std::size_t forget(int fd);
  std::size_t kept() const;

 private:
  struct Kept {
    std::shared_ptr<const CallerMapping> mapping;
    std::chrono::steady_clock::time_point used;
    pid_t owner = 0;  // the process that passed it when it was mapped
  };
  // Moves `it` out of kept_ into `dropped` (unmapped when the caller destroys it, after letting
  // go of the lock); returns the next. Caller holds mu_.
  std::vector<Kept>::iterator drop(std::vector<Kept>::iterator it, std::vector<Kept>& dropped);
  void drop_idle();  // the reaper thread's loop

  const std::chrono::milliseconds idle_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Kept> kept_;
  uint64_t kept_bytes_ = 0;
  int kcmp_allowed_ = -1;  // whether kcmp answers here: -1 not yet known, 0 no, 1 yes
  bool stopping_ = false;
  std::thread reaper_;  // started with the first kept mapping (after the mount's fork)
};

}  // namespace skein::client
