// The control socket's `fetch-files` command: the whole contents of many small files in one
// gateway call (ReadFiles), for skein-mpi's stage-in, where a FUSE open, read and release and a
// gateway call per file would cost more than the file.
//
//   fetch-files MAX_BYTES LIST_LENGTH
//
// The caller's buffer (a memfd sealed against shrinking, passed with the command; see
// caller_buffer.hpp) holds the files' paths in the namespace in its first LIST_LENGTH bytes, each
// ending with a NUL byte. The mount writes the files' contents one after another into the buffer
// from LIST_LENGTH on, so the buffer needs LIST_LENGTH + files x MAX_BYTES bytes. The answer is
// "ok N", then a line per file, in order: "ERRNO OFFSET LENGTH MODE MTIME_NS" (ERRNO 0: LENGTH
// bytes at OFFSET of the buffer are the whole file; else the file's errno and zeros; EFBIG: longer
// than MAX_BYTES).
//
// No file is read on the caller's behalf that the caller could not read through the mount: a path
// must name an inode this mount knows, and the caller must be root or have search permission on
// every directory above the file and read permission on the file, by mode, owner and group, as the
// kernel's default_permissions would judge (EACCES otherwise, also for any name below a directory
// it may not search; the bytes never reach the buffer). The file is judged by the attributes of
// the file read, which the gateway takes from the handle it read through
// (FileContent.attr_of_file): a name renamed over between a look at it and the read cannot bring
// another file's bytes. A caller that is not privileged has the mount fill at most kMaxOthersBuffer
// bytes of buffer a command.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "caller_buffer.hpp"
#include "control_socket.hpp"
#include "file_attr.hpp"
#include "gateway_client.hpp"
#include "permission.hpp"

namespace skein::client {

// Whether a process with these user, group and supplementary groups may read a file with these
// attributes: root always; the file's owner by the owner bits; a member of its group by the group
// bits; anyone else by the others' bits.
bool may_read(const FileAttr& attr, uid_t uid, gid_t gid, const std::vector<gid_t>& groups);

// The supplementary groups of process `pid` (/proc/PID/status), empty if it is gone.
std::vector<gid_t> supplementary_groups(pid_t pid);

// Attributes of a file or directory by path; nothing when they cannot be had.
using AttrsByPath = std::function<std::optional<FileAttr>(const std::string& path)>;

// Attributes from the local file system (stat(2), following symlinks as a path walk does).
AttrsByPath local_attrs();

// What a caller of the control socket may read by path, as the kernel's default_permissions would
// judge it for a process with the caller's credentials: every directory from the namespace's root
// down to the file's must be a directory the caller may search, and the file must be one it may
// read. Root may read everything. Each directory's attributes are asked of `dir_attrs` once; one
// that cannot be had counts as not searchable.
class PathAccess {
 public:
  PathAccess(const ControlPeer& peer, AttrsByPath dir_attrs);
  // Whether every directory above `ns_path` (an absolute path) may be searched; `dir_attrs` gives
  // the directories' attributes.
  bool may_reach(const std::string& ns_path);
  // may_reach, and read permission by `attr` (the file's).
  bool may_read(const std::string& ns_path, const FileAttr& attr);
  // Whether names may be made and replaced in the directory `dir`: may_reach of a name in it, and
  // write and search permission on it. EACCES, EPERM (a sticky directory the caller does not own:
  // the outcome depends on the name replaced), or 0.
  int may_change_names_in(const std::string& dir);
  // The caller's user, group and supplementary groups, as judged here.
  Credentials credentials() const { return Credentials{peer_.uid, peer_.gid, groups_}; }

 private:
  ControlPeer peer_;
  std::vector<gid_t> groups_;
  AttrsByPath dir_attrs_;
  std::map<std::string, bool> searchable_;
};

// What the command needs of the mount, so that it runs without FUSE in unit tests.
struct FileFetchContext {
  std::function<bool(const std::string& ns_path)> known;  // an inode of this mount
  AttrsByPath dir_attrs;  // for callers other than root (PathAccess)
  // GatewayClient::read_files
  std::function<Result<std::vector<GatewayClient::WholeFile>>(const std::vector<std::string>&,
                                                              uint32_t, bool attrs_of_files)>
      read_files;
  CallerBuffers& buffers;  // the callers' buffers, kept mapped
};

// Runs one `fetch-files` command (without the leading "fetch-files "); returns the answer.
std::string fetch_files(const FileFetchContext& mount, const std::string& args, int buf_fd,
                        const ControlPeer& peer);

}  // namespace skein::client
