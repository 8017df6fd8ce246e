// The FUSE low-level operations of skein-mount; see fuse_ops.hpp.
// Each operation: resolve inode numbers to paths, call the gateway, send exactly one reply.
// Lookup counts: every entry sent to the kernel (lookup, mkdir, create, readdirplus, ...) adds one
// through InodeTable::lookup_add; an entry the kernel never received is taken back at once.
#include "fuse_ops.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "skein/path.hpp"

namespace skein::client {
namespace {

static_assert(FUSE_ROOT_ID == kRootInode);

constexpr unsigned kMaxIoBytes = 1 << 20;  // the Data service's largest read and write
constexpr blksize_t kBlockSize = 4096;
// d_ino of a readdir entry the kernel holds no inode for (libfuse's FUSE_UNKNOWN_INO).
constexpr ino_t kUnknownIno = 0xffffffff;

// An open file: the gateway's handle and what the gateway needs to re-open it by path.
struct OpenFile {
  std::uint64_t gw_handle = 0;
  std::uint32_t flags = 0;
  std::string path;  // at open; later calls use the inode's current path (renames move it)
  std::unique_ptr<DataPath::File> data = nullptr;  // its read-ahead and write-behind
};

// An open directory: its whole listing, fetched at the first readdir that reaches this mount;
// entry i has offset i + 1. When the kernel still holds the listing (cache_readdir, kept across
// opens while nothing changed), no readdir comes and nothing is fetched.
struct DirHandle {
  // Serialises readdir calls on one handle (the kernel already does; this makes it certain).
  // Acquire before InodeTable's lock; may be held across the gateway call of a fetch, never
  // across a fuse_reply_*.
  std::mutex mu;
  std::vector<DirEntry> entries;  // guarded by mu; starts with "." and ".."
  CachePolicy::Ticket ticket;     // guarded by mu; taken before `entries` were fetched
  bool fetched = false;           // guarded by mu
  bool served = false;            // guarded by mu; a rewind to 0 after this fetches anew
  bool cache_readdir = false;     // set at opendir: the kernel keeps what readdir returns
};

Mount& mount_of(fuse_req_t req) { return *static_cast<Mount*>(fuse_req_userdata(req)); }
const GatewayClient& gateway_of(fuse_req_t req) { return *mount_of(req).gateway; }
OpenFile& open_file(const fuse_file_info* fi) { return *reinterpret_cast<OpenFile*>(fi->fh); }
DirHandle& dir_handle(const fuse_file_info* fi) { return *reinterpret_cast<DirHandle*>(fi->fh); }

bool is_dot_or_dotdot(const std::string& name) { return name == "." || name == ".."; }

timespec to_timespec(std::int64_t ns) {
  std::int64_t sec = ns / 1'000'000'000;
  std::int64_t rem = ns % 1'000'000'000;
  if (rem < 0) {
    --sec;
    rem += 1'000'000'000;
  }
  return timespec{static_cast<time_t>(sec), static_cast<long>(rem)};
}

std::int64_t to_ns(const timespec& ts) {
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct stat to_stat(const FileAttr& a, fuse_ino_t ino) {
  struct stat st {};
  st.st_ino = ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_blocks = static_cast<blkcnt_t>(a.blocks);
  st.st_blksize = kBlockSize;
  st.st_atim = to_timespec(a.atime_ns);
  st.st_mtim = to_timespec(a.mtime_ns);
  st.st_ctim = to_timespec(a.ctime_ns);
  return st;
}

// An entry for the kernel, cached as long as the cache policy allows for an operation that took
// `ticket` before asking the gateway.
fuse_entry_param to_entry(Mount& mount, InodeRef ref, const FileAttr& attr,
                          CachePolicy::Ticket ticket) {
  fuse_entry_param e{};
  e.ino = ref.ino;
  e.generation = ref.generation;
  e.attr = to_stat(attr, ref.ino);
  e.attr_timeout = e.entry_timeout = mount.cache.timeout(ticket);
  mount.cache.sent_attrs(ref.ino, attr, ticket);
  return e;
}

// Takes back kernel lookups; what the cache policy knew of a dropped inode goes with it.
void forget_lookups(Mount& mount, fuse_ino_t ino, std::uint64_t n) {
  if (mount.inodes.forget(ino, n)) mount.cache.forget(ino);
}

// The current path of `ino`: ENOENT once its name was removed, ESTALE if the kernel names an inode
// this mount never gave it.
Result<std::string> path_of(fuse_req_t req, fuse_ino_t ino) {
  const InodeTable& inodes = mount_of(req).inodes;
  if (auto path = inodes.path_of(ino)) return std::move(*path);
  return Result<std::string>::failure(inodes.last_path_of(ino) ? ENOENT : ESTALE);
}

Result<std::string> child_path(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (!is_valid_entry_name(name)) return Result<std::string>::failure(EINVAL);
  auto dir = path_of(req, parent);
  if (!dir) return dir;
  return join_path(*dir, name);
}

// Names an open file for the gateway by the inode's path now: a renamed open file keeps working,
// and one whose name was removed keeps its last path.
FileRef file_ref(fuse_req_t req, fuse_ino_t ino, const fuse_file_info* fi) {
  const OpenFile& file = open_file(fi);
  return FileRef{mount_of(req).inodes.last_path_of(ino).value_or(file.path), file.gw_handle,
                 file.flags};
}

// Replies with the entry at `path`, counting the lookup the kernel now holds.
void reply_entry(fuse_req_t req, const std::string& path, const FileAttr& attr,
                 CachePolicy::Ticket ticket) {
  Mount& mount = mount_of(req);
  fuse_entry_param e = to_entry(mount, mount.inodes.lookup_add(path), attr, ticket);
  if (fuse_reply_entry(req, &e) != 0) forget_lookups(mount, e.ino, 1);  // interrupted
}

void reply_status(fuse_req_t req, Status status) { fuse_reply_err(req, status.error()); }

// Removes a silly-renamed file whose last open on this mount has been closed.
void remove_hidden(Mount& mount, const std::string& hidden) {
  (void)mount.cache.begin_mutation();
  Status removed = mount.gateway->unlink(hidden);
  if (auto dir = mount.inodes.find(parent_path(hidden))) mount.cache.dir_changed(*dir);
  if (!removed && removed.error() != ENOENT) {
    spdlog::warn("cannot remove {} (deleted while open): errno {}", hidden, removed.error());
  }
  mount.inodes.unlink(hidden);
}

// A release (or an open the kernel never received) of `ino`: at its last close, a file deleted
// while open goes for good.
void closed(Mount& mount, fuse_ino_t ino) {
  if (auto hidden = mount.open_inodes.closed(ino)) remove_hidden(mount, *hidden);
}

// NFS-style silly rename: a file this mount has open is not removed but renamed to a hidden name
// in its directory, until its last close; its open descriptors keep reading, writing and
// fstat-ing it. Returns true when it did so (the unlink is then complete).
Result<bool> hide_if_open(Mount& mount, const std::string& path) {
  auto ino = mount.inodes.find(path);
  if (!ino || !mount.open_inodes.is_open(*ino)) return false;
  std::string hidden = join_path(parent_path(path), OpenInodes::hidden_name(*ino));
  Status renamed = mount.gateway->rename(path, hidden, RENAME_NOREPLACE);
  if (!renamed) return Result<bool>::failure(renamed.error());
  mount.inodes.rename(path, hidden);
  spdlog::debug("{} deleted while open: kept as {} until closed", path, hidden);
  if (!mount.open_inodes.hide(*ino, hidden)) remove_hidden(mount, hidden);  // closed meanwhile
  return true;
}

// The listing served by readdir: ".", "..", then the gateway's entries.
Result<std::vector<DirEntry>> fetch_listing(fuse_req_t req, fuse_ino_t ino) {
  using R = Result<std::vector<DirEntry>>;
  auto path = path_of(req, ino);
  if (!path) return R::failure(path.error());
  mount_of(req).data->settle_all();  // readdirplus hands out sizes
  auto listed = gateway_of(req).readdir(*path);
  if (!listed) return listed;
  std::vector<DirEntry> entries;
  entries.reserve(listed->size() + 2);
  entries.push_back(DirEntry{".", FileAttr{.mode = S_IFDIR}});
  entries.push_back(DirEntry{"..", FileAttr{.mode = S_IFDIR}});
  for (auto& e : *listed) {
    if (!is_valid_entry_name(e.name)) continue;        // the gateway's own "." and "..", or junk
    if (OpenInodes::is_hidden_name(e.name)) continue;  // deleted while open (silly rename)
    entries.push_back(std::move(e));
  }
  return entries;
}

// Fetches `dir`'s listing afresh, under a ticket taken before; the caller holds dir.mu (or owns
// a handle nobody else sees yet).
Status fetch_into(fuse_req_t req, fuse_ino_t ino, DirHandle& dir) {
  CachePolicy::Ticket ticket = mount_of(req).cache.ticket();
  auto fresh = fetch_listing(req, ino);
  if (!fresh) return Status::failure(fresh.error());
  dir.entries = fresh.take();
  dir.ticket = ticket;
  dir.fetched = true;
  return ok_status();
}

// readdir and readdirplus: entries from `off` on, as many as fit in `size` bytes.
void reply_listing(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                   bool plus) {
  Mount& mount = mount_of(req);
  DirHandle& dir = dir_handle(fi);
  std::unique_lock lock(dir.mu);
  if (!dir.fetched || (off == 0 && dir.served)) {  // first call, or rewinddir: what is there now
    if (Status fetched = fetch_into(req, ino, dir); !fetched) return reply_status(req, fetched);
  }
  dir.served = true;
  // readdirplus needs the directory's path to name entries; plain readdir only for their d_ino.
  auto dir_path = path_of(req, ino);
  if (plus && !dir_path) return (void)fuse_reply_err(req, dir_path.error());

  std::vector<char> buf(size);
  std::vector<fuse_ino_t> counted;  // lookups added for this reply
  size_t used = 0;
  for (size_t i = static_cast<size_t>(off); i < dir.entries.size(); ++i) {
    const DirEntry& entry = dir.entries[i];
    const off_t next = static_cast<off_t>(i + 1);
    const size_t room = size - used;
    size_t needed;
    if (!plus) {
      struct stat st {};
      st.st_mode = entry.attr.mode;
      st.st_ino = kUnknownIno;
      if (dir_path && !is_dot_or_dotdot(entry.name)) {
        st.st_ino = mount.inodes.find(join_path(*dir_path, entry.name)).value_or(kUnknownIno);
      }
      needed = fuse_add_direntry(req, buf.data() + used, room, entry.name.c_str(), &st, next);
    } else {
      fuse_entry_param e{};
      e.attr.st_mode = entry.attr.mode;
      e.attr.st_ino = kUnknownIno;
      // The kernel takes no lookup for "." and "..", nor for an entry with ino 0; an entry the
      // gateway sent without a file type gets no inode rather than a broken one.
      if (!is_dot_or_dotdot(entry.name) && (entry.attr.mode & S_IFMT) != 0) {
        e = to_entry(mount, mount.inodes.lookup_add(join_path(*dir_path, entry.name)), entry.attr,
                     dir.ticket);
        counted.push_back(e.ino);
      }
      needed = fuse_add_direntry_plus(req, buf.data() + used, room, entry.name.c_str(), &e, next);
      if (needed > room && e.ino != 0) {  // did not fit: the kernel will not hear of it
        forget_lookups(mount, e.ino, 1);
        counted.pop_back();
      }
    }
    if (needed > room) break;
    used += needed;
  }
  // The end of the listing: the kernel now holds all of it (when cache_readdir is on), as
  // fetched under the handle's ticket.
  const bool complete = used == 0;
  const CachePolicy::Ticket ticket = dir.ticket;
  lock.unlock();
  if (fuse_reply_buf(req, buf.data(), used) != 0) {
    for (fuse_ino_t counted_ino : counted) forget_lookups(mount, counted_ino, 1);
  } else if (complete && dir.cache_readdir) {
    mount.cache.listed(ticket, ino);
  }
}

// ---- operations, in fuse_lowlevel_ops order ----

void skein_init(void* userdata, fuse_conn_info* conn) {
  Mount& mount = *static_cast<Mount*>(userdata);
  conn->max_write = kMaxIoBytes;
  conn->max_read = kMaxIoBytes;
  const unsigned wanted = FUSE_CAP_ASYNC_READ | FUSE_CAP_READDIRPLUS | FUSE_CAP_ATOMIC_O_TRUNC;
  conn->want |= wanted & conn->capable;
  // No writeback cache yet: every write reaches the gateway before write(2) returns. Without
  // HANDLE_KILLPRIV the kernel clears setuid/setgid bits itself, through setattr.
  conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV | FUSE_CAP_SPLICE_READ |
                  FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  spdlog::info("FUSE session initialised: protocol {}.{}, max_write {}", conn->proto_major,
               conn->proto_minor, conn->max_write);
  // Coherence starts with the session: invalidations make sense only once the kernel is there.
  if (mount.kernel_cache) mount.kernel_cache->session_ready();
  if (mount.watch) mount.watch->start();
}

void skein_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto path = child_path(req, parent, name);
  if (!path) return (void)fuse_reply_err(req, path.error());
  if (auto known = mount_of(req).inodes.find(*path)) mount_of(req).data->settle(*known);
  CachePolicy::Ticket ticket = mount_of(req).cache.ticket();
  auto attr = gateway_of(req).getattr(*path);
  if (!attr) return (void)fuse_reply_err(req, attr.error());
  reply_entry(req, *path, *attr, ticket);
}

void skein_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  forget_lookups(mount_of(req), ino, nlookup);
  fuse_reply_none(req);
}

void skein_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  Mount& mount = mount_of(req);
  // A directory whose attributes nothing changed since the mount last told the kernel (which
  // asks again after every readdir and every change of an entry in it).
  if (auto kept = mount.cache.dir_attrs(ino)) {
    struct stat st = to_stat(kept->first, ino);
    return (void)fuse_reply_attr(req, &st, kept->second);
  }
  auto path = path_of(req, ino);
  if (path) mount.data->settle(ino);  // the size and mtime of writes acknowledged to the kernel
  CachePolicy& cache = mount.cache;
  CachePolicy::Ticket ticket = cache.ticket();
  auto attr = path ? gateway_of(req).getattr(*path) : Result<FileAttr>::failure(path.error());
  if (!attr && attr.error() == ENOENT) {
    // A file open here exists until its last close, even when its name is gone (removed through
    // another mount, or on a branch that is down): reads go on through the gateway's handle.
    if (auto seen = mount.open_inodes.last_seen(ino)) {
      struct stat st = to_stat(*seen, ino);
      return (void)fuse_reply_attr(req, &st, 0);
    }
  }
  if (!attr) return (void)fuse_reply_err(req, attr.error());
  struct stat st = to_stat(*attr, ino);
  cache.sent_attrs(ino, *attr, ticket);
  mount.open_inodes.seen(ino, *attr);
  fuse_reply_attr(req, &st, cache.timeout(ticket));
}

void skein_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                   fuse_file_info* fi) {
  AttrChange change;
  if (to_set & FUSE_SET_ATTR_MODE) {
    change.fields |= AttrChange::kMode;
    change.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    change.fields |= AttrChange::kUid;
    change.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    change.fields |= AttrChange::kGid;
    change.gid = attr->st_gid;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    change.fields |= AttrChange::kSize;
    change.size = static_cast<std::uint64_t>(attr->st_size);
  }
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    change.fields |= AttrChange::kAtimeNow;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    change.fields |= AttrChange::kAtime;
    change.atime_ns = to_ns(attr->st_atim);
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    change.fields |= AttrChange::kMtimeNow;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    change.fields |= AttrChange::kMtime;
    change.mtime_ns = to_ns(attr->st_mtim);
  }
  // ftruncate and futimens come with the open file: use it, and its path even if unlinked.
  Result<std::string> path =
      fi ? Result<std::string>(file_ref(req, ino, fi).path) : path_of(req, ino);
  if (!path) return (void)fuse_reply_err(req, path.error());
  if (fi) change.handle = open_file(fi).gw_handle;
  mount_of(req).data->settle(ino);  // writes acknowledged before must not land after (or undo) it
  CachePolicy& cache = mount_of(req).cache;
  CachePolicy::Ticket ticket = cache.begin_mutation().ticket;
  auto changed = gateway_of(req).setattr(*path, change);
  if (to_set & FUSE_SET_ATTR_SIZE) mount_of(req).data->changed(ino);
  if (!changed) return (void)fuse_reply_err(req, changed.error());
  struct stat st = to_stat(*changed, ino);
  cache.sent_attrs(ino, *changed, ticket);
  fuse_reply_attr(req, &st, cache.timeout(ticket));
}

void skein_readlink(fuse_req_t req, fuse_ino_t ino) {
  auto path = path_of(req, ino);
  if (!path) return (void)fuse_reply_err(req, path.error());
  auto target = gateway_of(req).readlink(*path);
  if (!target) return (void)fuse_reply_err(req, target.error());
  fuse_reply_readlink(req, target->c_str());
}

void skein_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  auto path = child_path(req, parent, name);
  if (!path) return (void)fuse_reply_err(req, path.error());
  CachePolicy::Ticket ticket = mount_of(req).cache.begin_mutation().ticket;
  auto attr = gateway_of(req).mkdir(*path, mode & 07777);
  mount_of(req).cache.dir_changed(parent);
  if (!attr) return (void)fuse_reply_err(req, attr.error());
  reply_entry(req, *path, *attr, ticket);
}

void skein_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto path = child_path(req, parent, name);
  if (!path) return (void)fuse_reply_err(req, path.error());
  (void)mount_of(req).cache.begin_mutation();
  auto hidden = hide_if_open(mount_of(req), *path);
  mount_of(req).cache.dir_changed(parent);
  if (!hidden) return (void)fuse_reply_err(req, hidden.error());
  if (*hidden) return (void)fuse_reply_err(req, 0);
  Status removed = gateway_of(req).unlink(*path);
  mount_of(req).cache.dir_changed(parent);
  if (removed) mount_of(req).inodes.unlink(*path);
  reply_status(req, removed);
}

void skein_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto path = child_path(req, parent, name);
  if (!path) return (void)fuse_reply_err(req, path.error());
  (void)mount_of(req).cache.begin_mutation();
  Status removed = gateway_of(req).rmdir(*path);
  mount_of(req).cache.dir_changed(parent);
  if (removed) mount_of(req).inodes.unlink(*path);
  reply_status(req, removed);
}

void skein_symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  auto path = child_path(req, parent, name);
  if (!path) return (void)fuse_reply_err(req, path.error());
  CachePolicy::Ticket ticket = mount_of(req).cache.begin_mutation().ticket;
  auto attr = gateway_of(req).symlink(*path, target);
  mount_of(req).cache.dir_changed(parent);
  if (!attr) return (void)fuse_reply_err(req, attr.error());
  reply_entry(req, *path, *attr, ticket);
}

void skein_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                  const char* newname, unsigned int flags) {
  if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) return (void)fuse_reply_err(req, EINVAL);
  auto from = child_path(req, parent, name);
  if (!from) return (void)fuse_reply_err(req, from.error());
  auto to = child_path(req, newparent, newname);
  if (!to) return (void)fuse_reply_err(req, to.error());
  (void)mount_of(req).cache.begin_mutation();
  Status renamed = gateway_of(req).rename(*from, *to, flags);
  CachePolicy& cache = mount_of(req).cache;
  cache.dir_changed(parent);
  cache.dir_changed(newparent);
  if (renamed && (flags & RENAME_EXCHANGE)) mount_of(req).inodes.exchange(*from, *to);
  if (renamed && !(flags & RENAME_EXCHANGE)) mount_of(req).inodes.rename(*from, *to);
  for (const std::string* moved : {&*from, &*to}) {  // a moved directory's ".." changed
    if (auto ino = mount_of(req).inodes.find(*moved)) cache.dir_changed(*ino);
  }
  reply_status(req, renamed);
}

// A hard link gets an inode of its own: inodes name paths, and this is a second path. st_nlink
// still says the truth.
void skein_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  auto existing = path_of(req, ino);
  if (!existing) return (void)fuse_reply_err(req, existing.error());
  auto path = child_path(req, newparent, newname);
  if (!path) return (void)fuse_reply_err(req, path.error());
  CachePolicy::Ticket ticket = mount_of(req).cache.begin_mutation().ticket;
  auto attr = gateway_of(req).link(*existing, *path);
  mount_of(req).cache.dir_changed(newparent);
  if (!attr) return (void)fuse_reply_err(req, attr.error());
  reply_entry(req, *path, *attr, ticket);
}

void skein_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto path = path_of(req, ino);
  if (!path) return (void)fuse_reply_err(req, path.error());
  const auto flags = static_cast<std::uint32_t>(fi->flags);
  Mount& mount = mount_of(req);
  CachePolicy::Ticket ticket = mount.cache.ticket();
  auto opened = gateway_of(req).open(*path, flags);
  if (!opened) return (void)fuse_reply_err(req, opened.error());
  auto* file = new OpenFile{opened->handle, flags, *path};
  file->data = mount.data->open(ino, gateway_of(req), flags, opened->attr.size);
  fi->fh = reinterpret_cast<std::uint64_t>(file);
  // Close-to-open: pages survive only if the file is as this mount's last open saw it, and the
  // kernel's attributes are dropped if the gateway's (fresh) ones differ from what it was told.
  auto decision = mount.cache.opened(ticket, ino, opened->attr.mtime_ns, opened->attr.size);
  if (decision.refresh_attrs && mount.kernel_cache) mount.kernel_cache->attributes_changed(ino);
  fi->keep_cache = decision.keep_cache ? 1 : 0;
  fi->direct_io = 0;
  mount.open_inodes.opened(ino, opened->attr);  // before the reply: a release may follow
  if (fuse_reply_open(req, fi) != 0) {          // interrupted: no release will come for it
    (void)gateway_of(req).release(FileRef{*path, file->gw_handle, flags});
    delete file;
    closed(mount, ino);
  }
}

// Read-ahead and write-behind live in DataPath: reads may come from blocks fetched earlier, and a
// write is acknowledged once queued, its error reported by a later write, flush, fsync or close.
void skein_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  auto data =
      mount_of(req).data->read(*open_file(fi).data, file_ref(req, ino, fi),
                               static_cast<std::uint64_t>(off), static_cast<std::uint32_t>(size));
  if (!data) return (void)fuse_reply_err(req, data.error());
  std::vector<iovec> iov;
  iov.reserve(data->pieces.size());
  for (std::string_view piece : data->pieces)
    iov.push_back(iovec{const_cast<char*>(piece.data()), piece.size()});
  if (iov.empty()) return (void)fuse_reply_buf(req, nullptr, 0);
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

void skein_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                 fuse_file_info* fi) {
  // The reply goes as soon as the bytes are taken, before they are sent on.
  Status written = mount_of(req).data->write(
      *open_file(fi).data, file_ref(req, ino, fi), static_cast<std::uint64_t>(off),
      std::string_view(buf, size), [req, size] { fuse_reply_write(req, size); });
  if (!written) fuse_reply_err(req, written.error());
}

// close(2): what matters is that every write reached the server, and the gateway acknowledges a
// write only once the server has it; so waiting for write-behind is all, and its error is
// close's. No gateway call.
void skein_flush(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  reply_status(req, mount_of(req).data->flush(*open_file(fi).data));
}

// The gateway's handle is released without waiting for its answer: the kernel ignores release
// errors, and the data is on the server already (see flush). The GatewayClient waits for
// releases still on their way when the mount goes.
void skein_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  FileRef file = file_ref(req, ino, fi);
  Status written = mount_of(req).data->flush(*open_file(fi).data);
  if (!written)
    spdlog::warn("{}: a write failed after the last flush: errno {}", file.path, written.error());
  gateway_of(req).release_async(file);
  closed(mount_of(req), ino);
  delete &open_file(fi);
  fuse_reply_err(req, 0);  // the kernel does not look at release errors
}

void skein_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  Status written = mount_of(req).data->flush(*open_file(fi).data);
  if (!written) return reply_status(req, written);
  reply_status(req, gateway_of(req).fsync(file_ref(req, ino, fi), datasync != 0));
}

// While the Watch stream is healthy the kernel caches listings (cache_readdir) and keeps them
// across opens as long as no invalidation touched the directory since this mount served it
// whole; such an opendir asks the gateway nothing (a readdir that still comes fetches). Any
// other opendir fetches the listing at once, so that its errors (EACCES, ENOENT) come from it.
void skein_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Mount& mount = mount_of(req);
  auto path = path_of(req, ino);
  if (!path) return (void)fuse_reply_err(req, path.error());
  auto dir = std::make_unique<DirHandle>();
  dir->cache_readdir = mount.cache.may_cache_listing();
  const bool keep = dir->cache_readdir && mount.cache.keep_listing(ino);
  if (!keep) {
    if (Status fetched = fetch_into(req, ino, *dir); !fetched) return reply_status(req, fetched);
  }
  fi->cache_readdir = dir->cache_readdir ? 1 : 0;
  fi->keep_cache = keep ? 1 : 0;
  fi->fh = reinterpret_cast<std::uint64_t>(dir.get());
  if (fuse_reply_open(req, fi) == 0)
    (void)dir.release();  // else interrupted: no releasedir will come
}

void skein_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  reply_listing(req, ino, size, off, fi, /*plus=*/false);
}

void skein_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  delete &dir_handle(fi);
  fuse_reply_err(req, 0);
}

void skein_statfs(fuse_req_t req, fuse_ino_t ino) {
  auto path = path_of(req, ino);
  auto stats = gateway_of(req).statfs(path ? *path : std::string("/"));
  if (!stats) return (void)fuse_reply_err(req, stats.error());
  struct statvfs sv {};
  sv.f_bsize = stats->block_size;
  sv.f_frsize = stats->fragment_size ? stats->fragment_size : stats->block_size;
  sv.f_blocks = stats->blocks;
  sv.f_bfree = stats->blocks_free;
  sv.f_bavail = stats->blocks_available;
  sv.f_files = stats->files;
  sv.f_ffree = stats->files_free;
  sv.f_favail = stats->files_available;
  sv.f_namemax = stats->name_max ? stats->name_max : 255;
  fuse_reply_statfs(req, &sv);
}

void skein_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
                  fuse_file_info* fi) {
  auto path = child_path(req, parent, name);
  if (!path) return (void)fuse_reply_err(req, path.error());
  const auto flags = static_cast<std::uint32_t>(fi->flags);
  Mount& mount = mount_of(req);
  const CachePolicy::Mutation mutation = mount.cache.begin_mutation();
  const CachePolicy::Ticket ticket = mutation.ticket;
  auto created = gateway_of(req).create(*path, flags, mode & 07777);
  if (!created) return (void)fuse_reply_err(req, created.error());
  if (created->parent_attr) {
    mount.cache.post_op_attrs(parent, *created->parent_attr, mutation);
  } else {
    mount.cache.dir_changed(parent);
  }
  fuse_entry_param e = to_entry(mount, mount.inodes.lookup_add(*path), created->attr, ticket);
  auto* file = new OpenFile{created->handle, flags, *path};
  file->data = mount.data->open(e.ino, gateway_of(req), flags, created->attr.size);
  fi->fh = reinterpret_cast<std::uint64_t>(file);
  fi->keep_cache = 0;
  fi->direct_io = 0;
  mount.open_inodes.opened(e.ino, created->attr);  // before the reply: a release may follow
  if (fuse_reply_create(req, &e, fi) != 0) {  // interrupted: neither lookup nor open was received
    (void)gateway_of(req).release(FileRef{*path, file->gw_handle, flags});
    delete file;
    closed(mount, e.ino);
    forget_lookups(mount, e.ino, 1);
  }
}

void skein_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  Mount& mount = mount_of(req);
  for (size_t i = 0; i < count; ++i) forget_lookups(mount, forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void skein_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  reply_listing(req, ino, size, off, fi, /*plus=*/true);
}

fuse_lowlevel_ops make_operations() {
  fuse_lowlevel_ops ops{};
  ops.init = skein_init;
  ops.lookup = skein_lookup;
  ops.forget = skein_forget;
  ops.getattr = skein_getattr;
  ops.setattr = skein_setattr;
  ops.readlink = skein_readlink;
  ops.mkdir = skein_mkdir;
  ops.unlink = skein_unlink;
  ops.rmdir = skein_rmdir;
  ops.symlink = skein_symlink;
  ops.rename = skein_rename;
  ops.link = skein_link;
  ops.open = skein_open;
  ops.read = skein_read;
  ops.write = skein_write;
  ops.flush = skein_flush;
  ops.release = skein_release;
  ops.fsync = skein_fsync;
  ops.opendir = skein_opendir;
  ops.readdir = skein_readdir;
  ops.releasedir = skein_releasedir;
  ops.statfs = skein_statfs;
  ops.create = skein_create;
  ops.forget_multi = skein_forget_multi;
  ops.readdirplus = skein_readdirplus;
  return ops;
}

}  // namespace

const fuse_lowlevel_ops& fuse_operations() {
  static const fuse_lowlevel_ops ops = make_operations();
  return ops;
}

}  // namespace skein::client
