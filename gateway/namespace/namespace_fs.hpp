// The filesystem a namespace presents: every operation a mount can ask for, on virtual paths.
// NamespaceFs resolves a path through the mount table, answers for the directories that exist
// only because mount points lie below them, refuses what would cross mounts (EXDEV), keeps the
// table of open files, and hands everything else to the mount's Layout.
// The mount table is a snapshot: admins swap in a new one at runtime while operations that
// already hold the old one finish with it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "auth/token_digest.hpp"
#include "namespace/layout.hpp"
#include "namespace/link_names.hpp"
#include "namespace/mount_table.hpp"
#include "skein/permission.hpp"
#include "skein/result.hpp"

namespace skein {

class NamespaceFs {
 public:
  // `max_open_files`: the files it holds open at the gateway at most (the gateway's [gateway]
  // max_open_files; no limit unless given). Each is a handle on a storage server, whose
  // sftp-server has a descriptor limit of its own and serves every namespace on that server. An
  // open, a create or a re-open by path past it fails with EMFILE, so that a client that opens
  // without releasing (or names handles the gateway never gave, each re-opened) runs out of its
  // own files, not out of other namespaces'.
  NamespaceFs(std::string name, TokenSet credential, std::shared_ptr<const MountTable> table,
              std::size_t max_open_files = std::numeric_limits<std::size_t>::max());
  const std::string& name() const { return name_; }
  // True when `token` is one of this namespace's tokens (compared in constant time).
  bool credential_ok(std::string_view token) const {
    std::lock_guard lock(credential_mu_);
    return credential_.matches(token);
  }
  // One more token grants the namespace (a job namespace's credential for a node).
  void add_credential(const TokenDigest& digest) {
    std::lock_guard lock(credential_mu_);
    credential_.add(digest);
  }

  std::shared_ptr<const MountTable> table() const;
  void set_table(std::shared_ptr<const MountTable> table);

  Result<sftp::Attrs> getattr(const std::string& vpath);
  // getattr() of each of `vpaths`, in the order asked. The paths below one mount go to its layout
  // together (Layout::getattr_each): a round trip per server for all of them, not one per path.
  std::vector<Result<sftp::Attrs>> getattr_each(const std::vector<std::string>& vpaths);
  // `as_user` (SetAttrRequest.as_user): the change of a user the gateway does not trust, judged by
  // the attributes of the file it lands on (the handle's, or one opened by path here) and made
  // through that file's handle (OpenFile::set_attrs), as the kernel judges chmod, chown, truncate
  // and utimes (skein::may_change_attrs). Only regular files and directories: anything else is
  // EPERM for such a user (ELOOP for a symlink).
  Result<sftp::Attrs> setattr(const std::string& vpath, const AttrChange& change, uint64_t handle,
                              const Credentials* as_user = nullptr);
  Result<std::vector<DirEntryAttrs>> readdir(const std::string& vpath);
  Result<sftp::Attrs> mkdir(const std::string& vpath, uint32_t mode);
  Status rmdir(const std::string& vpath);
  Status unlink(const std::string& vpath);
  // unlink(), with the directory's attributes right after it where the layout got them with it.
  Result<std::optional<sftp::Attrs>> unlink_reporting_parent(const std::string& vpath);
  // With the attributes of both directories right after it where the layout gives them.
  Result<RenameParents> rename(const std::string& from, const std::string& to, unsigned flags);
  Result<sftp::Attrs> symlink(const std::string& vpath, const std::string& target);
  Result<std::string> readlink(const std::string& vpath);
  Result<sftp::Attrs> link(const std::string& existing, const std::string& vpath);
  Result<sftp::StatVfs> statfs(const std::string& vpath);

  // Open files: a handle is a random 64-bit number naming an OpenFile. An unknown handle is
  // re-opened by path under the same number: clients keep working across gateway restarts, and a
  // mount may open a file for reading without a call, with a random handle of its own (its first
  // read opens it here). A handle released here is never opened again: a call that comes after
  // its release (a read-ahead the release overtook, a fill of a version let go) gets EBADF, and
  // one under way when the release came is served but leaves nothing open (kReleasedKept).
  struct Opened {
    uint64_t handle;
    sftp::Attrs attrs;
    std::optional<sftp::Attrs> parent_attrs;  // create: the directory right after, when known
  };
  // `mount`: the id of the mount that opens the file (x-skein-mount), which holds it; "" for none.
  // `attrs_of_file`: the attributes answered are the opened file's own (its FSTAT), not the look
  // at its path that came with the open (OpenRequest.attrs_of_file). `as_user`: the open of a
  // user the mount does not trust, judged by those attributes (EACCES, nothing left open) before
  // an O_TRUNC truncates through the handle (OpenRequest.as_user).
  Result<Opened> open(const std::string& vpath, int flags, std::string_view mount = {},
                      bool attrs_of_file = false, const Credentials* as_user = nullptr);
  // `as_user`: a new file is made (O_EXCL), and one found at the name (no O_EXCL asked: put there
  // since the kernel's lookup found none) is opened only as open() with `as_user` would.
  Result<Opened> create(const std::string& vpath, int flags, uint32_t mode,
                        std::string_view mount = {}, const Credentials* as_user = nullptr);
  // `create` (a mount's asynchronous create, FileRef.create): a handle not held here is made by
  // creating the file, as create() would, under that handle; `made` then gets its attributes
  // (and the directory's, when known). A held handle is the file as it is.
  struct CreateAtFirstUse {
    uint32_t mode = 0;
    std::optional<Opened>* made = nullptr;
  };
  // `as_user` (FileRef.as_user): a handle not held here is re-opened only as open() with it
  // would open the file.
  Result<std::shared_ptr<OpenFile>> file(uint64_t handle, const std::string& vpath, int flags,
                                         const CreateAtFirstUse* create = nullptr,
                                         std::string_view mount = {},
                                         const Credentials* as_user = nullptr);
  // For a mount's read of a whole file it opened without a call: the open file `handle` names if
  // the gateway holds it (`just_opened` false), else `vpath` opened for reading for this one use
  // and not kept (`just_opened` true: the caller closes it).
  Result<std::shared_ptr<OpenFile>> file_for_one_read(uint64_t handle, const std::string& vpath,
                                                      bool& just_opened);
  Status release(uint64_t handle);
  // The virtual path the open file `handle` is at now: where it was opened, moved by the renames
  // made through this namespace since (of it, or of a directory above it). A client names it by
  // the path its mount last saw, which a rename through another mount leaves behind.
  std::optional<std::string> path_of(uint64_t handle) const;
  // Releases every file the mount `mount` holds (a mount that went away: OrphanReaper); how many.
  size_t release_all_of(const std::string& mount);
  size_t open_files() const;
  // How long, and how many, released handles are remembered: well past a mount's call deadline.
  static constexpr std::chrono::seconds kReleasedFor{60};
  static constexpr size_t kReleasedKept = 1 << 17;
  // Regular files' whole contents and their attributes as opened, each if it is at most
  // `max_bytes` long (else EFBIG; a directory EISDIR, anything else EINVAL), in the order asked.
  // Opened, read and closed here, no handle kept: for ReadFiles. The files of one mount go to
  // its layout together (Layout::read_whole_files).
  // `attrs_of_files`: see Backend::read_whole_files.
  std::vector<Result<WholeFile>> read_whole_files(const std::vector<std::string>& vpaths,
                                                  uint32_t max_bytes, bool attrs_of_files = false);

  // Small files made whole (WriteFiles), each as NewWholeFile says (paths here are virtual
  // paths), in the order given. EINVAL for a partial elsewhere than beside its file, or the file
  // itself; the files of one mount go to its layout together (Layout::write_whole_files).
  std::vector<Result<MadeWholeFile>> write_whole_files(std::vector<NewWholeFile> files);

  // Bytes served to clients by Read and accepted from them by Write, since the gateway started
  // (`skeinctl namespaces list` shows them; they prove what a collective read fetched).
  void count_read(uint64_t n) { bytes_read_.fetch_add(n, std::memory_order_relaxed); }
  void count_written(uint64_t n) { bytes_written_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }

  // The layout holding `vpath` and the path below its mount point, for the gateway's own copies
  // (staging). `layout` is null where only the mount table holds the path (a directory above
  // mount points, or nothing); `table` keeps the layout alive.
  struct Resolved {
    std::shared_ptr<const MountTable> table;
    std::shared_ptr<Layout> layout;
    std::string rel;
  };
  Resolved resolve(const std::string& vpath) const;

  // The hard links made through this namespace, by virtual path (link, unlink, rename and whole
  // files keep it): a change of a file through one name is a change of its other names, which
  // other mounts may cache as files of their own.
  LinkNames& links() { return links_; }

 private:
  LinkNames links_;
  std::atomic<uint64_t> bytes_read_{0};
  std::atomic<uint64_t> bytes_written_{0};
  // Where a virtual path lives in the mount table of the moment (kept alive with it): the mount
  // holding it and the path relative to that mount. (fs_services.cpp's Target is the namespace
  // and normalised path a request names, before this.)
  struct Located {
    std::shared_ptr<const MountTable> table;
    const Mount* mount = nullptr;  // null: only the table holds this path
    std::string rel;
  };
  Located locate(const std::string& vpath) const;
  sftp::Attrs synthetic_dir_attrs() const;
  uint64_t register_file(std::shared_ptr<OpenFile> file, std::string_view mount,
                         const std::string& vpath);
  // A rename from `from` to `to` (`to_rel` in its mount) was made: the open files at or below
  // `from` are there now.
  void moved_open_files(const std::string& from, const std::string& to, const std::string& to_rel);
  // setattr() with `as_user`; `file` is the caller's open file, if any.
  Result<sftp::Attrs> setattr_judged(const Located& at, const AttrChange& change,
                                     std::shared_ptr<OpenFile> file, const Credentials& who);
  // Opens `at` by path for a handle the gateway does not hold: never creating or truncating.
  // `as_user`: judged by the file opened, as open() with it (FileRef.as_user).
  Result<std::shared_ptr<OpenFile>> reopen(const Located& at, int flags,
                                           const Credentials* as_user = nullptr);
  // The create of create() and of an asynchronous create's first use: refused in a synthesised
  // directory, made by the mount's layout.
  Result<Created> create_at(const Located& at, const std::string& vpath, int flags, uint32_t mode);

  std::string name_;
  mutable std::mutex credential_mu_;  // guards credential_
  TokenSet credential_;
  int64_t started_s_;

  mutable std::mutex table_mu_;  // guards table_ (the pointer, not the table)
  std::shared_ptr<const MountTable> table_;

  mutable std::mutex files_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<OpenFile>> files_;
  std::unordered_map<uint64_t, std::string>
      holders_;  // the mount holding each (guarded by files_mu_)
  std::unordered_map<uint64_t, std::string> paths_;  // path_of() each (guarded by files_mu_)
  // Handles being re-opened by path (a mount's deferred open meets several reads at once): the
  // first caller opens, the others wait for its result.
  using Reopen = std::shared_future<Result<std::shared_ptr<OpenFile>>>;
  std::unordered_map<uint64_t, Reopen> reopening_;  // guarded by files_mu_
  // Handles released lately, oldest first (guarded by files_mu_).
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> released_order_;
  std::unordered_set<uint64_t> released_;
  bool released_locked(uint64_t handle) const { return released_.count(handle) != 0; }
  std::mt19937_64 rng_;
  const std::size_t max_open_files_;
  // Whether one more file may be opened: with files_mu_ held by the caller, or taking it.
  bool room_for_a_file_locked() const {
    return files_.size() + reopening_.size() < max_open_files_;
  }
  bool room_for_a_file() const {
    std::lock_guard lock(files_mu_);
    return room_for_a_file_locked();
  }
};

}  // namespace skein
