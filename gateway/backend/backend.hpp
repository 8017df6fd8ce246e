// A Backend is one place files live: a directory tree that layouts (a union's branches, a striped
// layout's parts) and the namespace above them work on. It is an interface: SftpBackend is a
// storage server's exported directory reached over SFTP (sftp_backend.hpp), and the unit tests
// put an in-memory tree behind it.
//
// Paths are relative to the backend's root ("/" is the root), normalised, without "..". Every
// operation leaves the last component alone (lstat() shows a symlink as one; opening one is
// ELOOP) and refuses a path whose directories are not all real directories: a symlink there is
// ELOOP, a file ENOTDIR, nothing ENOENT. Errors are the errno a POSIX caller expects.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/path_guard.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"
#include "skein/shared_bytes.hpp"

namespace skein {

class BackendFile;

// The attributes of a rename's two directories right after it (NFS's post-op attributes), where
// they came with it; the same for both when they are one directory.
struct RenameParents {
  std::optional<sftp::Attrs> from_dir, to_dir;
};

// A regular file's whole contents with its attributes as it was opened: what ReadFiles serves.
struct WholeFile {
  sftp::Attrs attrs;
  SharedBytes data;
};

// A small file written whole (WriteFiles): created under `partial` (another name in the same
// directory; a file there is taken for a partial an earlier run left, and written over),
// written, given `mode` (07777) and the times (seconds), closed and renamed over `path`. Paths as
// the level that takes it names them (a backend's or a layout's relative path, the namespace's
// virtual path).
struct NewWholeFile {
  std::string path, partial;
  SharedBytes data;
  uint32_t mode = 0;
  int64_t atime_s = 0, mtime_s = 0;
};
// The file made, and its directory right after its rename when that came with it.
struct MadeWholeFile {
  sftp::Attrs attrs;
  std::optional<sftp::Attrs> parent_attrs;
};

// Bytes and operations served by one backend since the gateway started.
struct BackendCounters {
  uint64_t bytes_read = 0, bytes_written = 0, ops = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Its name in the configuration, for admins and logs.
  virtual const std::string& name() const = 0;
  // Where `rel` is on its storage server, so that two places can be told to be one whatever
  // backend, view or namespace names them: the server, and the absolute path there. A backend
  // that cannot tell gives its own name and `rel`.
  struct ServerPlace {
    std::string server, path;
  };
  virtual ServerPlace server_place(std::string_view rel) const {
    return {"backend " + name(), std::string(rel)};
  }
  // True while it answers. A backend that is down fails every call at once with EIO.
  virtual bool up() const = 0;
  // A draining backend takes no new files and keeps serving the ones it has.
  virtual bool draining() const = 0;
  // True when the backend may take a new file: up, not draining, above its minimum free space.
  virtual bool accepts_new_files() = 0;
  // Free space as last seen (refreshed every few seconds at most), for placement decisions.
  virtual Result<sftp::StatVfs> free_space() = 0;
  virtual BackendCounters counters() const = 0;

  virtual Result<sftp::Attrs> lstat(std::string_view rel) = 0;
  // Mode, owner and times never follow a symlink; a size (truncate) on a symlink is ELOOP.
  virtual Status setstat(std::string_view rel, const sftp::Attrs& attrs) = 0;
  // setstat(), with the attributes of `rel` right after it where the backend gets them in the
  // same round trip; nullopt where it does not. Never a size.
  virtual Result<std::optional<sftp::Attrs>> setstat_reporting(std::string_view rel,
                                                               const sftp::Attrs& attrs) {
    if (auto st = setstat(rel, attrs); !st)
      return Result<std::optional<sftp::Attrs>>::failure(st.error());
    return std::optional<sftp::Attrs>();
  }
  // The entries of directory `rel`, without "." and "..". A longname is `ls -l` output (its
  // second field is the link count).
  virtual Result<std::vector<sftp::NameEntry>> list_dir(std::string_view rel) = 0;
  virtual Status mkdir(std::string_view rel, uint32_t mode) = 0;
  virtual Status rmdir(std::string_view rel) = 0;
  virtual Status unlink(std::string_view rel) = 0;
  // unlink(), with the directory's attributes right after it where the backend gets them in the
  // same round trip; nullopt where it does not.
  virtual Result<std::optional<sftp::Attrs>> unlink_reporting_parent(std::string_view rel) {
    if (auto st = unlink(rel); !st) return Result<std::optional<sftp::Attrs>>::failure(st.error());
    return std::optional<sftp::Attrs>();
  }
  // flags: 0 (replace what is at `to`, atomically), or RENAME_NOREPLACE (1).
  virtual Status rename(std::string_view from, std::string_view to, unsigned flags) = 0;
  // rename(), with the attributes of the directories of `from` and `to` right after it where the
  // backend gets them in the same round trip; each nullopt where it does not.
  virtual Result<RenameParents> rename_reporting_parents(std::string_view from, std::string_view to,
                                                         unsigned flags) {
    if (auto st = rename(from, to, flags); !st) return Result<RenameParents>::failure(st.error());
    return RenameParents{};
  }
  // Makes `rel` a symlink holding `target` as it is (it is never followed here).
  virtual Status symlink(std::string_view target, std::string_view rel) = 0;
  virtual Result<std::string> readlink(std::string_view rel) = 0;
  virtual Status link(std::string_view existing, std::string_view rel) = 0;
  // The file system of `rel` (of its directory when `rel` is not a directory known to be one).
  virtual Result<sftp::StatVfs> statvfs(std::string_view rel) = 0;
  // Opens (or creates, with O_CREAT and `mode`) a file; `flags` are open(2) flags. A symlink is
  // never opened (ELOOP), also not by O_CREAT without O_EXCL.
  virtual Result<std::shared_ptr<BackendFile>> open(std::string_view rel, int flags,
                                                    uint32_t mode) = 0;
  // The whole of each of `rels`, if it is a regular file of at most `max_bytes` (else EFBIG; a
  // directory EISDIR, anything else EINVAL), each opened, read and closed; answers in the order
  // asked, each with its attributes: with `attrs_of_files` those of the file read (an FSTAT of
  // its handle, for a caller that judges permission by them: a name may lead to another file by
  // the time it is opened), else those seen as it was opened. The default does one file after
  // another; SftpBackend sends the requests of all of them together.
  virtual std::vector<Result<WholeFile>> read_whole_files(const std::vector<std::string>& rels,
                                                          uint32_t max_bytes, bool attrs_of_files);
  // Each of `files` made as NewWholeFile says, where the backend has a way of its own to make
  // many at once (SftpBackend sends the requests of all of them together); answers in the order
  // given. A failed file leaves its path as it was and its partial removed. Nothing (nullopt) for
  // a file the backend leaves to its layout, which makes it with its own create, write, setattr,
  // close and rename (Layout::write_whole_files): the default leaves every file.
  virtual std::vector<std::optional<Result<MadeWholeFile>>> write_whole_files(
      const std::vector<NewWholeFile>& files) {
    return std::vector<std::optional<Result<MadeWholeFile>>>(files.size());
  }

  // The same backend rooted at its directory `rel` (normalised, below the root; "/" is the root
  // itself): a view that shares what the backend has (for SFTP its connection pool and path
  // confinement), so that many are cheap. `rel` and everything above it are confined as any
  // path is: a symlink there is ELOOP, never followed. EINVAL for a path that is not normalised.
  virtual Result<std::shared_ptr<Backend>> subtree(std::string_view rel) = 0;
  // The server reported a change at `rel` (its watcher): what was checked there is looked at
  // again before it is trusted. With `replaced`, the file there (or below it) may be another
  // one now (removed, renamed over or away).
  virtual void changed_on_server(std::string_view rel, bool replaced) {
    (void)rel;
    (void)replaced;
  }
  // `listener` runs each time the backend comes back up after it was down, on a thread of the
  // backend's; it must not wait for the backend.
  virtual void on_back_up(std::function<void()> listener) { (void)listener; }

  // An lstat on its way.
  class PendingLstat {
   public:
    virtual ~PendingLstat() = default;
    virtual Result<sftp::Attrs> attrs() = 0;
  };
  // lstats of one path on several backends, all on their way before any answer is waited for.
  // Answers are taken in any order, or not at all; the thread that asked must take them and let
  // the batch go.
  class LstatBatch {
   public:
    // The answer of the i-th backend asked (waits for it).
    Result<sftp::Attrs> answer(size_t i) { return asks_[i]->attrs(); }
    size_t size() const { return asks_.size(); }

   private:
    friend class Backend;
    std::vector<PathGuard::Hold> holds_;  // let go after the lookups (declared first)
    std::vector<std::unique_ptr<PendingLstat>> asks_;
  };
  // lstat of `rel` on each of `backends` at once, answers in the order of `backends`.
  static LstatBatch lstat_each(const std::vector<std::shared_ptr<Backend>>& backends,
                               std::string_view rel);
  // lstat of each of `rels` on each of `backends`, all at once: the answer of rels[i] on
  // backends[b] is answer(i * backends.size() + b).
  static LstatBatch lstat_each(const std::vector<std::shared_ptr<Backend>>& backends,
                               const std::vector<std::string>& rels);

 protected:
  // Both lstat_each: every guard held first, then each of `rels` on each of `backends`.
  static LstatBatch lstat_all(const std::vector<std::shared_ptr<Backend>>& backends,
                              std::span<const std::string_view> rels);
  // Starts an lstat without waiting for it. The default asks at once.
  virtual std::unique_ptr<PendingLstat> start_lstat(std::string_view rel);
  // The lock this backend's path operations hold, if any. lstat_each takes those of all its
  // backends at once, in one order, before it starts any lookup (see PathGuard::hold_all).
  virtual PathGuard* path_guard() { return nullptr; }
};

}  // namespace skein
