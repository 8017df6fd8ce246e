// The asking side of the mount's control socket (ControlSocket::request and the names it
// needs); see control_socket.hpp. Kept apart from the serving side, which logs with spdlog, so that
// skein-mpi's library links this alone.
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <thread>

#include "control_socket.hpp"
#include "control_socket_common.hpp"

namespace skein::client {
namespace control_socket_detail {

constexpr std::size_t kMaxLinkName = 200;

std::string errno_text(const std::string& what) {
  const int e = errno;
  return what + ": " + std::strerror(e);
}

std::string link_name(const std::string& key) {
  const std::string out = percent_encoded(
      key, [](unsigned char c) { return std::isalnum(c) || c == '.' || c == '_' || c == '-'; });
  if (out.size() <= kMaxLinkName) return out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char buf[32];
  std::snprintf(buf, sizeof buf, "hash-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string links_dir(const std::string& dir) { return dir + "/by-mountpoint"; }

bool fill_address(const std::string& path, sockaddr_un& addr) {
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return true;
}

void set_timeouts(int fd, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool write_all(int fd, const std::string& data, std::chrono::steady_clock::time_point deadline) {
  std::size_t done = 0;
  while (done < data.size()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace control_socket_detail

namespace {

namespace fs = std::filesystem;
using namespace control_socket_detail;

}  // namespace

std::string ControlSocket::default_dir() {
  if (geteuid() == 0) return kSystemDir;
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && *runtime == '/') return std::string(runtime) + "/skein";
  return "/tmp/skein-" + std::to_string(geteuid());
}

std::vector<std::string> ControlSocket::default_dirs() {
  std::vector<std::string> dirs{default_dir()};
  if (dirs[0] != kSystemDir) dirs.push_back(kSystemDir);
  return dirs;
}

std::vector<std::string> ControlSocket::mountpoint_keys(const std::string& mountpoint) {
  std::string normal = fs::absolute(mountpoint).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  std::vector<std::string> keys{normal};
  fs::path p(normal);
  std::error_code ec;
  fs::path parent = fs::canonical(p.parent_path(), ec);
  if (!ec && p.has_filename()) {
    std::string resolved = (parent / p.filename()).string();
    if (resolved != normal) keys.push_back(resolved);
  }
  return keys;
}

std::string ControlSocket::path_field(const std::string& path) {
  auto plain = [](unsigned char c) { return c >= 0x20 && c != 0x7f; };
  const bool carried = !path.empty() && path[0] == '/' && path.back() != ' ' &&
                       std::all_of(path.begin(), path.end(), plain);
  if (carried) return path;
  return "%" +
         percent_encoded(path, [&](unsigned char c) { return plain(c) && c != '%' && c != ' '; });
}

std::string ControlSocket::one_line(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  std::string out;
  for (char c : text) {
    if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\n";
}

std::optional<std::string> ControlSocket::path_of_field(const std::string& field) {
  if (field.empty() || field[0] != '%') return field;
  std::string out;
  for (std::size_t i = 1; i < field.size(); ++i) {
    if (field[i] != '%') {
      out += field[i];
      continue;
    }
    // Two hex digits after it.
    if (i + 2 >= field.size()) return std::nullopt;
    unsigned value = 0;
    const char* digits = field.data() + i + 1;
    if (std::from_chars(digits, digits + 2, value, 16).ptr != digits + 2) return std::nullopt;
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

namespace {
// Who owns `dir` and its by-mountpoint links, when both are real directories of one owner that
// nobody else may write to; otherwise nothing, with `why`. Another user could have made the
// directory first (/tmp/skein-UID) and put links to a socket of its own there, which would then
// be handed the caller's commands and buffers.
// `dir` without its links directory is nobody's: nothing is linked from it.
std::optional<uid_t> trusted_owner(const std::string& dir, std::string& why) {
  struct stat d {
  }, l{};
  if (::lstat(dir.c_str(), &d) != 0 || ::lstat(links_dir(dir).c_str(), &l) != 0)
    return std::nullopt;
  if (!S_ISDIR(d.st_mode) || !S_ISDIR(l.st_mode) || d.st_uid != l.st_uid ||
      ((d.st_mode | l.st_mode) & (S_IWGRP | S_IWOTH))) {
    why = dir + " is not a directory of one owner that only its owner may write to";
    return std::nullopt;
  }
  return d.st_uid;
}
}  // namespace

bool ControlSocket::request_while_busy(const std::string& dir, const std::string& mountpoint,
                                       const std::string& command, std::string& answer,
                                       std::string& error, int fd, std::chrono::seconds timeout,
                                       std::chrono::milliseconds busy_for) {
  using Clock = std::chrono::steady_clock;
  const auto give_up = Clock::now() + busy_for;
  for (auto pause = std::chrono::milliseconds(5);;
       pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    answer.clear();
    if (!request(dir, mountpoint, command, answer, error, fd, timeout)) return false;
    if (answer.rfind("error: busy", 0) != 0 || Clock::now() + pause > give_up) return true;
    std::this_thread::sleep_for(pause);
  }
}

bool ControlSocket::request(const std::string& dir, const std::string& mountpoint,
                            const std::string& command, std::string& answer, std::string& error,
                            int pass_fd, std::chrono::seconds timeout) {
  std::string target, searched, untrusted;
  uid_t owner = 0;
  for (const std::string& d : dir.empty() ? default_dirs() : std::vector<std::string>{dir}) {
    searched += (searched.empty() ? "" : " or ") + d;
    std::string why;
    const auto by = trusted_owner(d, why);
    // A directory searched by default must be the caller's own or root's.
    if (by && dir.empty() && *by != 0 && *by != ::geteuid())
      why = d + " belongs to another user (uid " + std::to_string(*by) + ")";
    if (!why.empty()) untrusted += "; " + why + ": not searched";
    if (!by || !why.empty()) continue;
    for (const std::string& key : mountpoint_keys(mountpoint)) {
      std::error_code ec;
      fs::path linked = fs::read_symlink(links_dir(d) + "/" + link_name(key), ec);
      if (!ec) {
        target = linked.string();
        owner = *by;
        break;
      }
    }
    if (!target.empty()) break;
  }
  if (target.empty()) {
    error = "no skein mount at " + mountpoint + " (no control socket for it in " + searched + ")" +
            untrusted;
    return false;
  }
  sockaddr_un addr;
  if (!fill_address(target, addr)) {
    error = "control socket path too long: " + target;
    return false;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = errno_text("socket");
    return false;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  // Before the connect too: a mount that accepts nothing (stopped, hung) leaves a connect
  // waiting for room in its backlog, as long as the send timeout lets it.
  set_timeouts(fd, static_cast<int>(timeout.count()));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      error = "the mount at " + mountpoint + " did not take the connection within " +
              std::to_string(timeout.count()) + " s (stopped or hung?)";
    } else if (errno == ECONNREFUSED || errno == ENOENT) {
      error = "the skein-mount of " + mountpoint + " is not running (stale control socket " +
              target + ")";
    } else if (errno == EACCES) {
      error = errno_text("connect " + target) +
              " (a mount's control socket takes root, the mount's own user and the user of "
              "the job whose namespace it mounts)";
    } else {
      error = errno_text("connect " + target);
    }
    return false;
  }
  // The socket a link leads to may be anybody's: only a mount run by root or by the owner of the
  // directory the link is in is given the command (and the buffer that may go with it).
  ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0) {
    error = errno_text("SO_PEERCRED of " + target);
    return false;
  }
  if (peer.uid != 0 && peer.uid != owner) {
    error = "the control socket " + target + " is served by uid " + std::to_string(peer.uid) +
            ", neither root nor the owner of the directory that links to it (uid " +
            std::to_string(owner) + "): not asked";
    return false;
  }
  const std::string line = command + "\n";
  std::size_t sent = 0;
  if (pass_fd >= 0) {
    // The descriptor goes with the first bytes of the command.
    iovec iov{const_cast<char*>(line.data()), line.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof pass_fd);
    ssize_t n;
    do {
      n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      error = errno_text("send to " + target);
      return false;
    }
    sent = static_cast<std::size_t>(n);
  }
  if (!write_all(fd, line.substr(sent))) {
    error = errno_text("send to " + target);
    return false;
  }
  ::shutdown(fd, SHUT_WR);
  answer.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno == EAGAIN || errno == EWOULDBLOCK
                  ? "the mount at " + mountpoint + " did not answer within " +
                        std::to_string(timeout.count()) + " s (stopped or hung?)"
                  : errno_text("receive from " + target);
      return false;
    }
    if (n == 0) break;
    answer.append(buf, static_cast<std::size_t>(n));
  }
  // Every command has an answer: none means the mount ended (killed, crashed) while it worked,
  // and what it was to do (a fill's bytes in the caller's buffer) may not be done.
  if (answer.empty()) {
    error = "the mount at " + mountpoint + " ended the connection with no answer (did it stop?)";
    return false;
  }
  return true;
}

}  // namespace skein::client
