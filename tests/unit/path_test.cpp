// Virtual path normalisation is the first line of confinement: pin down what it accepts.
#include "skein/path.hpp"

#include <gtest/gtest.h>

using skein::normalize_virtual_path;

TEST(VirtualPath, NormalisesSlashesAndDots) {
  EXPECT_EQ(normalize_virtual_path("/"), "/");
  EXPECT_EQ(normalize_virtual_path("//a///b/"), "/a/b");
  EXPECT_EQ(normalize_virtual_path("/a/./b/../c"), "/a/c");
}

TEST(VirtualPath, RefusesToClimbAboveRoot) {
  EXPECT_FALSE(normalize_virtual_path("/.."));
  EXPECT_FALSE(normalize_virtual_path("/a/../../etc"));
}

TEST(VirtualPath, RefusesRelativeAndNulAndLongNames) {
  EXPECT_FALSE(normalize_virtual_path("a/b"));
  EXPECT_FALSE(normalize_virtual_path(""));
  EXPECT_FALSE(normalize_virtual_path(std::string("/a\0b", 4)));
  EXPECT_FALSE(normalize_virtual_path("/" + std::string(256, 'x')));
  EXPECT_TRUE(normalize_virtual_path("/" + std::string(255, 'x')));
  std::string longest;
  while (longest.size() + 4 <= skein::kMaxPathBytes) longest += "/abc";
  EXPECT_TRUE(normalize_virtual_path(longest));
  EXPECT_FALSE(normalize_virtual_path(longest + "/abcdefgh")) << "longer than PATH_MAX";
}

TEST(VirtualPath, JoinParentBase) {
  EXPECT_EQ(skein::join_path("/", "a"), "/a");
  EXPECT_EQ(skein::join_path("/a", "b"), "/a/b");
  EXPECT_EQ(skein::parent_path("/a/b"), "/a");
  EXPECT_EQ(skein::parent_path("/a"), "/");
  EXPECT_EQ(skein::base_name("/a/b"), "b");
}

TEST(VirtualPath, UnderIsComponentWise) {
  EXPECT_TRUE(skein::path_is_under("/a/b", "/a"));
  EXPECT_TRUE(skein::path_is_under("/a", "/a"));
  EXPECT_FALSE(skein::path_is_under("/ab", "/a"));
  EXPECT_TRUE(skein::path_is_under("/x", "/"));
}

TEST(VirtualPath, EntryNames) {
  EXPECT_TRUE(skein::is_valid_entry_name("file.txt"));
  EXPECT_FALSE(skein::is_valid_entry_name(".."));
  EXPECT_FALSE(skein::is_valid_entry_name("a/b"));
  EXPECT_FALSE(skein::is_valid_entry_name(""));
}
