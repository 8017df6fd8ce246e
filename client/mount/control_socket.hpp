// The mount's local control socket: a unix socket `<dir>/<mount id>.sock` answering one-line
// commands ("drop-caches", "status", ...) with text, and a symlink
// `<dir>/by-mountpoint/<mount point, %-encoded>` to it, so that `skein-mount --drop-caches
// MOUNTPOINT` finds it from the mount point alone, without touching the mount (which may be hung).
// <dir> is /run/skein for root, else $XDG_RUNTIME_DIR/skein or /tmp/skein-<uid>. The socket takes
// root and its owner (mode 0600); root's mount of a job's namespace (the Slurm prolog's) gives it
// to the job's user, who finds it in /run/skein; a mount that serves every user (allow_other)
// opens it to all (0666) and tells the handler who is not privileged (ControlAccess). Connections
// are answered at once, each on a thread of its own (up to kMaxAnswering; more wait), so that one
// slow command (a `fill fetch` reading from the gateway) does not hold up the others: the handler
// must be thread-safe.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace skein::client {

// Who sent a command (SO_PEERCRED). Privileged: root, the mount's own user, or the user the
// socket was opened for; any other local user reaches the handler only on a socket opened for
// everyone, and is then served only what it could read through the mount itself.
struct ControlPeer {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool privileged = false;
  // Its supplementary groups as they were when it connected (SO_PEERGROUPS), if known.
  std::optional<std::vector<gid_t>> groups = std::nullopt;
};

// Who may connect to a control socket, besides root and the mount process's user.
struct ControlAccess {
  // The socket's owner when not this process's user (root's mount of a job's namespace, for
  // the job's user): privileged as the mount's own user is.
  uid_t user = ::geteuid();
  // Every local user (mode 0666; a mount with allow_other, which serves them all): those not
  // privileged reach the handler as such.
  bool everyone = false;
};

class ControlSocket {
 public:
  // Answers one command (without its newline) from `peer`; runs on a thread of the socket's. `fd`
  // is a file descriptor the client passed with the command (SCM_RIGHTS), or -1; the socket
  // closes it once the handler has returned.
  using Handler =
      std::function<std::string(const std::string& command, int fd, const ControlPeer& peer)>;

  // Where a mount puts its socket: /run/skein for root, else the user's own directory.
  static constexpr const char* kSystemDir = "/run/skein";
  static std::string default_dir();
  // Where a client looks when given no directory: its own default_dir(), then /run/skein (root's
  // mounts, among them those of the caller's jobs).
  static std::vector<std::string> default_dirs();
  // The names a mount point is known by: the absolute, lexically normal path, and the same with
  // its parent directory's symlinks resolved. Never touches the mount point itself.
  static std::vector<std::string> mountpoint_keys(const std::string& mountpoint);

  using Access = ControlAccess;

  // Binds and listens (no thread yet, so it may be called before the daemon forks). Returns null
  // with `error` set on failure. First removes what mounts that ended without cleaning up (killed)
  // left in `dir`: sockets nobody listens on, at least kStaleAfter old, and links to them.
  static std::unique_ptr<ControlSocket> open(const std::string& dir, const std::string& mount_id,
                                             const std::string& mountpoint, std::string& error,
                                             Access access = {});
  // Connections answered at once; a further one waits until one of them is done. Callers who are
  // not privileged get at most kMaxAnswering - kKeptForPrivileged of them (the others are
  // answered "busy"), so that they never keep root and the mount's user out. A refusal ("busy",
  // "permission denied") takes none of them: at most kMaxRefusing are answered at once, each
  // reading what the caller still sends for at most kRefusalDrain, and further ones are closed
  // unanswered.
  static constexpr std::chrono::seconds kStaleAfter{60};
  static constexpr int kMaxAnswering = 8;
  static constexpr int kKeptForPrivileged = 2;
  static constexpr int kMaxRefusing = 8;
  static constexpr std::chrono::milliseconds kRefusalDrain{1000};
  // How long request() waits by default for a mount to take the connection, and then to answer.
  static constexpr std::chrono::seconds kRequestTimeout{10};

  // Serves commands on threads of its own until destroyed.
  void start(Handler handler);
  // Stops the threads (waiting for commands being answered); removes the socket and the links
  // that still point to it.
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

  const std::string& path() const { return path_; }

  // Client side: sends `command` to the mount at `mountpoint`, whose socket is linked from `dir`
  // (empty: the first of default_dirs() that has it), and returns its answer. With `fd` >= 0
  // that file descriptor goes with it (SCM_RIGHTS). On failure returns false with `error` set;
  // a mount that takes no connection or sends no answer within `timeout` is one.
  static bool request(const std::string& dir, const std::string& mountpoint,
                      const std::string& command, std::string& answer, std::string& error,
                      int fd = -1, std::chrono::seconds timeout = kRequestTimeout);
  // request(), sent again while the mount answers "busy" (as many other users' commands running
  // as it takes: the command was not read), waiting longer each time, for up to `busy_for`
  // (skein-mpi's commands: another user's job on the node must not fail them).
  static bool request_while_busy(const std::string& dir, const std::string& mountpoint,
                                 const std::string& command, std::string& answer,
                                 std::string& error, int fd = -1,
                                 std::chrono::seconds timeout = kRequestTimeout,
                                 std::chrono::milliseconds busy_for = kRequestTimeout);

  // A path as the last field of a command line (`fill`'s NS_PATH): as it is when the line can
  // carry it, else '%' and the path with '%', spaces and control bytes %-encoded. A file's name
  // may hold a newline, which would end the line, or end in spaces, which the socket strips. An
  // absolute path starts with '/', so the two forms cannot be taken for each other.
  static std::string path_field(const std::string& path);
  // The path such a field names; nullopt for a bad %-encoding.
  static std::optional<std::string> path_of_field(const std::string& field);
  // `text` (a file's answer of a fill-files command, a stage's failure: both may name a file
  // whose name holds a newline) as one line: a newline at its end kept, and each one inside
  // written "\n".
  static std::string one_line(std::string_view text);

 private:
  ControlSocket() = default;
  void serve();
  // Answers a caller taken (privileged; else counted among others_answering_).
  void answer(int fd, const ucred& peer, bool privileged);

  int listen_fd_ = -1;
  int wake_fd_[2] = {-1, -1};  // a pipe: writing to it ends serve()
  std::string path_;
  Access access_;
  std::vector<std::string> links_;
  Handler handler_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable done_;
  int answering_ = 0;         // connections being answered, each on a detached thread
  int others_answering_ = 0;  // of them, those of callers who are not privileged
  int refusing_ = 0;          // refusals being answered, each on a detached thread
};

}  // namespace skein::client
