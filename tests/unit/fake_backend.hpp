// An in-memory Backend for unit tests of the layouts and the namespace above them: a tree of
// directories, files and symlinks that answers as a POSIX file system would (EEXIST, ENOTEMPTY,
// EISDIR, ELOOP for a symlink on the way...). A test can make it down (every call EIO at once,
// as a backend whose server stopped answering), full (no free space or inodes: ENOSPC),
// read-only (every change EACCES, as `sftp-server -R` answers), draining, or fail one operation
// with an errno of its choice; and it can put and look at files directly, behind the layout's
// back. Subtree views share the tree, as SftpBackend's share a server.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_file.hpp"

namespace skein::test {

class FakeBackend final : public Backend, public std::enable_shared_from_this<FakeBackend> {
 public:
  // A backend named `name` holding an empty root directory, with 1 GiB of space, all free.
  static std::shared_ptr<FakeBackend> make(std::string name);

  // --- What the test controls.
  void set_down(bool down);
  void set_full(bool full);
  void set_read_only(bool read_only);
  void set_draining(bool draining);
  // Placement: no new files below this much free space (as BackendConfig::min_free_bytes).
  void set_min_free_bytes(uint64_t bytes);
  // The space statvfs reports.
  void set_space(uint64_t total_bytes, uint64_t free_bytes);
  // Every `op` ("lstat", "setstat", "list_dir", "mkdir", "rmdir", "unlink", "rename", "symlink",
  // "readlink", "link", "statvfs", "open", "read", "write", "truncate", "fsync") on `rel` (empty:
  // on any path) fails with `err` from now on.
  void fail(std::string op, std::string rel, int err);
  void clear_failures();
  // `hook` runs once, at the next call of `op` on any path, before the call does anything (with
  // the backend's lock let go: it may call the backend): what another client did while the call
  // was on its way to the server.
  void on_next(std::string op, std::function<void()> hook);
  // Judges directories' owner bits as a storage account that owns them but is not root: a
  // directory without owner read and search is not listed, one without owner write and search
  // takes no unlink or rmdir of its entries (EACCES).
  void set_owner_modes_checked(bool checked);
  // write_whole_files() makes the files itself, as SftpBackend does (each under its partial
  // name, then renamed over its path), instead of leaving them all to the layout.
  void set_makes_whole_files(bool makes);

  // --- The tree as it is, behind the layout's back (paths relative to this backend's root;
  // parents are made as needed). None of these count as calls, and they work while down.
  void put_dir(std::string_view rel, uint32_t mode = 0755);
  void put_file(std::string_view rel, std::string_view contents, uint32_t mode = 0644);
  void put_symlink(std::string_view rel, std::string_view target);
  bool has(std::string_view rel) const;
  // The file's contents; nullopt when there is no file there.
  std::optional<std::string> contents(std::string_view rel) const;
  std::optional<sftp::Attrs> attrs(std::string_view rel) const;
  // The names in directory `rel`, sorted.
  std::vector<std::string> names(std::string_view rel) const;
  // Calls made through the Backend interface (and its files), since the start.
  size_t calls() const;
  // Calls of `op` (as fail() names them).
  size_t calls(std::string_view op) const;
  // The judges its files were given last (OpenFile::judge_new_handles), oldest first: an empty
  // one keeps a file to the handles it has.
  std::vector<OpenFile::HandleJudge> judges() const;

  // --- Backend.
  const std::string& name() const override { return name_; }
  bool up() const override;
  bool draining() const override;
  bool accepts_new_files() override;
  Result<sftp::StatVfs> free_space() override { return statvfs("/"); }
  BackendCounters counters() const override;
  Result<sftp::Attrs> lstat(std::string_view rel) override;
  Status setstat(std::string_view rel, const sftp::Attrs& attrs) override;
  Result<std::vector<sftp::NameEntry>> list_dir(std::string_view rel) override;
  Status mkdir(std::string_view rel, uint32_t mode) override;
  Status rmdir(std::string_view rel) override;
  Status unlink(std::string_view rel) override;
  Status rename(std::string_view from, std::string_view to, unsigned flags) override;
  Status symlink(std::string_view target, std::string_view rel) override;
  Result<std::string> readlink(std::string_view rel) override;
  Status link(std::string_view existing, std::string_view rel) override;
  Result<sftp::StatVfs> statvfs(std::string_view rel) override;
  Result<std::shared_ptr<BackendFile>> open(std::string_view rel, int flags,
                                            uint32_t mode) override;
  Result<std::shared_ptr<Backend>> subtree(std::string_view rel) override;
  std::vector<std::optional<Result<MadeWholeFile>>> write_whole_files(
      const std::vector<NewWholeFile>& files) override;

  struct Node;
  struct Tree;

 private:
  class File;
  FakeBackend(std::shared_ptr<Tree> tree, std::string prefix, std::string name);
  std::string full(std::string_view rel) const;

  std::shared_ptr<Tree> tree_;
  std::string prefix_;  // "" or "/dir" for a subtree view
  std::string name_;
};

}  // namespace skein::test
