// Diagnosis of SFTP's generic failure; see failure_diagnosis.hpp.
#include "backend/failure_diagnosis.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "backend/backend.hpp"

namespace skein {

int diagnose_failure(Backend& tree, FailedOp op, std::string_view rel, std::string_view other) {
  using enum FailedOp;
  auto here = tree.lstat(rel);
  if (op == mkdir || op == symlink || op == link) {
    if (here) return EEXIST;
    if (op == link && !other.empty()) {
      auto src = tree.lstat(other);
      if (src && S_ISDIR(src->permissions)) return EPERM;
    }
  } else if (op == rmdir) {
    if (!here) return ENOENT;
    if (!S_ISDIR(here->permissions)) return ENOTDIR;
    auto entries = tree.list_dir(rel);
    if (entries && !entries->empty()) return ENOTEMPTY;
  } else if (op == unlink) {
    if (here && S_ISDIR(here->permissions)) return EISDIR;
  } else if (op == open) {
    if (here && S_ISDIR(here->permissions)) return EISDIR;
  } else if (op == rename) {
    // rel = source, other = target
    auto dst = tree.lstat(other);
    if (here && dst) {
      bool sdir = S_ISDIR(here->permissions), ddir = S_ISDIR(dst->permissions);
      if (sdir && !ddir) return ENOTDIR;
      if (!sdir && ddir) return EISDIR;
      if (ddir) {
        auto entries = tree.list_dir(other);
        if (entries && !entries->empty()) return ENOTEMPTY;
      }
    }
    if (here && S_ISDIR(here->permissions) && other.size() > rel.size() &&
        other.substr(0, rel.size()) == rel && other[rel.size()] == '/')
      return EINVAL;
  }
  if (op == write || op == mkdir || op == open) {
    auto vfs = tree.statvfs(op == write ? rel : std::string_view("/"));
    if (vfs && vfs->bavail == 0) return ENOSPC;
    if (vfs && vfs->favail == 0 && op != write) return ENOSPC;
  }
  return EIO;
}

}  // namespace skein
