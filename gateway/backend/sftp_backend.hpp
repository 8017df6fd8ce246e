// A storage server's exported directory (user@host:port:/root), reached over SFTP through a pool
// of connections (connection_pool.hpp): the Backend the gateway serves files from.
//
// It confines every path to its root (path_guard.hpp): each directory between the root and the
// last component is checked to be a real directory before the path is sent, a symlink there
// gives ELOOP, and the last component is never followed. rename, symlink and link hold the
// server's PathGuard exclusively (they can put a symlink where a directory was), every other
// path operation shared, from the check until the reply. It turns SFTP's coarse status codes
// into the errno a POSIX caller expects (failure_diagnosis.hpp).
//
// subtree() gives the same backend rooted at one of its directories (a job's directory, say): a
// view sharing the pool, the PathGuard and the draining state, so it costs no connection. The
// view's own root and the directories above it are confined like any other directory.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_config.hpp"
#include "backend/connection_pool.hpp"
#include "backend/path_epochs.hpp"
#include "backend/path_guard.hpp"
#include "sftp/connection.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein {

class SftpBackend final : public Backend, public std::enable_shared_from_this<SftpBackend> {
 public:
  // The backend of a configured export; connects nothing yet.
  explicit SftpBackend(BackendConfig cfg);
  SftpBackend(const SftpBackend&) = delete;
  SftpBackend& operator=(const SftpBackend&) = delete;

  // "srv0"; a subtree view "srv0:/jobs/42".
  const std::string& name() const override { return name_; }
  // The configured backend's (a view's too: its root is the export's).
  const BackendConfig& config() const { return server_->pool.config(); }
  bool up() const override { return server_->pool.up(); }
  bool draining() const override { return server_->draining.load(); }
  void set_draining(bool d) { server_->draining = d; }
  Result<sftp::StatVfs> free_space() override;
  bool accepts_new_files() override;
  BackendCounters counters() const override { return server_->pool.counters(); }

  // The connection pool's, for the admin: see connection_pool.hpp.
  size_t live_connections() const { return server_->pool.live_connections(); }
  std::string ssh_stacks() const { return server_->pool.ssh_stacks(); }
  void warm_up() { server_->pool.warm_up(); }
  Result<std::shared_ptr<sftp::Connection>> connection(size_t slot) {
    return server_->pool.connection(slot);
  }

  // Server path of a backend-relative path ("/" is this backend's root).
  std::string remote_path(std::string_view rel) const;
  // The server as host and port (not the login: two accounts see one file system) and
  // remote_path(). A host reached under two names is two servers here.
  ServerPlace server_place(std::string_view rel) const override;

  Result<sftp::Attrs> lstat(std::string_view rel) override;
  // Mode, owner and times never follow a symlink (lsetstat); a size (truncate) on a symlink, or
  // any change where the server has no lsetstat, is ELOOP.
  Status setstat(std::string_view rel, const sftp::Attrs& attrs) override;
  // The lsetstat and an LSTAT behind it on one connection: one round trip. Where the server has
  // no lsetstat, setstat() and nullopt.
  Result<std::optional<sftp::Attrs>> setstat_reporting(std::string_view rel,
                                                       const sftp::Attrs& attrs) override;
  Result<std::vector<sftp::NameEntry>> list_dir(std::string_view rel) override;
  Status mkdir(std::string_view rel, uint32_t mode) override;
  Status rmdir(std::string_view rel) override;
  Status unlink(std::string_view rel) override;
  // The REMOVE and an LSTAT of the directory behind it on one connection: one round trip.
  Result<std::optional<sftp::Attrs>> unlink_reporting_parent(std::string_view rel) override;
  // Uses posix-rename@openssh.com (atomic replace); without it a replacing rename is ENOTSUP.
  Status rename(std::string_view from, std::string_view to, unsigned flags) override;
  // The RENAME and LSTATs of both directories behind it on one connection: one round trip.
  Result<RenameParents> rename_reporting_parents(std::string_view from, std::string_view to,
                                                 unsigned flags) override;
  Status symlink(std::string_view target, std::string_view rel) override;
  Result<std::string> readlink(std::string_view rel) override;
  Status link(std::string_view existing, std::string_view rel) override;
  Result<sftp::StatVfs> statvfs(std::string_view rel) override;
  // A create is sent with O_EXCL, and an existing file is then opened as by a plain open, so
  // that O_CREAT never follows a symlink left at the name.
  Result<std::shared_ptr<BackendFile>> open(std::string_view rel, int flags,
                                            uint32_t mode) override;
  // Every file's LSTAT in one round trip, the OPENs of the regular files that fit in a second,
  // their READs and CLOSEs in a third, all on one connection; a fifo is never opened. A file whose
  // answers are not plainly clear (a failed OPEN or READ, a file that grew since its LSTAT, a
  // connection lost) is read again the default way, which says why.
  std::vector<Result<WholeFile>> read_whole_files(const std::vector<std::string>& rels,
                                                  uint32_t max_bytes, bool attrs_of_files) override;
  // Every partial's OPEN (O_EXCL) in one round trip; every file's WRITEs, mode and times and
  // CLOSE in a second; every RENAME, then the files' and their directories' LSTATs in a third,
  // with the server's paths held as any rename holds them; all on one connection. A file whose
  // answers are not plainly clear (its partial there already, a failed WRITE or RENAME, a
  // connection lost) is left to the layout, which makes it file by file and says why.
  std::vector<std::optional<Result<MadeWholeFile>>> write_whole_files(
      const std::vector<NewWholeFile>& files) override;
  Result<std::shared_ptr<Backend>> subtree(std::string_view rel) override;
  void changed_on_server(std::string_view rel, bool replaced) override;
  // The epoch of `rel` (PathEpochs), shared with the backend's views and the files they open.
  uint64_t epoch_of(std::string_view rel) const { return epochs().of(remote_path(rel)); }
  void on_back_up(std::function<void()> listener) override {
    server_->pool.on_back_up(std::move(listener));
  }

  static Result<sftp::Attrs> attrs_of(Result<sftp::Reply> reply);

 protected:
  std::unique_ptr<PendingLstat> start_lstat(std::string_view rel) override;
  PathGuard* path_guard() override { return paths_.get(); }

 private:
  friend class RemoteFile;
  class SentLstat;

  // What a backend and its subtree views share.
  struct Server {
    explicit Server(BackendConfig cfg) : pool(std::move(cfg)) {}
    ConnectionPool pool;
    std::atomic<bool> draining{false};
  };
  // The gateway removed or renamed `rel`: the file there (or below) may not be the one opened
  // there before.
  void replaced(std::string_view rel) { epochs().replaced(remote_path(rel), true); }
  // Around a removal of `rel` that runs beside opens (under a shared hold): the epoch moves before
  // the request goes out and, `done` or with its outcome `unknown` (no answer), again after it;
  // the watcher's report is its echo only if it was done.
  void replacing(std::string_view rel);
  void replacing_done(std::string_view rel, bool done, bool unknown);
  // Which file each path of the server names, as far as this gateway knows: one for every
  // backend on the server, as the PathGuard.
  PathEpochs& epochs() const { return paths_->epochs; }
  // A view of `server`'s export at `prefix` (a path below the export's root).
  SftpBackend(std::shared_ptr<Server> server, std::shared_ptr<PathGuard> paths, std::string prefix,
              std::string name);

  ConnectionPool& pool() { return server_->pool; }
  // `rel` as a path below the export's root: the same for the export itself, below the prefix
  // for a view.
  std::string in_export(std::string_view rel) const;
  // Server path of a path below the export's root.
  std::string export_path(std::string_view in_export) const;

  // What must be a verified directory for an operation on `rel`: the directories above it, and
  // with `self` also `rel` itself (a listing). Checks what the guard does not know yet with one
  // round trip of LSTATs; ELOOP, ENOTDIR or ENOENT at the first that is not a directory. The
  // caller holds the path guard.
  enum class Confine { parents, self };
  Status confine(std::string_view rel, Confine what = Confine::parents);
  // An lstat whose attributes, when they are a directory's, mark it verified. Caller holds the
  // guard and confined `rel`.
  Result<sftp::Attrs> lstat_confined(std::string_view rel);
  // setstat() and setstat_reporting(): the LSTAT behind it only with `report`, and only where
  // the server has lsetstat.
  Result<std::optional<sftp::Attrs>> setstat_sending(std::string_view rel, const sftp::Attrs& attrs,
                                                     bool report);
  // rename() and rename_reporting_parents(): the directories' LSTATs only with `report`.
  Result<RenameParents> renamed(std::string_view from, std::string_view to, unsigned flags,
                                bool report);
  // Opens `rel` on `conn` for a RemoteFile: with its LSTAT sent ahead on the same connection, so
  // that a symlink is refused (ELOOP) and never read or written through (a plain open has no
  // effect until it is used; its handle is closed). O_TRUNC is done through the handle once the
  // file is known not to be a symlink. Caller holds the guard and confined `rel`.
  // Returns the OPEN's reply.
  Result<sftp::Reply> open_confined(sftp::Connection& conn, const std::string& rel, int flags,
                                    const sftp::Attrs& attrs, std::optional<sftp::Attrs>* lstat);
  Status expect_status(Result<sftp::Reply> r);
  // A REMOVE's answer: the errno, with the cause of a generic failure asked of the server.
  Status removed(Result<sftp::Reply> reply, std::string_view rel);

  std::shared_ptr<Server> server_;
  std::shared_ptr<PathGuard> paths_;
  std::string prefix_;  // "" for the export itself; "/jobs/42" for a view
  std::string name_;

  std::mutex free_mu_;  // guards the free-space cache
  std::optional<sftp::StatVfs> free_cache_;
  std::chrono::steady_clock::time_point free_cache_time_{};
};

}  // namespace skein
