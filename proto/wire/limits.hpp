// The Data service's limits (fs.proto states them): the gateway refuses a call beyond them, and
// its clients (the mount, skein-mpi through it) keep to them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skein::wire {

// The largest Read or Write payload, and the most one ReadFiles call may return (its paths times
// its max_bytes).
inline constexpr uint32_t kMaxIoSize = 1u << 20;
// The most paths in one ReadFiles call.
inline constexpr int kMaxReadFiles = 256;
// The most files in one WriteFiles call (their data at most kMaxIoSize together).
inline constexpr int kMaxWriteFiles = 256;
// The most writes in one Write call: its data and its extents (WriteRequest.more). The mount
// gathers up to 64.
inline constexpr int kMaxWriteExtents = 256;
// The longest mount id (Subscribe.mount_id, the x-skein-mount metadata); a mount's is 16 hex
// digits. A longer x-skein-mount names no mount.
inline constexpr size_t kMaxMountIdBytes = 64;

}  // namespace skein::wire
