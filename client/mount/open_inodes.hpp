// Which inodes this mount has open, and NFS-style "silly renames": a file unlinked (or renamed
// over) while this mount has it open is renamed to a hidden name in its directory instead, and
// really removed at its last close. The gateway's handles may be re-opened by path (on other
// connections, after a restart), and fstat asks by path, so the file must keep a name meanwhile.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "gateway_client.hpp"
#include "inode_table.hpp"

namespace skein::client {

class OpenInodes {
 public:
  // Hidden names start with this; readdir leaves them out.
  static constexpr std::string_view kHiddenPrefix = ".skein-deleted-";

  // A fresh hidden name for `ino`: ".skein-deleted-<ino>-<random>".
  static std::string hidden_name(InodeNumber ino);
  static bool is_hidden_name(std::string_view name);

  // An open (or create) of `ino`, with the attributes it had then, was handed to the kernel / a
  // release came for it.
  void opened(InodeNumber ino, const FileAttr& attr);
  // Returns the hidden path to remove when this was the last close of a silly-renamed inode.
  std::optional<std::string> closed(InodeNumber ino);

  bool is_open(InodeNumber ino) const;
  // The attributes of an open inode as last seen (at open, or by a getattr since): the answer
  // for an open file whose name is gone. Nothing for an inode not open.
  void seen(InodeNumber ino, const FileAttr& attr);
  // This mount writes [.., end) of the open inode: as last seen, it is at least that long, and
  // modified now.
  void wrote(InodeNumber ino, uint64_t end);
  std::optional<FileAttr> last_seen(InodeNumber ino) const;
  // `ino` now lives at `hidden_path` until its last close. Returns false when it is no longer
  // open (the last close came in between): the caller removes `hidden_path` itself.
  bool hide(InodeNumber ino, std::string hidden_path);

  // Open inodes, for status output.
  std::size_t count() const;

 private:
  struct Open {
    uint64_t count = 0;
    std::string hidden_path;  // empty unless silly-renamed
    FileAttr attr;            // as last seen
  };
  // Lock order: a leaf; never held across a gateway call or a fuse_reply_*.
  mutable std::mutex mu_;
  std::unordered_map<InodeNumber, Open> open_;  // guarded by mu_
};

}  // namespace skein::client
