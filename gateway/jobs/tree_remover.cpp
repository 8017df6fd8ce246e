// Tree removal and counting; see tree_remover.hpp.
#include "jobs/tree_remover.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "skein/path.hpp"

namespace skein {

namespace {

// A directory its owner may not list, search or write: a user's `chmod 555`, a stage-in that kept
// a read-only directory's mode, Go's module cache. The storage account owns it (it made it), so it
// may open it up for itself, to remove what is in it; the directory goes next anyway. Without
// this, a non-root account could remove nothing in it, and the removal was retried for ever.
void open_up(Backend& backend, const std::string& rel, uint32_t mode) {
  if ((mode & S_IRWXU) == S_IRWXU) return;
  sftp::Attrs a;
  a.flags = sftp::ATTR_PERMISSIONS;
  a.permissions = (mode & 07777) | S_IRWXU;
  (void)backend.setstat(rel, a);
}

using Until = std::chrono::steady_clock::time_point;

// `rel` is a directory of mode `mode` (from its parent's listing).
Status remove_dir(Backend& backend, const std::string& rel, uint32_t mode, Until until) {
  if (std::chrono::steady_clock::now() > until) return Status::failure(ETIMEDOUT);
  open_up(backend, rel, mode);
  auto entries = backend.list_dir(rel);
  if (!entries) return entries.error() == ENOENT ? ok_status() : Status::failure(entries.error());
  for (auto& e : *entries) {
    if (!is_valid_entry_name(e.filename)) continue;
    if (std::chrono::steady_clock::now() > until) return Status::failure(ETIMEDOUT);
    const std::string child = join_path(rel, e.filename);
    Status st = S_ISDIR(e.attrs.permissions)
                    ? remove_dir(backend, child, e.attrs.permissions, until)
                    : backend.unlink(child);
    if (!st && st.error() != ENOENT) return st;
  }
  auto st = backend.rmdir(rel);
  return !st && st.error() == ENOENT ? ok_status() : st;
}

}  // namespace

Status remove_tree(Backend& backend, const std::string& rel, Until until) {
  auto a = backend.lstat(rel);
  if (!a) return a.error() == ENOENT ? ok_status() : Status::failure(a.error());
  if (S_ISDIR(a->permissions)) return remove_dir(backend, rel, a->permissions, until);
  // Not a directory (a file, or a symlink): the name itself goes.
  auto st = backend.unlink(rel);
  return !st && st.error() == ENOENT ? ok_status() : st;
}

Result<TreeCount> count_tree(Layout& layout, const std::string& rel,
                             const std::function<bool()>& stop) {
  if (stop && stop()) return Result<TreeCount>::failure(ECANCELED);
  auto entries = layout.readdir(rel);
  if (!entries) return Result<TreeCount>::failure(entries.error());
  TreeCount out;
  for (auto& e : *entries) {
    if (!is_valid_entry_name(e.name)) continue;
    ++out.inodes;
    if (S_ISREG(e.attrs.permissions)) out.bytes += e.attrs.size;
    if (S_ISDIR(e.attrs.permissions)) {
      auto below = count_tree(layout, join_path(rel, e.name), stop);
      if (!below) return below;
      out.bytes += below->bytes;
      out.inodes += below->inodes;
    }
  }
  return out;
}

}  // namespace skein
