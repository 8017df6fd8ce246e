// For tests of the batched lookups (Layout::getattr_each, NamespaceFs::getattr_each): each answer
// of a batch is the one getattr gives for its path alone.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein::test {

// `getattr` answers one path alone.
template <typename Getattr>
void expect_each_as_alone(const std::vector<Result<sftp::Attrs>>& each,
                          const std::vector<std::string>& paths, Getattr getattr) {
  ASSERT_EQ(each.size(), paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    const Result<sftp::Attrs> alone = getattr(paths[i]);
    ASSERT_EQ(static_cast<bool>(each[i]), static_cast<bool>(alone)) << paths[i];
    if (!alone) {
      EXPECT_EQ(each[i].error(), alone.error()) << paths[i];
      continue;
    }
    EXPECT_EQ(each[i]->size, alone->size) << paths[i];
    EXPECT_EQ(each[i]->permissions, alone->permissions) << paths[i];
    EXPECT_EQ(each[i]->mtime, alone->mtime) << paths[i];
  }
}

}  // namespace skein::test
