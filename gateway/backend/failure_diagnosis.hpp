// What an SFTP server's generic failure was. OpenSSH's sftp-server reports EEXIST, ENOTEMPTY,
// EISDIR, ENOSPC and others all as SSH_FX_FAILURE; a look at the tree (and at its free space)
// right after tells the errno a POSIX caller expects. Logic only, looking through the Backend
// interface: it is tested against an in-memory backend.
#pragma once

#include <string_view>

namespace skein {

class Backend;

// The operation that failed.
enum class FailedOp { open, write, setstat, mkdir, rmdir, unlink, rename, symlink, link };

// The errno for `op` on `rel` that failed with SSH_FX_FAILURE, judged by what `tree` shows now;
// EIO when nothing explains it. `other`: rename's target, link's existing file.
int diagnose_failure(Backend& tree, FailedOp op, std::string_view rel, std::string_view other = {});

}  // namespace skein
