// skein/permission.hpp for the mount's file attributes: what the mount judges for users other than
// root and its own (the control socket's commands: file_fetch.hpp, cache_fill.hpp).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "file_attr.hpp"
#include "skein/permission.hpp"

namespace skein::client {

using skein::Credentials;

inline bool may_access(const FileAttr& attr, uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
                       uint32_t bits) {
  return skein::may_access(attr.mode, attr.uid, attr.gid, uid, gid, groups, bits);
}

}  // namespace skein::client
