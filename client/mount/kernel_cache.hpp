// KernelCache: what the kernel caches for this mount (entries, attributes, pages), and the one
// place that drops it, through fuse_lowlevel_notify_inval_*. It applies the Watch stream's
// invalidations and the control socket's drop-caches, each from that thread, never from inside
// a FUSE operation: a notify may wait for a directory lock that an operation in progress holds.
// It copies what it needs out of the inode table first and holds no lock while notifying.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache_policy.hpp"
#include "inode_table.hpp"
#include "watch_stream.hpp"

namespace skein::client {

class KernelCache final : public WatchStream::Listener {
 public:
  KernelCache(fuse_session* session, InodeTable& inodes, CachePolicy& policy)
      : session_(session), inodes_(inodes), policy_(policy) {}

  // The kernel has initialised the session (FUSE_INIT): notifications make sense from now on.
  void session_ready() { ready_.store(true, std::memory_order_release); }

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
  // operation: attribute-only invalidation takes no lock that the kernel could be holding.
  void attributes_changed(InodeNumber ino);

  // Puts `len` bytes of `ino` at `offset` into the kernel's page cache (notify_store). Returns 0
  // or a negative errno. From the control socket's thread only, like the invalidations.
  int store(InodeNumber ino, uint64_t offset, const char* data, std::size_t len);

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

  fuse_session* session_;
  InodeTable& inodes_;
  CachePolicy& policy_;
  std::function<void(InodeNumber)> data_changed_;
  std::atomic<bool> ready_{false};
};

}  // namespace skein::client
