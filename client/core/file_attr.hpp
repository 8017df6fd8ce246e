// Attributes of a file as the mount gets them from the gateway, which has no inode numbers (the
// mount hands out its own).
#pragma once

#include <cstdint>
#include <string>

namespace skein::client {

struct FileAttr {
  uint32_t mode = 0;  // type and permission bits
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  uint64_t blocks = 0;  // 512-byte blocks
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
};

struct DirEntry {
  std::string name;
  FileAttr attr;
};

}  // namespace skein::client
