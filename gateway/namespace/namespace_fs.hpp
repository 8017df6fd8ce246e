// The filesystem a namespace presents: every operation a mount can ask for, on virtual paths,
// carried out on the branches the mount table names. With several branches a subtree behaves as
// a union: lookup is first-found in branch order, listings merge with the first branch winning
// a duplicate name, and new files go to the first branch that holds the parent directory.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "namespace/mount_table.hpp"
#include "skein/result.hpp"

namespace skein {

struct DirEntryAttrs {
  std::string name;
  sftp::Attrs attrs;
  uint32_t nlink = 1;
};

// What a SetAttr asks to change; unset fields stay as they are.
struct AttrChange {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid, gid;
  std::optional<uint64_t> size;
  std::optional<int64_t> atime_s, mtime_s;  // seconds; SFTP v3 keeps no finer times
};

class NamespaceFs {
 public:
  NamespaceFs(std::string name, std::string token, MountTable table);
  const std::string& name() const { return name_; }
  // True when `token` grants this namespace (always, when it has none).
  bool token_ok(std::string_view token) const;

  Result<sftp::Attrs> getattr(const std::string& vpath);
  Result<sftp::Attrs> setattr(const std::string& vpath, const AttrChange& change, uint64_t handle);
  Result<std::vector<DirEntryAttrs>> readdir(const std::string& vpath);
  Result<sftp::Attrs> mkdir(const std::string& vpath, uint32_t mode);
  Status rmdir(const std::string& vpath);
  Status unlink(const std::string& vpath);
  Status rename(const std::string& from, const std::string& to, unsigned flags);
  Result<sftp::Attrs> symlink(const std::string& vpath, const std::string& target);
  Result<std::string> readlink(const std::string& vpath);
  Result<sftp::Attrs> link(const std::string& existing, const std::string& vpath);
  Result<sftp::StatVfs> statfs(const std::string& vpath);

  // Open files: a handle is a random 64-bit number naming a RemoteFile. An unknown handle (the
  // gateway restarted, or the file was released elsewhere) is re-opened by path under the same
  // number, so clients keep working across gateway restarts.
  struct Opened {
    uint64_t handle;
    sftp::Attrs attrs;
  };
  Result<Opened> open(const std::string& vpath, int flags);
  Result<Opened> create(const std::string& vpath, int flags, uint32_t mode);
  Result<std::shared_ptr<RemoteFile>> file(uint64_t handle, const std::string& vpath, int flags);
  Status release(uint64_t handle);

 private:
  struct Found {
    std::shared_ptr<Backend> branch;
    std::string rel;
    sftp::Attrs attrs;
  };
  // First branch that has `vpath`, in priority order.
  Result<Found> find(const std::string& vpath);
  // The branch a new entry at `vpath` goes to: the first whose copy of the parent directory exists.
  Result<std::pair<std::shared_ptr<Backend>, std::string>> branch_for_new(const std::string& vpath);
  sftp::Attrs synthetic_dir_attrs() const;
  uint64_t new_handle();

  std::string name_;
  std::string token_;
  MountTable table_;
  int64_t started_s_;

  std::mutex files_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<RemoteFile>> files_;
  std::mt19937_64 rng_;
};

}  // namespace skein
