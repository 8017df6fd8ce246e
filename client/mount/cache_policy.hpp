// How long the kernel may trust what this mount tells it. While the Watch stream is healthy the
// gateway invalidates whatever changes, so entries and attributes get long lifetimes and page
// cache survives re-opens of unchanged files; without the stream, lifetimes are short and page
// cache is dropped at every open. Pure logic (no FUSE), so it is unit-tested on its own.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "file_attr.hpp"
#include "inode_table.hpp"

namespace skein::client {

class CachePolicy {
 public:
  struct Options {
    double cache_ttl = 3600.0;  // seconds, while the Watch stream is healthy
    double safe_ttl = 1.0;      // seconds, while it is not
    // Know directories' names to answer lookups of absent ones (see names_known): never; those
    // of directories this mount made (made_dir), or also those learnt from listings, while the
    // gateway reports every change on the namespace's servers (set_servers_watched); or always
    // (a name made on a server then shows only once revalidation finds it).
    enum class KnowNames { kNever, kMadeDirs, kWhileWatched, kAlways };
    KnowNames know_names = KnowNames::kWhileWatched;
    // Let an open for reading of a file whose attributes are current skip the gateway (see
    // current_attrs).
    bool deferred_open = true;
    // Read ahead directories whose files are being read whole one after another (read_whole_in).
    bool read_ahead_dirs = true;
    // How long, in seconds, a lookup in a directory whose read-ahead listing is on its way waits
    // for that listing rather than asking the gateway itself (take_ahead); 0: never.
    double ahead_listing_wait = 0.1;
  };

  // The cache's state when an operation started, taken before it asks the gateway. A reply may be
  // cached for long only if nothing happened between the ticket and the reply: no invalidation
  // (the reply might predate the change it announced) and no loss or renewal of the stream (the
  // gateway might not have recorded this mount's interest).
  class Ticket {
   public:
    Ticket() = default;

   private:
    friend class CachePolicy;
    explicit Ticket(uint64_t word) : word_(word) {}
    uint64_t word_ = 0;  // CachePolicy::state_ when taken
  };

  // What an open may keep and must refresh.
  struct OpenDecision {
    bool keep_cache = false;     // the kernel may keep the pages it has of the file
    bool refresh_attrs = false;  // the kernel's attributes may be older than these: drop them
  };

  CachePolicy() = default;
  explicit CachePolicy(Options options) : options_(options) {}
  CachePolicy(const CachePolicy&) = delete;
  CachePolicy& operator=(const CachePolicy&) = delete;

  // A metadata change this mount is about to make (create, mkdir, unlink, rename, setattr...):
  // the cache state, and which of this mount's changes it is: of all that touch any directory
  // (renames), and of those of the directory it changes, if it names one.
  struct Mutation {
    Ticket ticket;
    uint64_t number = 0;      // changes begun that may touch any directory, so far
    InodeNumber dir = 0;      // the directory whose entries (or itself) it changes, or 0
    uint64_t dir_number = 0;  // this one's number among `dir`'s changes; 0: not counted
  };

  // Set before the session starts; not synchronised.
  void set_options(Options options) { options_ = options; }
  const Options& options() const { return options_; }

  Ticket ticket() const { return Ticket(state_.load(std::memory_order_acquire)); }

  // Entry and attribute lifetime, in seconds, for a reply to an operation that took `t`: the long
  // TTL if the stream was healthy throughout, the short one in safe mode, 0 (do not cache) when
  // an invalidation arrived while the reply was on its way.
  double timeout(Ticket t) const;
  // The lifetime a reply gets right now (for status output).
  double current_timeout() const;

  // The attributes this mount hands the kernel for `ino` (entry and attribute replies), fetched by
  // an operation that took `t`. A directory's are also kept to answer the kernel's getattrs (see
  // dir_attrs) if the stream was healthy throughout.
  void sent_attrs(InodeNumber ino, const FileAttr& attr, Ticket t);
  // An open of `ino` (begun at `t`) got these attributes from the gateway. Keeps the page cache
  // when the stream stayed healthy, no invalidation of `ino` came since `t` (the reply may predate
  // the change it announced; invalidations of other files do not count, see open_unspoilt), and
  // the file's mtime and size are those of this mount's previous open of it; asks for an
  // attribute refresh when they differ from what the kernel was last told.
  OpenDecision opened(Ticket t, InodeNumber ino, int64_t mtime_ns, uint64_t size);

  // Whether this mount's last open of `ino` saw these mtime and size with a healthy stream, and no
  // invalidation of it and no write or truncation of this mount's own came since: the condition
  // under which bytes of that version may be put into the page cache (the control socket's fill
  // command). The mount hears of no invalidation for its own changes.
  bool open_matches(InodeNumber ino, int64_t mtime_ns, uint64_t size) const;

  // Directory listings. The kernel keeps a directory's listing in its page cache (FUSE's
  // cache_readdir) between opens when the open says keep_cache. `listed` records that this mount
  // fetched the listing of `ino` for an operation that took `t`; it counts only if the stream was
  // healthy throughout. `keep_listing` says whether an opendir may keep the kernel's copy: the
  // listing was fetched that way and no invalidation touched the directory since (an invalidation
  // of one of its entries counts: see invalidating(ino)).
  void listed(Ticket t, InodeNumber ino);
  bool keep_listing(InodeNumber ino) const;
  // Whether a listing fetched now may go into the kernel's cache at all (healthy stream).
  bool may_cache_listing() const { return healthy(); }

  // Directory attributes kept by the mount. The kernel asks for a directory's attributes again
  // after every readdir (it marks atime stale) and after every change of an entry in it; a scan of
  // a tree would pay a gateway round trip per directory. The mount answers from what it last told
  // the kernel, until an invalidation touches the directory (invalidating(ino), which an entry's
  // invalidation also does) or this mount changes an entry in it (dir_changed). After a change of
  // its own, a reply that brought the directory's attributes as they were right after the change
  // (NFS's post-op attributes) is kept instead, if no invalidation of the directory came since `m`
  // and no other change of this mount that may touch it began (its reply might predate that): one
  // of the same directory (`begin_mutation(dir)`) or one that may touch any (`begin_mutation()`:
  // renames). Changes in other directories do not count, so processes that create or remove files
  // in directories of their own do not spoil each other's post-op attributes. (Two changes of one
  // directory's entries do not overlap anyway: the kernel holds the directory's lock for each.)
  Mutation begin_mutation();
  // A change of the entries of `dir`, or of `dir` itself (setattr).
  Mutation begin_mutation(InodeNumber dir);
  void dir_changed(InodeNumber dir);
  void post_op_attrs(InodeNumber dir, const FileAttr& attr, const Mutation& m);
  // The kept attributes of `dir` with the lifetime they may be cached for; or nothing.
  std::optional<std::pair<FileAttr, double>> dir_attrs(InodeNumber dir) const;

  // The attributes of a file (not a directory) that this mount was last told by the gateway, while
  // they are still current: fetched while the stream was healthy and the servers watched, with no
  // invalidation of the file since and no write or attribute change of this mount's (wrote)
  // since. The file then
  // still exists, so an open for reading may skip the gateway (the gateway opens it at the first
  // read, by path); nothing without the deferred_open option.
  std::optional<FileAttr> current_attrs(InodeNumber ino) const;
  // A regular file this mount created through the gateway, with the owner the server gave it:
  // the user the gateway logs in as there, as the gateway shows it. Forgotten with all else kept
  // of `ino` when another mount or the server changes it (an invalidation).
  void made_file(InodeNumber ino, uint32_t owner);
  // The owner made_file() recorded for `ino`, or nothing.
  std::optional<uint32_t> made_owner(InodeNumber ino) const;
  // This mount is about to write `ino` or change its attributes or links, or has just done so:
  // what was kept of them is stale. Called before the change is sent and again once it is
  // queued or answered, so that attributes fetched meanwhile are not taken (server_attrs).
  // Returns how often it was called for `ino` (writes(ino)).
  uint64_t wrote(InodeNumber ino);
  // How often wrote(ino) was called: taken before an open asks the gateway.
  uint64_t writes(InodeNumber ino) const;
  // The attributes of the regular file `ino` that a call got from the server: an open's (taken
  // with the OPEN; `t` and `writes` taken before it asked, with no write of this mount's in
  // flight then), or the last write's before a close (an FSTAT behind the WRITE; `t` taken
  // before that write was queued, `writes` counted after it). Kept as current (current_attrs)
  // under sent_attrs's conditions if no invalidation of `ino` and no write or change of this
  // mount's came since: the kernel asks for them right after an open that refreshes its
  // attributes (a file this mount wrote, then opened again: cat, cp) and after a close of a file
  // written, and getattr answers from them.
  void server_attrs(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes);

  // What this mount wrote to the regular file `ino` from offset 0, in one piece (an echo-style
  // create's first write), with the attributes the server gave right after that write; `t` and
  // `writes` taken as for server_attrs. When their size is that of `content`, the write was all
  // of the file: the attributes are kept as current (server_attrs), and the content with them
  // while they stay current and are still of that version, so that reading the file back (cat,
  // cp, an import) needs no call. At most kContentBytes across the mount, the oldest dropped
  // first.
  static constexpr uint64_t kContentBytes = 16 << 20;
  static constexpr uint64_t kContentFileBytes = 64 << 10;  // larger files are not kept
  void wrote_whole(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes,
                   std::string_view content);
  // The same for a small file of a directory read ahead whose inode the kernel has (a listing gave
  // it): its content as a ReadFiles call fetched it, with the attributes of that call's open.
  void read_ahead_whole(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes,
                        std::string_view content);
  // That content, while the file's attributes are current and still of its version; or null.
  // Entries of the order in which kept contents go (some of contents dropped since): for tests.
  std::size_t content_order_size() const {
    std::lock_guard lock(mu_);
    return content_order_.size();
  }
  std::shared_ptr<const std::string> whole_content(InodeNumber ino) const;

  // Directories read ahead. A program that reads the files of one directory one after another
  // (`cat` in a loop, `grep -r`, an import of many modules, a copy) pays a lookup call and a read
  // call per file. After kAheadAfter whole-file reads in a directory went to the gateway
  // (read_whole_in), the mount fetches the directory's listing, with every entry's attributes,
  // and then the contents of its small files in a few ReadFiles calls (at most kAheadBytes, else
  // none), and answers the kernel's next lookups of those names, and the opens and reads of those
  // files, itself (take_ahead, then fetched_whole). The gateway counts this mount among those
  // that cache the directory from the listing on, so another mount's change of an entry in it,
  // and the remote watcher's report of one made on a server, come as invalidations naming the
  // directory or an entry in it. One naming an entry drops what was read ahead of that name only
  // (drop_ahead_name, invalidating_entry): a directory where files are written while others are
  // read keeps the rest. One naming the directory drops all it read ahead (invalidating it), as
  // does any change of this mount in it (begin_mutation), a rename anywhere, and every change of
  // the stream's or the servers' state. Only while the stream is healthy and the servers watched.
  // At most kAheadDirs directories are held, the oldest dropped first.
  static constexpr int kAheadAfter = 4;
  static constexpr uint64_t kAheadBytes = 4 << 20;
  static constexpr size_t kAheadNames = 65536;
  static constexpr size_t kAheadDirs = 4;
  // A directory larger than this (its st_size: on ext4 some 30,000 names, on tmpfs 50,000) is not
  // read ahead: the read that finds it due fetches the listing in its own thread.
  static constexpr uint64_t kAheadDirSize = 1 << 20;
  // A whole-file read of a file in `dir` went to the gateway. Returns non-zero when `dir` is to
  // be read ahead now: the number that ahead_listed and ahead_content take, which they ignore
  // once anything dropped what `dir` holds.
  uint64_t read_whole_in(InodeNumber dir);
  // The listing of `dir` (names with their attributes), fetched after read_whole_in gave `number`.
  void ahead_listed(InodeNumber dir, uint64_t number,
                    std::vector<std::pair<std::string, FileAttr>> entries);
  // Whether `dir` still holds what read ahead `number` is fetching.
  bool ahead_alive(InodeNumber dir, uint64_t number) const;
  // The listing for read ahead `number` of `dir` failed: it holds nothing, and the next whole
  // reads there may set off another.
  void ahead_failed(InodeNumber dir, uint64_t number);
  // The whole content of `name` in `dir`, with the attributes of the open that read it.
  void ahead_content(InodeNumber dir, uint64_t number, const std::string& name,
                     const FileAttr& attr, std::string data);
  struct Ahead {
    FileAttr attr;
    std::shared_ptr<const std::string> content;  // null: the attributes only
  };
  // What was read ahead of `name` in `dir`, taken (once): for the kernel's lookup of a name it
  // has no inode for. Take a ticket before, and give it to fetched_whole. While the directory's
  // read-ahead listing is on its way, this waits for it (the lookups that come right after the
  // read that set it off, which would each ask the gateway for what the listing brings): until
  // it lands, fails or is dropped, any invalidation or change of state comes (this lookup then
  // asks the gateway, and an invalidation of an entry in the directory, which needs the
  // kernel's lock on it that this lookup holds, is not held up), or Options::ahead_listing_wait
  // runs out; after one wait ran out, the other lookups of that read-ahead do not wait.
  std::optional<Ahead> take_ahead(InodeNumber dir, std::string_view name);
  // What was read ahead of `name` in `dir` goes, also while the listing is on its way (the
  // listing then does not bring it): when the kernel is given an entry for the name by other
  // means (a lookup, a listing, a create), since this mount's own later changes of the file come
  // back as no invalidation; and when an invalidation names the file (its inode perhaps unknown
  // here). A file's other names are invalidated by their own names where the gateway knows them;
  // a hard link made on a server is the known limit, as for the kernel's entries.
  void drop_ahead_name(InodeNumber dir, std::string_view name);
  // Everything `dir` read ahead goes (this mount renamed names in it).
  void ahead_changed(InodeNumber dir);
  // How many directories were read ahead, how many names the kernel got from them, and how many
  // files' contents were kept (status).
  struct AheadCounts {
    uint64_t dirs = 0, names = 0, contents = 0;
    uint64_t waits = 0;  // lookups that waited for a listing (take_ahead)
  };
  AheadCounts ahead_counts() const;
  // The kernel got `ino` for what take_ahead gave (after a ticket `t` taken before it): its
  // attributes are current, and its content (if any) answers the open and reads, if nothing was
  // invalidated at all since `t` (the name's inode may have been unknown to that invalidation).
  void fetched_whole(InodeNumber ino, const Ahead& ahead, Ticket t);

  // Every name of a directory, when this mount knows them all: from a whole listing (unless only
  // made directories' names are known), or for a directory it made itself (made_dir), then kept
  // up to date with this mount's own changes. A name
  // not among them does not exist, so a lookup of it (the kernel's, before every create) needs
  // no gateway call. Kept only while the Watch stream is healthy: another mount's change of the
  // directory comes as an invalidation of it, which drops its names (the gateway waits for this
  // mount's acknowledgement before it answers that change), and a directory whose interest the
  // gateway drops is invalidated too.
  // `t` and `changes` were taken before the names were fetched (names_changes(dir)); they are
  // recorded only if no invalidation and no change of this mount in `dir` came in between.
  uint64_t names_changes(InodeNumber dir) const;
  void names_known(InodeNumber dir, Ticket t, uint64_t changes,
                   const std::vector<std::string_view>& names);
  // This mount made directory `dir` (on the gateway, successfully): it has no names yet. `t` was
  // taken before the mkdir was sent, and the gateway counted this mount among those that cache
  // `dir` before it made it, so that another mount's name made in it since comes as an
  // invalidation; they are recorded only if no invalidation came in between. The gateway
  // invalidates a new directory for its maker too once a server's remote watcher has seen it
  // (names made in it before the watch began are reported by nobody); after that its names are
  // learnt from a listing, as with `auto`, after two misses.
  // The directory keeps being one this mount made under its path when the kernel forgets it and
  // looks it up again (a new inode number: entry_added), until this mount removes or renames it.
  void made_dir(InodeNumber dir, const std::string& path, Ticket t);
  // The kernel is given `ino` for `path` (an entry reply).
  void entry_added(InodeNumber ino, const std::string& path, const FileAttr& attr);
  // This mount removed the directory at `path`, or renamed it to `to`: what it made there is gone
  // or moved (what was below it is no longer counted as made).
  void dir_removed(const std::string& path);
  void dir_renamed(const std::string& from, const std::string& to);
  // This mount added or removed `name` in `dir` (on the gateway, successfully).
  void name_added(InodeNumber dir, std::string_view name);
  void name_removed(InodeNumber dir, std::string_view name);
  // The names of `dir` are no longer known (a change this mount cannot follow name by name).
  void names_unknown(InodeNumber dir);
  // A lookup in `dir` (whose names are not known) found nothing; true when that happened often
  // enough since its names were last known that learning them is worth a listing.
  bool missed(InodeNumber dir);
  // True when `dir`'s names are known and `name` is not one of them.
  bool known_absent(InodeNumber dir, std::string_view name) const;

  // The kernel forgot `ino`: drop what is remembered of it.
  void forget(InodeNumber ino);

  // A rename replaced the file `ino` named (told by the gateway, or made by this mount): an open
  // of it that the gateway has not seen (deferred) must not be opened again by the name, which
  // names another file now (MountSession::read answers ESTALE).
  void replaced(InodeNumber ino);
  // How many times that happened to `ino` while the kernel held it.
  uint64_t replacements(InodeNumber ino) const;

  // An invalidation is about to be applied. Replies to operations in flight are not cached, and
  // what the invalidated inodes were known to hold is forgotten.
  void invalidating();
  // While one of these lives (KernelCache::invalidate applying a batch to the kernel), no lookup
  // waits for a read-ahead listing (take_ahead), and one waiting stops: the kernel's invalidation
  // of an entry waits for the lookups in that directory.
  class Applying {
   public:
    explicit Applying(CachePolicy& policy);
    ~Applying();
    Applying(const Applying&) = delete;
    Applying& operator=(const Applying&) = delete;

   private:
    CachePolicy& policy_;
  };
  void invalidating(InodeNumber ino);
  // invalidating(dir) for an invalidation of its entry `name`: of what `dir` read ahead, only
  // that name goes.
  void invalidating_entry(InodeNumber dir, std::string_view name);
  void invalidating_all();

  // The Watch stream is healthy (welcome received, caches dropped) or not (ended, never began).
  // Losing it also means the servers are no longer known to be watched.
  void set_healthy(bool healthy);
  // Whether the gateway reports every change on the namespace's servers (its remote watchers run):
  // only then are a file's attributes current for as long as no invalidation comes
  // (current_attrs); otherwise a server's change shows only in the attributes an open fetches.
  // Becoming watched makes nothing fetched before current.
  void set_servers_watched(bool watched);
  bool healthy() const { return (state_.load(std::memory_order_acquire) & 1) != 0; }
  bool servers_watched() const { return servers_watched_.load(std::memory_order_acquire); }
  // Whether directories' names are learnt and used now (Options::know_names).
  bool knowing_names() const;

 private:
  struct Known {
    bool sent = false;  // sent_* below are what the kernel was last told
    int64_t sent_mtime_ns = 0;
    uint64_t sent_size = 0;
    bool opened = false;  // open_* below are what this mount's last open of it saw
    int64_t open_mtime_ns = 0;
    uint64_t open_size = 0;
    uint64_t open_writes = 0;  // `writes` as of that open: this mount's writes since spoil it
    bool listed = false;  // the kernel may hold this directory's listing as this mount served it
    std::optional<FileAttr> dir_attrs;   // a directory's attributes, still current
    std::optional<FileAttr> file_attrs;  // a file's attributes, still current (current_attrs)
    std::optional<std::set<std::string, std::less<>>> names;  // all of a directory's names
    uint32_t misses = 0;        // lookups in it that found nothing while its names were unknown
    uint64_t name_changes = 0;  // this mount's changes of its names (name_added, ...)
    uint64_t writes = 0;        // wrote() calls
    uint64_t mutations = 0;     // begin_mutation(this inode) calls while known
    int whole_reads = 0;        // whole-file reads of its files since it was last read ahead
    std::optional<uint32_t> made_owner;  // made_file()
  };

  // Bumps the epoch, keeping the healthy bit.
  void bump();
  // The epoch after a bump that drops everything (a change of the stream's state, every inode
  // invalidated): no open in flight across it keeps pages. Under mu_.
  void bump_all_locked();
  // Whether an open of `ino` that took `t` may keep pages, the state being `now`: healthy, and
  // since `t` no invalidation of `ino` and none of everything. A reply is suspect only for what
  // was invalidated while it was on its way; an open resolves its inode before it takes its
  // ticket, so an invalidation of its path names that inode. Under mu_.
  bool open_unspoilt(uint64_t now, Ticket t, InodeNumber ino) const;
  // server_attrs's decision: keeps `attr` as the current attributes of `ino` and returns true,
  // or returns false. Under mu_.
  bool keep_file_attrs_locked(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes);
  // Whether state `now` is the one ticket `t` was taken in, healthy: no invalidation, loss or
  // renewal of the stream since.
  static bool healthy_throughout(uint64_t now, Ticket t) {
    return (now & 1) != 0 && now == t.word_;
  }

  Options options_;
  // Bit 0: healthy. Bits 1..63: an epoch, bumped by every invalidation and every state change.
  std::atomic<uint64_t> state_{0};
  // This mount's metadata changes that may touch any directory (renames), begun so far.
  std::atomic<uint64_t> mutations_{0};
  std::atomic<bool> servers_watched_{false};
  // Lock order: a leaf; never held across a gateway call, a notify or a fuse_reply_*.
  mutable std::mutex mu_;
  std::unordered_map<InodeNumber, Known> known_;        // guarded by mu_
  std::unordered_map<InodeNumber, uint64_t> replaced_;  // replacements(), guarded by mu_
  // Directories this mount made (made_dir), until the kernel forgets them: with
  // KnowNames::kMadeDirs, the only ones whose names are known. Guarded by mu_.
  std::unordered_set<InodeNumber> made_dirs_;
  // Their paths, for the inode a later lookup gives them; at most kMadePaths (then forgotten all
  // at once: such directories' names are then learnt no more). Guarded by mu_.
  static constexpr size_t kMadePaths = 65536;
  std::set<std::string, std::less<>> made_paths_;
  // Drops `path` and every path below it from made_paths_. Under mu_.
  void forget_made_at_or_below_locked(const std::string& path);
  // Whether names of `dir` may be learnt from a listing (Options::know_names). Under mu_.
  bool may_learn_names_locked(InodeNumber dir) const;
  // Directories read ahead (read_whole_in), guarded by mu_: by inode, and in the order they came.
  struct AheadDir {
    uint64_t number = 0;
    bool listed = false;
    uint64_t bytes = 0;  // of the contents held
    std::unordered_map<std::string, Ahead> names;
    std::unordered_set<std::string> given;  // names the kernel got before the listing came
    bool waited_out = false;  // a lookup's wait for the listing ran out: no other waits
  };
  std::unordered_map<InodeNumber, AheadDir> ahead_;
  std::deque<std::pair<InodeNumber, uint64_t>> ahead_order_;
  uint64_t aheads_made_ = 0, aheads_taken_ = 0, ahead_contents_ = 0, ahead_waits_ = 0;
  // Lookups waiting for a read-ahead listing (take_ahead), woken by whatever may end their wait:
  // a listing landed or failed, a read-ahead dropped, any change of state_ (wake_ahead_waiters).
  // The count is read outside mu_ by invalidating(), so it and state_ are sequentially
  // consistent: either a waiter sees the new state or the invalidation sees the waiter.
  std::condition_variable ahead_cv_;
  std::atomic<int> ahead_waiters_{0};
  int applying_ = 0;  // Applying objects alive, guarded by mu_
  void wake_ahead_waiters_locked() {
    if (ahead_waiters_.load() != 0) ahead_cv_.notify_all();
  }
  // take_ahead's wait for the listing of `dir`, whose read-ahead is not listed: whether it is now.
  // No wait while an invalidation is being applied (Applying).
  bool wait_for_listing_locked(std::unique_lock<std::mutex>& lock, InodeNumber dir);
  void drop_ahead_locked(InodeNumber dir) {
    ahead_.erase(dir);
    wake_ahead_waiters_locked();
  }
  void drop_all_ahead_locked() {
    ahead_.clear();
    ahead_order_.clear();
    wake_ahead_waiters_locked();
  }
  // Removes `name` from what `dir` read ahead and returns it. Under mu_.
  std::optional<Ahead> take_ahead_name_locked(AheadDir& dir, std::string_view name);
  // What `dir` read ahead of `name` goes; if its listing is on its way, the listing must not
  // bring it. Under mu_.
  void drop_ahead_name_locked(InodeNumber dir, std::string_view name);
  // invalidating(ino) but for what `ino` read ahead. Under mu_.
  void invalidating_locked(InodeNumber ino);
  // wrote_whole's and read_ahead_whole's decision: keeps `attr` as current and `content` with it
  // when the content is all of the file and keep_file_attrs_locked allows. Under mu_.
  bool keep_whole_locked(InodeNumber ino, const FileAttr& attr, Ticket t, uint64_t writes,
                         std::string_view content);
  // Keeps `content` for `ino` whose current attributes are `attr` (wrote_whole, fetched_whole).
  void keep_content_locked(InodeNumber ino, const FileAttr& attr, std::string_view content);
  // wrote_whole's contents, guarded by mu_: by inode, and in the order they came (with the
  // number each was given, so that an inode's older place in the order drops nothing newer).
  struct Content {
    std::shared_ptr<const std::string> data;
    int64_t mtime_ns = 0;
    uint64_t number = 0;
  };
  std::unordered_map<InodeNumber, Content> contents_;
  std::deque<std::pair<InodeNumber, uint64_t>> content_order_;
  uint64_t content_bytes_ = 0, contents_made_ = 0;
  void drop_content_locked(InodeNumber ino);
  // The last invalidations of single inodes, with the epoch each made (a ring; guarded by mu_),
  // for open_unspoilt. An open whose ticket is older than the oldest one kept keeps nothing.
  struct Invalidated {
    uint64_t epoch = 0;
    InodeNumber ino = 0;
  };
  static constexpr std::size_t kInvalidationsKept = 1024;
  std::vector<Invalidated> invalidated_ = std::vector<Invalidated>(kInvalidationsKept);
  std::size_t invalidated_next_ = 0;  // guarded by mu_
  uint64_t invalidated_floor_ = 0;    // guarded by mu_; the epoch of the last one overwritten
  uint64_t all_invalidated_ = 0;      // guarded by mu_; the epoch of the last bump_all_locked
};

}  // namespace skein::client
