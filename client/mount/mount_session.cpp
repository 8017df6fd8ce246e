// skein-mount's operations without FUSE; see mount_session.hpp.
// Lookup counts: every entry handed out for the kernel (lookup, mkdir, create, readdirplus, ...)
// adds one through InodeTable::lookup_add; an entry the kernel never received is taken back.
#include "mount_session.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <stdio.h>   // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <stdlib.h>  // arc4random
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "skein/path.hpp"
#include "wire/limits.hpp"

namespace skein::client {
namespace {

bool is_dot_or_dotdot(std::string_view name) { return name == "." || name == ".."; }

}  // namespace

MountSession::MountSession(const GatewayClient& gateway, DataPath& data, InodeTable& inodes,
                           CachePolicy& cache, OpenInodes& open_inodes)
    : gateway_(gateway), data_(data), inodes_(inodes), cache_(cache), open_inodes_(open_inodes) {}

// ---- helpers ----

// The current path of `ino`: ENOENT once its name was removed, ESTALE if the kernel names an inode
// this mount never gave it.
Result<std::string> MountSession::path_of(InodeNumber ino) const {
  if (auto path = inodes_.path_of(ino)) return std::move(*path);
  return Result<std::string>::failure(inodes_.last_path_of(ino) ? ENOENT : ESTALE);
}

Result<std::string> MountSession::child_path(InodeNumber parent, std::string_view name) const {
  if (!is_valid_entry_name(name)) return Result<std::string>::failure(EINVAL);
  auto dir = path_of(parent);
  if (!dir) return dir;
  if (dir->size() + 1 + name.size() > kMaxPathBytes)
    return Result<std::string>::failure(ENAMETOOLONG);
  return join_path(*dir, name);
}

// Names an open file for the gateway by the inode's path now: a renamed open file keeps working,
// and one whose name was removed keeps its last path.
FileRef MountSession::file_ref(InodeNumber ino, const FileHandle& file) const {
  file.gateway_knows.store(true, std::memory_order_relaxed);  // the caller sends it
  return unnamed_ref(ino, file);
}

// The same, for a call that leaves the gateway holding no handle (ReadRequest.whole_file).
FileRef MountSession::unnamed_ref(InodeNumber ino, const FileHandle& file) const {
  return FileRef{inodes_.last_path_of(ino).value_or(file.path),
                 file.gw_handle,
                 file.flags,
                 false,
                 0,
                 file.judged};
}

// An entry for the kernel, cached as long as the cache policy allows for an operation that took
// `ticket` before asking the gateway.
Entry MountSession::make_entry(InodeRef ref, const FileAttr& attr, CachePolicy::Ticket ticket) {
  cache_.sent_attrs(ref.ino, attr, ticket);
  return Entry{ref, attr, cache_.timeout(ticket)};
}

// The entry at `path`, counting the lookup the kernel will hold.
Entry MountSession::add_entry(const std::string& path, const FileAttr& attr,
                              CachePolicy::Ticket ticket) {
  const InodeRef ref = inodes_.lookup_add(path);
  cache_.entry_added(ref.ino, path, attr);
  if (path != "/")
    if (auto dir = inodes_.find(parent_path(path))) cache_.drop_ahead_name(*dir, base_name(path));
  return make_entry(ref, attr, ticket);
}

// Takes back kernel lookups; what the cache policy knew of a dropped inode goes with it.
void MountSession::forget_lookups(InodeNumber ino, uint64_t n) {
  if (inodes_.forget(ino, n)) cache_.forget(ino);
}

// Removes a silly-renamed file whose last open on this mount has been closed.
void MountSession::remove_hidden(const std::string& hidden) {
  const auto dir = inodes_.find(parent_path(hidden));
  (void)(dir ? cache_.begin_mutation(*dir) : cache_.begin_mutation());
  auto removed = gateway_.unlink(hidden);
  if (dir) cache_.dir_changed(*dir);
  if (!removed && removed.error() != ENOENT) {
    spdlog::warn("cannot remove {} (deleted while open): errno {}", hidden, removed.error());
  }
  inodes_.unlink(hidden);
}

// A release (or an open the kernel never received) of `ino`: at its last close, a file deleted
// while open goes for good.
void MountSession::closed(InodeNumber ino) {
  if (auto hidden = open_inodes_.closed(ino)) remove_hidden(*hidden);
  if (open_inodes_.is_open(ino)) return;
  // The last close: a fill handle kept for the inode goes too (after the open count, so that a
  // fill_handle that still saw the inode open has put its handle where this finds it).
  std::optional<FileRef> kept;
  {
    std::lock_guard lock(fill_mu_);
    if (auto it = fill_handles_.find(ino); it != fill_handles_.end()) {
      kept = std::move(it->second.ref);
      fill_handles_.erase(it);
    }
  }
  if (kept) gateway_.release_async(*kept);
}

Result<MountSession::FillHandle> MountSession::fill_handle(InodeNumber ino, const std::string& path,
                                                           int64_t mtime_ns, uint64_t size,
                                                           bool attrs_of_file) {
  using R = Result<FillHandle>;
  std::optional<FileRef> stale;
  bool own = false;  // a kept handle without the attributes asked: one of its own, not kept
  {
    std::lock_guard lock(fill_mu_);
    if (auto it = fill_handles_.find(ino); it != fill_handles_.end()) {
      if (it->second.mtime_ns == mtime_ns && it->second.size == size) {
        if (!attrs_of_file || it->second.attr)
          return FillHandle{it->second.ref.handle, true, it->second.attr};
        own = true;
      } else {
        stale = std::move(it->second.ref);  // another version's: released, and opened afresh
        fill_handles_.erase(it);
      }
    }
  }
  if (stale) gateway_.release_async(*stale);
  auto opened = gateway_.open(path, O_RDONLY, attrs_of_file);
  if (!opened) return R::failure(opened.error());
  FileRef ref{path, opened->handle, O_RDONLY};
  if (opened->attr.mtime_ns != mtime_ns || opened->attr.size != size) {
    gateway_.release_async(ref);
    return R::failure(ESTALE);
  }
  const std::optional<FileAttr> attr =
      opened->attr_of_file ? std::optional<FileAttr>(opened->attr) : std::nullopt;
  if (own) return FillHandle{ref.handle, false, attr};
  FillHandle theirs;
  {
    std::lock_guard lock(fill_mu_);
    if (!open_inodes_.is_open(ino)) return FillHandle{ref.handle, false, attr};
    auto [it, added] = fill_handles_.try_emplace(ino, KeptFillHandle{ref, mtime_ns, size, attr});
    if (added) return FillHandle{ref.handle, true, attr};
    if (it->second.mtime_ns != mtime_ns || it->second.size != size ||
        (attrs_of_file && !it->second.attr))
      return FillHandle{ref.handle, false, attr};
    theirs = FillHandle{it->second.ref.handle, true, it->second.attr};
  }
  gateway_.release_async(ref);  // another fetch opened it meanwhile: one is enough
  return theirs;
}

// NFS-style silly rename: a file this mount has open is not removed but renamed to a hidden name
// in its directory, until its last close; its open descriptors keep reading, writing and
// fstat-ing it. Returns true when it did so (the unlink is then complete).
Result<bool> MountSession::hide_if_open(const std::string& path) {
  auto ino = inodes_.find(path);
  if (!ino || !open_inodes_.is_open(*ino)) return false;
  settle_writes_at_or_below(path);
  std::string hidden = join_path(parent_path(path), OpenInodes::hidden_name(*ino));
  auto renamed = gateway_.rename(path, hidden, RENAME_NOREPLACE);
  if (!renamed) return Result<bool>::failure(renamed.error());
  inodes_.rename(path, hidden);
  spdlog::debug("{} deleted while open: kept as {} until closed", path, hidden);
  if (!open_inodes_.hide(*ino, hidden)) remove_hidden(hidden);  // closed meanwhile
  return true;
}

// A queued write names its file by the path it had when it was queued, and the gateway takes
// the path a mount names a handle by for the file's path from then on (it follows renames so):
// one that arrived after a rename would take the file back to its old name there, where a later
// open by path (a connection of its own, a reconnect) would find another file or none. So the
// writes to the files that a rename moves land before it.
void MountSession::settle_writes_at_or_below(const std::string& path) {
  for (const auto& name : inodes_.names_at_or_below(path)) data_.settle(name.ino);
}

// The listing served by readdir: ".", "..", then the gateway's entries.
Result<std::vector<DirEntry>> MountSession::fetch_listing(InodeNumber ino, bool* whole) {
  using R = Result<std::vector<DirEntry>>;
  auto path = path_of(ino);
  if (!path) return R::failure(path.error());
  data_.settle_all();  // readdirplus hands out sizes
  auto listed = gateway_.readdir(*path);
  if (!listed) return listed;
  std::vector<DirEntry> entries;
  entries.reserve(listed->size() + 2);
  entries.push_back(DirEntry{".", FileAttr{.mode = S_IFDIR}});
  entries.push_back(DirEntry{"..", FileAttr{.mode = S_IFDIR}});
  for (auto& e : *listed) {
    if (!is_valid_entry_name(e.name)) {  // the gateway's own "." and "..", or junk
      if (!is_dot_or_dotdot(e.name)) *whole = false;
      continue;
    }
    if (OpenInodes::is_hidden_name(e.name)) {  // deleted while open (silly rename)
      *whole = false;
      continue;
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// Fetches `dir`'s listing afresh, under a ticket taken before; the caller holds dir.mu (or owns
// a handle nobody else sees yet).
Status MountSession::fetch_into(InodeNumber ino, DirHandle& dir) {
  CachePolicy::Ticket ticket = cache_.ticket();
  const uint64_t changes = cache_.names_changes(ino);
  bool whole = true;  // every name of the directory is in the listing
  auto fresh = fetch_listing(ino, &whole);
  if (!fresh) return Status::failure(fresh.error());
  if (whole) {
    std::vector<std::string_view> names;
    names.reserve(fresh->size());
    for (const DirEntry& e : *fresh)
      if (!is_dot_or_dotdot(e.name)) names.push_back(e.name);
    cache_.names_known(ino, ticket, changes, names);
  }
  dir.entries = fresh.take();
  dir.ticket = ticket;
  dir.fetched = true;
  return ok_status();
}

// A call that makes a name in `dir` failed. The name may be there all the same (EEXIST: made
// behind the gateway's back; EIO: the server may have done it before the answer was lost), so the
// names the mount knew of `dir` are not to be trusted.
Result<Entry> MountSession::made_nothing(InodeNumber dir, int error) {
  cache_.names_unknown(dir);
  return Result<Entry>::failure(error);
}

// ---- names ----

Result<Entry> MountSession::lookup(InodeNumber parent, std::string_view name) {
  settle_creates();
  auto path = child_path(parent, name);
  if (!path) return Result<Entry>::failure(path.error());
  // A directory whose names this mount knows: the kernel's lookup before a create, answered here.
  if (cache_.known_absent(parent, name)) return Result<Entry>::failure(ENOENT);
  if (auto known = inodes_.find(*path)) {
    // A file whose attributes this mount holds as current (CachePolicy::current_attrs: one it
    // wrote whole, whose asynchronously created entry the kernel did not keep; one whose entry
    // the kernel let go): the name still names it, as a change of the name would have come as
    // an invalidation of the file.
    // The ticket first: an invalidation that comes after current_attrs() read them must keep
    // them from being kept again (CachePolicy::sent_attrs).
    const CachePolicy::Ticket ticket = cache_.ticket();
    if (auto kept = cache_.current_attrs(*known); kept && data_.writes_idle(*known))
      return add_entry(*path, *kept, ticket);
    data_.settle(*known);
  } else {
    // A name of a directory read ahead (CachePolicy::read_whole_in).
    CachePolicy::Ticket ticket = cache_.ticket();
    if (auto ahead = cache_.take_ahead(parent, name)) {
      Entry entry = add_entry(*path, ahead->attr, ticket);
      cache_.fetched_whole(entry.ref.ino, *ahead, ticket);
      return entry;
    }
  }
  CachePolicy::Ticket ticket = cache_.ticket();
  auto attr = gateway_.getattr(*path);
  if (!attr) {
    // Names looked for and not found, again: a directory files are being made in (each create
    // comes after such a lookup), or one searched for names (imports, PATH). Its names, learnt
    // once, answer the next lookups of absent ones here.
    if (attr.error() == ENOENT && cache_.missed(parent)) learn_names(parent);
    return Result<Entry>::failure(attr.error());
  }
  return add_entry(*path, *attr, ticket);
}

// Fetches the names of directory `dir` for CachePolicy::names_known. A listing the mount does not
// serve whole (a hidden name of a file deleted while open, a name it would not hand out) teaches
// nothing.
void MountSession::learn_names(InodeNumber dir) {
  auto path = path_of(dir);
  if (!path) return;
  CachePolicy::Ticket ticket = cache_.ticket();
  const uint64_t changes = cache_.names_changes(dir);
  auto listed = gateway_.readdir(*path);
  if (!listed) return;
  std::vector<std::string_view> names;
  names.reserve(listed->size());
  for (const DirEntry& e : *listed) {
    if (is_dot_or_dotdot(e.name)) continue;
    if (!is_valid_entry_name(e.name) || OpenInodes::is_hidden_name(e.name)) return;
    names.push_back(e.name);
  }
  cache_.names_known(dir, ticket, changes, names);
}

// Files of one directory read whole one after another: after a few, the directory is read ahead
// (CachePolicy::read_whole_in), its listing and then its small files' contents in ReadFiles calls
// of at most wire::kMaxReadFiles files and 1 MiB, the smallest files first. The whole read that
// makes it due is counted at once; the read-ahead runs after that read's reply is sent.
std::function<void()> MountSession::dir_read_ahead_due(const std::string& file_path) {
  if (file_path == "/") return nullptr;
  std::string path = parent_path(file_path);
  const auto dir = inodes_.find(path);
  if (!dir) return nullptr;
  const uint64_t number = cache_.read_whole_in(*dir);
  if (!number) return nullptr;
  return [this, path = std::move(path), dir = *dir, number] { read_ahead_dir(path, dir, number); };
}

void MountSession::read_ahead_dir(const std::string& path, InodeNumber dir, uint64_t number) {
  // Anything that dropped the directory's read-ahead since it was found due (an invalidation,
  // a change of this mount's there) makes what follows a no-op.
  if (!cache_.ahead_alive(dir, number)) return;
  auto listed = gateway_.readdir(path);
  if (!listed) {
    spdlog::debug("read ahead {}: the listing failed: {}", path, std::strerror(listed.error()));
    cache_.ahead_failed(dir, number);
    return;
  }
  std::vector<std::pair<std::string, FileAttr>> entries;
  struct Small {
    uint64_t size = 0;
    std::string name;
    InodeNumber held = 0;  // the kernel's inode of it (a listing gave it), or 0
    uint64_t writes = 0;   // CachePolicy::writes(held), before the fetch
    bool operator<(const Small& o) const { return size < o.size; }
  };
  std::vector<Small> small;
  uint64_t small_bytes = 0;
  for (const DirEntry& e : *listed) {
    if (is_dot_or_dotdot(e.name) || !is_valid_entry_name(e.name) ||
        OpenInodes::is_hidden_name(e.name))
      continue;
    const bool small_file = S_ISREG(e.attr.mode) && e.attr.size <= CachePolicy::kContentFileBytes;
    if (const auto held = inodes_.find(join_path(path, e.name))) {
      // The kernel has the name already (from a listing, as cp -r and rsync list first): only
      // its content can spare a call, kept as for a file this mount wrote whole.
      if (small_file && data_.writes_idle(*held) && !cache_.whole_content(*held)) {
        small.push_back({e.attr.size, e.name, *held, cache_.writes(*held)});
        small_bytes += e.attr.size;
      }
      continue;
    }
    if (small_file) {
      small.push_back({e.attr.size, e.name});
      small_bytes += e.attr.size;
    }
    entries.emplace_back(e.name, e.attr);
  }
  const size_t names = entries.size();
  cache_.ahead_listed(dir, number, std::move(entries));
  if (small_bytes > CachePolicy::kAheadBytes) {  // the attributes only
    spdlog::debug("read ahead {}: {} names; {} small files of {} bytes left out", path, names,
                  small.size(), small_bytes);
    return;
  }
  spdlog::debug("read ahead {}: {} names, {} small files of {} bytes", path, names, small.size(),
                small_bytes);
  std::stable_sort(small.begin(), small.end());
  for (size_t at = 0; at < small.size() && cache_.ahead_alive(dir, number);) {
    const size_t first = at;
    std::vector<std::string> paths;
    uint64_t max_bytes = 1;
    for (; at < small.size() && paths.size() < wire::kMaxReadFiles; ++at) {
      const uint64_t widest = std::max<uint64_t>(max_bytes, small[at].size);
      if ((paths.size() + 1) * widest > wire::kMaxIoSize) break;
      max_bytes = widest;
      paths.push_back(join_path(path, small[at].name));
    }
    const CachePolicy::Ticket ticket = cache_.ticket();
    auto files = gateway_.read_files(paths, static_cast<uint32_t>(max_bytes));
    if (!files) return;
    for (size_t i = 0; i < paths.size(); ++i) {
      auto& f = (*files)[i];
      const Small& file = small[first + i];
      if (f.error != 0) continue;
      if (file.held)
        cache_.read_ahead_whole(file.held, f.attr, ticket, file.writes, f.data);
      else
        cache_.ahead_content(dir, number, file.name, f.attr, std::move(f.data));
    }
  }
}

void MountSession::forget(InodeNumber ino, uint64_t n) { forget_lookups(ino, n); }

void MountSession::entry_not_received(const Entry& entry) { forget_lookups(entry.ref.ino, 1); }

// ---- attributes ----

Result<Attributes> MountSession::getattr(InodeNumber ino) {
  // A file being created here: what the kernel was told, not to be kept (the kernel asks right
  // after the create, for the open's permission check). Nothing is made for it.
  if (auto told = unsent_create_attrs(ino)) return Attributes{*told, 0};
  settle_creates();
  // A directory whose attributes nothing changed since the mount last told the kernel (which
  // asks again after every readdir and every change of an entry in it).
  if (auto kept = cache_.dir_attrs(ino)) return Attributes{kept->first, kept->second};
  // A file whose attributes are current (CachePolicy::current_attrs): the kernel asks after an
  // open that refreshed them (server_attrs), and after a read (for atime, which the mount does
  // not follow, as with directories). Not while writes of this mount are on their way.
  // The ticket is taken before the attributes are read: an invalidation between the two would
  // otherwise go unseen by sent_attrs, which would keep the old attributes as current again.
  const CachePolicy::Ticket kept_ticket = cache_.ticket();
  if (auto kept = cache_.current_attrs(ino); kept && data_.writes_idle(ino)) {
    cache_.sent_attrs(ino, *kept, kept_ticket);
    open_inodes_.seen(ino, *kept);
    return Attributes{*kept, cache_.timeout(kept_ticket)};
  }
  auto path = path_of(ino);
  if (path) data_.settle(ino);  // the size and mtime of writes acknowledged to the kernel
  CachePolicy::Ticket ticket = cache_.ticket();
  auto attr = path ? gateway_.getattr(*path) : Result<FileAttr>::failure(path.error());
  if (!attr && attr.error() == ENOENT) {
    // A file open here exists until its last close, even when its name is gone (removed through
    // another mount, or on a branch that is down): reads go on through the gateway's handle.
    if (auto seen = open_inodes_.last_seen(ino)) return Attributes{*seen, 0};
  }
  if (!attr) return Result<Attributes>::failure(attr.error());
  cache_.sent_attrs(ino, *attr, ticket);
  open_inodes_.seen(ino, *attr);
  return Attributes{*attr, cache_.timeout(ticket)};
}

Result<Attributes> MountSession::setattr(InodeNumber ino, SetAttrArgs change,
                                         const FileHandle* file, const Credentials* judged) {
  settle_creates();
  // A mode or owner the file has already (rsync sets a file it just made to the mode it made it
  // with): nothing changes, and the attributes this mount holds as current answer. The kernel
  // has checked that the caller may change them (default_permissions), and another mount's change
  // reaches this one as an invalidation before that mount's call returns.
  constexpr uint32_t kOwnership = SetAttrArgs::kMode | SetAttrArgs::kUid | SetAttrArgs::kGid;
  if (change.fields && !(change.fields & ~kOwnership)) {
    const CachePolicy::Ticket ticket = cache_.ticket();  // before the read: see getattr
    if (auto kept = cache_.current_attrs(ino);
        kept && data_.writes_idle(ino) &&
        (!(change.fields & SetAttrArgs::kMode) || (kept->mode & 07777) == (change.mode & 07777)) &&
        (!(change.fields & SetAttrArgs::kUid) || kept->uid == change.uid) &&
        (!(change.fields & SetAttrArgs::kGid) || kept->gid == change.gid)) {
      cache_.sent_attrs(ino, *kept, ticket);
      return Attributes{*kept, cache_.timeout(ticket)};
    }
  }
  // ftruncate and futimens come with the open file: use it, and its path even if unlinked.
  Result<std::string> path = file ? Result<std::string>(file_ref(ino, *file).path) : path_of(ino);
  if (!path) return Result<Attributes>::failure(path.error());
  if (file) change.handle = file->gw_handle;
  change.as_user = judged;
  data_.settle(ino);  // writes acknowledged before must not land after (or undo) it
  cache_.wrote(ino);
  CachePolicy::Ticket ticket = cache_.begin_mutation(ino).ticket;
  auto changed = gateway_.setattr(*path, change);
  cache_.wrote(ino);
  if (change.fields & SetAttrArgs::kSize) data_.changed(ino);
  if (!changed) return Result<Attributes>::failure(changed.error());
  cache_.sent_attrs(ino, *changed, ticket);
  return Attributes{*changed, cache_.timeout(ticket)};
}

Result<std::string> MountSession::readlink(InodeNumber ino) {
  settle_creates();
  auto path = path_of(ino);
  if (!path) return path;
  return gateway_.readlink(*path);
}

Result<FsStats> MountSession::statfs(InodeNumber ino) {
  auto path = path_of(ino);
  return gateway_.statfs(path ? *path : std::string("/"));
}

// ---- changes of names ----

Result<Entry> MountSession::mkdir(InodeNumber parent, std::string_view name, uint32_t mode) {
  settle_creates();
  auto path = child_path(parent, name);
  if (!path) return Result<Entry>::failure(path.error());
  const CachePolicy::Mutation mutation = cache_.begin_mutation(parent);
  auto attr = gateway_.mkdir(*path, mode & 07777);
  cache_.dir_changed(parent);
  if (!attr) return made_nothing(parent, attr.error());
  cache_.name_added(parent, name);
  Entry entry = add_entry(*path, *attr, mutation.ticket);
  // A new directory has no names: creates in it need no lookup call (CachePolicy::made_dir).
  cache_.made_dir(entry.ref.ino, *path, mutation.ticket);
  return entry;
}

Result<Entry> MountSession::symlink(std::string_view target, InodeNumber parent,
                                    std::string_view name) {
  settle_creates();
  auto path = child_path(parent, name);
  if (!path) return Result<Entry>::failure(path.error());
  CachePolicy::Ticket ticket = cache_.begin_mutation(parent).ticket;
  auto attr = gateway_.symlink(*path, std::string(target));
  cache_.dir_changed(parent);
  if (!attr) return made_nothing(parent, attr.error());
  cache_.name_added(parent, name);
  return add_entry(*path, *attr, ticket);
}

Result<Entry> MountSession::link(InodeNumber ino, InodeNumber newparent, std::string_view newname) {
  settle_creates();
  auto existing = path_of(ino);
  if (!existing) return Result<Entry>::failure(existing.error());
  auto path = child_path(newparent, newname);
  if (!path) return Result<Entry>::failure(path.error());
  // The new name's attributes come back with the link: its size must count the writes
  // acknowledged before it.
  data_.settle(ino);
  CachePolicy::Ticket ticket = cache_.begin_mutation(newparent).ticket;
  cache_.wrote(ino);  // its link count and ctime change
  auto attr = gateway_.link(*existing, *path);
  cache_.wrote(ino);
  cache_.dir_changed(newparent);
  if (!attr) return made_nothing(newparent, attr.error());
  cache_.name_added(newparent, newname);
  return add_entry(*path, *attr, ticket);
}

Status MountSession::unlink(InodeNumber parent, std::string_view name) {
  settle_creates();
  auto path = child_path(parent, name);
  if (!path) return Status::failure(path.error());
  const CachePolicy::Mutation mutation = cache_.begin_mutation(parent);
  auto hidden = hide_if_open(*path);
  cache_.dir_changed(parent);
  if (!hidden) return Status::failure(hidden.error());
  if (*hidden) {
    cache_.names_unknown(parent);  // a hidden name took its place
    return ok_status();
  }
  const auto named = inodes_.find(*path);  // its link count changes
  if (named) cache_.wrote(*named);
  auto removed = gateway_.unlink(*path);
  if (named) cache_.wrote(*named);
  // The directory as the unlink left it, when the gateway said: the kernel, which drops its own
  // copy of the directory's attributes after an unlink, gets them from here without a call.
  if (removed && *removed)
    cache_.post_op_attrs(parent, **removed, mutation);
  else
    cache_.dir_changed(parent);
  if (!removed) return Status::failure(removed.error());
  inodes_.unlink(*path);
  cache_.name_removed(parent, name);
  return ok_status();
}

Status MountSession::rmdir(InodeNumber parent, std::string_view name) {
  settle_creates();
  auto path = child_path(parent, name);
  if (!path) return Status::failure(path.error());
  (void)cache_.begin_mutation(parent);
  Status removed = gateway_.rmdir(*path);
  cache_.dir_changed(parent);
  if (removed) {
    inodes_.unlink(*path);
    cache_.name_removed(parent, name);
    cache_.dir_removed(*path);
  }
  return removed;
}

Status MountSession::rename(InodeNumber parent, std::string_view name, InodeNumber newparent,
                            std::string_view newname, uint32_t flags) {
  settle_creates();
  if (flags & ~uint32_t{RENAME_NOREPLACE | RENAME_EXCHANGE}) return Status::failure(EINVAL);
  auto from = child_path(parent, name);
  if (!from) return Status::failure(from.error());
  auto to = child_path(newparent, newname);
  if (!to) return Status::failure(to.error());
  (void)cache_.begin_mutation();  // it may move any directory's entries
  // Changes of both directories too: what the gateway says of them after the rename is kept if
  // nothing else changed them meanwhile.
  const CachePolicy::Mutation from_dir = cache_.begin_mutation(parent);
  const CachePolicy::Mutation to_dir =
      newparent == parent ? from_dir : cache_.begin_mutation(newparent);
  // The files named at both ends change (ctime; a replaced file loses a link).
  const auto files_named = [&] {
    for (const std::string* named : {&*from, &*to})
      if (auto ino = inodes_.find(*named)) cache_.wrote(*ino);
  };
  files_named();
  // Whether the new name was absent, as far as the names this mount knows tell: only then is a
  // plain rename's outcome sure (over an existing name, both may be links to one file, which
  // POSIX leaves in place).
  const bool to_new_name = cache_.known_absent(newparent, newname);
  const std::optional<InodeNumber> replaced = inodes_.find(*to);
  settle_writes_at_or_below(*from);
  settle_writes_at_or_below(*to);  // a replaced file keeps its open descriptors
  auto renamed = gateway_.rename(*from, *to, flags);
  files_named();
  // Both directories as the rename left them, when the gateway said: the kernel, which drops its
  // copies of their attributes after a rename, gets them from here without a call, and a create
  // in them can go on without waiting for the gateway (asynchronous creates need them).
  if (renamed && renamed->from_dir)
    cache_.post_op_attrs(parent, *renamed->from_dir, from_dir);
  else
    cache_.dir_changed(parent);
  if (newparent != parent) {
    if (renamed && renamed->to_dir)
      cache_.post_op_attrs(newparent, *renamed->to_dir, to_dir);
    else
      cache_.dir_changed(newparent);
  }
  // The names the mount knows of both directories: after a rename to a new name, the one name
  // moved (an exchange keeps both); otherwise unknown (a call that failed by timing out may have
  // been made).
  if (renamed && (flags & RENAME_EXCHANGE)) {
    cache_.name_added(parent, name);
    cache_.name_added(newparent, newname);
  } else if (renamed && to_new_name) {
    cache_.name_removed(parent, name);
    cache_.name_added(newparent, newname);
  } else {
    cache_.names_unknown(parent);
    cache_.names_unknown(newparent);
  }
  if (renamed && (flags & RENAME_EXCHANGE)) {
    inodes_.exchange(*from, *to);
    cache_.dir_removed(*from);  // what this mount made at either is no longer told apart
    cache_.dir_removed(*to);
  }
  if (renamed && !(flags & RENAME_EXCHANGE)) {
    if (replaced) cache_.replaced(*replaced);  // its deferred opens, as another mount's rename
    inodes_.rename(*from, *to);
    cache_.dir_renamed(*from, *to);
  }
  // What a read-ahead listed in either directory before the names moved here.
  cache_.ahead_changed(parent);
  cache_.ahead_changed(newparent);
  for (const std::string* moved : {&*from, &*to}) {  // a moved directory's ".." changed
    if (auto ino = inodes_.find(*moved)) cache_.dir_changed(*ino);
    // The moved directories keep their inode numbers and the kernel its cache of what is below
    // them (the gateway counts this mount among those that cache the new paths from the rename
    // on), but the names this mount knew of them are learnt again from a listing rather than
    // carried over. (After a plain rename nothing is attached at `from` any more.)
    if (renamed)
      for (const auto& n : inodes_.names_at_or_below(*moved)) cache_.names_unknown(n.ino);
  }
  return renamed ? ok_status() : Status::failure(renamed.error());
}

// ---- files ----

Result<MountSession::Opened> MountSession::open(InodeNumber ino, uint32_t flags,
                                                const Credentials* judged) {
  settle_creates();
  auto path = path_of(ino);
  if (!path) return Result<Opened>::failure(path.error());
  const bool truncates = (flags & O_TRUNC) != 0;
  // Writes acknowledged before a truncating open must not land after (or undo) it.
  if (truncates) data_.settle(ino);
  if (truncates) cache_.wrote(ino);
  CachePolicy::Ticket ticket = cache_.ticket();
  // The writes to `ino` counted before asking, with none on its way: the gateway's attributes
  // then include every write of this mount's, unless one begins meanwhile (server_attrs).
  const uint64_t writes = cache_.writes(ino);
  const bool writes_done = !truncates && data_.writes_idle(ino);
  Result<OpenedFile> opened = Result<OpenedFile>::failure(EIO);
  bool deferred = false;
  const uint64_t replacements = cache_.replacements(ino);  // before it is judged current
  if (auto kept = judged ? std::nullopt : deferrable_open(ino, flags)) {
    opened = OpenedFile{deferred_handle(), *kept, std::nullopt};
    deferred = true;
  } else {
    opened = gateway_.open(*path, flags, false, judged);
    if (truncates) cache_.wrote(ino);
    if (opened && judged && !opened->judged) {
      gateway_.release_async(FileRef{*path, opened->handle, flags});
      spdlog::warn(
          "open of {} by uid {} refused: the gateway cannot judge opens of users other than "
          "root and the mount's own (an older gateway); upgrade it",
          *path, judged->uid);
      return Result<Opened>::failure(EACCES);
    }
  }
  if (!opened) return Result<Opened>::failure(opened.error());
  auto file = std::make_unique<FileHandle>(opened->handle, flags, *path);
  file->gateway_knows.store(!deferred, std::memory_order_relaxed);
  if (deferred) {
    file->deferred_size = opened->attr.size;
    file->replacements_at_open = replacements;
  }
  file->data = data_.open(ino, gateway_, flags, opened->attr.size);
  if (judged) file->judged = std::make_shared<const Credentials>(*judged);
  // Close-to-open: pages survive only if the file is as this mount's last open saw it, and the
  // kernel's attributes are dropped if the gateway's (fresh) ones differ from what it was told.
  // A judged open keeps none: pages read through other handles, by path, may be another file's.
  auto decision = cache_.opened(ticket, ino, opened->attr.mtime_ns, opened->attr.size);
  if (!deferred && writes_done) cache_.server_attrs(ino, opened->attr, ticket, writes);
  open_inodes_.opened(ino, opened->attr);  // before the reply: a release may follow
  return Opened{std::move(file), decision.keep_cache && !judged, decision.refresh_attrs};
}

Result<MountSession::Created> MountSession::create(InodeNumber parent, std::string_view name,
                                                   uint32_t flags, uint32_t mode,
                                                   const Credentials* judged) {
  auto path = child_path(parent, name);
  if (!path) return Result<Created>::failure(path.error());
  // Only where the directory's attributes are current and let someone write (not a directory
  // the gateway synthesises, where a create is refused at once).
  const auto dir = async_creates_ && !judged ? cache_.dir_attrs(parent) : std::nullopt;
  if (dir && (dir->first.mode & 0222) && (flags & O_ACCMODE) == O_WRONLY && !(flags & O_EXCL)) {
    // Asynchronous: the kernel's lookup found no such name, so the file starts empty. Its
    // attributes are this mount's guess (the server's umask and owner may differ): the kernel
    // may not keep them, and its getattr of the file gets them again until the create is made.
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    FileAttr attr{};
    attr.mode = S_IFREG | (mode & 07777);
    attr.nlink = 1;
    // The gateway shows a new file with its directory's owner (the server's login, or a job
    // namespace's owner), more often than with the caller's.
    attr.uid = dir->first.uid;
    attr.gid = dir->first.gid;
    attr.atime_ns = attr.mtime_ns = attr.ctime_ns = now;
    const CachePolicy::Mutation mutation = cache_.begin_mutation(parent);
    cache_.name_added(parent, name);
    cache_.dir_changed(parent);
    const InodeRef ref = inodes_.lookup_add(*path);
    cache_.wrote(ref.ino);  // what the cache policy kept of an earlier file at this path is old
    auto file = std::make_unique<FileHandle>(deferred_handle(), flags, *path);
    file->gateway_knows.store(false, std::memory_order_relaxed);
    file->create_mode = mode & 07777;
    file->create_unsettled.store(true, std::memory_order_release);
    file->create_attrs = attr;
    file->create_parent = parent;
    file->create_mutation = mutation;
    file->data = data_.open(ref.ino, gateway_, flags, 0);
    open_inodes_.opened(ref.ino, attr);  // before the reply: a release may follow
    {
      std::lock_guard lock(pending_mu_);
      pending_creates_[ref.ino] = file.get();
      unsent_creates_.fetch_add(1, std::memory_order_acq_rel);
    }
    return Created{Entry{ref, attr, 0}, std::move(file)};
  }
  const CachePolicy::Mutation mutation = cache_.begin_mutation(parent);
  auto created = gateway_.create(*path, flags, mode & 07777, judged);
  if (!created) {
    (void)made_nothing(parent, created.error());
    return Result<Created>::failure(created.error());
  }
  if (judged && !created->judged)
    spdlog::warn(
        "create of {} by uid {} was not judged: the gateway does not judge users other than root "
        "and the mount's own (an older gateway); upgrade it",
        *path, judged->uid);
  cache_.name_added(parent, name);
  if (created->parent_attr) {
    cache_.post_op_attrs(parent, *created->parent_attr, mutation);
  } else {
    cache_.dir_changed(parent);
  }
  Entry entry = add_entry(*path, created->attr, mutation.ticket);
  if (S_ISREG(created->attr.mode)) cache_.made_file(entry.ref.ino, created->attr.uid);
  auto file = std::make_unique<FileHandle>(created->handle, flags, *path);
  file->data = data_.open(entry.ref.ino, gateway_, flags, created->attr.size);
  if (judged) file->judged = std::make_shared<const Credentials>(*judged);
  open_inodes_.opened(entry.ref.ino, created->attr);  // before the reply: a release may follow
  return Created{entry, std::move(file)};
}

std::optional<FileAttr> MountSession::deferrable_open(InodeNumber ino, uint32_t flags) const {
  // Read-only, and nothing the gateway must do at open (truncate, create, fail on a directory).
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT | O_DIRECTORY))) return {};
  auto kept = cache_.current_attrs(ino);
  if (!kept || !S_ISREG(kept->mode)) return {};
  // Readable by whatever user the gateway logs in as on the file's server, so that the open
  // cannot fail there for want of permission (the lookup that found it already searched the
  // directories on the way): a file readable by everyone, or one this mount made (that user
  // made it, and owns it while the owner is the one it was made with) and its owner may read
  // (rsync opens each file it wrote, mode 0600, to change its mode).
  constexpr uint32_t kReadableByAll = S_IRUSR | S_IRGRP | S_IROTH;
  if ((kept->mode & kReadableByAll) == kReadableByAll) return kept;
  const auto made_owner = cache_.made_owner(ino);
  if (!made_owner || *made_owner != kept->uid || !(kept->mode & S_IRUSR)) return {};
  return kept;
}

uint64_t MountSession::deferred_handle() {
  // The gateway's own handles are random 64-bit numbers too (NamespaceFs::register_file); 0 is
  // never a handle.
  uint64_t h = 0;
  while (h == 0) h = (static_cast<uint64_t>(arc4random()) << 32) | arc4random();
  return h;
}

void MountSession::open_not_received(InodeNumber ino, std::unique_ptr<FileHandle> file) {
  if (file->gateway_knows.load(std::memory_order_relaxed))
    (void)gateway_.release(FileRef{file->path, file->gw_handle, file->flags});
  file.reset();
  closed(ino);
}

void MountSession::create_not_received(Created created) {
  const InodeNumber ino = created.entry.ref.ino;
  {
    // An asynchronous create the kernel never heard of is not made.
    std::lock_guard lock(created.file->create_mu);
    if (created.file->create_mode) {
      created.file->create_mode.reset();
      created.file->create_unsettled.store(false, std::memory_order_release);
      unsent_creates_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  drop_pending_create(ino, created.file.get());
  open_not_received(ino, std::move(created.file));
  forget_lookups(ino, 1);
}

Result<bool> MountSession::settle_create(InodeNumber ino, FileHandle& file, uint64_t offset,
                                         std::string_view data) {
  std::lock_guard lock(file.create_mu);
  if (file.create_error) return Result<bool>::failure(file.create_error);
  if (!file.create_mode) return false;
  FileRef ref = file_ref(ino, file);
  ref.create = true;
  ref.create_mode = *file.create_mode;
  // The write count once this write is answered (its second wrote() below), if no other write
  // of this mount's comes meanwhile.
  const uint64_t writes = cache_.wrote(ino) + 1;
  const CachePolicy::Ticket ticket = cache_.ticket();
  std::optional<FileAttr> parent_attr, file_attr;
  auto written = gateway_.write(ref, offset, data, &parent_attr, &file_attr);
  if (written && *written != data.size()) written = Result<uint32_t>::failure(EIO);
  file.create_mode.reset();
  unsent_creates_.fetch_sub(1, std::memory_order_acq_rel);
  cache_.wrote(ino);
  // The file's whole content, if the server's attributes right after the write say so: reading it
  // back needs no call while they stay current (CachePolicy::wrote_whole).
  if (written && file_attr && offset == 0)
    cache_.wrote_whole(ino, *file_attr, ticket, writes, data);
  if (written && file_attr) cache_.made_file(ino, file_attr->uid);
  // The directory as the create left it: the kernel asks for it at its next path walk.
  if (parent_attr) cache_.post_op_attrs(file.create_parent, *parent_attr, file.create_mutation);
  if (!written) {
    spdlog::debug("{}: asynchronous create failed: errno {}", ref.path, written.error());
    file.create_error = written.error();  // create_unsettled stays: every write returns it
    // gateway_knows stays (file_ref set it): the create may have been made and only its write
    // refused (EDQUOT, a short write, an answer lost), and then the gateway holds the handle
    // until the release. A release of a handle it never opened costs it nothing.
    return Result<bool>::failure(written.error());
  }
  file.create_unsettled.store(false, std::memory_order_release);
  if (data.empty()) file.made_empty.store(true, std::memory_order_release);
  return true;
}

void MountSession::settle_creates() {
  if (unsent_creates_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(pending_mu_);
  for (auto& [ino, file] : pending_creates_) (void)settle_create(ino, *file, 0, {});
}

std::optional<FileAttr> MountSession::unsent_create_attrs(InodeNumber ino) {
  if (unsent_creates_.load(std::memory_order_acquire) == 0) return {};
  std::lock_guard lock(pending_mu_);
  auto it = pending_creates_.find(ino);
  if (it == pending_creates_.end()) return {};
  std::lock_guard file_lock(it->second->create_mu);
  if (!it->second->create_mode) return {};
  return it->second->create_attrs;
}

void MountSession::drop_pending_create(InodeNumber ino, const FileHandle* file) {
  std::lock_guard lock(pending_mu_);
  auto it = pending_creates_.find(ino);
  if (it != pending_creates_.end() && it->second == file) pending_creates_.erase(it);
}

Result<ReadData> MountSession::read(InodeNumber ino, FileHandle& file, uint64_t offset,
                                    uint32_t size) {
  settle_creates();
  // A deferred open whose file a rename replaced: the gateway would open the file now at the name
  // and read on in it, after the old one's cached pages (NFS: ESTALE, its handle names the file).
  if (file.deferred_size && !file.gateway_knows.load(std::memory_order_relaxed) &&
      cache_.replacements(ino) != file.replacements_at_open)
    return Result<ReadData>::failure(ESTALE);
  // A small file this mount wrote whole, or read ahead, unchanged since
  // (CachePolicy::whole_content); not for a judged handle (FileHandle::judged).
  if (auto content = file.judged ? nullptr : cache_.whole_content(ino);
      content && data_.writes_idle(ino)) {
    ReadData out;
    if (offset < content->size()) {
      out.size = std::min<uint64_t>(size, content->size() - offset);
      out.pieces.emplace_back(content->data() + offset, out.size);
    }
    out.held.push_back(std::move(content));
    return out;
  }
  // The first read of a deferred open that takes the whole file (cat, cp, a stage-in of small
  // files): the gateway opens, reads and closes it for this call, so the handle stays unknown to
  // it and the release makes no call. A later read names the handle and opens it for keeps.
  if (offset == 0 && file.deferred_size && size >= *file.deferred_size &&
      !file.gateway_knows.load(std::memory_order_relaxed)) {
    auto whole = data_.read_whole(*file.data, unnamed_ref(ino, file), size);
    if (whole) whole->after_reply = dir_read_ahead_due(file.path);
    return whole;
  }
  return data_.read(*file.data, file_ref(ino, file), offset, size);
}

Status MountSession::write(InodeNumber ino, FileHandle& file, uint64_t offset,
                           std::string_view data, const std::function<void()>& taken,
                           bool from_pages) {
  // The size its writer knows, should the file's name go while it is open (getattr).
  open_inodes_.wrote(ino, offset + data.size());
  if (file.create_unsettled.load(std::memory_order_acquire)) {  // settle_create decides, locked
    // A small first write (echo, a small file's whole content) goes with the create, in one call;
    // a larger one after it, with write-behind as for any file.
    constexpr size_t kCreateCarriesAtMost = 64 << 10;
    const bool with_create = data.size() <= kCreateCarriesAtMost;
    auto settled = settle_create(ino, file, offset, with_create ? data : std::string_view());
    if (!settled) return Status::failure(settled.error());
    if (*settled && with_create) {
      taken();
      return ok_status();
    }
  }
  if (file.made_empty.exchange(false, std::memory_order_acq_rel) && offset == 0 && !data.empty() &&
      data.size() <= CachePolicy::kContentFileBytes) {
    // The first write of an asynchronous create that a flush made empty (a shell's redirection
    // closes a duplicate of the descriptor before it writes), from the file's start: it goes at
    // once, as it would have with the create, and brings back the file's attributes, which say
    // whether it is all of the file (CachePolicy::wrote_whole). The close that follows would
    // wait for it anyway.
    const uint64_t writes = cache_.wrote(ino) + 1;  // as in settle_create
    const CachePolicy::Ticket ticket = cache_.ticket();
    std::optional<FileAttr> file_attr;
    auto sent = data_.write_through(*file.data, file_ref(ino, file), 0, data, &file_attr);
    cache_.wrote(ino);
    if (!sent) return Status::failure(sent.error());
    if (*sent != data.size()) return Status::failure(EIO);
    if (file_attr) cache_.wrote_whole(ino, *file_attr, ticket, writes, data);
    taken();
    return ok_status();
  }
  const CachePolicy::Ticket ticket = cache_.ticket();
  cache_.wrote(ino);
  // Once `taken` has replied, the kernel may close and release the file at once: `file` is
  // recorded in before the reply, and not touched after it.
  bool recorded = false;
  auto record = [&] {
    // Queued now: an open that counted writes before this one sees it in flight.
    const uint64_t writes = cache_.wrote(ino);
    std::lock_guard lock(file.create_mu);
    file.last_write = std::make_pair(ticket, writes);
    recorded = true;
  };
  Status written = data_.write(
      *file.data, file_ref(ino, file), offset, data,
      [&] {
        record();
        taken();
      },
      from_pages);
  if (!recorded) record();  // failed: no reply went, so the file is still open
  return written;
}

Status MountSession::flush(InodeNumber ino, FileHandle& file) {
  // close(2) of an asynchronous create: the file is on the server when it returns.
  if (auto settled = settle_create(ino, file, 0, {}); !settled)
    return Status::failure(settled.error());
  Status flushed = data_.flush(*file.data, WriteBehind::Report::flush);
  // The attributes the last write brought back: the kernel asks for them after the close (the
  // writes changed them), and gets them without a call while nothing else changes the file.
  if (flushed) {
    if (auto attrs = data_.attrs_after_writes(*file.data)) {
      std::lock_guard lock(file.create_mu);
      if (file.last_write)
        cache_.server_attrs(ino, *attrs, file.last_write->first, file.last_write->second);
    }
  }
  return flushed;
}

Status MountSession::fsync(InodeNumber ino, FileHandle& file, bool datasync) {
  if (auto settled = settle_create(ino, file, 0, {}); !settled)
    return Status::failure(settled.error());
  Status written = data_.flush(*file.data, WriteBehind::Report::fsync);
  if (!written) return written;
  return gateway_.fsync(file_ref(ino, file), datasync);
}

void MountSession::release(InodeNumber ino, std::unique_ptr<FileHandle> file) {
  if (auto settled = settle_create(ino, *file, 0, {}); !settled)
    spdlog::warn("{}: the create failed: errno {}", file->path, settled.error());
  drop_pending_create(ino, file.get());
  Status written = data_.flush(*file->data, WriteBehind::Report::fsync);
  if (!written)
    spdlog::warn("{}: a write failed after the last flush: errno {}", file->path, written.error());
  // The read-ahead that named the handle has ended with the flush: gateway_knows is final.
  if (file->gateway_knows.load(std::memory_order_relaxed))
    gateway_.release_async(file_ref(ino, *file));
  closed(ino);
}

// ---- directories ----

Result<MountSession::OpenedDir> MountSession::opendir(InodeNumber ino) {
  settle_creates();
  auto path = path_of(ino);
  if (!path) return Result<OpenedDir>::failure(path.error());
  auto dir = std::make_unique<DirHandle>();
  dir->cache_readdir = cache_.may_cache_listing();
  const bool keep = dir->cache_readdir && cache_.keep_listing(ino);
  if (!keep) {
    if (Status fetched = fetch_into(ino, *dir); !fetched)
      return Result<OpenedDir>::failure(fetched.error());
  }
  return OpenedDir{std::move(dir), keep};
}

Result<MountSession::Listing> MountSession::readdir(InodeNumber ino, DirHandle& dir,
                                                    uint64_t offset, bool plus,
                                                    const ListFill& fill) {
  settle_creates();
  std::unique_lock lock(dir.mu);
  if (!dir.fetched || (offset == 0 && dir.served)) {  // first call, or rewinddir: what is there now
    if (Status fetched = fetch_into(ino, dir); !fetched)
      return Result<Listing>::failure(fetched.error());
  }
  dir.served = true;
  // readdirplus needs the directory's path to name entries; plain readdir only for their d_ino.
  auto dir_path = path_of(ino);
  if (plus && !dir_path) return Result<Listing>::failure(dir_path.error());

  Listing listing;
  listing.ticket = dir.ticket;
  listing.cache_readdir = dir.cache_readdir;
  bool added = false;
  for (std::size_t i = offset; i < dir.entries.size(); ++i) {
    const DirEntry& entry = dir.entries[i];
    ListItem item;
    item.name = entry.name;
    item.mode = entry.attr.mode;
    item.next = i + 1;
    if (!plus) {
      if (dir_path && !is_dot_or_dotdot(entry.name))
        item.known = inodes_.file_id_at(join_path(*dir_path, entry.name));
    } else if (!is_dot_or_dotdot(entry.name) && (entry.attr.mode & S_IFMT) != 0) {
      // The kernel takes no lookup for "." and "..", nor for an entry with ino 0; an entry the
      // gateway sent without a file type gets no inode rather than a broken one.
      item.entry = add_entry(join_path(*dir_path, entry.name), entry.attr, dir.ticket);
      listing.counted.push_back(item.entry->ref.ino);
    }
    if (!fill(item)) {  // did not fit: the kernel will not hear of it
      if (item.entry) {
        forget_lookups(item.entry->ref.ino, 1);
        listing.counted.pop_back();
      }
      break;
    }
    added = true;
  }
  // The end of the listing: the kernel now holds all of it (when cache_readdir is on), as
  // fetched under the handle's ticket.
  listing.complete = !added;
  return listing;
}

void MountSession::listing_replied(InodeNumber ino, const Listing& listing, bool received) {
  if (!received) {
    for (InodeNumber counted : listing.counted) forget_lookups(counted, 1);
  } else if (listing.complete && listing.cache_readdir) {
    cache_.listed(listing.ticket, ino);
  }
}

void MountSession::releasedir(std::unique_ptr<DirHandle> dir) { dir.reset(); }

}  // namespace skein::client
