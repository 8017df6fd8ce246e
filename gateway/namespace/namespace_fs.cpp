// Filesystem operations of a namespace; see namespace_fs.hpp.
#include "namespace/namespace_fs.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <set>

#include "skein/path.hpp"

namespace skein {
namespace {
int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The items of a call on many paths (ReadFiles, WriteFiles), gathered by the mount that holds
// them, so that its layout takes them together; each mount's in the order asked. `at` keeps the
// mount table alive.
template <typename At, typename Item>
struct MountBatch {
  At at;
  std::vector<size_t> which;  // the items' places in the call
  std::vector<Item> items;
};

template <typename At, typename Item>
void add_to_batch(std::vector<MountBatch<At, Item>>& batches, const At& at, size_t i, Item item) {
  auto b = std::find_if(batches.begin(), batches.end(),
                        [&](const MountBatch<At, Item>& x) { return x.at.mount == at.mount; });
  if (b == batches.end()) b = batches.insert(batches.end(), MountBatch<At, Item>{at, {}, {}});
  b->which.push_back(i);
  b->items.push_back(std::move(item));
}

// Each batch's answers, `answer(batch)` in the batch's order, put in their places in `out`.
template <typename At, typename Item, typename Out, typename Answer>
void answer_batches(std::vector<MountBatch<At, Item>>& batches, std::vector<Out>& out,
                    Answer answer) {
  for (auto& b : batches) {
    auto got = answer(b);
    for (size_t k = 0; k < b.which.size() && k < got.size(); ++k)
      out[b.which[k]] = std::move(got[k]);
  }
}
}  // namespace

NamespaceFs::NamespaceFs(std::string name, TokenSet credential,
                         std::shared_ptr<const MountTable> table, std::size_t max_open_files)
    : name_(std::move(name)),
      credential_(std::move(credential)),
      started_s_(now_s()),
      table_(std::move(table)),
      rng_(std::random_device{}()),
      max_open_files_(max_open_files) {}

std::shared_ptr<const MountTable> NamespaceFs::table() const {
  std::lock_guard lock(table_mu_);
  return table_;
}

void NamespaceFs::set_table(std::shared_ptr<const MountTable> table) {
  std::lock_guard lock(table_mu_);
  table_ = std::move(table);
}

NamespaceFs::Located NamespaceFs::locate(const std::string& vpath) const {
  Located t;
  t.table = table();
  auto place = t.table->place(vpath);
  if (place) {
    t.mount = place->mount;
    t.rel = std::move(place->rel);
  }
  return t;
}

NamespaceFs::Resolved NamespaceFs::resolve(const std::string& vpath) const {
  auto t = locate(vpath);
  Resolved r{t.table, nullptr, t.rel};
  if (t.mount && (!t.table->is_synthetic_dir(vpath) || t.rel == "/")) r.layout = t.mount->layout;
  return r;
}

sftp::Attrs NamespaceFs::synthetic_dir_attrs() const {
  sftp::Attrs a;
  a.flags = sftp::ATTR_PERMISSIONS | sftp::ATTR_ACMODTIME | sftp::ATTR_SIZE | sftp::ATTR_UIDGID;
  // Nothing can be made in a synthesised directory (EACCES), and its mode says so: a mount
  // answers a create itself only in a directory that may be written.
  a.permissions = S_IFDIR | 0555;
  a.atime = a.mtime = static_cast<uint32_t>(started_s_);
  a.size = 4096;
  return a;
}

Result<sftp::Attrs> NamespaceFs::getattr(const std::string& vpath) {
  auto t = locate(vpath);
  if (t.mount && !t.table->is_synthetic_dir(vpath)) return t.mount->layout->getattr(t.rel);
  if (t.mount) {
    // A mount point: its backend's root when it answers, else a stand-in directory.
    auto a = t.mount->layout->getattr(t.rel);
    if (a) return a;
  }
  if (t.table->is_synthetic_dir(vpath)) return synthetic_dir_attrs();
  return Result<sftp::Attrs>::failure(ENOENT);
}

std::vector<Result<sftp::Attrs>> NamespaceFs::getattr_each(const std::vector<std::string>& vpaths) {
  std::vector<Result<sftp::Attrs>> out(vpaths.size(), Result<sftp::Attrs>::failure(EIO));
  std::vector<Located> at;  // each holds its table, and so its mount, until the answers are in
  at.reserve(vpaths.size());
  std::vector<std::pair<const Mount*, std::vector<size_t>>> by_mount;  // indices of its paths
  for (size_t i = 0; i < vpaths.size(); ++i) {
    const Located& t = at.emplace_back(locate(vpaths[i]));
    if (!t.mount || t.table->is_synthetic_dir(vpaths[i])) {
      out[i] = getattr(vpaths[i]);  // a mount point or a directory above them: as getattr()
      continue;
    }
    auto g = std::find_if(by_mount.begin(), by_mount.end(),
                          [&](const auto& m) { return m.first == t.mount; });
    if (g == by_mount.end())
      by_mount.push_back({t.mount, {i}});
    else
      g->second.push_back(i);
  }
  for (auto& [mount, indices] : by_mount) {
    std::vector<std::string> rels;
    rels.reserve(indices.size());
    for (size_t i : indices) rels.push_back(at[i].rel);
    auto answers = mount->layout->getattr_each(rels);
    for (size_t k = 0; k < indices.size(); ++k) out[indices[k]] = std::move(answers[k]);
  }
  return out;
}

namespace {
// Whether `who` may open a file with attributes `a` as `flags` ask.
bool may_open(const sftp::Attrs& a, const Credentials& who, int flags) {
  return may_access(a.permissions, a.uid, a.gid, who.uid, who.gid, who.groups,
                    access_bits_of_open(flags));
}

// What a file opened for `who` as `flags` ask may open by path later: a regular file `who` may
// open so (OpenFile::judge_new_handles); without `who`, nothing.
OpenFile::HandleJudge judge_of(const Credentials* who, int flags) {
  if (!who) return {};
  return [who = *who, flags = flags & ~O_TRUNC](const sftp::Attrs& a) {
    return S_ISREG(a.permissions) && may_open(a, who, flags);
  };
}

// The attributes of the file `f` opened (its FSTAT, not a look at its path), the file judged by
// them being the one read, written or changed: from now on `f` uses only the handles it has and
// those judge_of(who, flags) accepts; where it has several opened by path (a striped file's
// parts), each is judged so now (OpenFile::judge_handles).
Result<sftp::Attrs> own_attrs(OpenFile& f, const Credentials* who, int flags) {
  return f.judge_handles(judge_of(who, flags));
}
}  // namespace

Result<sftp::Attrs> NamespaceFs::setattr(const std::string& vpath, const AttrChange& change,
                                         uint64_t handle, const Credentials* as_user) {
  std::shared_ptr<OpenFile> open;
  std::string at = vpath;
  if (handle) {
    std::lock_guard lock(files_mu_);
    auto it = files_.find(handle);
    if (it != files_.end()) {
      open = it->second;
      // Where the file is now: an ftruncate of a file renamed through another mount, whose
      // client names it by its old path, changes the file, not what is at that path.
      if (auto p = paths_.find(handle); p != paths_.end()) at = p->second;
    }
  }
  auto t = locate(at);
  if (!t.mount || (t.table->is_synthetic_dir(at) && t.rel != "/"))
    return Result<sftp::Attrs>::failure(t.table->is_synthetic_dir(at) ? EPERM : ENOENT);
  if (as_user) return setattr_judged(t, change, std::move(open), *as_user);
  return t.mount->layout->setattr(t.rel, change, open.get());
}

Result<sftp::Attrs> NamespaceFs::setattr_judged(const Located& t, const AttrChange& change,
                                                std::shared_ptr<OpenFile> file,
                                                const Credentials& who) {
  using R = Result<sftp::Attrs>;
  // The caller's handle serves an ftruncate: a new size, with the times set to now as the
  // kernel sends it, of a file the user opened for writing (judged then), which the kernel does
  // not judge again. Any other change is made through a handle opened here for it, which also
  // refuses a copy on a read-only branch.
  const bool times = change.atime_s || change.mtime_s;
  const bool ftruncate = file && change.size && !change.mode && !change.uid && !change.gid &&
                         (!times || change.to_now);
  if (!ftruncate) file.reset();
  AttrChangeAsked asked;
  asked.mode = change.mode;
  asked.size = change.size.has_value() && !ftruncate;
  asked.times = times && !change.to_now;
  asked.times_now = times && change.to_now && !ftruncate;
  asked.uid = change.uid;
  asked.gid = change.gid;
  auto judge = [who, asked](const sftp::Attrs& a) {
    return may_change_attrs(a.permissions, a.uid, a.gid, who, asked);
  };
  const bool ours = !file;
  if (ours) {
    // Only a regular file or a directory is opened (an OPEN of a fifo would wait in the server
    // for a writer). Anything else could only be changed by path, which may lead to another file
    // by then: refused for such a user.
    auto looked = t.mount->layout->getattr(t.rel);
    if (!looked) return looked;
    if (S_ISLNK(looked->permissions)) return R::failure(ELOOP);  // never through a symlink
    if (!S_ISREG(looked->permissions) && !S_ISDIR(looked->permissions)) return R::failure(EPERM);
    auto f = t.mount->layout->open_to_change(t.rel, change.size ? O_WRONLY : O_RDONLY);
    if (!f) return R::failure(f.error());
    file = *f;
  }
  R r = [&]() -> R {
    // A handle opened here is judged part by part (a striped file's parts were opened by path,
    // one server after another), then uses no other; the caller's keeps the judgement of its open.
    auto own = ours ? file->judge_handles([judge](const sftp::Attrs& a) { return judge(a) == 0; })
                    : file->fstat();
    if (ours) file->judge_new_handles({});
    if (!own) return own;
    if (int e = judge(*own)) return R::failure(e);
    if (!change.mode) return file->set_attrs(change);
    AttrChange as_set = change;
    as_set.mode = mode_set_by(*change.mode, change.gid ? *change.gid : own->gid, who);
    return file->set_attrs(as_set);
  }();
  if (ours) (void)file->close();
  return r;
}

Result<std::vector<DirEntryAttrs>> NamespaceFs::readdir(const std::string& vpath) {
  using R = Result<std::vector<DirEntryAttrs>>;
  auto t = locate(vpath);
  bool synthetic = t.table->is_synthetic_dir(vpath);
  std::vector<DirEntryAttrs> out;
  if (t.mount) {
    auto l = t.mount->layout->readdir(t.rel);
    if (l)
      out = l.take();
    else if (!synthetic)
      return R::failure(l.error());
  } else if (!synthetic) {
    return R::failure(ENOENT);
  }
  std::set<std::string> seen;
  for (auto& e : out) seen.insert(e.name);
  for (auto& name : t.table->synthetic_children(vpath)) {
    if (!seen.insert(name).second) continue;
    // A mount point's entry shows its backend's root, as its getattr does (the mode the mount
    // learns here decides whether it may answer a create in it itself); a directory above the
    // mount points, or a mount point whose backend is down, shows the stand-in.
    auto attrs = getattr(join_path(vpath, name));
    out.push_back({name, attrs ? *attrs : synthetic_dir_attrs(), 2});
  }
  return out;
}

Result<sftp::Attrs> NamespaceFs::mkdir(const std::string& vpath, uint32_t mode) {
  auto t = locate(vpath);
  if (t.table->is_synthetic_dir(vpath)) return Result<sftp::Attrs>::failure(EEXIST);
  if (!t.mount) return Result<sftp::Attrs>::failure(EACCES);  // only the table holds the parent
  return t.mount->layout->mkdir(t.rel, mode);
}

Status NamespaceFs::rmdir(const std::string& vpath) {
  auto t = locate(vpath);
  if (t.table->is_synthetic_dir(vpath)) return Status::failure(EBUSY);
  if (!t.mount) return Status::failure(ENOENT);
  return t.mount->layout->rmdir(t.rel);
}

Status NamespaceFs::unlink(const std::string& vpath) {
  auto t = locate(vpath);
  if (t.table->is_synthetic_dir(vpath)) return Status::failure(EISDIR);
  if (!t.mount) return Status::failure(ENOENT);
  Status st = t.mount->layout->unlink(t.rel);
  if (st) links_.removed(vpath);
  return st;
}

Result<std::optional<sftp::Attrs>> NamespaceFs::unlink_reporting_parent(const std::string& vpath) {
  using R = Result<std::optional<sftp::Attrs>>;
  auto t = locate(vpath);
  if (t.table->is_synthetic_dir(vpath)) return R::failure(EISDIR);
  if (!t.mount) return R::failure(ENOENT);
  auto r = t.mount->layout->unlink_reporting_parent(t.rel);
  if (r) links_.removed(vpath);
  return r;
}

Result<RenameParents> NamespaceFs::rename(const std::string& from, const std::string& to,
                                          unsigned flags) {
  using R = Result<RenameParents>;
  if (flags & ~1u) return R::failure(EINVAL);  // RENAME_EXCHANGE cannot be done over SFTP
  auto f = locate(from);
  auto t = locate(to);
  if (f.table->is_synthetic_dir(from) || f.table->is_synthetic_dir(to)) return R::failure(EBUSY);
  if (!f.mount) return R::failure(ENOENT);
  if (!t.mount) return R::failure(EACCES);
  if (f.mount != t.mount || f.table != t.table) return R::failure(EXDEV);
  // Two names of one file: rename(2) leaves both.
  const bool one_file = links_.same_file(from, to);
  auto r = f.mount->layout->rename_reporting_parents(f.rel, t.rel, flags);
  if (r && !one_file) {
    moved_open_files(from, to, t.rel);
    links_.renamed(from, to);
  }
  return r;
}

void NamespaceFs::moved_open_files(const std::string& from, const std::string& to,
                                   const std::string& to_rel) {
  // Neither is "/" nor a mount point (refused above as synthesised directories).
  if (from == to) return;
  std::lock_guard lock(files_mu_);
  for (auto& [handle, vpath] : paths_) {
    if (!path_is_under(vpath, from)) continue;
    const std::string below = vpath.substr(from.size());  // "" or "/..."
    vpath = to + below;
    if (auto f = files_.find(handle); f != files_.end()) f->second->renamed(to_rel + below);
  }
}

std::optional<std::string> NamespaceFs::path_of(uint64_t handle) const {
  std::lock_guard lock(files_mu_);
  auto it = paths_.find(handle);
  return it == paths_.end() ? std::nullopt : std::optional<std::string>(it->second);
}

Result<sftp::Attrs> NamespaceFs::symlink(const std::string& vpath, const std::string& target_text) {
  auto t = locate(vpath);
  if (t.table->is_synthetic_dir(vpath)) return Result<sftp::Attrs>::failure(EEXIST);
  if (!t.mount) return Result<sftp::Attrs>::failure(EACCES);
  return t.mount->layout->symlink(t.rel, target_text);
}

Result<std::string> NamespaceFs::readlink(const std::string& vpath) {
  auto t = locate(vpath);
  if (!t.mount || t.table->is_synthetic_dir(vpath))
    return Result<std::string>::failure(t.mount ? EINVAL : ENOENT);
  return t.mount->layout->readlink(t.rel);
}

Result<sftp::Attrs> NamespaceFs::link(const std::string& existing, const std::string& vpath) {
  auto e = locate(existing);
  auto n = locate(vpath);
  if (n.table->is_synthetic_dir(vpath)) return Result<sftp::Attrs>::failure(EEXIST);
  if (!e.mount || e.table->is_synthetic_dir(existing))
    return Result<sftp::Attrs>::failure(e.mount ? EPERM : ENOENT);
  if (!n.mount) return Result<sftp::Attrs>::failure(EACCES);
  if (e.mount != n.mount || e.table != n.table) return Result<sftp::Attrs>::failure(EXDEV);
  auto r = e.mount->layout->link(e.rel, n.rel);
  if (r) links_.linked(existing, vpath);
  return r;
}

Result<sftp::StatVfs> NamespaceFs::statfs(const std::string& vpath) {
  using R = Result<sftp::StatVfs>;
  auto t = locate(vpath);
  // Inside a mount, or its mount point (whose layout knows its space: a job namespace's quota).
  if (t.mount && (!t.table->is_synthetic_dir(vpath) || t.rel == "/"))
    return t.mount->layout->statfs(t.rel);
  // Above the mount points: the sum over every backend below, each counted once.
  std::set<Backend*> done;
  SpaceTotal total;
  for (auto& m : t.table->mounts()) {
    if (!path_is_under(m.path, vpath)) continue;
    for (auto& b : m.layout->backends()) {
      if (!done.insert(b.get()).second) continue;
      auto v = b->statvfs("/");
      if (v) total.add(*v);
    }
  }
  if (!total.any()) return R::failure(EIO);
  return total.sum();
}

uint64_t NamespaceFs::register_file(std::shared_ptr<OpenFile> file, std::string_view mount,
                                    const std::string& vpath) {
  std::lock_guard lock(files_mu_);
  uint64_t h;
  do {
    h = rng_();
  } while (h == 0 || files_.count(h) || released_locked(h) || reopening_.count(h));
  files_[h] = std::move(file);
  paths_[h] = vpath;
  if (!mount.empty()) holders_[h] = std::string(mount);
  return h;
}

Result<NamespaceFs::Opened> NamespaceFs::open(const std::string& vpath, int flags,
                                              std::string_view mount, bool attrs_of_file,
                                              const Credentials* as_user) {
  using R = Result<Opened>;
  auto t = locate(vpath);
  if (!t.mount) return R::failure(t.table->is_synthetic_dir(vpath) ? EISDIR : ENOENT);
  if (!room_for_a_file()) return R::failure(EMFILE);
  // A judged open truncates only once the file opened is judged.
  auto f = t.mount->layout->open_with_attrs(t.rel, as_user ? flags & ~O_TRUNC : flags);
  if (!f) return R::failure(f.error());
  auto fail = [&](int error) {
    (void)f->file->close();
    return R::failure(error);
  };
  if (attrs_of_file || as_user) {
    // For the control socket's reads (attrs_of_file alone) the mount judges the caller by these
    // attributes: the file keeps to the handle it has.
    auto own = own_attrs(*f->file, as_user, flags);
    if (!own) return fail(own.error());
    f->attrs = *own;
  }
  if (as_user) {
    if (S_ISDIR(f->attrs.permissions)) return fail(EISDIR);  // a create that found a directory
    if (!may_open(f->attrs, *as_user, flags)) return fail(EACCES);
    if (flags & O_TRUNC) {
      if (auto cut = f->file->truncate(0); !cut) return fail(cut.error());
    }
  }
  if (flags & O_TRUNC) f->attrs.size = 0;
  return Opened{register_file(f->file, mount, vpath), f->attrs, std::nullopt};
}

Result<NamespaceFs::Opened> NamespaceFs::create(const std::string& vpath, int flags, uint32_t mode,
                                                std::string_view mount,
                                                const Credentials* as_user) {
  // A file made for such a user is used only through the handles it was made with: its user's
  // rights to it came from making it, not from its attributes (the server's account owns it), so
  // no file opened by its name later could be told to be the same.
  auto made_for = [&](Created& made) {
    if (as_user) made.file->judge_new_handles({});
    return Opened{register_file(made.file, mount, vpath), made.attrs, made.parent_attrs};
  };
  if (!room_for_a_file()) return Result<Opened>::failure(EMFILE);
  if (as_user && !(flags & O_EXCL)) {
    // A new file, or the file found at the name judged as the user's open of it would be; a few
    // times while it comes and goes.
    for (int attempt = 0;; ++attempt) {
      auto made = create_at(locate(vpath), vpath, flags | O_EXCL, mode);
      if (made) return made_for(*made);
      if (made.error() != EEXIST) return Result<Opened>::failure(made.error());
      auto found = open(vpath, flags & ~(O_CREAT | O_EXCL), mount, true, as_user);
      if (found || found.error() != ENOENT || attempt == 2) return found;
    }
  }
  auto c = create_at(locate(vpath), vpath, flags, mode);
  if (!c) return Result<Opened>::failure(c.error());
  return made_for(*c);
}

Result<Created> NamespaceFs::create_at(const Located& at, const std::string& vpath, int flags,
                                       uint32_t mode) {
  if (at.table->is_synthetic_dir(vpath)) return Result<Created>::failure(EISDIR);
  if (!at.mount) return Result<Created>::failure(EACCES);
  return at.mount->layout->create(at.rel, flags, mode);
}

Result<std::shared_ptr<OpenFile>> NamespaceFs::file(uint64_t handle, const std::string& vpath,
                                                    int flags, const CreateAtFirstUse* create,
                                                    std::string_view mount,
                                                    const Credentials* as_user) {
  using R = Result<std::shared_ptr<OpenFile>>;
  auto t = locate(vpath);
  std::promise<R> opening;
  {
    std::unique_lock lock(files_mu_);
    auto it = files_.find(handle);
    // As it is: the client's path is where its mount last saw the file, which a rename through
    // another mount has moved since (the gateway moved the file's path then: moved_open_files).
    if (it != files_.end()) return it->second;
    if (released_locked(handle)) return R::failure(EBADF);
    auto pending = reopening_.find(handle);
    if (pending != reopening_.end()) {
      Reopen other = pending->second;
      lock.unlock();  // wait for the caller that opens it
      return other.get();
    }
    if (!room_for_a_file_locked()) return R::failure(EMFILE);
    reopening_.emplace(handle, opening.get_future().share());
  }
  // Soft state: re-open by path; or the first use of an asynchronous create: create it. Without
  // O_TRUNC: a mount creates asynchronously only where its lookup found no such name, so a file
  // there now was made since (by another mount, or on the server), after this create as the
  // application saw it; truncating it would throw its bytes away. The cost: where the mount's
  // "no such name" was already out of date (a name made a moment before, whose invalidation had
  // not reached it), the application's O_TRUNC is lost and a longer file keeps its tail.
  R r = R::failure(EIO);
  if (!create) {
    r = reopen(t, flags, as_user);
  } else if (auto made = create_at(t, vpath, flags & ~O_TRUNC, create->mode); !made) {
    r = R::failure(made.error());
  } else {
    r = made->file;
    if (create->made) *create->made = Opened{handle, made->attrs, made->parent_attrs};
  }
  {
    std::lock_guard lock(files_mu_);
    // Released while it opened: this call has it, and its end closes it.
    if (r && !released_locked(handle) && files_.emplace(handle, *r).second) {
      paths_[handle] = vpath;
      if (!mount.empty()) holders_[handle] = std::string(mount);
    }
    reopening_.erase(handle);
  }
  opening.set_value(r);
  return r;
}

Result<std::shared_ptr<OpenFile>> NamespaceFs::reopen(const Located& at, int flags,
                                                      const Credentials* as_user) {
  using R = Result<std::shared_ptr<OpenFile>>;
  if (!at.mount) return R::failure(ENOENT);
  flags &= ~(O_CREAT | O_EXCL | O_TRUNC);
  auto f = at.mount->layout->open(at.rel, flags);
  if (f && as_user) {
    // Judged as the open it stands for was: the name may lead to another file by now.
    auto own = own_attrs(**f, as_user, flags);
    if (!own || !may_open(*own, *as_user, flags)) {
      (void)(*f)->close();
      return R::failure(own ? EACCES : own.error());
    }
  }
  if (f) return std::move(*f);
  // The client holds the file open: not found while one of its servers is down means it is on
  // that server, out of reach, not gone.
  if (f.error() == ENOENT)
    for (auto& b : at.mount->layout->backends())
      if (!b->up()) return R::failure(EIO);
  return R::failure(f.error());
}

Result<std::shared_ptr<OpenFile>> NamespaceFs::file_for_one_read(uint64_t handle,
                                                                 const std::string& vpath,
                                                                 bool& just_opened) {
  just_opened = false;
  bool held;
  {
    std::lock_guard lock(files_mu_);
    if (released_locked(handle)) return Result<std::shared_ptr<OpenFile>>::failure(EBADF);
    held = files_.count(handle) || reopening_.count(handle);
  }
  // A handle the gateway holds, or is opening for keeps for another read: read through that.
  if (held) return file(handle, vpath, O_RDONLY);
  auto f = reopen(locate(vpath), O_RDONLY);
  just_opened = f.ok();
  return f;
}

std::vector<Result<WholeFile>> NamespaceFs::read_whole_files(const std::vector<std::string>& vpaths,
                                                             uint32_t max_bytes,
                                                             bool attrs_of_files) {
  std::vector<Result<WholeFile>> out(vpaths.size(), Result<WholeFile>::failure(EIO));
  std::vector<MountBatch<Located, std::string>> batches;
  for (size_t i = 0; i < vpaths.size(); ++i) {
    auto t = locate(vpaths[i]);
    if (!t.mount) {
      out[i] = Result<WholeFile>::failure(t.table->is_synthetic_dir(vpaths[i]) ? EISDIR : ENOENT);
      continue;
    }
    add_to_batch(batches, t, i, t.rel);
  }
  answer_batches(batches, out, [&](const auto& b) {
    return b.at.mount->layout->read_whole_files(b.items, max_bytes, attrs_of_files);
  });
  return out;
}

std::vector<Result<MadeWholeFile>> NamespaceFs::write_whole_files(std::vector<NewWholeFile> files) {
  using R = Result<MadeWholeFile>;
  std::vector<R> out(files.size(), R::failure(EIO));
  std::vector<std::string> vpaths(files.size());
  std::vector<MountBatch<Located, NewWholeFile>> batches;
  for (size_t i = 0; i < files.size(); ++i) {
    NewWholeFile& f = files[i];
    if (f.partial == f.path || parent_path(f.partial) != parent_path(f.path)) {
      out[i] = R::failure(EINVAL);
      continue;
    }
    auto at = locate(f.path);
    auto part = locate(f.partial);
    if (at.table->is_synthetic_dir(f.path) || part.table->is_synthetic_dir(f.partial)) {
      out[i] = R::failure(EISDIR);
      continue;
    }
    if (!at.mount || !part.mount) {
      out[i] = R::failure(EACCES);
      continue;
    }
    if (at.mount != part.mount || at.table != part.table) {
      out[i] = R::failure(EXDEV);
      continue;
    }
    vpaths[i] = f.path;
    f.path = at.rel;
    f.partial = std::move(part.rel);
    add_to_batch(batches, at, i, std::move(f));
  }
  answer_batches(batches, out,
                 [](const auto& b) { return b.at.mount->layout->write_whole_files(b.items); });
  // Each name made names a new file, whatever other file's name it was.
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i] && !vpaths[i].empty()) links_.removed(vpaths[i]);
  return out;
}

Status NamespaceFs::release(uint64_t handle) {
  std::shared_ptr<OpenFile> f;
  {
    std::lock_guard lock(files_mu_);
    const auto now = std::chrono::steady_clock::now();
    while (!released_order_.empty() && (released_order_.size() >= kReleasedKept ||
                                        now - released_order_.front().first > kReleasedFor)) {
      released_.erase(released_order_.front().second);
      released_order_.pop_front();
    }
    if (released_.insert(handle).second) released_order_.emplace_back(now, handle);
    holders_.erase(handle);
    paths_.erase(handle);
    auto it = files_.find(handle);
    if (it == files_.end()) return ok_status();
    f = std::move(it->second);
    files_.erase(it);
  }
  return f->close();
}

size_t NamespaceFs::release_all_of(const std::string& mount) {
  std::vector<uint64_t> held;
  {
    std::lock_guard lock(files_mu_);
    for (auto& [handle, holder] : holders_)
      if (holder == mount) held.push_back(handle);
  }
  for (uint64_t handle : held) (void)release(handle);
  return held.size();
}

size_t NamespaceFs::open_files() const {
  std::lock_guard lock(files_mu_);
  return files_.size();
}

}  // namespace skein
