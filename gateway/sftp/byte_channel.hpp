// One SSH channel as the SFTP connection drives it: a byte stream each way over a socket it can
// poll, used by one thread at a time. Two implementations: LibsshChannel (libssh in the gateway's
// process) and OpensshChannel (the system's `ssh` client as a child process, over a socket pair).
#pragma once

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <string_view>

namespace skein::sftp {

using Deadline = std::chrono::steady_clock::time_point;

// Milliseconds from now to `deadline` (0 once it has passed), for poll().
inline int ms_left(Deadline deadline) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
  return ms <= 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
}

class ByteChannel {
 public:
  virtual ~ByteChannel() = default;
  // The socket, to poll for POLLIN (and POLLOUT while wants_write()).
  virtual int fd() const = 0;
  // Sends `head` then each of `pieces` as channel data, in order, and returns once all of it is
  // with the kernel, reading what arrives meanwhile; false if the channel failed or `deadline`
  // passed first (error() says which).
  virtual bool write(std::string_view head, std::span<const std::string_view> pieces,
                     Deadline deadline) = 0;
  // Reads up to `n` bytes of channel data without blocking: the count, 0 when nothing is there
  // now, -1 when the channel is closed or failed. Call it until it gives 0 before polling: bytes
  // may wait inside, read during a write.
  virtual long read(char* dst, size_t n) = 0;
  // Bytes of the transport's own (window adjustments, replies) wait for the socket: poll for
  // POLLOUT too and call flush() when it is writable.
  virtual bool wants_write() const { return false; }
  virtual bool flush() { return true; }
  // Why the channel failed, for logs (the cause only: callers name the server); "" while it
  // works.
  virtual std::string error() const = 0;
};

}  // namespace skein::sftp
