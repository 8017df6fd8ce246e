// The control socket's `fill` command: puts a byte range of a file into this mount's kernel page
// cache (fuse_lowlevel_notify_store), for skein-mpi's collective reads. The bytes come either
// from the gateway (`fetch`: the mount reads exactly that range, no read-ahead, and also copies
// it into the caller's buffer file so that the caller can share it with other nodes) or from the
// caller's buffer file (`store`: bytes another node fetched).
//
//   fill fetch|store MTIME_NS SIZE OFFSET LENGTH BUF_OFFSET BUF_PATH NS_PATH
//
// NS_PATH (the rest of the line) is the file's path in the namespace; the caller must hold it
// open through this mount, and MTIME_NS and SIZE must be what that open saw (the cache policy's
// record of it, see CachePolicy::open_matches). The record is what later opens compare against
// to keep the page cache, so bytes stored for a version of the file are kept only while that
// version is current; an invalidation since the open fails the command ("changed"), and one
// arriving after it drops the pages as any invalidation does. LENGTH 0 only checks.
#pragma once

#include <string>

#include "fuse_ops.hpp"

namespace skein::client {

// Runs one `fill` command (without the leading "fill "); returns the answer line: "ok BYTES" or
// "error: ...".
std::string cache_fill(MountDaemon& mount, const std::string& args);

}  // namespace skein::client
