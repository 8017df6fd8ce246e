// A buffer a control-socket client passes with its command (SCM_RIGHTS): a memfd sealed against
// shrinking (F_SEAL_SHRINK), which the mount maps. The mount touches only memory the caller could
// touch itself, and a buffer that cannot shrink cannot make the mapping fault.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace skein::client {

// A mapping of [offset, offset + length) of the caller's buffer; unmapped when destroyed.
struct CallerBuffer {
  CallerBuffer() = default;
  CallerBuffer(const CallerBuffer&) = delete;
  CallerBuffer& operator=(const CallerBuffer&) = delete;
  ~CallerBuffer();

  void* base = MAP_FAILED;
  std::size_t size = 0;
  char* data = nullptr;
};

// Maps the range of the buffer `fd` (-1: none was passed), readable and, with `writable`, writable;
// "" or the failure, each starting with `command` ("fill: ...").
std::string map_caller_buffer(const std::string& command, int fd, uint64_t offset, uint64_t length,
                              bool writable, CallerBuffer& m);

}  // namespace skein::client
