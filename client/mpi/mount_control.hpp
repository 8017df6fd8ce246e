// A node's skein mount as skein-mpi's ranks use it: which mount holds a path, commands to its
// control socket, and the buffer that goes with them (docs/mpi.md).
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace skein::mpi {

// The skein mount (a fuse.skein entry of /proc/self/mountinfo) holding `path`, or "".
std::string skein_mount_of(const std::string& path);
// The path in the namespace of `path` (absolute, normal), which lies on the mount at `mount`.
std::string namespace_path(const std::string& path, const std::string& mount);

// Lists the directory `dir` on a mount and drops the listing: the mount learns every name's
// attributes in one call, where each open would look its name up at the gateway, and its
// `fetch-files` reads only names it knows. A directory that cannot be listed is left to the
// opens, which say what is wrong.
void learn_names(const std::string& dir);

// A file's mtime in nanoseconds, as stat(2) gives it (and a mount's `fill` command names a
// version).
int64_t mtime_ns_of(const struct stat& st);

// The mount's `fill MODE` command (cache_fill.hpp) for bytes [offset, offset + length) of the file
// at `ns_path` in the namespace, in the version of `mtime_ns` and `size` its open saw, to or from
// `buf_offset` in the buffer that goes with it.
std::string fill_command(const char* mode, int64_t mtime_ns, uint64_t size, uint64_t offset,
                         uint64_t length, uint64_t buf_offset, const std::string& ns_path);

// One node's mount.
struct Mount {
  std::string dir;
  std::string control_dir;
  // Sends a control command (with the file descriptor `fd`, if >= 0); "" or the failure. A mount
  // that takes no connection or sends no answer within ControlSocket::kRequestTimeout (10 s),
  // plus a second for every 16 MiB of `bytes` (what the command moves: its answer comes once
  // they are), has failed it.
  std::string command(const std::string& cmd, std::string* answer = nullptr, int fd = -1,
                      uint64_t bytes = 0) const;
};

// A buffer for the mount's commands: a memfd, mapped, sealed against changes of its size. Its
// file descriptor goes with the command (the mount maps it too; the seal keeps that mapping
// from faulting), and its pages are allocated and mapped here at once (fallocate,
// MAP_POPULATE), so that neither side allocates them later. Touching each page with a memset
// instead cost 13 µs a page on the VM's shadowed page tables (docs/benchmarks.md).
struct Buffer {
  int fd = -1;
  char* data = nullptr;
  std::size_t size = 0;
  // Makes a buffer of `bytes` for the commands of `mount`, which keeps it mapped between them
  // until told, when the buffer goes, that it may let go of it (`forget-buffer`).
  std::string open(std::size_t bytes, const Mount& mount);
  ~Buffer();

 private:
  Mount mount_;
};

}  // namespace skein::mpi
