// The mount's inode numbers: the kernel names files by number, the gateway by virtual path.
// Numbers are synthetic (a counter, never a pointer, never reused while mounted) and map to the
// path they currently have; renames move whole subtrees, removals detach a number from its path.
//
// What stat(2) shows as st_ino is a file number of its own: the inode number, except that a path
// whose inode the kernel forgot keeps its file number for the next inode made there, unless this
// mount removed or replaced it, or the gateway said that the name changed. The kernel forgets an
// inode whenever its cache lets it go (memory, an invalidation of every name after the mount lost
// and regained the gateway's Watch stream), and programs that compare st_ino before and after an
// open (cp, tar, rsync, git) would otherwise take the file for replaced.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace skein::client {

using InodeNumber = uint64_t;

// The root of the namespace, "/"; equal to FUSE_ROOT_ID (checked where FUSE is included).
inline constexpr InodeNumber kRootInode = 1;

// What an entry reply tells the kernel: (ino, generation) is unique for the life of the mount.
struct InodeRef {
  InodeNumber ino = 0;
  uint64_t generation = 0;
  uint64_t file_id = 0;  // st_ino
};

// One name the kernel may cache: `name` in directory `parent` stands for `ino`.
struct CachedName {
  InodeNumber parent = 0;
  InodeNumber ino = 0;
  std::string name;
};

class InodeTable {
 public:
  InodeTable();

  // The inode attached at normalised `path`, created if the path has none, with one more kernel
  // lookup counted on it. Call once per entry reply sent to the kernel.
  InodeRef lookup_add(const std::string& path);

  // Takes back `n` kernel lookups. An inode left with none is dropped (returns true); the root
  // never is.
  bool forget(InodeNumber ino, uint64_t n);

  // The path of an inode attached to the tree; nullopt when unknown or detached.
  std::optional<std::string> path_of(InodeNumber ino) const;

  // The last path an inode had, attached or not: an open file whose name was removed keeps using
  // it, because the gateway may need it to re-open the file after a restart.
  std::optional<std::string> last_path_of(InodeNumber ino) const;

  // The inode attached at `path`, if any; counts no lookup.
  std::optional<InodeNumber> find(const std::string& path) const;

  // After a successful rename: whatever was at `to` (and below it) is detached, then `from` and
  // everything below it move to `to`, keeping their numbers.
  void rename(const std::string& from, const std::string& to);

  // After a successful RENAME_EXCHANGE: the subtrees at `a` and `b` trade places.
  void exchange(const std::string& a, const std::string& b);

  // After a successful unlink or rmdir: `path` and anything below it are detached. Their numbers
  // stay valid (for open files) until the kernel forgets them.
  void unlink(const std::string& path);

  // For cache invalidation, copied out so that no lock is held while the kernel is told:
  // the name at `path` (not the root), if attached;
  std::optional<CachedName> name_at(const std::string& path) const;
  // the attached names at `path` and below it (never the root itself), deepest first;
  std::vector<CachedName> names_at_or_below(const std::string& path) const;
  // every inode known, attached or not.
  std::vector<InodeNumber> all_inodes() const;

  // The file number (st_ino) of `ino`; `ino` itself when unknown.
  uint64_t file_id(InodeNumber ino) const;
  // The file number of the inode attached at `path`, if any.
  std::optional<uint64_t> file_id_at(const std::string& path) const;
  // The name at `path` (with `below`, also every name below it) may stand for another file now:
  // an inode made there later gets a file number of its own.
  void changed(const std::string& path, bool below);

  // Kernel lookups counted on `ino` (0 when unknown). For tests and diagnostics.
  uint64_t lookup_count(InodeNumber ino) const;

  // Inodes currently known, attached or not, the root included.
  std::size_t size() const;

 private:
  struct Inode {
    std::string path;
    uint64_t nlookup = 0;
    uint64_t generation = 0;
    bool attached = true;
    uint64_t file_id = 0;
  };

  // File numbers of paths whose inodes the kernel forgot, at most kRemembered (the oldest go).
  static constexpr std::size_t kRemembered = 100'000;
  void remember_locked(const std::string& path, uint64_t file_id);
  // Forgets the file numbers kept at `path` and, with `below`, below it.
  void erase_remembered_locked(const std::string& path, bool below);
  // Moves the file numbers kept at and below `from` to `to`.
  void move_remembered_locked(const std::string& from, const std::string& to);

  // Removes `path` and the entries below it from by_path_, returning them (path, ino) in order.
  std::map<std::string, InodeNumber> take_subtree_locked(const std::string& path);
  // Attaches each (old path, ino) of `subtree` under `to` in place of `from`.
  void place_subtree_locked(const std::map<std::string, InodeNumber>& subtree,
                            const std::string& from, const std::string& to);

  // Lock order: mu_ is a leaf. Take it only inside these methods; never hold it across a gateway
  // call or a fuse_reply_* (callers cannot: no method returns with it held).
  mutable std::mutex mu_;
  InodeNumber next_ino_ = kRootInode + 1;          // guarded by mu_
  std::unordered_map<InodeNumber, Inode> inodes_;  // guarded by mu_
  // Attached inodes only. Ordered, so the entries below "/a" are the one range starting at "/a/".
  std::map<std::string, InodeNumber> by_path_;  // guarded by mu_
  std::map<std::string, uint64_t> remembered_;  // path -> file number; guarded by mu_
  std::deque<std::string> remembered_order_;    // oldest first (may hold stale paths)
};

}  // namespace skein::client
