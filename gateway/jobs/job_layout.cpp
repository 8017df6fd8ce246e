// Job namespaces' ownership and quota over another layout; see job_layout.hpp.
#include "jobs/job_layout.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace skein {
namespace {

// `a` as the job's owner owns it.
sftp::Attrs with_owner(sftp::Attrs a, uint32_t uid, uint32_t gid) {
  a.flags |= sftp::ATTR_UIDGID;
  a.uid = uid;
  a.gid = gid;
  return a;
}

// A handle of a job's file: the attributes it reports carry the job's owner, as every other
// answer of the layout does (a caller judged by the attributes of the file it opened is judged by
// the owner the kernel was shown). Open for reading only, it is all there is to the handle.
class OwnedFile : public OpenFile {
 public:
  OwnedFile(std::shared_ptr<OpenFile> inner, uint32_t uid, uint32_t gid)
      : inner_(std::move(inner)), uid_(uid), gid_(gid) {}

  const std::shared_ptr<OpenFile>& inner() const { return inner_; }

  Result<SharedBytes> read(uint64_t offset, uint32_t size) override {
    return inner_->read(offset, size);
  }
  Result<ReadWithAttrs> read_reporting_attrs(uint64_t offset, uint32_t size) override {
    auto r = inner_->read_reporting_attrs(offset, size);
    if (r) r->attrs = owned(r->attrs);
    return r;
  }
  Result<uint32_t> write(uint64_t offset, const SharedBytes& data) override {
    return inner_->write(offset, data);  // refused by the server: the file is open for reading
  }
  Status fsync() override { return inner_->fsync(); }
  Status truncate(uint64_t size) override { return inner_->truncate(size); }
  Result<sftp::Attrs> fstat() override {
    auto a = inner_->fstat();
    if (a) *a = owned(*a);
    return a;
  }
  // As JobLayout::setattr: the servers see one service account, so the owner stays the job's;
  // the size through truncate() (counted, CountedFile).
  Result<sftp::Attrs> set_attrs(const AttrChange& change) override {
    if ((change.uid && *change.uid != uid_) || (change.gid && *change.gid != gid_))
      return Result<sftp::Attrs>::failure(EPERM);
    AttrChange as_set = change;  // the owner asked for is the job's already
    as_set.uid.reset();
    as_set.gid.reset();
    return set_size_then(as_set, [&](const AttrChange& rest) -> Status {
      if (auto r = inner_->set_attrs(rest); !r) return Status::failure(r.error());
      return ok_status();
    });
  }
  Status close() override { return inner_->close(); }
  std::string rel_path() const override { return inner_->rel_path(); }
  void renamed(std::string new_rel) override { inner_->renamed(std::move(new_rel)); }
  // Judged as fstat() shows the file: owned by the job's user.
  void judge_new_handles(HandleJudge may_use) override {
    inner_->judge_new_handles(as_owned(std::move(may_use)));
  }
  Result<sftp::Attrs> judge_handles(HandleJudge may_use) override {
    auto a = inner_->judge_handles(as_owned(std::move(may_use)));
    if (a) *a = owned(*a);
    return a;
  }

 protected:
  sftp::Attrs owned(const sftp::Attrs& a) const { return with_owner(a, uid_, gid_); }

  std::shared_ptr<OpenFile> inner_;

 private:
  // `may_use` of the attributes as fstat() shows them; empty (nothing by path) stays empty.
  HandleJudge as_owned(HandleJudge may_use) const {
    if (!may_use) return {};
    return [uid = uid_, gid = gid_, may_use = std::move(may_use)](const sftp::Attrs& a) {
      return may_use(with_owner(a, uid, gid));
    };
  }

  uint32_t uid_, gid_;
};

// The file at `rel` changed size: the cells of its other names (each name has its own) no longer
// know it, and ask the server at their next change.
void others_ask_again(OpenSizes& sizes, LinkNames& links, const std::string& rel) {
  for (const std::string& other : links.others(rel)) {
    auto cell = sizes.find(other);
    if (!cell) continue;
    std::lock_guard lock(cell->mu);
    cell->known = false;
  }
}

// A handle open for writing: what its writes add to the file's size, and what its truncations
// add or give back, is counted against the quota before the request goes out (once per name of
// the file, LinkNames). The attributes it reports carry the job's owner (OwnedFile).
class CountedFile final : public OwnedFile {
 public:
  CountedFile(std::shared_ptr<OpenFile> inner, std::shared_ptr<OpenSizes::Cell> cell,
              std::shared_ptr<Quota> quota, std::shared_ptr<LinkNames> links,
              std::shared_ptr<OpenSizes> sizes, uint32_t uid, uint32_t gid, bool append)
      : OwnedFile(std::move(inner), uid, gid),
        cell_(std::move(cell)),
        quota_(std::move(quota)),
        links_(std::move(links)),
        sizes_(std::move(sizes)),
        append_(append) {}

  const std::shared_ptr<OpenSizes::Cell>& cell() const { return cell_; }

  Result<uint32_t> write(uint64_t offset, const SharedBytes& data) override {
    std::shared_lock in_flight(cell_->changing);
    auto charge = count_write(offset, data.size());
    if (!charge) return Result<uint32_t>::failure(charge.error());
    auto w = inner_->write(offset, data);
    if (!w) undo_write(*charge);
    if (charge->bytes) others_ask_again(*sizes_, *links_, inner_->rel_path());
    return w;
  }
  Result<Written> write_reporting_attrs(uint64_t offset, const SharedBytes& data) override {
    std::shared_lock in_flight(cell_->changing);
    auto charge = count_write(offset, data.size());
    if (!charge) return Result<Written>::failure(charge.error());
    auto w = inner_->write_reporting_attrs(offset, data);
    if (!w) undo_write(*charge);
    if (w && w->attrs) w->attrs = owned(*w->attrs);
    if (charge->bytes) others_ask_again(*sizes_, *links_, inner_->rel_path());
    return w;
  }

  Status truncate(uint64_t size) override {
    if (size > kMaxFileSize) return Status::failure(EFBIG);
    std::unique_lock no_write_in_flight(cell_->changing);
    Status st = truncate_counted(size);
    others_ask_again(*sizes_, *links_, inner_->rel_path());
    return st;
  }

 private:
  // truncate(), with the writes in flight ended.
  Status truncate_counted(uint64_t size) {
    Charge change;  // a growing truncation's bytes taken; a shrinking one's given once it is done
    uint64_t giving = 0;
    {
      std::lock_guard lock(cell_->mu);
      if (auto st = know_size(); !st) return st;
      const uint64_t names = links_->names(inner_->rel_path());
      change = {cell_->size, size, 0};
      if (size > cell_->size) {
        change.bytes = bytes_of_names(size - cell_->size, names);
        if (!quota_->take_bytes(change.bytes)) return Status::failure(EDQUOT);
      } else {
        giving = bytes_of_names(cell_->size - size, names);
      }
      cell_->size = size;
    }
    Status st = inner_->truncate(size);
    if (!st && change.bytes)
      undo_write(change);  // it may have grown the file in part (a striped file's servers)
    else if (!st)
      undo(change);
    else if (giving)
      quota_->give_bytes(giving);
    return st;
  }

  // A change of the file's size, as counted: the size before and after, and the bytes taken.
  struct Charge {
    uint64_t before = 0, after = 0, bytes = 0;
  };
  // What a write of `size` bytes at `offset` adds to the file, taken from the quota first (EDQUOT
  // if it has no room); undone if the write fails.
  Result<Charge> count_write(uint64_t offset, uint64_t size) {
    std::lock_guard lock(cell_->mu);
    if (auto st = know_size(); !st) return Result<Charge>::failure(st.error());
    // An appending write lands at the end, wherever the caller (a kernel whose idea of the size
    // is old: another node appended meanwhile) put it.
    const uint64_t start = append_ ? std::max(offset, cell_->size) : offset;
    if (start > kMaxFileSize || size > kMaxFileSize - start) return Result<Charge>::failure(EFBIG);
    const uint64_t end = start + size;
    Charge c{cell_->size, cell_->size, 0};
    if (end > cell_->size) {
      c.bytes = bytes_of_names(end - cell_->size, links_->names(inner_->rel_path()));
      if (!quota_->take_bytes(c.bytes)) return Result<Charge>::failure(EDQUOT);
      cell_->size = c.after = end;
    }
    return c;
  }
  // A write counted as `c` failed. It may have landed in part (one server of a striped file took
  // its stripes, one chunk of a pipelined write failed, a connection dropped after the server
  // wrote): what the file holds now is asked, and only the bytes it did not grow by are given
  // back. Without an answer the count stays as it is, high, until the namespace is counted again,
  // and the file's size is asked again at its next change. As undo() when another change of the
  // size came since.
  void undo_write(const Charge& c) {
    std::lock_guard lock(cell_->mu);
    if (cell_->size != c.after || !c.bytes) return;
    auto now = inner_->fstat();
    if (!now) {
      cell_->known = false;
      return;
    }
    const uint64_t landed = std::clamp(now->size, c.before, c.after);
    cell_->size = landed;
    // bytes_of_names is linear in the bytes: the bytes per byte of growth are the names.
    const uint64_t names = c.bytes / (c.after - c.before);
    quota_->give_bytes((c.after - landed) * names);
  }
  // The change `c` failed on the server: its count is undone, unless another change of the size
  // came since (the count then stays high until the namespace is counted again).
  void undo(const Charge& c) {
    std::lock_guard lock(cell_->mu);
    if (cell_->size != c.after) return;
    cell_->size = c.before;
    if (c.bytes) quota_->give_bytes(c.bytes);
  }

  // Caller holds cell_->mu.
  Status know_size() {
    if (cell_->known) return ok_status();
    auto a = inner_->fstat();
    if (!a) return Status::failure(a.error());
    cell_->size = a->size;
    cell_->known = true;
    return ok_status();
  }

  std::shared_ptr<OpenSizes::Cell> cell_;
  std::shared_ptr<Quota> quota_;
  std::shared_ptr<LinkNames> links_;
  std::shared_ptr<OpenSizes> sizes_;
  const bool append_;  // opened O_APPEND: writes land at the file's end
};

bool writes(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC); }

}  // namespace

JobLayout::JobLayout(std::shared_ptr<Layout> inner, uint32_t uid, uint32_t gid,
                     std::shared_ptr<Quota> quota)
    : inner_(std::move(inner)), uid_(uid), gid_(gid), quota_(std::move(quota)) {}

sftp::Attrs JobLayout::owned(sftp::Attrs a) const { return with_owner(std::move(a), uid_, gid_); }

Result<sftp::Attrs> JobLayout::owned(Result<sftp::Attrs> r) const {
  if (!r) return r;
  return owned(*r);
}

void JobLayout::give_back(const sftp::Attrs& a) {
  if (S_ISREG(a.permissions)) quota_->give_bytes(a.size);
  quota_->give_inodes(1);
}

std::shared_ptr<OpenFile> JobLayout::counted(std::shared_ptr<OpenFile> file, const std::string& rel,
                                             std::optional<uint64_t> size, int flags) {
  auto cell = sizes_->acquire(rel);
  if (size) {
    std::lock_guard lock(cell->mu);
    cell->size = *size;
    cell->known = true;
  }
  return std::make_shared<CountedFile>(std::move(file), std::move(cell), quota_, links_, sizes_,
                                       uid_, gid_, (flags & O_APPEND) != 0);
}

Result<sftp::Attrs> JobLayout::getattr(const std::string& rel) {
  return owned(inner_->getattr(rel));
}

std::vector<Result<sftp::Attrs>> JobLayout::getattr_each(const std::vector<std::string>& rels) {
  auto each = inner_->getattr_each(rels);
  for (auto& a : each) a = owned(std::move(a));
  return each;
}

Result<sftp::Attrs> JobLayout::setattr(const std::string& rel, const AttrChange& change,
                                       OpenFile* open) {
  using R = Result<sftp::Attrs>;
  // The servers see one service account: a file can only ever be the job's.
  if ((change.uid && *change.uid != uid_) || (change.gid && *change.gid != gid_))
    return R::failure(EPERM);
  AttrChange rest = change;
  rest.uid.reset();
  rest.gid.reset();
  auto* counted_file = dynamic_cast<CountedFile*>(open);
  auto* owned_file = dynamic_cast<OwnedFile*>(open);
  OpenFile* inner_open = owned_file ? owned_file->inner().get() : open;
  uint64_t taken = 0;   // bytes taken for a growing truncation, given back if it fails
  uint64_t giving = 0;  // bytes a shrinking one gives back once it is done
  uint64_t from_size = 0, names = 1;       // the size as counted before, and the file's names
  std::shared_ptr<OpenSizes::Cell> sized;  // the cell set to the new size, and what it was
  std::optional<uint64_t> sized_from;
  // Held to the end of the change: no write of the file's handles lands after it uncounted.
  std::unique_lock<std::shared_mutex> no_write_in_flight;
  if (rest.size) {
    if (*rest.size > kMaxFileSize) return R::failure(EFBIG);
    auto cell = counted_file ? counted_file->cell() : sizes_->find(rel);
    uint64_t old = 0;
    std::unique_lock<std::mutex> lock;
    if (cell) {
      no_write_in_flight = std::unique_lock(cell->changing);
      lock = std::unique_lock(cell->mu);
    }
    if (cell && cell->known) {
      old = cell->size;
    } else {
      auto a = inner_->getattr(rel);
      if (!a) return R::failure(a.error());
      if (S_ISLNK(a->permissions)) return R::failure(ELOOP);
      old = a->size;
    }
    names = links_->names(rel);
    from_size = old;
    if (*rest.size > old) {
      taken = bytes_of_names(*rest.size - old, names);
      if (!quota_->take_bytes(taken)) return R::failure(EDQUOT);
    } else {
      giving = bytes_of_names(old - *rest.size, names);
    }
    if (cell) {
      sized = cell;
      if (cell->known) sized_from = cell->size;
      cell->size = *rest.size;
      cell->known = true;
    }
  }
  if (!rest.mode && !rest.size && !rest.atime_s && !rest.mtime_s) return getattr(rel);
  auto r = inner_->setattr(rel, rest, inner_open);
  if (!r) {
    // A growing truncation may have grown the file in part (a striped file's servers): what it
    // holds now is asked, and only the bytes it did not grow by are given back. Without an
    // answer, all of them (and the size is asked again at the next change).
    std::optional<uint64_t> landed;
    if (taken) {
      if (auto now = inner_->getattr(rel); now && S_ISREG(now->permissions))
        landed = std::clamp<uint64_t>(now->size, from_size, *rest.size);
      quota_->give_bytes(landed ? taken - bytes_of_names(*landed - from_size, names) : taken);
    }
    if (sized) {  // the size stays what it was, unless another change came since
      std::lock_guard lock(sized->mu);
      if (sized->size == *rest.size) {
        sized->known = landed.has_value() || sized_from.has_value();
        sized->size = landed ? *landed : sized_from.value_or(0);
      }
    }
  } else if (giving) {
    quota_->give_bytes(giving);
  }
  if (r && rest.size) others_ask_again(*sizes_, *links_, rel);
  return owned(r);
}

Result<std::vector<DirEntryAttrs>> JobLayout::readdir(const std::string& rel) {
  auto r = inner_->readdir(rel);
  if (r)
    for (auto& e : *r) e.attrs = owned(e.attrs);
  return r;
}

Result<sftp::Attrs> JobLayout::mkdir(const std::string& rel, uint32_t mode) {
  if (!quota_->take_inodes(1)) return Result<sftp::Attrs>::failure(EDQUOT);
  auto r = inner_->mkdir(rel, mode);
  if (!r) quota_->give_inodes(1);
  return owned(r);
}

Status JobLayout::rmdir(const std::string& rel) {
  auto st = inner_->rmdir(rel);
  if (st) quota_->give_inodes(1);
  return st;
}

Status JobLayout::unlink(const std::string& rel) {
  std::lock_guard name(names_.of(rel));
  auto a = inner_->getattr(rel);
  if (!a) return Status::failure(a.error());
  auto st = inner_->unlink(rel);
  if (st) removed(rel, *a);
  return st;
}

Result<std::optional<sftp::Attrs>> JobLayout::unlink_reporting_parent(const std::string& rel) {
  std::lock_guard name(names_.of(rel));
  auto a = inner_->getattr(rel);
  if (!a) return Result<std::optional<sftp::Attrs>>::failure(a.error());
  auto r = inner_->unlink_reporting_parent(rel);
  if (r) {
    removed(rel, *a);
    if (*r) *r = owned(**r);
  }
  return r;
}

void JobLayout::removed(const std::string& rel, const sftp::Attrs& attrs) {
  name_goes(rel, attrs);
  sizes_->removed(rel);
  links_->removed(rel);
}

void JobLayout::name_goes(const std::string& rel, const sftp::Attrs& a) {
  if (S_ISREG(a.permissions) && links_->names(rel) == 1) {
    if (auto cell = sizes_->find(rel)) {
      std::lock_guard lock(cell->mu);
      if (!cell->known) {  // what it counts for now
        cell->size = a.size;
        cell->known = true;
      }
      cell->orphan_of = quota_;
      quota_->give_inodes(1);
      return;
    }
  }
  give_back(a);
}

Status JobLayout::rename(const std::string& from, const std::string& to, unsigned flags) {
  // Two names of one file: rename(2) does nothing, and both stay.
  if (from == to || links_->same_file(from, to)) return inner_->rename(from, to, flags);
  auto locked = names_.both(from, to);
  std::optional<sftp::Attrs> replaced;
  if (!(flags & 1)) {  // without RENAME_NOREPLACE, an old `to` goes
    if (auto a = inner_->getattr(to)) replaced = *a;
  }
  auto st = inner_->rename(from, to, flags);
  if (st && replaced && S_ISREG(replaced->permissions) && inner_->getattr(from)) {
    // `from` is still there: the two were names of one file (linked before this gateway
    // started, so not known as such), and rename(2) did nothing.
    return st;
  }
  if (st) {
    if (replaced) name_goes(to, *replaced);
    sizes_->renamed(from, to);
    links_->renamed(from, to);
  }
  return st;
}

Result<sftp::Attrs> JobLayout::symlink(const std::string& rel, const std::string& target) {
  if (!quota_->take_inodes(1)) return Result<sftp::Attrs>::failure(EDQUOT);
  auto r = inner_->symlink(rel, target);
  if (!r) quota_->give_inodes(1);
  return owned(r);
}

Result<std::string> JobLayout::readlink(const std::string& rel) { return inner_->readlink(rel); }

Result<sftp::Attrs> JobLayout::link(const std::string& existing, const std::string& rel) {
  using R = Result<sftp::Attrs>;
  // Usage counts names: a second name of a file counts as much as a copy would.
  auto a = inner_->getattr(existing);
  if (!a) return R::failure(a.error());
  const uint64_t bytes = S_ISREG(a->permissions) ? a->size : 0;
  if (!quota_->take_inodes(1)) return R::failure(EDQUOT);
  if (!quota_->take_bytes(bytes)) {
    quota_->give_inodes(1);
    return R::failure(EDQUOT);
  }
  auto r = inner_->link(existing, rel);
  if (!r) {
    quota_->give_inodes(1);
    quota_->give_bytes(bytes);
  } else {
    links_->linked(existing, rel);
  }
  return owned(r);
}

Result<sftp::StatVfs> JobLayout::statfs(const std::string&) {
  // df shows the quota: its size, what is used, what is left.
  auto u = quota_->usage();
  sftp::StatVfs v{};
  v.bsize = v.frsize = 4096;
  v.blocks = u.bytes_limit / 4096;
  uint64_t used_blocks = (u.bytes + 4095) / 4096;
  v.bfree = v.bavail = used_blocks >= v.blocks ? 0 : v.blocks - used_blocks;
  v.files = u.inodes_limit;
  v.ffree = v.favail = u.inodes >= u.inodes_limit ? 0 : u.inodes_limit - u.inodes;
  v.namemax = 255;
  return v;
}

Result<std::shared_ptr<OpenFile>> JobLayout::open(const std::string& rel, int flags) {
  return open_through(rel, flags, false);
}

Result<std::shared_ptr<OpenFile>> JobLayout::open_to_change(const std::string& rel, int flags) {
  return open_through(rel, flags, true);
}

Result<std::shared_ptr<OpenFile>> JobLayout::open_through(const std::string& rel, int flags,
                                                          bool to_change) {
  using R = Result<std::shared_ptr<OpenFile>>;
  std::optional<uint64_t> truncated_from;
  // Held while the open truncates, until the handles' cell says the file is empty (counted()).
  std::unique_lock<std::shared_mutex> no_write_in_flight;
  if (flags & O_TRUNC) {
    auto cell = sizes_->find(rel);
    std::optional<uint64_t> known;
    if (cell) {
      no_write_in_flight = std::unique_lock(cell->changing);
      std::lock_guard lock(cell->mu);
      if (cell->known) known = cell->size;
    }
    if (!known) {
      auto a = inner_->getattr(rel);
      if (!a) return R::failure(a.error());
      known = S_ISREG(a->permissions) ? a->size : 0;
    }
    truncated_from = known;
  }
  auto f = to_change ? inner_->open_to_change(rel, flags) : inner_->open(rel, flags);
  if (!f) return f;
  if (!writes(flags)) return std::shared_ptr<OpenFile>(std::make_shared<OwnedFile>(*f, uid_, gid_));
  if (!truncated_from) return counted(*f, rel, std::nullopt, flags);
  quota_->give_bytes(bytes_of_names(*truncated_from, links_->names(rel)));
  auto file = counted(*f, rel, 0, flags);  // the cell of every handle of `rel`: empty now
  others_ask_again(*sizes_, *links_, rel);
  return file;
}

Result<Created> JobLayout::create(const std::string& rel, int flags, uint32_t mode) {
  using R = Result<Created>;
  // Held until the new file's handles are counted: an unlink of the name meanwhile would find no
  // count to leave as an orphan's, and the bytes written through the handle would stay taken.
  std::lock_guard name(names_.of(rel));
  if (!quota_->take_inodes(1)) return R::failure(EDQUOT);
  // Always exclusive below: a name that exists takes no inode, and is opened as by open().
  auto c = inner_->create(rel, flags | O_EXCL, mode);
  if (!c) {
    quota_->give_inodes(1);
    if (c.error() != EEXIST || (flags & O_EXCL)) return R::failure(c.error());
    auto f = open(rel, flags & ~(O_CREAT | O_EXCL));
    if (!f) return R::failure(f.error());
    auto a = (*f)->fstat();
    if (!a) return R::failure(a.error());
    return Created{*f, owned(*a), std::nullopt};
  }
  c->attrs = owned(c->attrs);
  if (c->parent_attrs) c->parent_attrs = owned(*c->parent_attrs);
  c->file = counted(c->file, rel, static_cast<uint64_t>(0), flags);
  return c;
}

std::vector<Result<MadeWholeFile>> JobLayout::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  using R = Result<MadeWholeFile>;
  std::vector<R> out(files.size(), R::failure(EIO));
  // What is at each path now (what its rename will replace, as rename()) and at each partial's
  // name: a partial a killed copy left is removed by the write (Layout::write_whole_files), and
  // its count goes with it.
  std::vector<std::string> paths;
  for (const NewWholeFile& f : files) paths.push_back(f.path);
  for (const NewWholeFile& f : files) paths.push_back(f.partial);
  // The names are held from the look at what is there to the count of what was made, as an
  // unlink or a rename holds its names: one of them meanwhile would give back what these files
  // are counted as replacing, and again as they replace it.
  const auto held = names_.all(paths);
  const auto there = inner_->getattr_each(paths);
  // Each file takes what it adds to what it replaces, before anything is sent: its inode unless
  // it replaces a name, and its bytes past those of the file it replaces (a file copied again
  // over itself takes nothing, however full the quota). A path named twice in one call: its
  // second file replaces its first (the renames go in order), which it is counted against once
  // made; only the first is counted against what was there before the call.
  struct Taken {
    uint64_t bytes = 0;     // taken now
    uint64_t replaces = 0;  // the bytes of what it replaces, counted against it
    bool inode = false;     // taken now (it replaces no name)
  };
  std::vector<NewWholeFile> sent;
  std::vector<size_t> which;
  std::vector<Taken> taken;
  std::set<std::string> counted_against;
  for (size_t i = 0; i < files.size(); ++i) {
    Taken t;
    const Result<sftp::Attrs>& old = there[i];
    const bool replaces = counted_against.insert(files[i].path).second && old &&
                          !S_ISDIR(old->permissions);  // a directory there: the rename fails
    if (replaces && S_ISREG(old->permissions)) t.replaces = old->size;
    t.inode = !replaces;
    const uint64_t size = files[i].data.size();
    t.bytes = size > t.replaces ? size - t.replaces : 0;
    if (t.inode && !quota_->take_inodes(1)) {
      out[i] = R::failure(EDQUOT);
      continue;
    }
    if (!quota_->take_bytes(t.bytes)) {
      if (t.inode) quota_->give_inodes(1);
      out[i] = R::failure(EDQUOT);
      continue;
    }
    sent.push_back(files[i]);
    which.push_back(i);
    taken.push_back(t);
  }
  auto made = inner_->write_whole_files(sent);
  std::map<std::string, sftp::Attrs> made_here;
  for (size_t k = 0; k < which.size(); ++k) {
    const NewWholeFile& f = sent[k];
    const Taken& t = taken[k];
    if (k >= made.size() || !made[k]) {
      quota_->give_bytes(t.bytes);
      if (t.inode) quota_->give_inodes(1);
      out[which[k]] = k < made.size() ? std::move(made[k]) : R::failure(EIO);
      continue;
    }
    if (auto earlier = made_here.find(f.path); earlier != made_here.end()) {
      give_back(earlier->second);  // this file was counted whole, with an inode of its own
    } else if (!t.inode && t.replaces > f.data.size()) {
      quota_->give_bytes(t.replaces - f.data.size());  // it replaced a larger file
    }
    made_here[f.path] = made[k]->attrs;
    const Result<sftp::Attrs>& left_partial = there[files.size() + which[k]];
    if (left_partial && !made_here.count(f.partial)) give_back(*left_partial);
    sizes_->renamed(f.partial, f.path);
    // The partial is a new file, whatever name of another one was at its name before (it was
    // removed), and goes to f.path.
    links_->removed(f.partial);
    links_->renamed(f.partial, f.path);
    made[k]->attrs = owned(made[k]->attrs);
    if (made[k]->parent_attrs) made[k]->parent_attrs = owned(*made[k]->parent_attrs);
    out[which[k]] = std::move(made[k]);
  }
  return out;
}

}  // namespace skein
