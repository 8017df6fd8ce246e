// A Backend is one storage server's exported directory (user@host:port:/root), reached through a
// pool of SFTP connections. It confines every path to its root (no symlink on the way is followed:
// see path_guard.hpp), reconnects lost connections with backoff and jitter, and turns SFTP's
// coarse status codes into the errno a POSIX caller expects.
//
// Paths are relative to the root ("/" is the root). For every operation, each directory between
// the root and the last component must be a real directory on the server: a symlink there gives
// ELOOP, a file ENOTDIR, nothing ENOENT, and nothing is sent for the path itself. The last
// component is not followed either: lstat() shows a symlink as one, and opening one is ELOOP.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/path_guard.hpp"
#include "sftp/connection.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein {

struct BackendConfig {
  std::string name;
  sftp::Endpoint endpoint;
  std::string root;  // absolute directory on the server
  int connections = 4;
  uint64_t min_free_bytes = 0;  // below this much free space the backend takes no new files
};

class RemoteFile;

class Backend : public std::enable_shared_from_this<Backend> {
 public:
  explicit Backend(BackendConfig cfg);
  ~Backend();
  const std::string& name() const { return cfg_.name; }
  const BackendConfig& config() const { return cfg_; }
  // True while the server answers. A backend that is down fails every call at once with EIO and
  // is probed in the background, with backoff and jitter, until it answers again.
  bool up() const { return up_.load(); }
  // A draining backend takes no new files and keeps serving the ones it has.
  bool draining() const { return draining_.load(); }
  void set_draining(bool d) { draining_ = d; }
  // Live connections in the pool.
  size_t live_connections() const;
  // What the live connections run on: "native", "libssh", "native,libssh", or "" with none.
  std::string ssh_stacks() const;
  // Opens the rest of the pool's connections in the background, so the first large transfer
  // does not pay for SSH handshakes.
  void warm_up();
  // Free space as last seen (refreshed at most every two seconds), for placement decisions.
  Result<sftp::StatVfs> free_space();
  // True when the backend may take a new file: up, not draining, above its minimum free space.
  bool accepts_new_files();

  // Server path of a backend-relative path ("/" is the root itself).
  std::string remote_path(std::string_view rel) const;

  Result<sftp::Attrs> lstat(std::string_view rel);
  // Mode, owner and times never follow a symlink (lsetstat); a size (truncate) on a symlink, or
  // any change where the server has no lsetstat, is ELOOP.
  Status setstat(std::string_view rel, const sftp::Attrs& attrs);
  Result<std::vector<sftp::NameEntry>> list_dir(std::string_view rel);
  Status mkdir(std::string_view rel, uint32_t mode);
  Status rmdir(std::string_view rel);
  Status unlink(std::string_view rel);
  // flags: 0, or RENAME_NOREPLACE (1). Uses posix-rename@openssh.com (atomic replace) when offered.
  Status rename(std::string_view from, std::string_view to, unsigned flags);
  Status symlink(std::string_view target, std::string_view rel);
  Result<std::string> readlink(std::string_view rel);
  Status link(std::string_view existing, std::string_view rel);
  // The file system of `rel` (of its directory when `rel` is not a directory known to be one).
  Result<sftp::StatVfs> statvfs(std::string_view rel);
  // Opens (or creates, with O_CREAT and `mode`) a file; `flags` are open(2) flags. A symlink is
  // never opened (ELOOP), also not by O_CREAT without O_EXCL: a create is sent with O_EXCL, and
  // an existing file is then opened as by a plain open.
  Result<std::shared_ptr<RemoteFile>> open(std::string_view rel, int flags, uint32_t mode);
  // Creates every missing directory of `rel_dir` on this backend, copying mode, owner and
  // times from `model` (another branch's copy of the same directories).
  Status clone_dirs(std::string_view rel_dir, Backend& model);

  // Connection pool. A slot's connection is replaced when it dies; attempts to reconnect a slot
  // back off exponentially with jitter, and while one is not due the caller gets EIO at once.
  size_t slot_count() const { return slots_.size(); }
  size_t pick_slot();
  Result<std::shared_ptr<sftp::Connection>> connection(size_t slot);
  // An lstat sent without waiting, so that several backends can be asked at once: attrs() waits
  // for it. Its path guard is held until then, on the thread that started it. To ask several
  // backends, hold their guards first (hold_paths), in one go.
  class PendingLstat {
   public:
    Result<sftp::Attrs> attrs();

   private:
    friend class Backend;
    PendingLstat() = default;
    std::future<Result<sftp::Reply>> reply_;
    std::optional<Result<sftp::Attrs>> done_;  // set when it failed before anything was sent
    PathGuard::Hold hold_;
  };
  PendingLstat start_lstat(std::string_view rel);
  // Shared holds of the path guards of `backends`, taken in one order (see PathGuard::hold_all).
  static std::vector<PathGuard::Hold> hold_paths(
      const std::vector<std::shared_ptr<Backend>>& backends);
  static Result<sftp::Attrs> attrs_of(Result<sftp::Reply> reply);
  // The server reported a change at `rel` (its watcher): what was verified there is looked at
  // again before it is trusted.
  void changed_on_server(std::string_view rel);

  // Bytes and operations served, for stats.
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, ops{0};

 private:
  friend class RemoteFile;
  // Sends a request on some live connection; retries once on a fresh connection when the one
  // used died, which is safe only for requests that can be repeated (`idempotent`).
  Result<sftp::Reply> call(const std::string& framed, bool idempotent);
  // Sends a request without waiting.
  std::future<Result<sftp::Reply>> start(std::string framed);

  // What must be a verified directory for an operation on `rel`: the directories above it, and
  // with `self` also `rel` itself (a listing). Checks what the guard does not know yet with one
  // round trip of LSTATs; ELOOP, ENOTDIR or ENOENT at the first that is not a directory. The
  // caller holds the path guard.
  enum class Confine { parents, self };
  Status confine(std::string_view rel, Confine what = Confine::parents);
  // An lstat whose attributes, when they are a directory's, mark it verified. Caller holds the
  // guard and confined `rel`.
  Result<sftp::Attrs> lstat_confined(std::string_view rel);
  // Opens `rel` on `conn` for a RemoteFile: with its LSTAT sent ahead on the same connection, so
  // that a symlink is refused (ELOOP) and never read or written through (a plain open has no
  // effect until it is used; its handle is closed). O_TRUNC is done through the handle once the
  // file is known not to be a symlink. Caller holds the guard and confined `rel`.
  // Returns the OPEN's reply.
  Result<sftp::Reply> open_confined(sftp::Connection& conn, const std::string& rel, int flags,
                                    const sftp::Attrs& attrs, std::optional<sftp::Attrs>* lstat);
  Status expect_status(Result<sftp::Reply> r);
  // Refines SFTP's generic failure for `op` on `rel` by looking at what is there now.
  int diagnose_failure(std::string_view op, std::string_view rel, std::string_view other = {});

  struct Slot {
    std::mutex mu;
    std::shared_ptr<sftp::Connection> conn;
    int failures = 0;
    std::chrono::steady_clock::time_point next_attempt{};
  };

  void mark_down(const std::string& why);
  // A connection missed a deadline: the server is hung. Down at once, and every connection to it
  // shut down, so that no caller waits for another deadline on a sibling connection.
  void hung(const std::string& why);
  std::unique_ptr<sftp::Connection> connect(std::string& error);
  void probe_until_up();

  BackendConfig cfg_;
  std::shared_ptr<PathGuard> paths_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<size_t> round_robin_{0};
  std::atomic<bool> up_{true};
  std::atomic<bool> draining_{false};

  std::mutex probe_mu_;  // guards prober_, stopping_ and free-space cache
  std::condition_variable probe_cv_;
  std::thread prober_;
  std::thread warmer_;
  bool probing_ = false;
  bool stopping_ = false;
  std::optional<sftp::StatVfs> free_cache_;
  std::chrono::steady_clock::time_point free_cache_time_{};
};

}  // namespace skein
