// Tree removal and counting; see tree_remover.hpp.
#include "jobs/tree_remover.hpp"

#include <sys/stat.h>

#include <cerrno>

#include "skein/path.hpp"

namespace skein {

Status remove_tree(Backend& backend, const std::string& rel) {
  auto entries = backend.list_dir(rel);
  if (!entries) {
    if (entries.error() == ENOENT) return ok_status();
    if (entries.error() != ENOTDIR && entries.error() != ELOOP)
      return Status::failure(entries.error());
    // Not a directory (a file, or a symlink): the name itself goes.
    auto st = backend.unlink(rel);
    return !st && st.error() == ENOENT ? ok_status() : st;
  }
  for (auto& e : *entries) {
    if (!is_valid_entry_name(e.filename)) continue;
    const std::string child = join_path(rel, e.filename);
    Status st = S_ISDIR(e.attrs.permissions) ? remove_tree(backend, child) : backend.unlink(child);
    if (!st && st.error() != ENOENT) return st;
  }
  auto st = backend.rmdir(rel);
  return !st && st.error() == ENOENT ? ok_status() : st;
}

Result<TreeCount> count_tree(Layout& layout, const std::string& rel) {
  auto entries = layout.readdir(rel);
  if (!entries) return Result<TreeCount>::failure(entries.error());
  TreeCount out;
  for (auto& e : *entries) {
    if (!is_valid_entry_name(e.name)) continue;
    ++out.inodes;
    if (S_ISREG(e.attrs.permissions)) out.bytes += e.attrs.size;
    if (S_ISDIR(e.attrs.permissions)) {
      auto below = count_tree(layout, join_path(rel, e.name));
      if (!below) return below;
      out.bytes += below->bytes;
      out.inodes += below->inodes;
    }
  }
  return out;
}

}  // namespace skein
