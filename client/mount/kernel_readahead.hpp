// The kernel's own read-ahead for a FUSE mount: the read_ahead_kb of the mount's backing device
// (/sys/class/bdi/MAJOR:MINOR). FUSE starts it at 128 KiB, and a FUSE_INIT reply can only lower
// it; raising it takes root, after the session is initialised.
#pragma once

#include <optional>
#include <string>

namespace skein::client {

// "MAJOR:MINOR" of the filesystem mounted at `mountpoint`, from /proc/self/mountinfo (a stat of
// the mount point would be a FUSE request, which the caller may be the one to serve).
std::optional<std::string> mount_device(const std::string& mountpoint);

// Sets the read-ahead of the mount at `mountpoint` to `kb`. On failure returns false and says
// why in `error`.
bool set_kernel_readahead(const std::string& mountpoint, unsigned kb, std::string& error);

}  // namespace skein::client
