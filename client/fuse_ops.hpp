// The FUSE low-level operations of skein-mount: a thin adapter that turns each kernel request into
// inode-table look-ups and one GatewayClient call, then exactly one fuse_reply_*.
#pragma once

#include <fuse_lowlevel.h>

#include <memory>

#include "gateway_client.hpp"
#include "inode_table.hpp"

namespace skein::client {

// Everything one mounted session works on; passed to fuse_session_new as its userdata.
struct Mount {
  // Created only once the daemon has forked (gRPC threads do not survive a fork), and before the
  // session loop starts, so no operation ever sees it null.
  std::unique_ptr<GatewayClient> gateway;
  InodeTable inodes;
};

// The operations table for fuse_session_new; the session's userdata must be a Mount.
const fuse_lowlevel_ops& fuse_operations();

}  // namespace skein::client
