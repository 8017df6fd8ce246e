// The FUSE low-level operations of skein-mount; see fuse_ops.hpp. Each operation converts the
// kernel's arguments, calls one MountSession operation (which decides everything), and sends
// exactly one reply. A reply that fails (the request was interrupted) is told back to the session,
// which takes back the lookups or the open the kernel never received.
#include "fuse_ops.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>

#include <cerrno>
#include <string>
#include <vector>

#include "wire/limits.hpp"

namespace skein::client {
namespace {

static_assert(FUSE_ROOT_ID == kRootInode);

constexpr unsigned kMaxIoBytes = wire::kMaxIoSize;  // the Data service's largest read and write
constexpr blksize_t kBlockSize = 4096;
// d_ino of a readdir entry the kernel holds no inode for (libfuse's FUSE_UNKNOWN_INO).
constexpr ino_t kUnknownIno = 0xffffffff;

MountDaemon& daemon_of(fuse_req_t req) {
  return *static_cast<MountDaemon*>(fuse_req_userdata(req));
}
MountSession& session_of(fuse_req_t req) { return *daemon_of(req).session; }
FileHandle& file_handle(const fuse_file_info* fi) { return *reinterpret_cast<FileHandle*>(fi->fh); }
DirHandle& dir_handle(const fuse_file_info* fi) { return *reinterpret_cast<DirHandle*>(fi->fh); }

timespec to_timespec(int64_t ns) {
  int64_t sec = ns / 1'000'000'000;
  int64_t rem = ns % 1'000'000'000;
  if (rem < 0) {
    --sec;
    rem += 1'000'000'000;
  }
  return timespec{static_cast<time_t>(sec), static_cast<long>(rem)};
}

int64_t to_ns(const timespec& ts) {
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// `file_id` is what stat(2) shows as st_ino (InodeTable::file_id).
struct stat to_stat(const FileAttr& a, uint64_t file_id) {
  struct stat st {};
  st.st_ino = file_id;
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

fuse_entry_param to_entry_param(const Entry& entry) {
  fuse_entry_param e{};
  e.ino = entry.ref.ino;
  e.generation = entry.ref.generation;
  e.attr = to_stat(entry.attr, entry.ref.file_id);
  e.attr_timeout = e.entry_timeout = entry.timeout;
  return e;
}

SetAttrArgs to_attr_change(const struct stat* attr, int to_set) {
  SetAttrArgs change;
  if (to_set & FUSE_SET_ATTR_MODE) {
    change.fields |= SetAttrArgs::kMode;
    change.mode = attr->st_mode & 07777;
  }
  if (to_set & FUSE_SET_ATTR_UID) {
    change.fields |= SetAttrArgs::kUid;
    change.uid = attr->st_uid;
  }
  if (to_set & FUSE_SET_ATTR_GID) {
    change.fields |= SetAttrArgs::kGid;
    change.gid = attr->st_gid;
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    change.fields |= SetAttrArgs::kSize;
    change.size = static_cast<uint64_t>(attr->st_size);
  }
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
    change.fields |= SetAttrArgs::kAtimeNow;
  } else if (to_set & FUSE_SET_ATTR_ATIME) {
    change.fields |= SetAttrArgs::kAtime;
    change.atime_ns = to_ns(attr->st_atim);
  }
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
    change.fields |= SetAttrArgs::kMtimeNow;
  } else if (to_set & FUSE_SET_ATTR_MTIME) {
    change.fields |= SetAttrArgs::kMtime;
    change.mtime_ns = to_ns(attr->st_mtim);
  }
  return change;
}

void reply_entry(fuse_req_t req, const Result<Entry>& entry) {
  if (!entry) return (void)fuse_reply_err(req, entry.error());
  fuse_entry_param e = to_entry_param(*entry);
  if (fuse_reply_entry(req, &e) != 0) session_of(req).entry_not_received(*entry);
}

void reply_attr(fuse_req_t req, fuse_ino_t ino, const Result<Attributes>& attr) {
  if (!attr) return (void)fuse_reply_err(req, attr.error());
  struct stat st = to_stat(attr->attr, session_of(req).file_id(ino));
  fuse_reply_attr(req, &st, attr->timeout);
}

void reply_status(fuse_req_t req, Status status) { fuse_reply_err(req, status.error()); }

// readdir and readdirplus: entries from `off` on, as many as fit in `size` bytes.
void reply_listing(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi,
                   bool plus) {
  std::vector<char> buf(size);
  size_t used = 0;
  auto fill = [&](const MountSession::ListItem& item) {
    const std::string name(item.name);
    const size_t room = size - used;
    const auto next = static_cast<off_t>(item.next);
    size_t needed;
    if (!plus) {
      struct stat st {};
      st.st_mode = item.mode;
      st.st_ino = item.known.value_or(kUnknownIno);
      needed = fuse_add_direntry(req, buf.data() + used, room, name.c_str(), &st, next);
    } else {
      fuse_entry_param e{};
      if (item.entry) {
        e = to_entry_param(*item.entry);
      } else {
        e.attr.st_mode = item.mode;
        e.attr.st_ino = kUnknownIno;
      }
      needed = fuse_add_direntry_plus(req, buf.data() + used, room, name.c_str(), &e, next);
    }
    if (needed > room) return false;
    used += needed;
    return true;
  };
  MountSession& session = session_of(req);
  auto listing = session.readdir(ino, dir_handle(fi), static_cast<uint64_t>(off), plus, fill);
  if (!listing) return (void)fuse_reply_err(req, listing.error());
  session.listing_replied(ino, *listing, fuse_reply_buf(req, buf.data(), used) == 0);
}

// ---- operations, in fuse_lowlevel_ops order ----

void skein_init(void* userdata, fuse_conn_info* conn) {
  MountDaemon& daemon = *static_cast<MountDaemon*>(userdata);
  conn->max_write = kMaxIoBytes;
  conn->max_read = kMaxIoBytes;
  const unsigned wanted = FUSE_CAP_ASYNC_READ | FUSE_CAP_READDIRPLUS | FUSE_CAP_ATOMIC_O_TRUNC;
  conn->want |= wanted & conn->capable;
  // No kernel writeback cache: the kernel hands every write(2) to the mount at once, and the
  // mount's own write-behind acknowledges it as soon as the bytes are copied, before the gateway
  // has them (an error comes back at a later write, flush, fsync or close: write_behind.hpp).
  // Without HANDLE_KILLPRIV the kernel clears setuid/setgid bits itself, through setattr.
  conn->want &= ~(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_HANDLE_KILLPRIV | FUSE_CAP_SPLICE_READ |
                  FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
  // readdirplus for every chunk of a listing, not only the first (libfuse's default, "auto",
  // lets the kernel fall back to plain readdir unless lookups came between chunks): the
  // gateway's listing carries every entry's attributes anyway (SFTP's READDIR does), so the
  // stat(2) of each name that follows a listing (ls -l, find, cp -r, rsync) costs no call.
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  spdlog::info("FUSE session initialised: protocol {}.{}, max_write {}", conn->proto_major,
               conn->proto_minor, conn->max_write);
  // Coherence starts with the session: invalidations make sense only once the kernel is there.
  if (daemon.kernel_cache) daemon.kernel_cache->session_ready();
  if (daemon.watch) daemon.watch->start();
}

void skein_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  reply_entry(req, session_of(req).lookup(parent, name));
}

void skein_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  session_of(req).forget(ino, nlookup);
  fuse_reply_none(req);
}

// The credentials of the process behind `req` when the mount does not trust it (another user of
// a mount that serves every user), else nullopt.
std::optional<Credentials> judged_caller(fuse_req_t req) {
  const MountDaemon& daemon = daemon_of(req);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (!daemon.judge_others || ctx->uid == 0 || ctx->uid == daemon.trusted_user) return std::nullopt;
  Credentials who{ctx->uid, ctx->gid, {}};
  std::vector<gid_t> groups(64);
  for (;;) {
    const int n = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
    if (n < 0) break;  // unknown: judged by user and group alone
    if (static_cast<std::size_t>(n) <= groups.size()) {
      who.groups.assign(groups.begin(), groups.begin() + n);
      break;
    }
    groups.resize(static_cast<std::size_t>(n));
  }
  return who;
}

void skein_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* /*fi*/) {
  reply_attr(req, ino, session_of(req).getattr(ino));
}

void skein_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
                   fuse_file_info* fi) {
  const std::optional<Credentials> judged = judged_caller(req);
  reply_attr(req, ino,
             session_of(req).setattr(ino, to_attr_change(attr, to_set),
                                     fi ? &file_handle(fi) : nullptr, judged ? &*judged : nullptr));
}

void skein_readlink(fuse_req_t req, fuse_ino_t ino) {
  auto target = session_of(req).readlink(ino);
  if (!target) return (void)fuse_reply_err(req, target.error());
  fuse_reply_readlink(req, target->c_str());
}

void skein_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  reply_entry(req, session_of(req).mkdir(parent, name, mode));
}

void skein_unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  reply_status(req, session_of(req).unlink(parent, name));
}

void skein_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  reply_status(req, session_of(req).rmdir(parent, name));
}

void skein_symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  reply_entry(req, session_of(req).symlink(target, parent, name));
}

void skein_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
                  const char* newname, unsigned int flags) {
  reply_status(req, session_of(req).rename(parent, name, newparent, newname, flags));
}

void skein_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  reply_entry(req, session_of(req).link(ino, newparent, newname));
}

void skein_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  MountDaemon& daemon = daemon_of(req);
  const std::optional<Credentials> judged = judged_caller(req);
  auto opened =
      daemon.session->open(ino, static_cast<uint32_t>(fi->flags), judged ? &*judged : nullptr);
  if (!opened) return (void)fuse_reply_err(req, opened.error());
  if (opened->refresh_attrs && daemon.kernel_cache) daemon.kernel_cache->attributes_changed(ino);
  fi->keep_cache = opened->keep_cache ? 1 : 0;
  fi->direct_io = 0;
  // A file opened for reading has nothing to flush at close: the kernel need not ask.
  fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY ? 1 : 0;
  fi->fh = reinterpret_cast<uint64_t>(opened->file.get());
  if (fuse_reply_open(req, fi) == 0) {
    (void)opened->file.release();  // the kernel's until release
  } else {                         // interrupted: no release will come for it
    daemon.session->open_not_received(ino, std::move(opened->file));
  }
}

// Read-ahead and write-behind live in DataPath: reads may come from blocks fetched earlier, and a
// write is acknowledged once queued, its error reported by a later write, flush, fsync or close.
void skein_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  auto data = session_of(req).read(ino, file_handle(fi), static_cast<uint64_t>(off),
                                   static_cast<uint32_t>(size));
  if (!data) return (void)fuse_reply_err(req, data.error());
  std::vector<iovec> iov;
  iov.reserve(data->pieces.size());
  for (std::string_view piece : data->pieces)
    iov.push_back(iovec{const_cast<char*>(piece.data()), piece.size()});
  if (iov.empty())
    fuse_reply_buf(req, nullptr, 0);
  else
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  if (data->after_reply) data->after_reply();  // the pages this read filled are unlocked now
}

void skein_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off,
                 fuse_file_info* fi) {
  // The reply goes as soon as the bytes are taken, before they are sent on; pages of a shared
  // mapping once the gateway has them (MountSession::write).
  Status written = session_of(req).write(
      ino, file_handle(fi), static_cast<uint64_t>(off), std::string_view(buf, size),
      [req, size] { fuse_reply_write(req, size); }, fi->writepage != 0);
  if (!written) fuse_reply_err(req, written.error());
}

// FLUSH's and FSYNC's errors as the application is to see them. The kernel takes ENOSYS for "no
// such operation": it would answer every later flush (or fsync) of the mount itself, with
// success, and never ask again, so write errors would no longer reach close() or fsync().
// ENOSYS can come from the gateway's side (gRPC UNIMPLEMENTED, such as a proxy's 404 during a
// restart); it is an I/O error here.
void reply_sync_status(fuse_req_t req, Status status) {
  fuse_reply_err(req, status.error() == ENOSYS ? EIO : status.error());
}

void skein_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  reply_sync_status(req, session_of(req).flush(ino, file_handle(fi)));
}

void skein_release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  session_of(req).release(ino, std::unique_ptr<FileHandle>(&file_handle(fi)));
  fuse_reply_err(req, 0);  // the kernel does not look at release errors
}

void skein_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi) {
  reply_sync_status(req, session_of(req).fsync(ino, file_handle(fi), datasync != 0));
}

void skein_opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  auto opened = session_of(req).opendir(ino);
  if (!opened) return (void)fuse_reply_err(req, opened.error());
  fi->cache_readdir = opened->dir->cache_readdir ? 1 : 0;
  fi->keep_cache = opened->keep_cache ? 1 : 0;
  fi->fh = reinterpret_cast<uint64_t>(opened->dir.get());
  if (fuse_reply_open(req, fi) == 0)
    (void)opened->dir.release();  // else interrupted: no releasedir will come
}

void skein_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  reply_listing(req, ino, size, off, fi, /*plus=*/false);
}

void skein_releasedir(fuse_req_t req, fuse_ino_t /*ino*/, fuse_file_info* fi) {
  session_of(req).releasedir(std::unique_ptr<DirHandle>(&dir_handle(fi)));
  fuse_reply_err(req, 0);
}

void skein_statfs(fuse_req_t req, fuse_ino_t ino) {
  auto stats = session_of(req).statfs(ino);
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
  MountSession& session = session_of(req);
  const std::optional<Credentials> judged = judged_caller(req);
  auto created = session.create(parent, name, static_cast<uint32_t>(fi->flags), mode,
                                judged ? &*judged : nullptr);
  if (!created) return (void)fuse_reply_err(req, created.error());
  fuse_entry_param e = to_entry_param(created->entry);
  fi->fh = reinterpret_cast<uint64_t>(created->file.get());
  fi->keep_cache = 0;
  fi->direct_io = 0;
  if (fuse_reply_create(req, &e, fi) == 0) {
    (void)created->file.release();  // the kernel's until release
  } else {                          // interrupted: neither lookup nor open was received
    session.create_not_received(created.take());
  }
}

void skein_forget_multi(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  MountSession& session = session_of(req);
  for (size_t i = 0; i < count; ++i) session.forget(forgets[i].ino, forgets[i].nlookup);
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
