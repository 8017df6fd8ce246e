// The mount's control socket, its serving side; see control_socket.hpp. The asking side is in
// control_socket_client.cpp.
#include "control_socket.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <system_error>

#include "control_socket_common.hpp"

namespace skein::client {
namespace {

namespace fs = std::filesystem;
using namespace control_socket_detail;

constexpr int kServerTimeoutSeconds = 2;  // a client that sends nothing is dropped
// The most a client may take to send its whole command, however it spaces its bytes.
constexpr std::chrono::seconds kCommandDeadline{5};
// The longest an answer may take to be taken: a caller that reads it slowly does not keep a slot.
constexpr std::chrono::seconds kAnswerDeadline{30};
// A fill command carries a path (PATH_MAX), which path_field may %-encode to three times its size.
constexpr std::size_t kMaxCommand = 3 * 4096 + 256;

// Whether the socket file `path` has nobody listening on it: its mount ended without removing it
// (killed, or the machine's power lost with /run kept). A socket younger than `min_age` is left
// alone: a mount starting now binds it a moment before it listens.
bool stale_socket(const std::string& path, std::chrono::seconds min_age) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  if (std::chrono::system_clock::now() - std::chrono::system_clock::from_time_t(st.st_mtime) <
      min_age)
    return false;
  sockaddr_un addr;
  if (!fill_address(path, addr)) return false;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return false;
  const bool refused =
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == ECONNREFUSED;
  ::close(fd);
  return refused;
}

// Removes from `dir` the sockets of mounts that ended without removing them, and the mount-point
// links that name no socket any more. What this user may not remove is left.
void sweep_stale(const std::string& dir, std::chrono::seconds min_age) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() == ".sock" && stale_socket(path, min_age)) {
      spdlog::info("control socket: removing {}, whose mount has ended", path);
      ::unlink(path.c_str());
    }
  }
  for (const auto& entry : fs::directory_iterator(links_dir(dir), ec)) {
    std::error_code link_ec;
    if (entry.is_symlink(link_ec) && !fs::exists(entry.path(), link_ec) && !link_ec)
      ::unlink(entry.path().c_str());
  }
}

// Creates `dir` (and parents) if missing: private to its owner for a user's own mounts; for root's
// (/run/skein) searchable by everyone whatever the umask, since a job's user must reach the
// socket of its job's mount there (each socket's own mode and owner say who may connect).
bool make_dir(const std::string& dir, std::string& error) {
  std::error_code ec;
  const bool made = fs::create_directories(dir, ec);
  if (ec) {
    error = "cannot create " + dir + ": " + ec.message();
    return false;
  }
  // Made by another user before this one (/tmp/skein-UID), or a symlink: its owner could swap
  // the socket; askers refuse such a directory anyway (ControlSocket::request).
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    error = dir + " is not a directory of this user (uid " + std::to_string(geteuid()) +
            "): another user may have made it; remove it or choose another --control-dir";
    return false;
  }
  if (::chmod(dir.c_str(), geteuid() != 0 ? 0700 : made ? 0755 : st.st_mode & 07777 & ~022) != 0) {
    error = "cannot chmod " + dir + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

// Answers `text` without taking the command, which is read and dropped (for at most
// ControlSocket::kRefusalDrain): closing with it unread would reset the connection, and the client
// would see that instead of the answer.
void refuse(int fd, const std::string& text) {
  write_all(fd, text);
  set_timeouts(fd, kServerTimeoutSeconds);
  ::shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + ControlSocket::kRefusalDrain;
  char drop[512];
  for (std::size_t n = 0; n < 2 * kMaxCommand;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t r = ::read(fd, drop, sizeof drop);
    if (r <= 0) break;
    n += static_cast<std::size_t>(r);
  }
}

}  // namespace

std::unique_ptr<ControlSocket> ControlSocket::open(const std::string& dir,
                                                   const std::string& mount_id,
                                                   const std::string& mountpoint,
                                                   std::string& error, Access access) {
  if (!make_dir(dir, error) || !make_dir(links_dir(dir), error)) return nullptr;
  sweep_stale(dir, kStaleAfter);
  std::unique_ptr<ControlSocket> socket(new ControlSocket());
  socket->access_ = access;
  socket->path_ = dir + "/" + mount_id + ".sock";
  sockaddr_un addr;
  if (!fill_address(socket->path_, addr)) {
    error = "control socket path too long: " + socket->path_;
    return nullptr;
  }
  socket->listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (socket->listen_fd_ < 0) {
    error = errno_text("socket");
    return nullptr;
  }
  ::unlink(socket->path_.c_str());
  // Created private: nobody else may connect even for a moment.
  mode_t old_mask = ::umask(077);
  int rc = ::bind(socket->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old_mask);
  if (rc != 0) {
    error = errno_text("bind " + socket->path_);
    return nullptr;
  }
  ::chmod(socket->path_.c_str(), access.everyone ? 0666 : 0600);
  // Root's mount for another user (a job's): that user owns the socket, so only it and root may
  // connect; answer() checks the peer again.
  if (access.user != ::geteuid() &&
      ::chown(socket->path_.c_str(), access.user, static_cast<gid_t>(-1)) != 0) {
    error = errno_text("chown " + socket->path_ + " to uid " + std::to_string(access.user));
    ::unlink(socket->path_.c_str());
    return nullptr;
  }
  if (::listen(socket->listen_fd_, 16) != 0 || ::pipe2(socket->wake_fd_, O_CLOEXEC) != 0) {
    error = errno_text("listen " + socket->path_);
    ::unlink(socket->path_.c_str());
    return nullptr;
  }
  for (const std::string& key : mountpoint_keys(mountpoint)) {
    // A link left by an earlier mount on the same mount point is replaced atomically.
    std::string link = links_dir(dir) + "/" + link_name(key);
    std::string tmp = link + ".new-" + mount_id;
    ::unlink(tmp.c_str());
    if (::symlink(socket->path_.c_str(), tmp.c_str()) != 0 ||
        ::rename(tmp.c_str(), link.c_str()) != 0) {
      spdlog::warn("control socket: cannot link {}: {}", link, std::strerror(errno));
      ::unlink(tmp.c_str());
      continue;
    }
    socket->links_.push_back(link);
  }
  return socket;
}

void ControlSocket::start(Handler handler) {
  handler_ = std::move(handler);
  thread_ = std::thread([this] { serve(); });
}

ControlSocket::~ControlSocket() {
  if (thread_.joinable()) {
    char stop = 's';
    while (::write(wake_fd_[1], &stop, 1) < 0 && errno == EINTR) {
    }
    thread_.join();
    std::unique_lock lock(mu_);
    done_.wait(lock, [this] { return answering_ == 0 && refusing_ == 0; });
  }
  for (int fd : {listen_fd_, wake_fd_[0], wake_fd_[1]}) {
    if (fd >= 0) ::close(fd);
  }
  if (path_.empty() || listen_fd_ < 0) return;
  for (const std::string& link : links_) {
    std::error_code ec;
    if (fs::read_symlink(link, ec).string() == path_) ::unlink(link.c_str());
  }
  ::unlink(path_.c_str());
}

void ControlSocket::serve() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_[0], POLLIN, 0}};
  // Each connection is answered on a thread of its own, then closed and counted out. A thread
  // that cannot be made (the node is out of them) leaves the caller unanswered, and the mount
  // serving.
  auto on_own_thread = [](std::function<void()> work, std::function<void()> finished) {
    try {
      std::thread([work = std::move(work), finished] {
        work();
        finished();
      }).detach();
    } catch (const std::system_error& e) {
      spdlog::warn("control socket: no thread to answer with: {}", e.what());
      finished();
    }
  };
  for (;;) {
    int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    {
      std::unique_lock lock(mu_);
      done_.wait(lock, [this] { return answering_ < kMaxAnswering; });
    }
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    // Who calls decides at once whether the connection is taken or refused.
    ucred peer{};
    socklen_t len = sizeof peer;
    const bool known = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0;
    const bool privileged =
        known && (peer.uid == 0 || peer.uid == ::geteuid() || peer.uid == access_.user);
    std::string refusal;
    {
      std::lock_guard lock(mu_);
      if (privileged) {
        ++answering_;
      } else if (!known || !access_.everyone) {
        refusal = "error: permission denied\n";
      } else if (others_answering_ < kMaxAnswering - kKeptForPrivileged) {
        ++answering_;
        ++others_answering_;
      } else {
        refusal =
            "error: busy: the mount is answering as many other users as it takes; try again\n";
      }
      if (!refusal.empty()) {
        if (refusing_ >= kMaxRefusing) {  // a flood of refusals: closed unanswered
          ::close(fd);
          continue;
        }
        ++refusing_;
      }
    }
    if (!refusal.empty()) {
      on_own_thread([this, fd, refusal] { refuse(fd, refusal); },
                    [this, fd] {
                      ::close(fd);
                      std::lock_guard lock(mu_);
                      --refusing_;
                      done_.notify_all();
                    });
      continue;
    }
    on_own_thread([this, fd, peer, privileged] { answer(fd, peer, privileged); },
                  [this, fd, privileged] {
                    ::close(fd);
                    std::lock_guard lock(mu_);
                    --answering_;
                    if (!privileged) --others_answering_;
                    done_.notify_all();
                  });
  }
}

void ControlSocket::answer(int fd, const ucred& peer, bool privileged) {
  set_timeouts(fd, kServerTimeoutSeconds);
  // The command up to its newline (a client sends nothing after it), and the first file
  // descriptor passed with it; any further ones are closed.
  std::string command;
  int passed = -1;
  char buf[512];
  bool line_done = false, late = false, cut_short = false;
  const auto deadline = std::chrono::steady_clock::now() + kCommandDeadline;
  while (!line_done && command.size() < kMaxCommand) {
    if (std::chrono::steady_clock::now() >= deadline) {
      late = true;
      break;
    }
    iovec iov{buf, sizeof buf};
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      // Nothing was received, descriptors neither: the control buffer is not looked at (the
      // kernel leaves its length as it was given). A receive timeout waits on, up to the
      // deadline; any other error ends the line unfinished, and nothing is run.
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      cut_short = true;
      break;
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int got = -1;
        std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
        if (passed < 0) {
          passed = got;
        } else {
          ::close(got);
        }
      }
    }
    if (n == 0) break;  // the caller ended its side: the line is what came
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        line_done = true;
        break;
      }
      command += buf[i];
    }
  }
  // A line cut short could name something else (a path's prefix): refused, never run.
  const bool too_long = command.size() >= kMaxCommand;
  while (!command.empty() && (command.back() == '\r' || command.back() == ' ')) command.pop_back();
  if (late || too_long || cut_short) {
    if (late)
      write_all(fd, "error: no whole command line within " +
                        std::to_string(kCommandDeadline.count()) + " s\n");
    else if (cut_short)
      write_all(fd, "error: the command line could not be received whole\n");
    else  // the rest of it may still be coming: read and dropped
      refuse(fd, "error: a command line of " + std::to_string(kMaxCommand) + " bytes or more\n");
    if (passed >= 0) ::close(passed);
    return;
  }
  // Other users' commands at debug level: they must not be able to flood the log. So are the
  // data commands (fill, fetch-files, store-files), which come one or more a file of a bcast or
  // a stage, and forget-buffer, which ends each rank's.
  const bool data_command = command.rfind("fill ", 0) == 0 ||
                            command.rfind("fill-files ", 0) == 0 ||
                            command.rfind("fetch-files ", 0) == 0 ||
                            command.rfind("store-files ", 0) == 0 || command == "forget-buffer";
  spdlog::log(privileged && !data_command ? spdlog::level::info : spdlog::level::debug,
              "control socket: uid {}: {}{}", peer.uid, command,
              passed >= 0 ? " (with a file descriptor)" : "");
  ControlPeer who{peer.pid, peer.uid, peer.gid, privileged, std::nullopt};
  // Supplementary groups as of the connection (the process may be gone, its pid reused, by the
  // time /proc would be read).
  std::vector<gid_t> groups(64);
  for (int tries = 0; tries < 4; ++tries) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      who.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) break;
    groups.resize(size / sizeof(gid_t) + 1);
  }
  std::string answer;
  try {
    answer = handler_(command, passed, who);
  } catch (const std::exception& e) {
    answer = std::string("error: ") + e.what() + "\n";
  }
  write_all(fd, answer, std::chrono::steady_clock::now() + kAnswerDeadline);
  if (passed >= 0) ::close(passed);
}
}  // namespace skein::client
