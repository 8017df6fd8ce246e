// A job namespace's usage against its quota, counted at the gateway over all its backends (the
// parts of striped files included): bytes are the sum of its files' sizes, inodes the number of
// its files, directories and symlinks. A change is refused (EDQUOT) before it is sent when it
// would pass a limit, so that usage never ends above it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>

namespace skein {

class Quota {
 public:
  Quota(uint64_t bytes_limit, uint64_t inodes_limit, uint64_t bytes_used = 0,
        uint64_t inodes_used = 0)
      : bytes_limit_(bytes_limit),
        inodes_limit_(inodes_limit),
        bytes_(bytes_used),
        inodes_(inodes_used) {}

  // Takes `n` more; false (and nothing taken) when that would pass the limit.
  bool take_bytes(uint64_t n);
  bool take_inodes(uint64_t n);
  // Gives `n` back (never below zero: a count that was low stays at zero).
  void give_bytes(uint64_t n);
  void give_inodes(uint64_t n);

  struct Usage {
    uint64_t bytes = 0, inodes = 0, bytes_limit = 0, inodes_limit = 0;
  };
  Usage usage() const;
  // Bumped by every change: what to save, and whether a recount raced with changes.
  uint64_t generation() const;
  // The counts found by walking the tree.
  void set_used(uint64_t bytes, uint64_t inodes);
  // set_used(), only if no change came since generation() said `generation`: the check and the
  // setting in one hold, so that a change counted in between is not overwritten. Whether set.
  bool set_used_if(uint64_t generation, uint64_t bytes, uint64_t inodes);

 private:
  mutable std::mutex mu_;
  const uint64_t bytes_limit_, inodes_limit_;
  uint64_t bytes_, inodes_;
  uint64_t generation_ = 0;
};

// What `grown` bytes of a file with `names` names count for (each name counts the file once);
// UINT64_MAX where that does not fit in 64 bits, which no quota has room for. A file with three
// names grown by a third of 2^64 bytes must not count as a few bytes.
inline uint64_t bytes_of_names(uint64_t grown, uint64_t names) {
  uint64_t bytes = 0;
  return __builtin_mul_overflow(grown, names, &bytes) ? UINT64_MAX : bytes;
}

// The largest size a file may have (off_t's): a size or a write's end past it is EFBIG.
inline constexpr uint64_t kMaxFileSize = INT64_MAX;

// The sizes of a namespace's files open for writing, one cell per path shared by every handle
// open on it, so that two writers of one file (MPI ranks, two mounts) count its growth once.
class OpenSizes {
 public:
  struct Cell {
    std::mutex mu;
    bool known = false;  // size is the file's size (false: ask the server first)
    uint64_t size = 0;
    // Held shared by each write from its count to its answer, exclusively by a change that
    // shrinks the file (truncate, O_TRUNC): a write still on its way would otherwise land after
    // the shrink gave its bytes back, past the size counted. Taken before `mu`.
    std::shared_mutex changing;
    // Set when the file's last name went while handles held it open (by `mu`): its bytes stay on
    // the server, and counted, until the last handle goes, and then go back to this quota.
    std::shared_ptr<Quota> orphan_of;
    ~Cell();
  };
  // The cell of `rel`, made when no handle has it.
  std::shared_ptr<Cell> acquire(const std::string& rel);
  // The cell of `rel` if a handle has it open, else null.
  std::shared_ptr<Cell> find(const std::string& rel);
  // A rename moved `from` (and what is below it) to `to`.
  void renamed(const std::string& from, const std::string& to);
  // `rel` was removed: its cell (if any) belongs to no name any more.
  void removed(const std::string& rel);

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<Cell>> cells_;
};

}  // namespace skein
