// What the two sides of the mount's control socket share: the serving side
// (control_socket.cpp, in the mount) and the asking side (control_socket_client.cpp, also in
// skein-mpi's library, which must not need the mount's logging): names of sockets and links,
// addresses, timeouts and sends.
#pragma once

#include <sys/un.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace skein::client::control_socket_detail {

// "WHAT: strerror(errno)".
std::string errno_text(const std::string& what);

// `s` with every byte `kept` refuses as %XX.
template <typename Kept>
std::string percent_encoded(const std::string& s, Kept kept) {
  std::string out;
  for (unsigned char c : s) {
    if (kept(c)) {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

// A mount point as one file name: %-encoding of everything but [A-Za-z0-9._-], so distinct paths
// get distinct names; a hash for paths too long for a name.
std::string link_name(const std::string& key);
// Where a socket directory keeps its links from mount points to sockets.
std::string links_dir(const std::string& dir);
// `path` as a socket address; false when it is too long for one.
bool fill_address(const std::string& path, sockaddr_un& addr);
// Receive and send timeouts of `fd`.
void set_timeouts(int fd, int seconds);
// Sends all of `data` (no SIGPIPE); false on failure, or once `deadline` has passed (a reader
// that takes a little every few seconds keeps each send within its timeout, never the whole).
bool write_all(
    int fd, const std::string& data,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

}  // namespace skein::client::control_socket_detail
