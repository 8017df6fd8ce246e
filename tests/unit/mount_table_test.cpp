// Mount table resolution: longest prefix wins, and directories above mount points are synthesised.
#include "namespace/mount_table.hpp"

#include <gtest/gtest.h>

using skein::Mount;
using skein::MountTable;

namespace {
MountTable table() {
  return MountTable({Mount{"/srv0", {}}, Mount{"/srv1", {}}, Mount{"/data/deep", {}}});
}
}  // namespace

TEST(MountTable, PlacesPathsInTheLongestMatchingMount) {
  auto t = table();
  auto p = t.place("/srv0/a/b");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->mount->path, "/srv0");
  EXPECT_EQ(p->rel, "/a/b");
  auto root = t.place("/srv1");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->rel, "/");
  EXPECT_FALSE(t.place("/srv01"));
  EXPECT_FALSE(t.place("/"));
}

TEST(MountTable, RootMountCoversEverythingElse) {
  MountTable t({Mount{"/", {}}, Mount{"/x", {}}});
  EXPECT_EQ(t.place("/y/z")->mount->path, "/");
  EXPECT_EQ(t.place("/y/z")->rel, "/y/z");
  EXPECT_EQ(t.place("/x/z")->mount->path, "/x");
}

TEST(MountTable, SynthesisesDirectoriesAboveMountPoints) {
  auto t = table();
  EXPECT_EQ(t.synthetic_children("/"), (std::vector<std::string>{"data", "srv0", "srv1"}));
  EXPECT_EQ(t.synthetic_children("/data"), (std::vector<std::string>{"deep"}));
  EXPECT_TRUE(t.is_synthetic_dir("/data"));
  EXPECT_TRUE(t.is_synthetic_dir("/srv0"));
  EXPECT_FALSE(t.is_synthetic_dir("/srv0/a"));
  EXPECT_TRUE(t.synthetic_children("/srv0").empty());
}
