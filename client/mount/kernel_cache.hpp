// KernelCache: what the kernel caches for this mount (entries, attributes, pages), and the one
// place that drops it, through fuse_lowlevel_notify_inval_*. It applies the Watch stream's
// invalidations and the control socket's drop-caches, each from that thread, never from inside
// a FUSE operation: a notify may wait for a directory lock that an operation in progress holds.
// It copies what it needs out of the inode table first and holds no lock while notifying.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "cache_policy.hpp"
#include "inode_table.hpp"
#include "watch_stream.hpp"

namespace skein::client {

class KernelCache final : public WatchStream::Listener {
 public:
  // `mountpoint`: where the session is mounted (absolute), for the root's priming (below).
  KernelCache(fuse_session* session, std::string mountpoint, InodeTable& inodes,
              CachePolicy& policy)
      : session_(session), mountpoint_(std::move(mountpoint)), inodes_(inodes), policy_(policy) {}

  // The kernel has initialised the session (FUSE_INIT): notifications make sense from now on.
  // Also starts the root's priming: a thread that stats the mount point until the kernel holds
  // the root's attributes (below). Call stop() before the session is destroyed.
  void session_ready();
  // Ends the root's priming: its thread notifies nothing after this returns (and is left to
  // end by itself: its stat may wait for the session, or for the process's exit).
  void stop();
  ~KernelCache() { stop(); }

  // Also told of every inode whose data may have changed (the mount's own read-ahead). Set
  // before the session starts.
  void set_data_changed(std::function<void(InodeNumber)> hook) { data_changed_ = std::move(hook); }

  struct Dropped {
    std::size_t inodes = 0;   // inodes whose attributes and pages were dropped
    std::size_t entries = 0;  // names dropped from the kernel's directory cache
  };
  // Everything cached: every known inode's attributes and pages, every known name.
  Dropped drop_all();

  // The kernel's attributes of `ino` (not its pages) are out of date. Safe to call from an
  // operation: attribute-only invalidation takes no lock that the kernel could be holding. (For
  // the root, until its priming has ended, it takes the priming's lock.)
  void attributes_changed(InodeNumber ino);

  // Drops `ino`'s attributes and pages (a fill stored pages that may be of an older version).
  // From the control socket's thread only, like the invalidations.
  void pages_stale(InodeNumber ino) { (void)inval_inode(ino); }

  // Puts `len` bytes of `ino` at `offset` into the kernel's page cache (notify_store) if
  // `current()` still holds (the bytes are of the version the kernel may keep), checked and
  // stored under a lock the Watch stream's invalidations take exclusively: a store lands either
  // before an invalidation, which then drops it, or is refused after it. Returns 0, -ESTALE when
  // not current, or another negative errno. From the control socket's threads.
  int store_if(InodeNumber ino, uint64_t offset, const char* data, std::size_t len,
               const std::function<bool()>& current);

  // --- WatchStream::Listener ---
  void subscribed() override;
  void lost(const std::string& why) override;
  void invalidate(const std::vector<Invalidation>& items) override;
  void servers_watched(bool watched) override { policy_.set_servers_watched(watched); }

 private:
  // Each returns true when the kernel had something to drop.
  // Attributes and pages; also what the mount read ahead.
  bool inval_inode(InodeNumber ino);
  bool inval_entry(InodeNumber parent, const std::string& name);
  // `path` and everything cached below it.
  void drop_tree(const std::string& path);

  // The root's invalidations wait until the kernel holds its attributes. The kernel makes up
  // the root's first attributes (mode 040000, owned by whoever mounted: nobody else may search
  // it) and drops a GETATTR's reply when an invalidation of the inode came while it was on its
  // way; fuse_permission then checks the made-up ones, and the caller's first access to a fresh
  // mount fails with EACCES (default_permissions). Any other inode's attributes, once it is
  // looked up, are real ones, so a dropped reply leaves older real ones in place. Held: true
  // when `ino` is the root and its invalidation is kept for later.
  bool hold_root(InodeNumber ino);
  struct RootPriming {
    std::mutex mu;
    std::condition_variable cv;
    bool known = false;     // the kernel has applied the root's real attributes
    bool held = false;      // an invalidation of the root waits for that
    bool started = false;   // the priming thread was started
    bool stopping = false;  // stop() was called
  };
  // The priming thread: stats the mount point (a GETATTR of the root that no invalidation can
  // meet, as they are held) until that succeeds, then sends what was held.
  static void prime_root(std::shared_ptr<RootPriming> state, fuse_session* session,
                         std::string mountpoint);

  fuse_session* session_;
  const std::string mountpoint_;
  InodeTable& inodes_;
  CachePolicy& policy_;
  std::function<void(InodeNumber)> data_changed_;
  std::atomic<bool> ready_{false};
  // Shared by stores (store_if), exclusive for the Watch stream's invalidations and drops.
  std::shared_mutex stores_mu_;
  // Shared with the priming thread, which may outlive this object.
  std::shared_ptr<RootPriming> root_ = std::make_shared<RootPriming>();
};

}  // namespace skein::client
