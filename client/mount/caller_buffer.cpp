// Mapping a control-socket client's buffer; see caller_buffer.hpp.
#include "caller_buffer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace skein::client {

CallerBuffer::~CallerBuffer() {
  if (base != MAP_FAILED) ::munmap(base, size);
}

std::string map_caller_buffer(const std::string& command, int fd, uint64_t offset, uint64_t length,
                              bool writable, CallerBuffer& m) {
  if (fd < 0)
    return command + ": no buffer (its file descriptor goes with the command, SCM_RIGHTS)";
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return command + ": the buffer must be a memfd sealed against shrinking (F_SEAL_SHRINK)";
  struct stat st;
  if (::fstat(fd, &st) != 0) return command + ": buffer: " + std::strerror(errno);
  if (offset > static_cast<uint64_t>(st.st_size) ||
      length > static_cast<uint64_t>(st.st_size) - offset)
    return command + ": range beyond the buffer's size";
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  m.size = static_cast<std::size_t>(offset - start + length);
  m.base = ::mmap(nullptr, m.size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                  MAP_SHARED | MAP_POPULATE, fd, static_cast<off_t>(start));
  if (m.base == MAP_FAILED) return command + ": map the buffer: " + std::strerror(errno);
  m.data = static_cast<char*>(m.base) + (offset - start);
  return "";
}

}  // namespace skein::client
