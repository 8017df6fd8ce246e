// Filesystem operations of a namespace; see namespace_fs.hpp.
#include "namespace/namespace_fs.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <future>
#include <set>

#include "skein/path.hpp"

namespace skein {
namespace {

// Ranks errors across branches: a specific answer beats "not there", which beats a server that
// could not be asked.
int rank(int err) {
  switch (err) {
    case ENOENT:
      return 1;
    case EIO:
      return 0;
    default:
      return 2;
  }
}
int worse_error(int a, int b) { return rank(b) > rank(a) ? b : a; }

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

NamespaceFs::NamespaceFs(std::string name, std::string token, MountTable table)
    : name_(std::move(name)),
      token_(std::move(token)),
      table_(std::move(table)),
      started_s_(now_s()),
      rng_(std::random_device{}()) {}

bool NamespaceFs::token_ok(std::string_view token) const {
  if (token_.empty()) return true;
  // Constant-time compare: the token is a secret.
  if (token.size() != token_.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= unsigned(token[i] ^ token_[i]);
  return diff == 0;
}

sftp::Attrs NamespaceFs::synthetic_dir_attrs() const {
  sftp::Attrs a;
  a.flags = sftp::ATTR_PERMISSIONS | sftp::ATTR_ACMODTIME | sftp::ATTR_SIZE | sftp::ATTR_UIDGID;
  a.permissions = S_IFDIR | 0755;
  a.atime = a.mtime = uint32_t(started_s_);
  a.size = 4096;
  return a;
}

Result<NamespaceFs::Found> NamespaceFs::find(const std::string& vpath) {
  auto place = table_.place(vpath);
  if (!place) return Result<Found>::failure(ENOENT);
  int err = 0;
  for (auto& b : place->mount->branches) {
    auto a = b->lstat(place->rel);
    if (a) return Found{b, place->rel, *a};
    err = err ? worse_error(err, a.error()) : a.error();
  }
  return Result<Found>::failure(err ? err : ENOENT);
}

Result<std::pair<std::shared_ptr<Backend>, std::string>> NamespaceFs::branch_for_new(
    const std::string& vpath) {
  using R = Result<std::pair<std::shared_ptr<Backend>, std::string>>;
  auto place = table_.place(vpath);
  if (!place || place->rel == "/") return R::failure(EACCES);  // only the table holds it
  std::string parent = parent_path(place->rel);
  int err = 0;
  for (auto& b : place->mount->branches) {
    auto a = b->lstat(parent);
    if (a && S_ISDIR(a->permissions)) return std::make_pair(b, place->rel);
    int e = a ? ENOTDIR : a.error();
    err = err ? worse_error(err, e) : e;
  }
  return R::failure(err ? err : ENOENT);
}

Result<sftp::Attrs> NamespaceFs::getattr(const std::string& vpath) {
  auto f = find(vpath);
  if (f) return f->attrs;
  if (table_.is_synthetic_dir(vpath) &&
      (f.error() == ENOENT || table_.place(vpath) == std::nullopt))
    return synthetic_dir_attrs();
  return Result<sftp::Attrs>::failure(f.error());
}

Result<sftp::Attrs> NamespaceFs::setattr(const std::string& vpath, const AttrChange& ch,
                                         uint64_t handle) {
  using R = Result<sftp::Attrs>;
  auto place = table_.place(vpath);
  if (!place || place->rel == "/") {
    if (table_.is_synthetic_dir(vpath)) return R::failure(EPERM);
  }
  auto f = find(vpath);
  if (!f) return R::failure(f.error());
  sftp::Attrs a;
  if (ch.mode) {
    a.flags |= sftp::ATTR_PERMISSIONS;
    a.permissions = *ch.mode & 07777;
  }
  if (ch.uid || ch.gid) {
    a.flags |= sftp::ATTR_UIDGID;
    a.uid = ch.uid.value_or(f->attrs.uid);
    a.gid = ch.gid.value_or(f->attrs.gid);
  }
  if (ch.atime_s || ch.mtime_s) {
    a.flags |= sftp::ATTR_ACMODTIME;
    a.atime = uint32_t(ch.atime_s.value_or(f->attrs.atime));
    a.mtime = uint32_t(ch.mtime_s.value_or(f->attrs.mtime));
  }
  // Truncation through an open file works even where the path no longer allows writing.
  if (ch.size) {
    std::shared_ptr<RemoteFile> open_file;
    if (handle) {
      std::lock_guard lock(files_mu_);
      auto it = files_.find(handle);
      if (it != files_.end()) open_file = it->second;
    }
    Status st = open_file ? open_file->truncate(*ch.size) : [&] {
      sftp::Attrs s;
      s.flags = sftp::ATTR_SIZE;
      s.size = *ch.size;
      return f->branch->setstat(f->rel, s);
    }();
    if (!st) return R::failure(st.error());
  }
  if (a.flags) {
    // Every copy in the union changes, so a later lookup sees the same attributes.
    for (auto& b : place->mount->branches) {
      Status st = b->setstat(f->rel, a);
      if (!st && b == f->branch) return R::failure(st.error());
    }
  }
  auto after = f->branch->lstat(f->rel);
  if (!after) return R::failure(after.error());
  return *after;
}

Result<std::vector<DirEntryAttrs>> NamespaceFs::readdir(const std::string& vpath) {
  using R = Result<std::vector<DirEntryAttrs>>;
  std::vector<DirEntryAttrs> out;
  std::set<std::string> seen;
  auto place = table_.place(vpath);
  int err = 0;
  bool listed = false;
  if (place) {
    // Ask every branch at once; merge in branch order, the first branch winning a duplicate.
    std::vector<std::future<Result<std::vector<sftp::NameEntry>>>> lists;
    for (auto& b : place->mount->branches)
      lists.push_back(
          std::async(std::launch::async, [b, rel = place->rel] { return b->list_dir(rel); }));
    for (size_t i = 0; i < lists.size(); ++i) {
      auto l = lists[i].get();
      if (!l) {
        if (l.error() == EIO && place->mount->branches.size() > 1)
          spdlog::warn("namespace {}: branch {} left out of listing {}", name_,
                       place->mount->branches[i]->name(), vpath);
        err = err ? worse_error(err, l.error()) : l.error();
        continue;
      }
      listed = true;
      for (auto& e : *l) {
        if (!seen.insert(e.filename).second) continue;
        uint32_t nlink = 1;
        // OpenSSH's long name is `ls -l` output; its second field is the link count.
        auto sp = e.longname.find_first_of(' ');
        if (sp != std::string::npos) {
          auto start = e.longname.find_first_not_of(' ', sp);
          if (start != std::string::npos)
            nlink = uint32_t(std::max(1l, std::atol(e.longname.c_str() + start)));
        }
        out.push_back({std::move(e.filename), e.attrs, nlink});
      }
    }
  }
  for (auto& name : table_.synthetic_children(vpath)) {
    if (!seen.insert(name).second) continue;
    out.push_back({name, synthetic_dir_attrs(), 2});
  }
  if (!listed && !table_.is_synthetic_dir(vpath)) return R::failure(err ? err : ENOENT);
  return out;
}

Result<sftp::Attrs> NamespaceFs::mkdir(const std::string& vpath, uint32_t mode) {
  using R = Result<sftp::Attrs>;
  if (table_.is_synthetic_dir(vpath)) return R::failure(EEXIST);
  if (find(vpath)) return R::failure(EEXIST);
  auto where = branch_for_new(vpath);
  if (!where) return R::failure(where.error());
  auto& [b, rel] = *where;
  auto st = b->mkdir(rel, mode);
  if (!st) return R::failure(st.error());
  return b->lstat(rel);
}

Status NamespaceFs::rmdir(const std::string& vpath) {
  if (table_.is_synthetic_dir(vpath)) return Status::failure(EBUSY);
  auto place = table_.place(vpath);
  if (!place) return Status::failure(ENOENT);
  // A union directory goes only when every copy can go.
  bool any = false;
  int err = 0;
  for (auto& b : place->mount->branches) {
    auto st = b->rmdir(place->rel);
    if (st) {
      any = true;
    } else if (st.error() != ENOENT) {
      err = err ? worse_error(err, st.error()) : st.error();
    }
  }
  if (err) return Status::failure(err);
  return any ? ok_status() : Status::failure(ENOENT);
}

Status NamespaceFs::unlink(const std::string& vpath) {
  if (table_.is_synthetic_dir(vpath)) return Status::failure(EISDIR);
  auto place = table_.place(vpath);
  if (!place) return Status::failure(ENOENT);
  bool any = false;
  int err = 0;
  for (auto& b : place->mount->branches) {
    auto st = b->unlink(place->rel);
    if (st) {
      any = true;
    } else if (st.error() != ENOENT) {
      err = err ? worse_error(err, st.error()) : st.error();
    }
  }
  if (any && !err) return ok_status();
  return Status::failure(err ? err : ENOENT);
}

Status NamespaceFs::rename(const std::string& from, const std::string& to, unsigned flags) {
  if (flags & ~1u) return Status::failure(EINVAL);  // RENAME_EXCHANGE cannot be done over SFTP
  if (table_.is_synthetic_dir(from) || table_.is_synthetic_dir(to)) return Status::failure(EBUSY);
  auto pf = table_.place(from), pt = table_.place(to);
  if (!pf || !pt) return Status::failure(ENOENT);
  if (pf->mount != pt->mount) return Status::failure(EXDEV);
  auto f = find(from);
  if (!f) return Status::failure(f.error());
  // The target's directory must exist on the branch that holds the source.
  auto parent = f->branch->lstat(parent_path(pt->rel));
  if (!parent) return Status::failure(pf->mount->branches.size() > 1 ? EXDEV : parent.error());
  auto st = f->branch->rename(pf->rel, pt->rel, flags);
  if (!st) return st;
  // Lower-priority copies of the source would show through; move them too, where possible.
  for (auto& b : pf->mount->branches) {
    if (b == f->branch) continue;
    if (b->lstat(pf->rel)) (void)b->rename(pf->rel, pt->rel, flags);
  }
  return ok_status();
}

Result<sftp::Attrs> NamespaceFs::symlink(const std::string& vpath, const std::string& target) {
  using R = Result<sftp::Attrs>;
  if (table_.is_synthetic_dir(vpath) || find(vpath)) return R::failure(EEXIST);
  auto where = branch_for_new(vpath);
  if (!where) return R::failure(where.error());
  auto& [b, rel] = *where;
  auto st = b->symlink(target, rel);
  if (!st) return R::failure(st.error());
  return b->lstat(rel);
}

Result<std::string> NamespaceFs::readlink(const std::string& vpath) {
  auto f = find(vpath);
  if (!f) return Result<std::string>::failure(f.error());
  if (!S_ISLNK(f->attrs.permissions)) return Result<std::string>::failure(EINVAL);
  return f->branch->readlink(f->rel);
}

Result<sftp::Attrs> NamespaceFs::link(const std::string& existing, const std::string& vpath) {
  using R = Result<sftp::Attrs>;
  auto pe = table_.place(existing), pn = table_.place(vpath);
  if (!pe || !pn) return R::failure(ENOENT);
  if (pe->mount != pn->mount) return R::failure(EXDEV);
  auto f = find(existing);
  if (!f) return R::failure(f.error());
  if (S_ISDIR(f->attrs.permissions)) return R::failure(EPERM);
  if (find(vpath)) return R::failure(EEXIST);
  auto st = f->branch->link(pe->rel, pn->rel);
  if (!st) return R::failure(st.error());
  return f->branch->lstat(pn->rel);
}

Result<sftp::StatVfs> NamespaceFs::statfs(const std::string& vpath) {
  using R = Result<sftp::StatVfs>;
  // A path inside a mount reports its first branch that answers; above the mounts, the sum.
  std::vector<std::pair<std::shared_ptr<Backend>, std::string>> targets;
  auto place = table_.place(vpath);
  if (place && !table_.is_synthetic_dir(vpath)) {
    for (auto& b : place->mount->branches) {
      auto v = b->statvfs(place->rel);
      if (v) return v;
    }
    return R::failure(EIO);
  }
  std::set<Backend*> done;
  sftp::StatVfs sum{};
  sum.bsize = sum.frsize = 4096;
  sum.namemax = 255;
  bool any = false;
  for (auto& m : table_.mounts()) {
    if (!path_is_under(m.path, vpath)) continue;
    for (auto& b : m.branches) {
      if (!done.insert(b.get()).second) continue;
      auto v = b->statvfs("/");
      if (!v) continue;
      any = true;
      double scale = double(v->frsize ? v->frsize : v->bsize) / double(sum.frsize);
      sum.blocks += uint64_t(double(v->blocks) * scale);
      sum.bfree += uint64_t(double(v->bfree) * scale);
      sum.bavail += uint64_t(double(v->bavail) * scale);
      sum.files += v->files;
      sum.ffree += v->ffree;
      sum.favail += v->favail;
    }
  }
  if (!any) return R::failure(EIO);
  return sum;
}

uint64_t NamespaceFs::new_handle() {
  // Caller holds files_mu_.
  uint64_t h;
  do {
    h = rng_();
  } while (h == 0 || files_.count(h));
  return h;
}

Result<NamespaceFs::Opened> NamespaceFs::open(const std::string& vpath, int flags) {
  using R = Result<Opened>;
  flags &= ~(O_CREAT | O_EXCL);
  auto f = find(vpath);
  if (!f) return R::failure(f.error());
  if (S_ISDIR(f->attrs.permissions) && (flags & O_ACCMODE) != O_RDONLY) return R::failure(EISDIR);
  auto file = f->branch->open(f->rel, flags, 0);
  if (!file) return R::failure(file.error());
  sftp::Attrs attrs = f->attrs;
  if (flags & O_TRUNC) attrs.size = 0;
  std::lock_guard lock(files_mu_);
  uint64_t h = new_handle();
  files_[h] = *file;
  return Opened{h, attrs};
}

Result<NamespaceFs::Opened> NamespaceFs::create(const std::string& vpath, int flags,
                                                uint32_t mode) {
  using R = Result<Opened>;
  if (table_.is_synthetic_dir(vpath)) return R::failure(EISDIR);
  std::shared_ptr<Backend> branch;
  std::string rel;
  auto existing = find(vpath);
  if (existing) {
    if ((flags & O_EXCL)) return R::failure(EEXIST);
    if (S_ISDIR(existing->attrs.permissions)) return R::failure(EISDIR);
    branch = existing->branch;
    rel = existing->rel;
  } else {
    auto where = branch_for_new(vpath);
    if (!where) return R::failure(where.error());
    branch = where->first;
    rel = where->second;
  }
  auto file = branch->open(rel, flags | O_CREAT, mode);
  if (!file) return R::failure(file.error());
  auto attrs = (*file)->fstat();
  if (!attrs) return R::failure(attrs.error());
  std::lock_guard lock(files_mu_);
  uint64_t h = new_handle();
  files_[h] = *file;
  return Opened{h, *attrs};
}

Result<std::shared_ptr<RemoteFile>> NamespaceFs::file(uint64_t handle, const std::string& vpath,
                                                      int flags) {
  using R = Result<std::shared_ptr<RemoteFile>>;
  {
    std::lock_guard lock(files_mu_);
    auto it = files_.find(handle);
    if (it != files_.end()) {
      // Follow renames: the client names the file by its current path.
      auto place = table_.place(vpath);
      if (place && place->rel != it->second->rel_path()) it->second->renamed(place->rel);
      return it->second;
    }
  }
  // Soft state: re-open by path, never creating or truncating.
  auto f = find(vpath);
  if (!f) return R::failure(f.error());
  auto file = f->branch->open(f->rel, flags & ~(O_CREAT | O_EXCL | O_TRUNC), 0);
  if (!file) return R::failure(file.error());
  std::lock_guard lock(files_mu_);
  auto [it, inserted] = files_.emplace(handle, *file);
  return it->second;
}

Status NamespaceFs::release(uint64_t handle) {
  std::shared_ptr<RemoteFile> f;
  {
    std::lock_guard lock(files_mu_);
    auto it = files_.find(handle);
    if (it == files_.end()) return ok_status();
    f = std::move(it->second);
    files_.erase(it);
  }
  return f->close();
}

}  // namespace skein
