// Which paths a change makes stale in the mounts' caches: the one place that decides it. The
// services ask here for every change they make through the gateway, and the coherence side for
// every change found behind the gateway's back; the broker sends the result to the mounts that
// cache those paths (an INODE or ENTRY item reaches the mounts that cache the path or its
// directory, a TREE item every mount of the namespace).
#pragma once

#include <string>
#include <vector>

#include "skein/v1/watch.pb.h"

namespace skein {

enum class Change {
  create,            // a file opened with O_CREAT at `path` (new, or an existing one opened)
  mkdir,             // a directory made at `path`
  symlink,           // a symlink made at `path`
  rmdir,             // the directory `path` removed
  unlink,            // the name `path` removed
  rename,            // `path` moved to `other`, replacing what was there
  rename_noreplace,  // `path` moved to `other`, where nothing was (RENAME_NOREPLACE)
  link,              // `other` made as a new name of the file `path`
  setattr,           // mode, owner, times or size of `path` changed
  truncate_on_open,  // `path` opened with O_TRUNC
  write,             // `path`'s contents written
  found_changed,     // `path` found changed on the server (its watcher, revalidation, a lookup)
};

// The change a rename with `flags` (0 or RENAME_NOREPLACE, 1) is.
inline Change rename_change(unsigned flags) {
  return (flags & 1) ? Change::rename_noreplace : Change::rename;
}

// What the mounts other than the one that made `change` must drop. `path` and `other` are
// normalised virtual paths; `other` only for rename (the new name) and link (the new name).
std::vector<v1::Invalidation> invalidations_for(Change change, const std::string& path,
                                                const std::string& other = {});

// What `change` of a file through one of its names makes stale at its other names `others` (hard
// links, which SFTP does not show to be one file): the file's contents and attributes, for a
// change of those or one found on the server; nothing for a change of the name alone.
std::vector<v1::Invalidation> invalidations_for_other_names(Change change,
                                                            const std::vector<std::string>& others);

}  // namespace skein
