// Whether a user may read, write or search a file by its mode, owner and group, as the kernel's
// default_permissions judges without ACLs. Where skein acts for a user it does not trust (another
// user of a mount that serves every user), it judges by this: the mount for the control socket's
// commands, the gateway for such a user's opens (OpenRequest.as_user).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <optional>
#include <vector>

namespace skein {

// A user's id, group and supplementary groups.
struct Credentials {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

// Whether `group` is the user's group or one of its supplementary groups.
inline bool in_group(gid_t group, gid_t gid, const std::vector<gid_t>& groups) {
  return group == gid || std::find(groups.begin(), groups.end(), group) != groups.end();
}

// Whether the owner's, group's or others' bits of `mode` (whichever class the user is in, by the
// file's `owner` and `group`) hold every one of `bits` (4 read, 2 write, 1 search); root may do
// anything.
inline bool may_access(uint32_t mode, uint32_t owner, uint32_t group, uid_t uid, gid_t gid,
                       const std::vector<gid_t>& groups, uint32_t bits) {
  if (uid == 0) return true;
  if (owner == uid) return (mode & (bits << 6)) == (bits << 6);
  if (in_group(group, gid, groups)) return (mode & (bits << 3)) == (bits << 3);
  return (mode & bits) == bits;
}

// The permission bits an open(2) with `flags` needs: read, write or both, and write for O_TRUNC.
inline uint32_t access_bits_of_open(int flags) {
  const int acc = flags & O_ACCMODE;
  return (acc == O_RDONLY ? 4u : acc == O_WRONLY ? 2u : 6u) | ((flags & O_TRUNC) ? 2u : 0u);
}

// A change of a file's attributes, as far as its judgement goes.
struct AttrChangeAsked {
  std::optional<uint32_t> mode;  // the new permission bits
  bool size = false;
  bool times = false;      // times given (utimes with times)
  bool times_now = false;  // times set to now (utimes(NULL), touch)
  std::optional<uint32_t> uid, gid;
};

// 0 if a user may make `change` to a file with `mode`, `owner` and `group`, as the kernel judges
// chmod, chown, truncate and utimes of a user without capabilities; else EPERM or EACCES. Root may
// do anything; only root gives a file away; its owner may change its mode and times, and its group
// to one of the owner's groups; anyone may take away its set-user-ID and set-group-ID bits alone
// (the kernel does so at a write by another user); a new size needs write permission, times set
// to now ownership or write permission.
inline int may_change_attrs(uint32_t mode, uint32_t owner, uint32_t group, const Credentials& who,
                            const AttrChangeAsked& change) {
  if (who.uid == 0) return 0;
  const bool owns = owner == who.uid;
  if (change.uid && *change.uid != owner) return EPERM;
  if (change.gid && *change.gid != group) {
    if (!owns || !in_group(*change.gid, who.gid, who.groups)) return EPERM;
  }
  const uint32_t kill_bits = S_ISUID | S_ISGID;
  const bool kills_only = change.mode && (*change.mode & 07777) == (mode & 07777 & ~kill_bits);
  if (((change.mode && !kills_only) || change.times) && !owns) return EPERM;
  const bool writes = may_access(mode, owner, group, who.uid, who.gid, who.groups, 2);
  if (change.times_now && !owns && !writes) return EACCES;
  if (change.size && !writes) return EACCES;
  return 0;
}

// The mode a permitted chmod by `who` sets, as the kernel's setattr_prepare: without root, the
// set-group-ID bit is silently dropped unless the file's group (`group`: its new one where the same
// change gives one) is the user's group or one of its supplementary groups.
inline uint32_t mode_set_by(uint32_t asked, uint32_t group, const Credentials& who) {
  if (who.uid == 0 || !(asked & S_ISGID)) return asked;
  return in_group(group, who.gid, who.groups) ? asked : asked & ~static_cast<uint32_t>(S_ISGID);
}

}  // namespace skein
