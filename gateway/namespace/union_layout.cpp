// Union of branches; see union_layout.hpp.
#include "namespace/union_layout.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <future>
#include <set>

#include "backend/backend_file.hpp"
#include "namespace/clone_dirs.hpp"
#include "skein/path.hpp"

namespace skein {

int error_rank(int err) {
  switch (err) {
    case 0:
      return 100;
    case EIO:
      return 0;
    case ENOENT:
      return 1;
    case EROFS:
      return 2;
    default:
      return 3;
  }
}

UnionLayout::UnionLayout(std::vector<Branch> branches, std::shared_ptr<CreatePolicy> policy)
    : branches_(std::move(branches)), policy_(std::move(policy)) {}

std::vector<std::shared_ptr<Backend>> UnionLayout::backends() const {
  std::vector<std::shared_ptr<Backend>> out;
  for (auto& b : branches_) out.push_back(b.backend);
  return out;
}

std::string UnionLayout::describe() const {
  if (branches_.size() == 1) return branches_[0].backend->name();
  std::string out = "union(";
  for (size_t i = 0; i < branches_.size(); ++i) {
    if (i) out += ", ";
    out += branches_[i].backend->name();
    if (branches_[i].mode != BranchMode::read_write)
      out += "=" + std::string(branch_mode_name(branches_[i].mode));
  }
  return out + "; create " + std::string(policy_->name()) + ")";
}

UnionLayout::Lookup UnionLayout::lookup_all(const std::string& rel) {
  auto answers = Backend::lstat_each(backends(), rel);
  return looked_up(answers, 0);
}

UnionLayout::Lookup UnionLayout::looked_up(Backend::LstatBatch& answers, size_t first_at) {
  Lookup out;
  int err = 0;
  int on_the_way = 0;  // ENOTDIR or ELOOP: a file or symlink on the way, on that branch
  bool not_there = false;
  for (size_t i = 0; i < branches_.size(); ++i) {
    auto a = answers.answer(first_at + i);
    if (a) {
      out.copies.push_back({&branches_[i], *a});
      continue;
    }
    const int e = a.error();
    not_there |= e == ENOENT;
    if (e == ENOTDIR || e == ELOOP)
      on_the_way = most_telling_error(on_the_way, e);
    else
      err = most_telling_error(err, e);
  }
  // A file or symlink on the way on one branch says nothing about the others: where another
  // branch answers "not there", so is the name (a lower branch's file /d does not hide the
  // names below the union's directory /d, nor stop new ones being created there).
  if (!not_there) err = most_telling_error(err, on_the_way);
  // A branch that is down hides no name from the others, nor stops new files being created
  // under them: its EIO ranks below their "not there". Only when no branch could answer is the
  // answer EIO.
  out.error = err ? err : ENOENT;
  return out;
}

std::vector<Result<sftp::Attrs>> UnionLayout::getattr_each(const std::vector<std::string>& rels) {
  auto answers = Backend::lstat_each(backends(), rels);
  std::vector<Result<sftp::Attrs>> out;
  out.reserve(rels.size());
  for (size_t i = 0; i < rels.size(); ++i) {
    // First found in branch order, else the most telling error, as find() answers.
    const Lookup l = looked_up(answers, i * branches_.size());
    out.push_back(l.copies.empty() ? Result<sftp::Attrs>::failure(l.error)
                                   : Result<sftp::Attrs>(l.copies.front().attrs));
  }
  return out;
}

Result<UnionLayout::Copy> UnionLayout::find(const std::string& rel) {
  if (branches_.size() == 1) {
    auto a = branches_[0].backend->lstat(rel);
    if (!a) return Result<Copy>::failure(a.error());
    return Copy{&branches_[0], *a};
  }
  auto l = lookup_all(rel);
  if (l.copies.empty()) return Result<Copy>::failure(l.error);
  return l.copies.front();
}

Result<const Branch*> UnionLayout::branch_for_new(const std::string& rel) {
  using R = Result<const Branch*>;
  std::string parent = parent_path(rel);
  auto model = find(parent);
  if (!model) return R::failure(model.error());
  if (S_ISLNK(model->attrs.permissions)) return R::failure(ELOOP);  // never followed
  if (!S_ISDIR(model->attrs.permissions)) return R::failure(ENOTDIR);
  std::vector<const Branch*> candidates;
  bool any_rw = false;
  for (auto& b : branches_) {
    any_rw |= b.mode == BranchMode::read_write;
    if (b.takes_new_files()) candidates.push_back(&b);
  }
  if (candidates.empty()) {
    if (!any_rw) return R::failure(EROFS);
    bool any_up = false;
    for (auto& b : branches_) any_up |= b.backend->up();
    return R::failure(any_up ? ENOSPC : EIO);  // full, draining or below minimum free space
  }
  const Branch* chosen = candidates[policy_->pick(candidates, rel)];
  if (chosen != model->branch) {
    auto st = clone_dirs(*chosen->backend, parent, *model->branch->backend);
    if (!st) return R::failure(st.error());
  }
  return chosen;
}

template <typename Op>
Status UnionLayout::on_every_copy(const std::string& rel, Op op) {
  return on_every_copy(lookup_all(rel), op);
}

template <typename Op>
Status UnionLayout::on_every_copy(const Lookup& l, Op op) {
  if (l.copies.empty()) return Status::failure(l.error);
  int err = 0;
  bool any = false;
  for (auto& c : l.copies) {
    if (!c.branch->writable()) {
      err = most_telling_error(err, EROFS);
      continue;
    }
    Status st = op(c);
    if (st)
      any = true;
    else
      err = most_telling_error(err, st.error());
  }
  return any ? ok_status() : Status::failure(err ? err : EIO);
}

Result<sftp::Attrs> UnionLayout::getattr(const std::string& rel) {
  auto c = find(rel);
  if (!c) return Result<sftp::Attrs>::failure(c.error());
  return c->attrs;
}

Result<sftp::Attrs> UnionLayout::setattr(const std::string& rel, const AttrChange& ch,
                                         OpenFile* open) {
  using R = Result<sftp::Attrs>;
  // One writable branch and a change that needs nothing of what is there: the change and the
  // look at the result in one round trip where the backend can (a copy, tool or stage setting
  // a mode and times on each file it writes pays for them).
  if (branches_.size() == 1 && branches_[0].writable() && !ch.size && !ch.needs_current()) {
    if (const sftp::Attrs a = ch.setstat_attrs({}); a.flags) {
      auto r = branches_[0].backend->setstat_reporting(rel, a);
      if (!r) return R::failure(r.error());
      if (*r) {
        // A symlink: lsetstat changed at most the link's own times or owner, never its
        // target; answered as below, where nothing is done through a symlink.
        if (S_ISLNK((*r)->permissions)) return R::failure(ELOOP);
        return **r;
      }
      return branches_[0].backend->lstat(rel);
    }
  }
  // One look at every branch: the copies to change, the first of them for what is there.
  const Lookup found = lookup_all(rel);
  if (found.copies.empty()) return R::failure(found.error);
  const Copy* first = &found.copies.front();
  if (S_ISLNK(first->attrs.permissions)) return R::failure(ELOOP);  // never through a symlink
  sftp::Attrs a = ch.setstat_attrs(first->attrs);
  if (ch.size && open && branches_.size() == 1) {
    // Through the caller's handle: works even where the path itself no longer allows writing.
    if (!first->branch->writable()) return R::failure(EROFS);
    auto st = open->truncate(*ch.size);
    if (!st) return R::failure(st.error());
  } else if (ch.size) {
    a.flags |= sftp::ATTR_SIZE;
    a.size = *ch.size;
  }
  if (a.flags) {
    auto st =
        on_every_copy(found, [&](const Copy& c) { return c.branch->backend->setstat(rel, a); });
    if (!st) return R::failure(st.error());
  }
  auto after = first->branch->backend->lstat(rel);
  if (!after) return R::failure(after.error());
  return *after;
}

Result<std::vector<DirEntryAttrs>> UnionLayout::readdir(const std::string& rel) {
  using R = Result<std::vector<DirEntryAttrs>>;
  std::vector<std::future<Result<std::vector<sftp::NameEntry>>>> lists;
  for (auto& b : branches_) {
    if (branches_.size() == 1) break;
    lists.push_back(
        std::async(std::launch::async, [be = b.backend, rel] { return be->list_dir(rel); }));
  }
  std::vector<DirEntryAttrs> out;
  std::set<std::string> seen;
  int err = 0;
  bool listed = false;
  for (size_t i = 0; i < branches_.size(); ++i) {
    auto l = branches_.size() == 1 ? branches_[0].backend->list_dir(rel) : lists[i].get();
    if (!l) {
      if (l.error() == EIO && branches_.size() > 1)
        spdlog::warn("branch {} is left out of the listing of {}: it is down",
                     branches_[i].backend->name(), rel);
      err = most_telling_error(err, l.error());
      continue;
    }
    listed = true;
    for (auto& e : *l) {
      if (!seen.insert(e.filename).second) continue;
      uint32_t nlink = 1;
      // OpenSSH's long name is `ls -l` output; its second field is the link count.
      auto sp = e.longname.find(' ');
      if (sp != std::string::npos) {
        auto start = e.longname.find_first_not_of(' ', sp);
        if (start != std::string::npos)
          nlink = static_cast<uint32_t>(std::max(1l, std::atol(e.longname.c_str() + start)));
      }
      out.push_back({std::move(e.filename), e.attrs, nlink});
    }
  }
  if (!listed) return R::failure(err ? err : ENOENT);
  return out;
}

Result<sftp::Attrs> UnionLayout::mkdir(const std::string& rel, uint32_t mode) {
  using R = Result<sftp::Attrs>;
  if (branches_.size() == 1) {
    // One branch: the server answers EEXIST and ENOENT itself; no lookups first.
    const Branch& only = branches_[0];
    if (!only.writable()) return R::failure(EROFS);
    if (only.mode == BranchMode::no_create || !only.backend->accepts_new_files())
      return R::failure(only.backend->up() ? ENOSPC : EIO);
    auto st = only.backend->mkdir(rel, mode);
    if (!st) return R::failure(st.error());
    return only.backend->lstat(rel);
  }
  std::lock_guard placing(new_entry_locks_.of(rel));
  if (find(rel)) return R::failure(EEXIST);
  auto b = branch_for_new(rel);
  if (!b) return R::failure(b.error());
  auto st = (*b)->backend->mkdir(rel, mode);
  if (!st) return R::failure(st.error());
  return (*b)->backend->lstat(rel);
}

Status UnionLayout::every_copy_empty(const std::string& rel, const Lookup& found) {
  std::vector<std::future<Result<std::vector<sftp::NameEntry>>>> lists;
  for (auto& c : found.copies) {
    if (!S_ISDIR(c.attrs.permissions)) continue;  // its rmdir says ENOTDIR
    lists.push_back(std::async(std::launch::async,
                               [be = c.branch->backend, rel] { return be->list_dir(rel); }));
  }
  bool empty = true;
  int err = 0;
  for (auto& f : lists) {
    auto l = f.get();
    if (!l)
      err = most_telling_error(err, l.error());
    else
      empty &= l->empty();
  }
  if (!empty) return Status::failure(ENOTEMPTY);
  // A copy that cannot be listed may hold entries: nothing is removed on a guess.
  return err ? Status::failure(err) : ok_status();
}

Status UnionLayout::rmdir(const std::string& rel) {
  // The merged directory is empty only when every copy is: the empty copies of one that is not
  // stay, or it would be reported gone while it still shows the other copies' entries.
  const Lookup found = lookup_all(rel);
  // One copy: its server answers ENOTEMPTY itself, no listing first.
  if (found.copies.size() > 1) {
    if (auto st = every_copy_empty(rel, found); !st) return st;
  }
  return on_every_copy(found, [&](const Copy& c) { return c.branch->backend->rmdir(rel); });
}

Status UnionLayout::unlink(const std::string& rel) {
  // One writable branch: the REMOVE alone, one round trip. The server refuses a directory, and
  // the failure's diagnosis then says EISDIR.
  if (branches_.size() == 1 && branches_[0].writable()) return branches_[0].backend->unlink(rel);
  return on_every_copy(rel, [&](const Copy& c) {
    if (S_ISDIR(c.attrs.permissions)) return Status::failure(EISDIR);
    return c.branch->backend->unlink(rel);
  });
}

Result<std::optional<sftp::Attrs>> UnionLayout::unlink_reporting_parent(const std::string& rel) {
  // One writable branch: its directory is the namespace's. Over several, the merged directory's
  // attributes are not one server's: the mount asks again.
  if (branches_.size() == 1 && branches_[0].writable())
    return branches_[0].backend->unlink_reporting_parent(rel);
  return Layout::unlink_reporting_parent(rel);
}

Result<RenameParents> UnionLayout::rename_reporting_parents(const std::string& from,
                                                            const std::string& to, unsigned flags) {
  if (branches_.size() == 1) {
    if (!branches_[0].writable()) return Result<RenameParents>::failure(EROFS);
    return branches_[0].backend->rename_reporting_parents(from, to, flags);
  }
  return Layout::rename_reporting_parents(from, to, flags);
}

Status UnionLayout::rename(const std::string& from, const std::string& to, unsigned flags) {
  // One branch: its backend answers a missing source and an existing target with
  // RENAME_NOREPLACE itself, without looks of its own first.
  if (branches_.size() == 1) {
    if (!branches_[0].writable()) return Status::failure(EROFS);
    return branches_[0].backend->rename(from, to, flags);
  }
  auto src = lookup_all(from);
  if (src.copies.empty()) return Status::failure(src.error);
  if (from == to) return ok_status();  // nothing to do, as rename(2) says
  const Lookup target = lookup_all(to);
  if ((flags & 1) && !target.copies.empty()) return Status::failure(EEXIST);  // RENAME_NOREPLACE
  // A copy of the target on a read-only branch cannot be replaced: it would still show where
  // its branch comes first, and come back once the new file goes.
  for (auto& c : target.copies)
    if (!c.branch->writable()) return Status::failure(EROFS);

  for (auto& c : src.copies)
    if (!c.branch->writable()) return Status::failure(EXDEV);  // cannot move it: let mv copy
  // rename(2)'s kinds: a branch without the source would not say so itself, and would lose its
  // copy of the target to the removal of old targets below.
  const bool src_dir = S_ISDIR(src.copies.front().attrs.permissions);
  for (auto& c : target.copies) {
    const bool dir = S_ISDIR(c.attrs.permissions);
    if (dir && !src_dir) return Status::failure(EISDIR);
    if (!dir && src_dir) return Status::failure(ENOTDIR);
  }
  // A directory over a directory: the merged target must be empty, every copy of it, or what
  // another branch's copy holds would show in the moved directory (a branch with a source
  // refuses its own copy, but not the others').
  if (src_dir) {
    if (auto st = every_copy_empty(to, target); !st) return st;
  }
  std::string to_parent = parent_path(to);
  auto model = find(to_parent);
  if (!model) return Status::failure(model.error());
  std::vector<const Branch*> moved;
  // Moves the copies already moved back (what they replaced on their branch is gone), and
  // answers `err`: a rename done on some branches only would leave a copy at either name.
  auto undo = [&](int err) {
    for (auto* b : moved) {
      if (auto st = b->backend->rename(to, from, 0); !st)
        spdlog::warn("rename {} -> {} failed on another branch; moving it back on {} failed: {}",
                     from, to, b->backend->name(), std::strerror(st.error()));
    }
    return Status::failure(err);
  };
  for (auto& c : src.copies) {
    // The target's directory must exist on the branch; clone it there when it does not.
    auto st = clone_dirs(*c.branch->backend, to_parent, *model->branch->backend);
    if (!st) return undo(EXDEV);
    st = c.branch->backend->rename(from, to, flags);
    if (!st) return undo(st.error());
    moved.push_back(c.branch);
  }
  // An old target on a branch that held no source would still show (or resurface later): the
  // look before the rename found it (every such copy is on a writable branch). One that cannot
  // be removed fails the rename.
  for (auto& old : target.copies) {
    if (std::find(moved.begin(), moved.end(), old.branch) != moved.end()) continue;
    auto st = S_ISDIR(old.attrs.permissions) ? old.branch->backend->rmdir(to)
                                             : old.branch->backend->unlink(to);
    if (!st && st.error() != ENOENT) return undo(st.error());
  }
  return ok_status();
}

Result<sftp::Attrs> UnionLayout::symlink(const std::string& rel, const std::string& target) {
  using R = Result<sftp::Attrs>;
  std::lock_guard placing(new_entry_locks_.of(rel));
  if (find(rel)) return R::failure(EEXIST);
  auto b = branch_for_new(rel);
  if (!b) return R::failure(b.error());
  auto st = (*b)->backend->symlink(target, rel);
  if (!st) return R::failure(st.error());
  return (*b)->backend->lstat(rel);
}

Result<std::string> UnionLayout::readlink(const std::string& rel) {
  auto c = find(rel);
  if (!c) return Result<std::string>::failure(c.error());
  if (!S_ISLNK(c->attrs.permissions)) return Result<std::string>::failure(EINVAL);
  return c->branch->backend->readlink(rel);
}

Result<sftp::Attrs> UnionLayout::link(const std::string& existing, const std::string& rel) {
  using R = Result<sftp::Attrs>;
  auto c = find(existing);
  if (!c) return R::failure(c.error());
  if (S_ISDIR(c->attrs.permissions)) return R::failure(EPERM);
  std::unique_lock<std::mutex> placing;  // as for create: the look for the name to the link
  if (branches_.size() > 1) placing = std::unique_lock(new_entry_locks_.of(rel));
  if (find(rel)) return R::failure(EEXIST);
  if (!c->branch->writable()) return R::failure(EROFS);
  // A hard link lives on the branch of its file; the new name's directory must be there.
  std::string parent = parent_path(rel);
  if (branches_.size() > 1) {
    auto model = find(parent);
    if (!model) return R::failure(model.error());
    if (!clone_dirs(*c->branch->backend, parent, *model->branch->backend)) return R::failure(EXDEV);
  }
  auto st = c->branch->backend->link(existing, rel);
  if (!st) return R::failure(st.error());
  return c->branch->backend->lstat(rel);
}

Result<sftp::StatVfs> UnionLayout::statfs(const std::string& rel) {
  using R = Result<sftp::StatVfs>;
  if (branches_.size() == 1) return branches_[0].backend->statvfs(rel);
  // A union holds the space of all its branches (each server counted once).
  std::set<Backend*> done;
  SpaceTotal total;
  for (auto& b : branches_) {
    if (!done.insert(b.backend.get()).second) continue;
    auto v = b.backend->statvfs("/");
    if (v) total.add(*v, b.takes_new_files());
  }
  if (!total.any()) return R::failure(EIO);
  return total.sum();
}

Result<std::shared_ptr<OpenFile>> UnionLayout::open(const std::string& rel, int flags) {
  using R = Result<std::shared_ptr<OpenFile>>;
  if (branches_.size() == 1) {
    // No copy to find first: the LSTAT that goes with the OPEN is the check (one round trip, not
    // two, for the open a mount makes by path at a file's first read).
    auto f = open_with_attrs(rel, flags);
    if (!f) return R::failure(f.error());
    return std::move(f->file);
  }
  return open_found(rel, flags, false);
}

Result<std::shared_ptr<OpenFile>> UnionLayout::open_to_change(const std::string& rel, int flags) {
  if (branches_.size() == 1) {
    if (!branches_[0].writable()) return Result<std::shared_ptr<OpenFile>>::failure(EROFS);
    return open(rel, flags);
  }
  return open_found(rel, flags, true);
}

Result<std::shared_ptr<OpenFile>> UnionLayout::open_found(const std::string& rel, int flags,
                                                          bool to_change) {
  using R = Result<std::shared_ptr<OpenFile>>;
  flags &= ~(O_CREAT | O_EXCL);
  auto c = find(rel);
  if (!c) return R::failure(c.error());
  bool writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  if (S_ISDIR(c->attrs.permissions) && writes) return R::failure(EISDIR);
  if ((writes || to_change) && !c->branch->writable()) return R::failure(EROFS);
  auto f = c->branch->backend->open(rel, flags, 0);
  if (!f) return R::failure(f.error());
  return std::shared_ptr<OpenFile>(*f);
}

Result<Layout::OpenedWithAttrs> UnionLayout::open_with_attrs(const std::string& rel, int flags) {
  using R = Result<OpenedWithAttrs>;
  if (branches_.size() != 1) return Layout::open_with_attrs(rel, flags);
  flags &= ~(O_CREAT | O_EXCL);
  const Branch& branch = branches_[0];
  const bool writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  if (writes && !branch.writable()) return R::failure(EROFS);
  auto f = branch.backend->open(rel, flags, 0);
  if (!f) return R::failure(f.error());
  auto attrs = (*f)->attrs_as_opened();
  if (!attrs) return R::failure(attrs.error());
  if (S_ISDIR(attrs->permissions) && writes) return R::failure(EISDIR);
  return OpenedWithAttrs{std::shared_ptr<OpenFile>(*f), *attrs};
}

std::vector<Result<WholeFile>> UnionLayout::read_whole_files(const std::vector<std::string>& rels,
                                                             uint32_t max_bytes,
                                                             bool attrs_of_files) {
  if (branches_.size() != 1) return Layout::read_whole_files(rels, max_bytes, attrs_of_files);
  return branches_[0].backend->read_whole_files(rels, max_bytes, attrs_of_files);
}

std::vector<Result<MadeWholeFile>> UnionLayout::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  if (branches_.size() != 1 || branches_[0].mode != BranchMode::read_write ||
      !branches_[0].backend->accepts_new_files())
    return Layout::write_whole_files(files);
  // What the backend leaves is made here, file by file.
  return made_the_rest_here(files, branches_[0].backend->write_whole_files(files));
}

Result<Created> UnionLayout::create(const std::string& rel, int flags, uint32_t mode) {
  using R = Result<Created>;
  if (branches_.size() == 1 && branches_[0].mode == BranchMode::read_write &&
      branches_[0].backend->accepts_new_files()) {
    // One branch that takes new files: a single OPEN with O_CREAT does it all on the server, and
    // the attributes of the file and of its directory come in the same round trip.
    auto f = branches_[0].backend->open(rel, flags | O_CREAT, mode);
    if (!f) return R::failure(f.error());
    if (auto known = (*f)->attrs_at_open())
      return Created{*f, *known, (*f)->parent_attrs_at_open()};
    auto attrs = (*f)->fstat();
    if (!attrs) return R::failure(attrs.error());
    return Created{*f, *attrs, std::nullopt};
  }
  std::lock_guard placing(new_entry_locks_.of(rel));
  const Branch* where = nullptr;
  auto existing = find(rel);
  if (existing) {
    if (flags & O_EXCL) return R::failure(EEXIST);
    if (S_ISDIR(existing->attrs.permissions)) return R::failure(EISDIR);
    if (!existing->branch->writable()) return R::failure(EROFS);
    where = existing->branch;
  } else if (existing.error() != ENOENT) {
    return R::failure(existing.error());
  } else {
    auto b = branch_for_new(rel);
    if (!b) return R::failure(b.error());
    where = *b;
  }
  auto f = where->backend->open(rel, flags | O_CREAT, mode);
  if (!f) return R::failure(f.error());
  // The directory's attributes are those of one branch's copy only: not the merged directory.
  auto attrs = (*f)->attrs_as_opened();
  if (!attrs) return R::failure(attrs.error());
  return Created{*f, *attrs, std::nullopt};
}

}  // namespace skein
