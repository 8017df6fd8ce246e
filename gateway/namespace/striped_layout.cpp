// Striped layout; see striped_layout.hpp and docs/striping.md.
#include "namespace/striped_layout.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <set>
#include <unordered_map>

#include "namespace/clone_dirs.hpp"
#include "namespace/striped_file.hpp"
#include "skein/path.hpp"

namespace skein {
namespace {

Status status_of(int err) { return err ? Status::failure(err) : ok_status(); }

// OpenSSH's long name is `ls -l` output; its second field is the link count.
uint32_t link_count(const std::string& longname) {
  auto sp = longname.find(' ');
  if (sp == std::string::npos) return 1;
  auto start = longname.find_first_not_of(' ', sp);
  if (start == std::string::npos) return 1;
  return static_cast<uint32_t>(std::max(1l, std::atol(longname.c_str() + start)));
}

}  // namespace

StripedLayout::StripedLayout(std::vector<std::shared_ptr<Backend>> backends, uint64_t stripe_size)
    : backends_(std::move(backends)), map_(stripe_size, static_cast<uint32_t>(backends_.size())) {}

std::string StripedLayout::shape() const {
  std::string out =
      "striped(" + stripe_size_text(map_.stripe_size()) + " x " + std::to_string(width());
  for (size_t b = 0; b < width(); ++b) out += (b ? ", " : ": ") + backends_[b]->name();
  return out + ")";
}

std::string StripedLayout::refusal() const {
  std::lock_guard lock(refusal_mu_);
  return refusal_;
}

void StripedLayout::set_refusal(std::string why) {
  std::lock_guard lock(refusal_mu_);
  refusal_ = std::move(why);
}

std::string StripedLayout::problem() const {
  auto why = refusal();
  return why.empty() ? why : "refused: " + why;
}

std::string StripedLayout::describe() const {
  auto why = problem();
  return why.empty() ? shape() : shape() + " " + why;
}

Status StripedLayout::all_up() const {
  for (auto& b : backends_)
    if (!b->up()) return Status::failure(EIO);
  return ok_status();
}

namespace {
// Indices 1 .. n-1: the backends that hold parts only.
std::vector<size_t> part_backends(size_t n) {
  std::vector<size_t> out;
  for (size_t b = 1; b < n; ++b) out.push_back(b);
  return out;
}

constexpr auto kRecheckAfterRefusal = std::chrono::seconds(2);
constexpr uint32_t kRecordMaxBytes = 64 << 10;

// A name in the layout's root that the stripe records take.
bool is_record_name(std::string_view name) {
  return name == kStripeRecordName || name == kStripeRecordTemp;
}
bool is_record_path(std::string_view rel) {
  return rel.starts_with('/') && is_record_name(rel.substr(1));
}
std::string root_path(std::string_view name) { return "/" + std::string(name); }
}  // namespace

Status StripedLayout::ready(const std::string& rel, int reserved_err) {
  if (is_record_path(rel)) return Status::failure(reserved_err);
  if (records_ok_.load(std::memory_order_acquire)) return ok_status();
  return check_records();
}

Result<FoundRecord> StripedLayout::read_record(size_t b) {
  using R = Result<FoundRecord>;
  FoundRecord found;
  auto f = backends_[b]->open(root_path(kStripeRecordName), O_RDONLY, 0);
  if (!f) return f.error() == ENOENT ? R(found) : R::failure(f.error());
  found.present = true;
  auto text = (*f)->read(0, kRecordMaxBytes);
  (void)(*f)->close();
  if (!text) return R::failure(text.error());
  found.record = parse_stripe_record(text->flatten(), found.error);
  return found;
}

Status StripedLayout::write_record(size_t b, const StripeRecord& record) {
  Backend& be = *backends_[b];
  const std::string temp = root_path(kStripeRecordTemp);
  auto text = std::make_shared<std::string>(format_stripe_record(record));
  auto f = be.open(temp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!f) return Status::failure(f.error());
  auto wrote = (*f)->write(0, SharedBytes({std::string_view(*text)}, text));
  auto synced = wrote ? (*f)->fsync() : Status::failure(wrote.error());
  auto closed = (*f)->close();
  if (!synced) return synced;
  if (!closed) return closed;
  return be.rename(temp, root_path(kStripeRecordName), 0);
}

Status StripedLayout::check_records() {
  std::lock_guard lock(check_mu_);
  if (records_ok_.load(std::memory_order_acquire)) return ok_status();
  const auto now = std::chrono::steady_clock::now();
  const std::string before = refusal();
  if (!before.empty() && now - refused_at_ < kRecheckAfterRefusal) return Status::failure(EIO);
  if (auto st = all_up(); !st) return st;

  std::vector<std::string> names;
  for (auto& b : backends_) names.push_back(b->name());
  auto reads = fan_out(width(), [&](size_t b) { return read_record(b); });
  std::vector<FoundRecord> found;
  for (size_t b = 0; b < width(); ++b) {
    if (!reads[b]) {
      spdlog::warn("{}: cannot read the stripe record on {}: {}", shape(), names[b],
                   std::strerror(reads[b].error()));
      return Status::failure(EIO);
    }
    found.push_back(std::move(*reads[b]));
  }
  if (!found[0].present) {
    // What tells an unfinished write of the records from an empty server in backend 0's place:
    // the names at the roots of backend 0 and of the backends that hold a record.
    std::vector<size_t> to_list{0};
    for (size_t b = 1; b < width(); ++b)
      if (found[b].present) to_list.push_back(b);
    if (to_list.size() > 1) {
      auto lists = fan_out(to_list, [&](size_t b) { return backends_[b]->list_dir("/"); });
      for (size_t i = 0; i < to_list.size(); ++i) {
        const size_t b = to_list[i];
        if (!lists[i]) {
          spdlog::warn("{}: cannot list the root of {} to check its stripe record: {}", shape(),
                       names[b], std::strerror(lists[i].error()));
          return Status::failure(EIO);
        }
        for (auto& e : *lists[i])
          if (!is_record_name(e.filename)) found[b].entries.push_back(e.filename);
      }
    }
  }
  auto verdict = check_stripe_records(found, map_.stripe_size(), names);
  if (verdict.outcome == StripeCheck::Outcome::refuse) {
    if (verdict.reason != before)
      spdlog::error(
          "{}: {}. Its files would be read and written at the wrong offsets, so it answers EIO "
          "until the configuration matches them again (docs/striping.md)",
          shape(), verdict.reason);
    refused_at_ = now;
    set_refusal(std::move(verdict.reason));
    return Status::failure(EIO);
  }
  if (verdict.outcome == StripeCheck::Outcome::record_anew) {
    StripeRecord record;
    record.layout = verdict.layout.empty() ? new_stripe_layout_id() : verdict.layout;
    record.stripe_size = map_.stripe_size();
    record.width = static_cast<uint32_t>(width());
    record.backends = names;
    // Backend 0 last: its record says that every other backend has one.
    auto done = fan_out(part_backends(width()), [&](size_t b) {
      StripeRecord mine = record;
      mine.part = static_cast<uint32_t>(b);
      return write_record(b, mine);
    });
    Status st = status_of(worst_error(done));
    if (st) st = write_record(0, record);
    if (!st) {
      spdlog::warn("{}: cannot write its stripe records: {}", shape(), std::strerror(st.error()));
      return Status::failure(EIO);
    }
    spdlog::info("{}: stripe records written (layout {})", shape(), record.layout);
  } else {
    spdlog::info("{}: stripe records match (layout {})", shape(), verdict.layout);
  }
  if (!before.empty()) spdlog::info("{}: serving again", shape());
  set_refusal({});
  records_ok_.store(true, std::memory_order_release);
  return ok_status();
}

void StripedLayout::remove_orphan(size_t b, const std::string& rel) {
  Backend& be = *backends_[b];
  auto a = be.lstat(rel);
  if (!a) return;
  if (S_ISDIR(a->permissions)) {
    auto entries = be.list_dir(rel);
    if (entries)
      for (auto& e : *entries) remove_orphan(b, join_path(rel, e.filename));
    (void)be.rmdir(rel);
  } else {
    (void)be.unlink(rel);
  }
}

Status StripedLayout::make_dir_on(size_t b, const std::string& rel, uint32_t mode) {
  Backend& be = *backends_[b];
  auto st = be.mkdir(rel, mode);
  if (st) return st;
  if (st.error() == ENOENT) return clone_dirs(be, rel, primary());  // its parents are missing too
  if (st.error() != EEXIST) return st;
  auto there = be.lstat(rel);
  if (there && S_ISDIR(there->permissions)) return ok_status();
  remove_orphan(b, rel);  // backend 0 did not have the name: whatever is here is left over
  return be.mkdir(rel, mode);
}

Result<std::shared_ptr<BackendFile>> StripedLayout::open_part(size_t b, const std::string& rel,
                                                              int flags, uint32_t mode,
                                                              bool missing_ok,
                                                              const sftp::Attrs* like) {
  using R = Result<std::shared_ptr<BackendFile>>;
  Backend& be = *backends_[b];
  auto f = be.open(rel, flags, mode);
  if (f || b == 0 || f.error() != ENOENT) return f;
  // The part, or the directory it goes in, is missing here: make them.
  auto dir = clone_dirs(be, parent_path(rel), primary());
  if (dir) f = be.open(rel, flags | O_CREAT, mode);
  if (f && like && (like->flags & sftp::ATTR_UIDGID)) {
    // Made now, by the server's account: owned as part 0 is (where that account may give it
    // away), so that every part of the file shows the owner the file has; the parts of a file
    // opened for a user the gateway does not trust are each judged by their own.
    AttrChange owner;
    owner.uid = like->uid;
    owner.gid = like->gid;
    (void)(*f)->set_attrs(owner);
  }
  if (f) return f;
  int err = dir ? f.error() : dir.error();
  if (missing_ok && err != EIO) {
    spdlog::warn("striped file {}: no part on {} ({}); it reads as holes", rel, be.name(),
                 std::strerror(err));
    return std::shared_ptr<BackendFile>();
  }
  return R::failure(err);
}

Status StripedLayout::truncate_parts(const std::string& rel, uint64_t size,
                                     const sftp::Attrs& like) {
  auto done = fan_out(width(), [&](size_t b) -> Status {
    uint64_t local = map_.local_size(static_cast<uint32_t>(b), size);
    sftp::Attrs a;
    a.flags = sftp::ATTR_SIZE;
    a.size = local;
    auto st = backends_[b]->setstat(rel, a);
    if (st || b == 0 || st.error() != ENOENT) return st;
    if (local == 0) return ok_status();  // a missing part is already empty
    auto f = open_part(b, rel, O_WRONLY | O_CREAT, like.permissions & 07777, false, &like);
    if (!f) return Status::failure(f.error());
    st = (*f)->truncate(local);
    (void)(*f)->close();
    return st;
  });
  return status_of(worst_error(done));
}

Result<sftp::Attrs> StripedLayout::getattr(const std::string& rel) {
  using R = Result<sftp::Attrs>;
  if (auto ready_st = ready(rel, ENOENT); !ready_st) return R::failure(ready_st.error());
  // Ask every backend at once: a regular file's size needs all its parts.
  auto asks = Backend::lstat_each(backends_, rel);
  return combined(asks, 0);
}

std::vector<Result<sftp::Attrs>> StripedLayout::getattr_each(const std::vector<std::string>& rels) {
  using R = Result<sftp::Attrs>;
  std::vector<R> out(rels.size(), R::failure(EIO));
  std::vector<std::string> asked;
  std::vector<size_t> asked_at;
  for (size_t i = 0; i < rels.size(); ++i) {
    if (auto ready_st = ready(rels[i], ENOENT); !ready_st) {
      out[i] = R::failure(ready_st.error());
      continue;
    }
    asked.push_back(rels[i]);
    asked_at.push_back(i);
  }
  if (asked.empty()) return out;
  auto asks = Backend::lstat_each(backends_, asked);
  for (size_t k = 0; k < asked.size(); ++k) out[asked_at[k]] = combined(asks, k * width());
  return out;
}

Result<sftp::Attrs> StripedLayout::combined(Backend::LstatBatch& asks, size_t first_at) const {
  using R = Result<sftp::Attrs>;
  auto first = asks.answer(first_at);
  if (!first) return R::failure(first.error());
  if (!S_ISREG(first->permissions)) return first;
  std::vector<uint64_t> sizes(width(), 0);
  sizes[0] = first->size;
  sftp::Attrs out = *first;
  for (size_t b = 1; b < width(); ++b) {
    auto a = asks.answer(first_at + b);
    if (!a) {
      if (a.error() == ENOENT) continue;  // no part here yet: all holes
      return R::failure(a.error());
    }
    if (!S_ISREG(a->permissions)) continue;
    sizes[b] = a->size;
    // Writes touch only some parts, so the file changed when its latest part did; but an empty
    // part other than backend 0's has had no write, and may have been made long after the file
    // (a file of one stripe made by write_whole_files has no other parts until an open makes
    // them), so its times say nothing.
    if (a->size == 0) continue;
    out.mtime = std::max(out.mtime, a->mtime);
    out.atime = std::max(out.atime, a->atime);
  }
  out.size = map_.logical_size(sizes);
  return out;
}

Result<sftp::Attrs> StripedLayout::setattr(const std::string& rel, const AttrChange& ch,
                                           OpenFile* open) {
  using R = Result<sftp::Attrs>;
  if (auto ready_st = ready(rel, ENOENT); !ready_st) return R::failure(ready_st.error());
  auto cur = getattr(rel);
  if (!cur) return R::failure(cur.error());
  if (S_ISLNK(cur->permissions)) return R::failure(ELOOP);  // never changed through a symlink
  bool reg = S_ISREG(cur->permissions), dir = S_ISDIR(cur->permissions);
  sftp::Attrs a = ch.setstat_attrs(*cur);
  if ((ch.size || a.flags) && (reg || dir)) {
    auto st = all_up();
    if (!st) return R::failure(st.error());
  }
  if (ch.size) {
    if (dir) return R::failure(EISDIR);
    if (!reg) return R::failure(EINVAL);
    // Through the caller's handle where there is one: it works even where the path no longer
    // allows writing.
    auto st = open ? open->truncate(*ch.size) : truncate_parts(rel, *ch.size, *cur);
    if (!st) return R::failure(st.error());
  }
  if (a.flags) {
    // Times after the size: a truncation would move them again.
    auto st = primary().setstat(rel, a);
    if (!st) return R::failure(st.error());
    if (reg || dir) {
      auto done = fan_out(part_backends(width()), [&](size_t b) -> Status {
        auto s = backends_[b]->setstat(rel, a);
        // A missing part is made later, like backend 0's (open_part).
        return !s && s.error() == ENOENT ? ok_status() : s;
      });
      if (int err = worst_error(done)) return R::failure(err);
    }
  }
  return getattr(rel);
}

Result<std::vector<DirEntryAttrs>> StripedLayout::readdir(const std::string& rel) {
  using R = Result<std::vector<DirEntryAttrs>>;
  if (auto ready_st = ready(rel, ENOENT); !ready_st) return R::failure(ready_st.error());
  auto lists = fan_out(width(), [&](size_t b) { return backends_[b]->list_dir(rel); });
  if (!lists[0]) return R::failure(lists[0].error());
  // Names come from backend 0; the other listings give the sizes of the parts.
  std::vector<std::unordered_map<std::string_view, const sftp::Attrs*>> parts(width());
  for (size_t b = 1; b < width(); ++b) {
    if (!lists[b]) {
      if (lists[b].error() != ENOENT) return R::failure(lists[b].error());
      (void)clone_dirs(*backends_[b], rel, primary());  // missing here: repair it
      continue;
    }
    for (auto& e : *lists[b]) parts[b][e.filename] = &e.attrs;
  }
  std::vector<DirEntryAttrs> out;
  out.reserve(lists[0]->size());
  std::vector<uint64_t> sizes(width());
  for (auto& e : *lists[0]) {
    if (rel == "/" && is_record_name(e.filename)) continue;
    DirEntryAttrs d{e.filename, e.attrs, link_count(e.longname)};
    if (S_ISREG(e.attrs.permissions)) {
      sizes.assign(width(), 0);
      sizes[0] = e.attrs.size;
      for (size_t b = 1; b < width(); ++b) {
        auto it = parts[b].find(e.filename);
        if (it == parts[b].end() || !S_ISREG(it->second->permissions)) continue;
        sizes[b] = it->second->size;
        if (sizes[b] == 0) continue;  // no write landed here: its times say nothing (getattr)
        d.attrs.mtime = std::max(d.attrs.mtime, it->second->mtime);
        d.attrs.atime = std::max(d.attrs.atime, it->second->atime);
      }
      d.attrs.size = map_.logical_size(sizes);
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<sftp::Attrs> StripedLayout::mkdir(const std::string& rel, uint32_t mode) {
  using R = Result<sftp::Attrs>;
  if (auto ready_st = ready(rel, EACCES); !ready_st) return R::failure(ready_st.error());
  auto st = all_up();
  if (!st) return R::failure(st.error());
  std::lock_guard name(names_.of(rel));
  st = primary().mkdir(rel, mode);
  if (!st) return R::failure(st.error());
  auto others = part_backends(width());
  auto done = fan_out(others, [&](size_t b) { return make_dir_on(b, rel, mode); });
  if (int err = worst_error(done)) {
    for (size_t i = 0; i < others.size(); ++i)
      if (done[i]) (void)backends_[others[i]]->rmdir(rel);
    (void)primary().rmdir(rel);
    return R::failure(err);
  }
  return primary().lstat(rel);
}

Status StripedLayout::rmdir(const std::string& rel) {
  if (auto ready_st = ready(rel, ENOENT); !ready_st) return ready_st;
  auto st = all_up();
  if (!st) return st;
  std::lock_guard name(names_.of(rel));
  st = primary().rmdir(rel);  // backend 0 decides: ENOTEMPTY, ENOTDIR...
  if (!st) return st;
  (void)fan_out(part_backends(width()), [&](size_t b) {
    Backend& be = *backends_[b];
    auto s = be.rmdir(rel);
    if (s || s.error() == ENOENT) return 0;
    remove_orphan(b, rel);  // what is left here has no name on backend 0
    if (be.lstat(rel))
      spdlog::warn("striped rmdir {}: the copy on {} stays: {}", rel, be.name(),
                   std::strerror(s.error()));
    return 0;
  });
  return ok_status();
}

Status StripedLayout::unlink(const std::string& rel) {
  if (auto ready_st = ready(rel, ENOENT); !ready_st) return ready_st;
  auto st = all_up();
  if (!st) return st;
  std::lock_guard name(names_.of(rel));
  st = primary().unlink(rel);  // backend 0 decides: ENOENT, EISDIR...
  if (!st) return st;
  (void)fan_out(part_backends(width()), [&](size_t b) {
    auto s = backends_[b]->unlink(rel);
    if (!s && s.error() != ENOENT)
      spdlog::warn("striped unlink {}: the part on {} stays as an orphan: {}", rel,
                   backends_[b]->name(), std::strerror(s.error()));
    return 0;
  });
  return ok_status();
}

Status StripedLayout::rename(const std::string& from, const std::string& to, unsigned flags) {
  if (auto ready_st = ready(from, ENOENT); !ready_st) return ready_st;
  if (auto ready_st = ready(to, EACCES); !ready_st) return ready_st;
  auto st = all_up();
  if (!st) return st;
  auto names = names_.both(from, to);
  bool target_existed = static_cast<bool>(primary().lstat(to));
  st = primary().rename(from, to, flags);  // backend 0 decides: EEXIST, ENOTEMPTY, EISDIR...
  if (!st) return st;
  auto moved = primary().lstat(to);
  bool is_dir = moved && S_ISDIR(moved->permissions);
  auto others = part_backends(width());
  auto done = fan_out(others, [&](size_t b) -> Status {
    Backend& be = *backends_[b];
    auto s = be.rename(from, to, 0);
    if (s) return s;
    int e = s.error();
    if (e == ENOTEMPTY || e == EISDIR || e == ENOTDIR || e == EEXIST) {
      // Backend 0 allowed it, so what is in the way here is an orphan.
      remove_orphan(b, to);
      return be.rename(from, to, 0);
    }
    if (e != ENOENT) return s;
    if (be.lstat(from)) {  // the source is here, so the target's directory is not
      auto d = clone_dirs(be, parent_path(to), primary());
      return d ? be.rename(from, to, 0) : d;
    }
    // Nothing to move here; an old target's part must not live on under the new name.
    remove_orphan(b, to);
    return is_dir ? clone_dirs(be, to, primary()) : ok_status();
  });
  int err = worst_error(done);
  if (!err) return ok_status();
  spdlog::error("striped rename {} -> {} failed on a part backend: {}", from, to,
                std::strerror(err));
  if (!target_existed) {
    // Undo, so the name and its parts stay together.
    for (size_t i = 0; i < others.size(); ++i)
      if (done[i]) (void)backends_[others[i]]->rename(to, from, 1);
    (void)primary().rename(to, from, 1);
  }
  return Status::failure(err);
}

Result<sftp::Attrs> StripedLayout::symlink(const std::string& rel, const std::string& target) {
  if (auto ready_st = ready(rel, EACCES); !ready_st)
    return Result<sftp::Attrs>::failure(ready_st.error());
  // On backend 0 only: a symlink has no data to stripe.
  auto st = primary().symlink(target, rel);
  if (!st) return Result<sftp::Attrs>::failure(st.error());
  return primary().lstat(rel);
}

Result<std::string> StripedLayout::readlink(const std::string& rel) {
  if (auto ready_st = ready(rel, ENOENT); !ready_st)
    return Result<std::string>::failure(ready_st.error());
  return primary().readlink(rel);
}

Result<sftp::Attrs> StripedLayout::link(const std::string& existing, const std::string& rel) {
  using R = Result<sftp::Attrs>;
  if (auto ready_st = ready(existing, ENOENT); !ready_st) return R::failure(ready_st.error());
  if (auto ready_st = ready(rel, EACCES); !ready_st) return R::failure(ready_st.error());
  auto st = all_up();
  if (!st) return R::failure(st.error());
  auto src = primary().lstat(existing);
  if (!src) return R::failure(src.error());
  if (S_ISDIR(src->permissions)) return R::failure(EPERM);
  std::lock_guard name(names_.of(rel));
  st = primary().link(existing, rel);
  if (!st) return R::failure(st.error());
  if (!S_ISREG(src->permissions)) return primary().lstat(rel);
  // Both names must share every part: link each one.
  auto others = part_backends(width());
  auto done = fan_out(others, [&](size_t b) -> Status {
    Backend& be = *backends_[b];
    auto s = be.link(existing, rel);
    if (s) return s;
    if (s.error() == EEXIST) {
      remove_orphan(b, rel);
      return be.link(existing, rel);
    }
    if (s.error() != ENOENT) return s;
    if (!be.lstat(existing)) {  // no part yet: make the empty one, so the names share it
      auto f = open_part(b, existing, O_WRONLY | O_CREAT, src->permissions & 07777, false, &*src);
      if (!f) return Status::failure(f.error());
      (void)(*f)->close();
    }
    auto d = clone_dirs(be, parent_path(rel), primary());
    return d ? be.link(existing, rel) : d;
  });
  if (int err = worst_error(done)) {
    for (size_t i = 0; i < others.size(); ++i)
      if (done[i]) (void)backends_[others[i]]->unlink(rel);
    (void)primary().unlink(rel);
    return R::failure(err);
  }
  return getattr(rel);
}

Result<sftp::StatVfs> StripedLayout::statfs(const std::string& rel) {
  using R = Result<sftp::StatVfs>;
  (void)rel;
  // Every file spreads over all the backends: the layout holds the space of all of them.
  std::set<Backend*> seen;
  std::vector<size_t> unique;
  for (size_t b = 0; b < width(); ++b)
    if (seen.insert(backends_[b].get()).second) unique.push_back(b);
  auto answers = fan_out(unique, [&](size_t b) { return backends_[b]->statvfs("/"); });
  SpaceTotal total;
  for (auto& v : answers) {
    if (!v) return R::failure(v.error());  // a part backend that cannot answer: so can't we
    total.add(*v);
  }
  return total.sum();
}

Result<std::shared_ptr<OpenFile>> StripedLayout::open(const std::string& rel, int flags) {
  using R = Result<std::shared_ptr<OpenFile>>;
  if (auto ready_st = ready(rel, ENOENT); !ready_st) return R::failure(ready_st.error());
  flags &= ~(O_CREAT | O_EXCL);
  auto first = primary().lstat(rel);
  if (!first) return R::failure(first.error());
  bool writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  if (S_ISDIR(first->permissions) && writes) return R::failure(EISDIR);
  if (!S_ISREG(first->permissions)) {
    // Not striped (a directory, a symlink's target...): backend 0 has all of it.
    auto f = primary().open(rel, flags, 0);
    if (!f) return R::failure(f.error());
    return std::shared_ptr<OpenFile>(*f);
  }
  if (writes) {
    auto st = all_up();
    if (!st) return R::failure(st.error());
  }
  // O_APPEND is the StripedFile's to do: a part's end of file is not the file's.
  int part_flags = flags & ~O_APPEND;
  uint32_t mode = first->permissions & 07777;
  auto opened = fan_out(width(), [&](size_t b) {
    return open_part(b, rel, part_flags, mode, /*missing_ok=*/!writes, &*first);
  });
  if (int err = worst_error(opened)) return R::failure(err);
  std::vector<std::shared_ptr<BackendFile>> parts;
  for (auto& p : opened) parts.push_back(*p);
  return std::shared_ptr<OpenFile>(
      std::make_shared<StripedFile>(map_, std::move(parts), rel, flags));
}

Result<Created> StripedLayout::create(const std::string& rel, int flags, uint32_t mode) {
  using R = Result<Created>;
  if (auto ready_st = ready(rel, EACCES); !ready_st) return R::failure(ready_st.error());
  auto st = all_up();
  if (!st) return R::failure(st.error());
  auto open_existing = [&]() -> R {
    auto f = open(rel, flags & ~(O_CREAT | O_EXCL));
    if (!f) return R::failure(f.error());
    auto a = (*f)->fstat();
    if (!a) return R::failure(a.error());
    return Created{*f, *a, std::nullopt};
  };
  // Backend 0 settles who creates the name (O_EXCL there even when the caller did not ask, so
  // that of two racing creators only one truncates the other parts). What is on the other
  // backends under a name backend 0 did not have is an orphan: truncated. A name that is there
  // already is looked at only then: a new file costs no lookup first.
  int part_flags = (flags & ~(O_APPEND | O_EXCL)) | O_CREAT;
  std::unique_lock name(names_.of(rel));
  auto p0 = primary().open(rel, part_flags | O_EXCL, mode);
  if (!p0) {
    if (p0.error() != EEXIST || (flags & O_EXCL)) return R::failure(p0.error());
    name.unlock();
    auto existing = primary().lstat(rel);
    if (existing && S_ISDIR(existing->permissions)) return R::failure(EISDIR);
    return open_existing();
  }
  auto others = part_backends(width());
  auto opened = fan_out(
      others, [&](size_t b) { return open_part(b, rel, part_flags | O_TRUNC, mode, false); });
  if (int err = worst_error(opened)) {
    // All or nothing: take away what was made.
    for (size_t i = 0; i < others.size(); ++i) {
      if (!opened[i]) continue;
      (void)(*opened[i])->close();
      (void)backends_[others[i]]->unlink(rel);
    }
    (void)(*p0)->close();
    (void)primary().unlink(rel);
    return R::failure(err);
  }
  // The attributes the create brought back (same round trip), else asked.
  auto attrs = (*p0)->attrs_as_opened();
  if (!attrs) return R::failure(attrs.error());
  std::vector<std::shared_ptr<BackendFile>> parts{*p0};
  for (auto& p : opened) parts.push_back(*p);
  attrs->size = 0;
  return Created{std::make_shared<StripedFile>(map_, std::move(parts), rel, flags), *attrs,
                 std::nullopt};
}

std::vector<Result<MadeWholeFile>> StripedLayout::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  using R = Result<MadeWholeFile>;
  // Answers so far; nullopt: made the layout's way at the end (larger files, and those backend
  // 0 leaves).
  std::vector<std::optional<R>> out(files.size());
  std::vector<NewWholeFile> alone;  // on backend 0 alone
  std::vector<size_t> alone_at;
  const Status up = all_up();
  for (size_t i = 0; i < files.size(); ++i) {
    const NewWholeFile& f = files[i];
    Status st = ready(f.path, EACCES);
    if (st) st = ready(f.partial, EACCES);
    if (st) st = up;
    if (!st) {
      out[i] = R::failure(st.error());
    } else if (f.data.size() <= map_.stripe_size()) {
      alone.push_back(f);
      alone_at.push_back(i);
    }
  }
  if (alone.empty()) return made_the_rest_here(files, std::move(out));
  // A file made on backend 0 alone replaces only what backend 0 has under its name: a part with
  // bytes on another backend (the file it replaces, if larger than a stripe; an orphan) would lend
  // the new one its size and bytes. Such names, and those another backend cannot answer for, go
  // the layout's way, which makes every part anew. An empty part, as every file of a stripe or
  // less has, reads as no part, but it may be another name's too (a hard link makes every part
  // a link) or a writer's of the old file: it is removed before the file is made, or a write
  // past the first stripe of either file would land in the other. All asked at once, before
  // anything is made, so that a file that fails leaves the one it would have replaced whole (its
  // empty parts read as none).
  std::vector<std::vector<size_t>> empty_parts;  // of alone[k]: the backends holding one
  {
    std::vector<std::string> names;
    for (const NewWholeFile& f : alone) names.push_back(f.path);
    const auto part_at = part_backends(width());
    std::vector<std::shared_ptr<Backend>> others;
    for (size_t b : part_at) others.push_back(backends_[b]);
    auto parts = Backend::lstat_each(others, names);  // lets its holds go at the end of the block
    std::vector<NewWholeFile> clear;
    std::vector<size_t> clear_at;
    for (size_t k = 0; k < alone.size(); ++k) {
      bool nothing_there = true;
      std::vector<size_t> empty;
      for (size_t j = 0; j < others.size() && nothing_there; ++j) {
        auto a = parts.answer(k * others.size() + j);
        nothing_there = a ? S_ISREG(a->permissions) && a->size == 0 : a.error() == ENOENT;
        if (a && nothing_there) empty.push_back(part_at[j]);
      }
      if (!nothing_there) continue;
      empty_parts.push_back(std::move(empty));
      clear.push_back(std::move(alone[k]));
      clear_at.push_back(alone_at[k]);
    }
    alone = std::move(clear);
    alone_at = std::move(clear_at);
  }
  // A file whose empty part cannot be removed goes the layout's way.
  {
    std::vector<NewWholeFile> clear;
    std::vector<size_t> clear_at;
    for (size_t k = 0; k < alone.size(); ++k) {
      bool removed = true;
      for (size_t b : empty_parts[k]) {
        auto st = backends_[b]->unlink(alone[k].path);
        removed = removed && (st || st.error() == ENOENT);
      }
      if (!removed) continue;
      clear.push_back(std::move(alone[k]));
      clear_at.push_back(alone_at[k]);
    }
    alone = std::move(clear);
    alone_at = std::move(clear_at);
  }
  if (!alone.empty()) {
    auto made = primary().write_whole_files(alone);
    for (size_t k = 0; k < alone.size() && k < made.size(); ++k)
      out[alone_at[k]] = std::move(made[k]);
  }
  return made_the_rest_here(files, std::move(out));
}

}  // namespace skein
