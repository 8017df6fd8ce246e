// MountSession: skein-mount's operations without FUSE, as Ceph's Client is under fuse_ll.cc. Each
// operation takes inode numbers and plain values, runs its steps in order (resolve inodes to
// paths, wait for the data path, take a cache ticket, call the gateway, update the inode table,
// the open files and the cache policy) and returns a value or an errno. The listing cache of an
// open directory, the lookup counts (and their rollback when a reply never reaches the kernel),
// silly rename and the attributes of open files whose name is gone are decided here.
// fuse_ops.cpp only converts the kernel's arguments, calls one method and sends one reply; so
// all of this is unit-tested against an in-process gateway, without a kernel.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache_policy.hpp"
#include "data_path.hpp"
#include "gateway_client.hpp"
#include "inode_table.hpp"
#include "open_inodes.hpp"
#include "skein/result.hpp"

namespace skein::client {

// An entry reply for the kernel: one lookup is counted on `ref` already. When the reply does not
// reach the kernel (interrupted), give the lookup back with entry_not_received.
struct Entry {
  InodeRef ref;
  FileAttr attr;
  double timeout = 0;  // seconds the kernel may keep the entry and its attributes
};

// An attribute reply for the kernel.
struct Attributes {
  FileAttr attr;
  double timeout = 0;  // seconds; 0: do not cache
};

// An open file, as the kernel holds it (FUSE's fh) from open or create until release: the
// gateway's handle and what the gateway needs to re-open the file by path, and its data path.
// An open for reading may be deferred (CachePolicy::current_attrs): the mount picks the handle
// itself and makes no call; the gateway opens the file by path under that handle at its first use.
struct FileHandle {
  FileHandle(uint64_t handle, uint32_t open_flags, std::string at)
      : gw_handle(handle), flags(open_flags), path(std::move(at)) {}
  uint64_t gw_handle = 0;
  uint32_t flags = 0;
  std::string path;  // at open; later calls use the inode's current path (renames move it)
  std::unique_ptr<DataPath::File> data;  // its read-ahead and write-behind
  // Opened for this user, whom the mount does not trust, judged at the gateway by the file opened
  // (MountSession::open), and at a re-open by path (FileRef.as_user): read only through its own
  // gateway handle, never from contents the mount fetched by path (a directory's read-ahead),
  // which may be of another file. Null for everyone else.
  std::shared_ptr<const Credentials> judged;
  // False while the open is deferred and no call has named the handle yet: nothing to release.
  mutable std::atomic<bool> gateway_knows{true};
  // A deferred open's size of the file (from the attributes it was opened with): a first read of
  // at least this many bytes from offset 0 reads the whole file in one call that leaves the
  // gateway holding nothing (ReadRequest.whole_file).
  std::optional<uint64_t> deferred_size;
  // A deferred open's count of the file's replacements (CachePolicy::replacements) when it was
  // opened: once it has changed, a read that needs the gateway fails with ESTALE rather than
  // open the file that took the name.
  uint64_t replacements_at_open = 0;
  // An asynchronous create (MountSession::create): the mount answered the kernel itself, and the
  // file is made at the gateway by the first write, with its bytes, or else by the flush, the
  // fsync, or any other call of the mount (MountSession::settle_creates). Guarded by create_mu.
  std::mutex create_mu;
  std::atomic<bool> create_unsettled{false};  // create_mode is set, or create_error: read unlocked
  std::optional<uint32_t> create_mode;        // the create still to be sent, with this mode
  FileAttr create_attrs;                      // what the kernel was told at the create
  InodeNumber create_parent = 0;  // its directory, and the change the create began there
  CachePolicy::Mutation create_mutation;
  int create_error = 0;  // the create failed: every later call returns this
  // An asynchronous create made empty (by a flush, before any write), with nothing written
  // through this handle yet: its first write, from offset 0, may be all of it
  // (MountSession::write).
  std::atomic<bool> made_empty{false};
  // The last write queued through this handle: the cache's ticket before it and the inode's
  // write count after it, for the attributes its call brings back (MountSession::flush).
  // Guarded by create_mu.
  std::optional<std::pair<CachePolicy::Ticket, uint64_t>> last_write;
};

// An open directory: its whole listing, fetched at the first readdir that reaches this mount;
// entry i has offset i + 1. When the kernel still holds the listing (cache_readdir, kept across
// opens while nothing changed), no readdir comes and nothing is fetched.
struct DirHandle {
  // Serialises readdir calls on one handle (the kernel already does; this makes it certain).
  // Acquire before InodeTable's lock; may be held across the gateway call of a fetch, never
  // across a reply to the kernel (MountSession::readdir returns without it).
  std::mutex mu;
  std::vector<DirEntry> entries;  // guarded by mu; starts with "." and ".."
  CachePolicy::Ticket ticket;     // guarded by mu; taken before `entries` were fetched
  bool fetched = false;           // guarded by mu
  bool served = false;            // guarded by mu; a rewind to 0 after this fetches anew
  bool cache_readdir = false;     // set at opendir: the kernel keeps what readdir returns
};

class MountSession {
 public:
  // What an open hands the kernel.
  struct Opened {
    std::unique_ptr<FileHandle> file;  // the kernel's until release
    bool keep_cache = false;           // the kernel may keep the pages it has of the file
    bool refresh_attrs = false;        // the kernel's attributes are older: drop them
  };
  // What a create hands the kernel: an entry (one lookup counted) and an open file.
  struct Created {
    Entry entry;
    std::unique_ptr<FileHandle> file;
  };
  struct OpenedDir {
    std::unique_ptr<DirHandle> dir;  // the kernel's until releasedir
    bool keep_cache = false;         // the kernel may keep the listing it has (cache_readdir)
  };

  // One entry of a listing, offered to the reply being filled.
  struct ListItem {
    std::string_view name;
    uint32_t mode = 0;  // the type bits (and permissions) as the gateway sent them
    uint64_t next = 0;  // the offset of the entry after this one
    // readdir: the file number (st_ino) of the inode this mount has for the name, if any (the
    // kernel's d_ino).
    std::optional<uint64_t> known;
    // readdirplus: the entry, one lookup counted (taken back if it does not fit); none for "."
    // and "..", and for an entry the gateway sent without a file type.
    std::optional<Entry> entry;
  };
  // Adds an item to the reply; false when it did not fit (the listing then stops there).
  using ListFill = std::function<bool(const ListItem&)>;
  // What one readdir put in its reply; hand it back to listing_replied once the reply is sent.
  struct Listing {
    std::vector<InodeNumber> counted;  // lookups added for the reply's entries (readdirplus)
    bool complete = false;  // nothing was left to add: the kernel now has the whole listing
    CachePolicy::Ticket ticket;
    bool cache_readdir = false;
  };

  // `gateway` and `data` must outlive the session; the others are the mount's state, also read
  // by the kernel cache and the control socket.
  MountSession(const GatewayClient& gateway, DataPath& data, InodeTable& inodes, CachePolicy& cache,
               OpenInodes& open_inodes);
  MountSession(const MountSession&) = delete;
  MountSession& operator=(const MountSession&) = delete;

  // ---- names ----
  Result<Entry> lookup(InodeNumber parent, std::string_view name);
  // The kernel forgets `n` lookups of `ino`.
  void forget(InodeNumber ino, uint64_t n);
  // An entry reply (lookup, mkdir, symlink, link) that never reached the kernel.
  void entry_not_received(const Entry& entry);

  // ---- attributes ----
  // What stat(2) shows as the inode's st_ino (InodeTable::file_id).
  uint64_t file_id(InodeNumber ino) const { return inodes_.file_id(ino); }
  // Answered from the mount's copy for a directory nothing changed since; for an open file whose
  // name is gone, its attributes as last seen (not to be cached).
  Result<Attributes> getattr(InodeNumber ino);
  // `file`: the open file the change comes with (ftruncate, futimens), or null. The handle of
  // `change` is set from it.
  // `judged`: the change of a user this mount does not trust, judged at the gateway by the file
  // it lands on (SetAttrRequest.as_user), as open()'s.
  Result<Attributes> setattr(InodeNumber ino, SetAttrArgs change, const FileHandle* file,
                             const Credentials* judged = nullptr);
  Result<std::string> readlink(InodeNumber ino);
  Result<FsStats> statfs(InodeNumber ino);

  // ---- changes of names ----
  Result<Entry> mkdir(InodeNumber parent, std::string_view name, uint32_t mode);
  Result<Entry> symlink(std::string_view target, InodeNumber parent, std::string_view name);
  // A hard link gets an inode of its own: inodes name paths, and this is a second path. st_nlink
  // still says the truth.
  Result<Entry> link(InodeNumber ino, InodeNumber newparent, std::string_view newname);
  // A file this mount has open is renamed to a hidden name instead (silly rename), and removed
  // at its last close.
  Status unlink(InodeNumber parent, std::string_view name);
  Status rmdir(InodeNumber parent, std::string_view name);
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE; anything else is EINVAL.
  Status rename(InodeNumber parent, std::string_view name, InodeNumber newparent,
                std::string_view newname, uint32_t flags);

  // ---- files ----
  // `judged`: the credentials of a user this mount does not trust (another user of a mount that
  // serves every user). The kernel judged that user's open by the attributes of the inode this
  // mount gave it, but the gateway opens by path, and the path may lead to another file by then:
  // such an open is never deferred, and the gateway judges it by the file it opened
  // (OpenRequest.as_user). EACCES from a gateway that cannot.
  Result<Opened> open(InodeNumber ino, uint32_t flags, const Credentials* judged = nullptr);
  // A create for writing only (O_WRONLY, without O_EXCL: echo, cp, a shell's >) in a directory
  // whose attributes are current and writable is answered without a call, when asynchronous
  // creates are on: the file is made at the gateway by the first write, or at the latest by
  // close(2), which returns the create's error. The kernel gets attributes it does not keep.
  // `judged`: as open()'s; such a create is never asynchronous, and a file found at the name is
  // opened only as the user's open of it would be judged (OpenRequest.as_user).
  Result<Created> create(InodeNumber parent, std::string_view name, uint32_t flags, uint32_t mode,
                         const Credentials* judged = nullptr);
  void set_async_creates(bool on) { async_creates_ = on; }
  // An open or create whose reply never reached the kernel: no release will come for it.
  void open_not_received(InodeNumber ino, std::unique_ptr<FileHandle> file);
  void create_not_received(Created created);
  // From read-ahead, or the gateway; fewer bytes only at end of file.
  Result<ReadData> read(InodeNumber ino, FileHandle& file, uint64_t offset, uint32_t size);
  // Taken by write-behind: `taken` runs (once) as soon as the bytes are safe here, before the
  // gateway has them; an earlier write's error may come back instead. `taken` replies to the
  // kernel, which may then release `file`: nothing of `file` is used after it. `from_pages`: the
  // kernel writes back pages of a shared mapping (FUSE_WRITE_CACHE), through whichever open file
  // of the inode it picks, perhaps after the mapping's own file was closed: such a write goes
  // through to the gateway before `taken`, so that its error reaches the kernel, which keeps it
  // for the msync, fsync or close of the mapping's file, rather than an unrelated writer.
  Status write(InodeNumber ino, FileHandle& file, uint64_t offset, std::string_view data,
               const std::function<void()>& taken, bool from_pages = false);
  // close(2): waits for the file's write-behind, whose error it returns. The gateway acknowledges
  // a write only once the server has it, so there is no gateway call.
  Status flush(InodeNumber ino, FileHandle& file);
  Status fsync(InodeNumber ino, FileHandle& file, bool datasync);
  // The last close of the file's open: the gateway's handle is released without waiting for the
  // answer (the data is on the server already, see flush), and a file deleted while open goes.
  void release(InodeNumber ino, std::unique_ptr<FileHandle> file);

  // ---- directories ----
  // While the Watch stream is healthy the kernel caches listings (cache_readdir) and keeps them
  // across opens as long as no invalidation touched the directory since this mount served it
  // whole; such an opendir asks the gateway nothing (a readdir that still comes fetches). Any
  // other opendir fetches the listing at once, so that its errors (EACCES, ENOENT) come from it.
  Result<OpenedDir> opendir(InodeNumber ino);
  // Offers the listing's entries from `offset` on to `fill` until one does not fit; readdirplus
  // (`plus`) counts a lookup on each entry it adds. The first call fetches, and so does a rewind
  // to 0 after the listing was served.
  Result<Listing> readdir(InodeNumber ino, DirHandle& dir, uint64_t offset, bool plus,
                          const ListFill& fill);
  // After the reply: `received` false takes back the lookups of its entries; a complete listing
  // the kernel caches is recorded with the cache policy.
  void listing_replied(InodeNumber ino, const Listing& listing, bool received);
  void releasedir(std::unique_ptr<DirHandle> dir);

  // ---- the control socket's cache fills ----
  // A gateway handle of `ino` (at `path`) opened for reading, for the fill command's fetches
  // (cache_fill.hpp). It is opened at the first fetch and kept while the kernel has the inode
  // open here (the fill's caller must hold it open), so a file fetched chunk by chunk costs one
  // open at the gateway, not one per chunk; it is released at the inode's last close, or when a
  // fetch finds another version. `kept` false: not kept (the inode is not open here); the caller
  // releases it after its fetch. ESTALE: the gateway's size or mtime is not `size`/`mtime_ns`.
  // `attrs_of_file`: `attr` are to be the attributes of the file the handle opened (its own,
  // asked with the open: the path may have led to another file by then), by which a caller who is
  // not privileged is judged; nullopt from a gateway that gives only a look at the path. A kept
  // handle opened without them does not serve such a caller: it gets one of its own, not kept.
  struct FillHandle {
    uint64_t handle = 0;
    bool kept = false;
    std::optional<FileAttr> attr;
  };
  Result<FillHandle> fill_handle(InodeNumber ino, const std::string& path, int64_t mtime_ns,
                                 uint64_t size, bool attrs_of_file);

 private:
  Result<std::string> path_of(InodeNumber ino) const;
  Result<std::string> child_path(InodeNumber parent, std::string_view name) const;
  // The file as a call to the gateway names it; from then on the gateway knows the handle.
  FileRef file_ref(InodeNumber ino, const FileHandle& file) const;
  FileRef unnamed_ref(InodeNumber ino, const FileHandle& file) const;
  // When an open may skip the gateway (see FileHandle): the attributes to answer it with.
  std::optional<FileAttr> deferrable_open(InodeNumber ino, uint32_t flags) const;
  // A fresh handle for a deferred open.
  static uint64_t deferred_handle();
  Entry make_entry(InodeRef ref, const FileAttr& attr, CachePolicy::Ticket ticket);
  Entry add_entry(const std::string& path, const FileAttr& attr, CachePolicy::Ticket ticket);
  void forget_lookups(InodeNumber ino, uint64_t n);
  void remove_hidden(const std::string& hidden);
  void closed(InodeNumber ino);
  Result<bool> hide_if_open(const std::string& path);
  // Waits for the queued writes of the files at `path` and below it, before a rename moves them.
  void settle_writes_at_or_below(const std::string& path);
  void learn_names(InodeNumber dir);
  // The read-ahead of the directory of `file_path` when this whole read of it makes it due
  // (CachePolicy::read_whole_in), to run once the read's reply is sent; null otherwise.
  std::function<void()> dir_read_ahead_due(const std::string& file_path);
  void read_ahead_dir(const std::string& path, InodeNumber dir, uint64_t number);
  Result<Entry> made_nothing(InodeNumber dir, int error);
  // `whole` is cleared when a name of the directory was left out (a hidden or invalid one).
  Result<std::vector<DirEntry>> fetch_listing(InodeNumber ino, bool* whole);
  // Sends an asynchronous create of `file` if it is still to go: a Write of `data` at `offset`
  // that makes the file at the gateway. True when the data went with it; the create's error.
  Result<bool> settle_create(InodeNumber ino, FileHandle& file, uint64_t offset,
                             std::string_view data);
  // Every asynchronous create still to go, sent: before any call that might see the files or
  // their directories (a lookup, getattr, listing, rename, open, ...) asks the gateway.
  void settle_creates();
  void drop_pending_create(InodeNumber ino, const FileHandle* file);
  // The attributes told at an asynchronous create of `ino` not sent yet (the kernel asks for
  // them at once, to check the open's permissions), or nothing.
  std::optional<FileAttr> unsent_create_attrs(InodeNumber ino);
  Status fetch_into(InodeNumber ino, DirHandle& dir);

  const GatewayClient& gateway_;
  DataPath& data_;
  InodeTable& inodes_;
  CachePolicy& cache_;
  OpenInodes& open_inodes_;
  bool async_creates_ = false;
  // The open files of asynchronous creates, from create to release (the kernel's until then).
  std::mutex pending_mu_;                                         // before a FileHandle's create_mu
  std::unordered_map<InodeNumber, FileHandle*> pending_creates_;  // guarded by pending_mu_
  std::atomic<uint64_t> unsent_creates_{0};  // of those, the creates not sent yet
  // The fill handles kept (fill_handle), by inode. A leaf lock: never held across a call.
  struct KeptFillHandle {
    FileRef ref;
    int64_t mtime_ns = 0;
    uint64_t size = 0;
    std::optional<FileAttr> attr;  // the opened file's own (FillHandle::attr)
  };
  std::mutex fill_mu_;
  std::unordered_map<InodeNumber, KeptFillHandle> fill_handles_;  // guarded by fill_mu_
};

}  // namespace skein::client
