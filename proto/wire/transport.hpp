// HTTP/2 and TCP settings of the mount <-> gateway connection, which both sides set alike. It
// carries file contents in messages of up to 1 MiB; gRPC's defaults are made for small messages.
#pragma once

#include <absl/synchronization/mutex.h>
#include <grpc/impl/codegen/grpc_types.h>

namespace skein::wire {

// Calls set(name, value) for each channel argument; `set` is ChannelArguments::SetInt on the
// mount's side and ServerBuilder::AddChannelArgument on the gateway's.
template <typename Set>
void tune_bulk_transport(Set&& set) {
  // Frames of up to 1 MiB, not 16 KiB: a message's contents go out in one frame, not in 64 with
  // a header each, and are parsed so.
  set(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20);
  // A stream may have 8 MiB in flight before the receiver must grant more (a write-behind or a
  // read-ahead window's worth), instead of growing from 64 KiB by probing the bandwidth.
  set(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  set(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // Read the socket in chunks of at least 64 KiB, not from 8 KiB up.
  set(GRPC_ARG_TCP_MIN_READ_CHUNK_SIZE, 64 << 10);
  set(GRPC_ARG_TCP_READ_CHUNK_SIZE, 256 << 10);
}

// Process-wide, once at start, before any gRPC object exists; both binaries call it.
// Debian builds Abseil without NDEBUG, so every absl::Mutex that gRPC takes also records a stack
// trace and an edge in a lock-order graph (deadlock detection meant for debug builds): 3-4% of
// the mount's and the gateway's CPU on every metadata call, measured with perf.
inline void tune_grpc_process() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace skein::wire
