// Cloning directory paths between backends; see clone_dirs.hpp.
#include "namespace/clone_dirs.hpp"

#include <sys/stat.h>

#include <cerrno>

namespace skein {

Status clone_dirs(Backend& onto, std::string_view rel_dir, Backend& model) {
  if (rel_dir.empty() || rel_dir == "/") return ok_status();
  auto here = onto.lstat(rel_dir);
  if (here) return S_ISDIR(here->permissions) ? ok_status() : Status::failure(ENOTDIR);
  if (here.error() != ENOENT) return Status::failure(here.error());
  auto pos = rel_dir.rfind('/');
  auto st = clone_dirs(onto, pos == 0 ? std::string_view("/") : rel_dir.substr(0, pos), model);
  if (!st) return st;
  auto m = model.lstat(rel_dir);
  if (!m) return Status::failure(m.error());
  st = onto.mkdir(rel_dir, m->permissions & 07777);
  if (!st && st.error() != EEXIST) return st;
  sftp::Attrs a = *m;
  a.flags &= sftp::ATTR_UIDGID | sftp::ATTR_PERMISSIONS | sftp::ATTR_ACMODTIME;
  a.permissions &= 07777;
  (void)onto.setstat(rel_dir, a);
  return ok_status();
}

}  // namespace skein
