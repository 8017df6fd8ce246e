// The control socket's `fill` command: puts a byte range of a file into this mount's kernel page
// cache (fuse_lowlevel_notify_store), for skein-mpi's collective reads. The bytes come either
// from the gateway (`fetch`: the mount reads exactly that range, no read-ahead, and also copies
// it into the caller's buffer so that the caller can share it with other nodes) or from the
// caller's buffer (`store`: bytes another node fetched). `read` fills the caller's buffer only:
// the range comes from the gateway as for `fetch` and goes into no page cache (skein-mpi's
// stage-in of a large file, which it reads once).
//
//   fill fetch[:tag]|store[:TAG]|read MTIME_NS SIZE OFFSET LENGTH BUF_OFFSET NS_PATH
//
// The buffer is not named: its file descriptor comes with the command (SCM_RIGHTS), so the mount
// touches only memory the caller could touch itself. It must be a memfd sealed against
// shrinking (F_SEAL_SHRINK), which the mount maps: a buffer that cannot shrink cannot make the
// mapping fault. BUF_OFFSET is where in the buffer the range goes (fetch) or comes from (store).
//
// NS_PATH (the rest of the line) is the file's path in the namespace; the caller must hold it
// open through this mount, and MTIME_NS and SIZE must be what that open saw (the cache policy's
// record of it, see CachePolicy::open_matches). The record is what later opens compare against
// to keep the page cache, so bytes stored for a version of the file are kept only while that
// version is current; an invalidation since the open fails the command ("changed"), and one
// arriving after it drops the pages as any invalidation does. LENGTH 0 only checks (no buffer
// needed). The fetches of one file read through one gateway handle, which the session keeps
// until the file's last close here (MountSession::fill_handle).
//
// A caller other than root and the mount's user must be able to read the file through the mount
// (search permission on every directory above it, read permission on it: PathAccess): judged by
// the path's attributes before anything moves, and again by the attributes of the file the
// gateway opened or read (its own, from its handle: the name may lead to another file by then)
// before any of its bytes reaches the caller's buffer. A store's bytes come from the
// caller and go into the page cache that every reader of the file on this node is served from:
// privileged callers (root, the mount's own user, a job's user) may store any; others only bytes
// with the tag (fill_tag.hpp) that a mount of the namespace gave them at their fetch, which
// `fetch` answers such callers, and privileged ones that ask for it (`fetch:tag`), as
// "ok BYTES TAG". The mount signs and stores its own copy of the bytes, never the caller's buffer,
// which may change under it.
#pragma once

#include <string>

#include "control_socket.hpp"
#include "file_fetch.hpp"
#include "fuse_ops.hpp"

namespace skein::client {

// Runs one `fill` command (without the leading "fill "), with the buffer's file descriptor
// `buf_fd` (-1: none passed); returns the answer line: "ok BYTES [TAG]" or "error: ...".
std::string cache_fill(MountDaemon& mount, const std::string& args, int buf_fd,
                       const ControlPeer& peer);

// Runs one `fill-files` command (without "fill-files "): `fill fetch[:tag]` or `fill store[:TAG]`
// of whole files, many at once, for skein-mpi's batches of small files:
//
//   fill-files fetch[:tag]|store LIST_OFFSET LIST_LENGTH
//
// The files are listed in the buffer at [LIST_OFFSET, LIST_OFFSET + LIST_LENGTH), a line each:
// MTIME_NS SIZE BUF_OFFSET TAG NS_PATH (TAG "-" for none; a store's tag otherwise). Each is
// judged and moved as its own `fill` command of the whole file (OFFSET 0, LENGTH SIZE) would be;
// fetches of files of up to 1 MiB are read many to a gateway call (ReadFiles), whose answer
// carries the version read. Answers "ok COUNT", then each file's `fill` answer line in order.
std::string cache_fill_files(MountDaemon& mount, const std::string& args, int buf_fd,
                             const ControlPeer& peer);

// Attributes in the namespace for judging a caller's access (PathAccess): what the mount keeps of
// a path it knows (a directory's, a file's current ones) while every server is watched, else the
// gateway's.
AttrsByPath mount_attrs(MountDaemon& mount);

}  // namespace skein::client
