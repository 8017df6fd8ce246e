// The FUSE low-level operations of skein-mount: a thin adapter that converts each kernel request's
// arguments, calls one MountSession operation, and turns its value or errno into exactly one
// fuse_reply_*.
#pragma once

#include <fuse_lowlevel.h>

#include <memory>

#include "cache_policy.hpp"
#include "caller_buffer.hpp"
#include "control_socket.hpp"
#include "data_path.hpp"
#include "fill_tag.hpp"
#include "gateway_client.hpp"
#include "inode_table.hpp"
#include "kernel_cache.hpp"
#include "mount_session.hpp"
#include "open_inodes.hpp"
#include "watch_stream.hpp"

namespace skein::client {

// Everything the running skein-mount daemon holds; passed to fuse_session_new as its userdata.
struct MountDaemon {
  // Created only once the daemon has forked (gRPC threads do not survive a fork), and before the
  // session loop starts, so no operation ever sees it null.
  std::unique_ptr<GatewayClient> gateway;
  // Read-ahead and write-behind; created with the gateway, and destroyed before it (its writes
  // still in flight finish through it).
  std::unique_ptr<DataPath> data;
  InodeTable inodes;
  CachePolicy cache;       // kernel cache lifetimes; options set before the session starts
  OpenInodes open_inodes;  // open counts and silly renames
  // The operations themselves, over the members above; created right after the data path, and
  // destroyed before it.
  std::unique_ptr<MountSession> session;

  // Coherence: set up by main before the session loop, started by the init operation, and
  // stopped by main (watch and control first) before the session is destroyed.
  std::unique_ptr<KernelCache> kernel_cache;
  std::unique_ptr<WatchStream> watch;
  std::unique_ptr<ControlSocket> control;
  // Signs what `fill fetch` got from the gateway for callers who are not privileged, and checks
  // what they hand `fill store` (fill_tag.hpp); set from the namespace's token before the session.
  FillTag::Key fill_key{};
  // Callers' buffers, kept mapped between their control-socket commands.
  CallerBuffers caller_buffers;
  // On a mount that serves every user (allow_other), the opens of users other than root and
  // `trusted_user` (the mount's own, or a job's user) are judged by the file the gateway opens
  // (MountSession::open). Set before the session starts.
  bool judge_others = false;
  uid_t trusted_user = 0;
};

// The operations table for fuse_session_new; the session's userdata must be a MountDaemon.
const fuse_lowlevel_ops& fuse_operations();

}  // namespace skein::client
