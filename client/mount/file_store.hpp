// The control socket's `store-files` command: many small whole files written to the namespace in
// one gateway call (WriteFiles), for skein-mpi's stage-out, where a FUSE create, write, times,
// close and rename and a gateway call or more for each would cost more than the file.
//
//   store-files LIST_LENGTH
//
// The caller's buffer (a memfd sealed against shrinking, passed with the command; see
// caller_buffer.hpp) holds the list of files in its first LIST_LENGTH bytes: for each file
// "MODE MTIME_NS LENGTH PATH" and a NUL byte, then the name it is written under first (in PATH's
// directory) and a NUL byte. MODE is octal permission bits, PATH the file's path in the
// namespace. The files' contents follow the list in the buffer, one after another, LENGTH bytes
// each. Each file is made under its partial name, given its mode and mtime (as its atime too) and
// renamed over PATH, so PATH never names a half-written file. The answer is "ok N", then a line
// per file, in order, with its errno (0: made; EFBIG: over 1 MiB). The mount drops what it and
// the kernel cached of each PATH made, as it does when another mount makes a file there, and of
// each PATH sent that failed (other than for the quota): it may have been replaced all the same.
//
// No file is made on the caller's behalf that the caller could not make through the mount: it
// must be root, or have search permission on every directory down to PATH's and write permission
// on that one, as the kernel's default_permissions would judge (EACCES otherwise). In a sticky
// directory that is not its own, and for set-id bits, a caller other than root gets EPERM (what
// the kernel would decide there depends on the file replaced; a plain copy lets it decide). Its
// command may name at most 64 MiB of buffer (root and the mount's user: 256 MiB).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "caller_buffer.hpp"
#include "control_socket.hpp"
#include "file_fetch.hpp"
#include "gateway_client.hpp"

namespace skein::client {

// What the command needs of the mount, so that it runs without FUSE in unit tests.
struct FileStoreContext {
  AttrsByPath dir_attrs;  // for callers other than root (PathAccess)
  std::function<Result<std::vector<GatewayClient::FileWritten>>(
      const std::vector<GatewayClient::NewFile>&)>
      write_files;
  // A file was made at `ns_path`: what the mount and the kernel cached of the name, the file it
  // named before and its directory is dropped.
  std::function<void(const std::string& ns_path)> made;
  CallerBuffers& buffers;  // the callers' buffers, kept mapped
};

// Runs one `store-files` command (without the leading "store-files "); returns the answer.
std::string store_files(const FileStoreContext& mount, const std::string& args, int buf_fd,
                        const ControlPeer& peer);

}  // namespace skein::client
