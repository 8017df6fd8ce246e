// Dropping what the kernel caches; see kernel_cache.hpp.
#include "kernel_cache.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "skein/path.hpp"

namespace skein::client {
namespace {

const char* kind_name(Invalidation::Kind kind) {
  switch (kind) {
    case Invalidation::Kind::kInode:
      return "inode";
    case Invalidation::Kind::kEntry:
      return "entry";
    case Invalidation::Kind::kTree:
      return "tree";
    case Invalidation::Kind::kAll:
      return "all";
  }
  return "?";
}

}  // namespace

void KernelCache::session_ready() {
  ready_.store(true, std::memory_order_release);
  std::lock_guard lock(root_->mu);
  if (root_->stopping || root_->started) return;
  root_->started = true;
  // Detached: a stat that the session will never answer (the loop ended with it queued) must not
  // hold up the unmount; the process's exit ends it. It touches only the shared state, and the
  // session only while stop() has not been called.
  std::thread(prime_root, root_, session_, mountpoint_).detach();
}

void KernelCache::stop() {
  {
    std::lock_guard lock(root_->mu);
    root_->stopping = true;
  }
  root_->cv.notify_all();
}

bool KernelCache::hold_root(InodeNumber ino) {
  if (ino != FUSE_ROOT_ID) return false;
  std::lock_guard lock(root_->mu);
  if (root_->known) return false;
  root_->held = true;
  return true;
}

void KernelCache::prime_root(std::shared_ptr<RootPriming> state, fuse_session* session,
                             std::string mountpoint) {
  std::chrono::milliseconds pause(10);
  for (;;) {
    {
      std::lock_guard lock(state->mu);
      if (state->stopping || fuse_session_exited(session)) return;
    }
    struct stat st {};
    const int rc = ::stat(mountpoint.c_str(), &st);
    const int error = errno;
    std::unique_lock lock(state->mu);
    if (state->stopping) return;
    if (rc == 0) {
      state->known = true;
      // Under the lock, so that nothing is sent once stop() has returned.
      if (std::exchange(state->held, false))
        (void)fuse_lowlevel_notify_inval_inode(session, FUSE_ROOT_ID, 0, 0);
      return;
    }
    spdlog::debug("stat of the mount point, for the root's attributes: {} (again in {} ms)",
                  std::strerror(error), pause.count());
    if (state->cv.wait_for(lock, pause, [&] { return state->stopping; })) return;
    pause = std::min(pause * 2, std::chrono::milliseconds(2000));
  }
}

bool KernelCache::inval_inode(InodeNumber ino) {
  if (data_changed_) data_changed_(ino);
  if (!ready_.load(std::memory_order_acquire) || hold_root(ino)) return false;
  // Offset 0, length 0: attributes and every cached page.
  int rc = fuse_lowlevel_notify_inval_inode(session_, ino, 0, 0);
  if (rc != 0 && rc != -ENOENT) spdlog::debug("inval_inode {}: {}", ino, std::strerror(-rc));
  return rc == 0;
}

bool KernelCache::inval_entry(InodeNumber parent, const std::string& name) {
  if (!ready_.load(std::memory_order_acquire)) return false;
  int rc = fuse_lowlevel_notify_inval_entry(session_, parent, name.data(), name.size());
  if (rc != 0 && rc != -ENOENT) {
    spdlog::debug("inval_entry {}/{}: {}", parent, name, std::strerror(-rc));
  }
  return rc == 0;
}

void KernelCache::attributes_changed(InodeNumber ino) {
  if (!ready_.load(std::memory_order_acquire) || hold_root(ino)) return;
  int rc = fuse_lowlevel_notify_inval_inode(session_, ino, -1, 0);  // negative offset: attrs only
  if (rc != 0 && rc != -ENOENT) spdlog::debug("inval attrs {}: {}", ino, std::strerror(-rc));
}

int KernelCache::store_if(InodeNumber ino, uint64_t offset, const char* data, std::size_t len,
                          const std::function<bool()>& current) {
  if (!ready_.load(std::memory_order_acquire)) return -EAGAIN;
  std::shared_lock lock(stores_mu_);
  if (!current()) return -ESTALE;
  fuse_bufvec buf = FUSE_BUFVEC_INIT(len);
  buf.buf[0].mem = const_cast<char*>(data);
  return fuse_lowlevel_notify_store(session_, ino, static_cast<off_t>(offset), &buf,
                                    fuse_buf_copy_flags(0));
}

KernelCache::Dropped KernelCache::drop_all() {
  policy_.invalidating_all();
  Dropped dropped;
  // Names deepest first, so each invalidation has no cached subtree left to walk.
  for (const auto& n : inodes_.names_at_or_below("/")) {
    if (inval_entry(n.parent, n.name)) ++dropped.entries;
  }
  for (InodeNumber ino : inodes_.all_inodes()) {
    if (inval_inode(ino)) ++dropped.inodes;
  }
  return dropped;
}

void KernelCache::drop_tree(const std::string& path) {
  if (path == "/") {
    drop_all();
    return;
  }
  auto names = inodes_.names_at_or_below(path);
  for (const auto& n : names) policy_.invalidating(n.ino);
  for (const auto& n : names) inval_entry(n.parent, n.name);
  for (const auto& n : names) inval_inode(n.ino);
  if (auto parent = inodes_.find(parent_path(path))) {
    policy_.invalidating_entry(*parent, base_name(path));
    inval_inode(*parent);
  }
}

void KernelCache::invalidate(const std::vector<Invalidation>& items) {
  std::unique_lock stores(stores_mu_);  // no fill's store between its check and this
  // No lookup waits for a read-ahead listing meanwhile: the kernel's invalidation of an entry
  // waits for the lookups in its directory.
  const CachePolicy::Applying applying(policy_);
  // First, so that replies already on their way are not cached as if they were newer.
  policy_.invalidating();
  for (const Invalidation& item : items) {
    spdlog::debug("invalidate {} {}", kind_name(item.kind), item.path);
    switch (item.kind) {
      case Invalidation::Kind::kInode:
        if (auto ino = inodes_.find(item.path)) {
          policy_.invalidating(*ino);
          inval_inode(*ino);
        }
        // What its directory read ahead of it, whether the kernel has the inode or not.
        if (item.path != "/")
          if (auto parent = inodes_.find(parent_path(item.path)))
            policy_.drop_ahead_name(*parent, base_name(item.path));
        break;
      case Invalidation::Kind::kEntry: {
        // A name the inode table does not hold is not in the kernel's directory cache either
        // (failed lookups are not cached), so only known names need the directory's lock.
        if (item.path == "/") break;
        // Its deferred opens must not go on with the file that took its name.
        if (item.replaced)
          if (auto ino = inodes_.find(item.path)) policy_.replaced(*ino);
        inodes_.changed(item.path, false);  // it may name another file now
        if (auto name = inodes_.name_at(item.path)) inval_entry(name->parent, name->name);
        // The directory's attributes and its cached listing (kept in its pages) go too.
        if (auto parent = inodes_.find(parent_path(item.path))) {
          policy_.invalidating_entry(*parent, base_name(item.path));
          inval_inode(*parent);
        }
        break;
      }
      case Invalidation::Kind::kTree:
        inodes_.changed(item.path, true);
        drop_tree(item.path);
        break;
      case Invalidation::Kind::kAll:
        drop_all();
        break;
    }
  }
}

void KernelCache::subscribed() {
  // Changes may have gone unreported while there was no stream: drop everything, then trust.
  std::unique_lock stores(stores_mu_);
  Dropped d = drop_all();
  policy_.set_healthy(true);
  spdlog::info("cache dropped on subscription: {} inodes, {} names", d.inodes, d.entries);
}

void KernelCache::lost(const std::string& /*why*/) {
  // Short lifetimes first, so nothing fetched from now on is cached for long, then drop what was.
  policy_.set_healthy(false);
  std::unique_lock stores(stores_mu_);
  Dropped d = drop_all();
  spdlog::info("cache dropped on losing the watch stream: {} inodes, {} names", d.inodes,
               d.entries);
}

}  // namespace skein::client
