// Fill tags (client/mount/fill_tag.hpp): what a tag binds (key of namespace and token, path,
// version, range, time made, bytes), and that it is the same however the bytes are fed.
#include "fill_tag.hpp"

#include <gtest/gtest.h>

#include <string>

namespace skein::client {
namespace {

std::string tag_of(const FillTag::Key& key, const std::string& path, int64_t mtime, uint64_t size,
                   uint64_t offset, const std::string& bytes, int64_t made = 1764800000) {
  FillTag t(key, path, mtime, size, offset, bytes.size(), made);
  t.add(bytes.data(), bytes.size());
  return t.tag();
}

TEST(FillTagTest, ATagBindsTheBytesThePathTheVersionAndTheRange) {
  const FillTag::Key key = FillTag::key_for("default", "namespace token");
  EXPECT_EQ(key, FillTag::key_for("default", "namespace token"));
  EXPECT_NE(key, FillTag::key_for("default", "another token"));
  const std::string bytes = "chunk of a file";
  const std::string tag = tag_of(key, "/srv0/f", 1000, 4096, 0, bytes);
  EXPECT_EQ(tag.size(), FillTag::kSize);
  EXPECT_EQ(tag.substr(0, 11), "1764800000.");
  EXPECT_EQ(FillTag::made_of(tag), 1764800000);
  EXPECT_FALSE(FillTag::made_of("x" + tag.substr(1)));
  EXPECT_FALSE(FillTag::made_of(tag.substr(0, 74)));
  // Another namespace with the same token, another time: other tags.
  EXPECT_NE(key, FillTag::key_for("job-7", "namespace token"));
  EXPECT_NE(tag.substr(11), tag_of(key, "/srv0/f", 1000, 4096, 0, bytes, 1764800001).substr(11));
  EXPECT_EQ(tag, tag_of(key, "/srv0/f", 1000, 4096, 0, bytes));
  EXPECT_NE(tag, tag_of(key, "/srv0/f", 1000, 4096, 0, "chunk of a filE"));
  EXPECT_NE(tag, tag_of(key, "/srv0/g", 1000, 4096, 0, bytes));
  EXPECT_NE(tag, tag_of(key, "/srv0/f", 1001, 4096, 0, bytes));
  EXPECT_NE(tag, tag_of(key, "/srv0/f", 1000, 4097, 0, bytes));
  EXPECT_NE(tag, tag_of(key, "/srv0/f", 1000, 4096, 1, bytes));
  EXPECT_NE(tag,
            tag_of(FillTag::key_for("default", "another token"), "/srv0/f", 1000, 4096, 0, bytes));
  // A path cannot borrow the numbers' place: "/a" with mtime 10 is not "/a\01" with mtime 0.
  EXPECT_NE(tag_of(key, "/a", 10, 1, 0, "x"),
            tag_of(key, std::string("/a\0", 3) + "1", 0, 1, 0, "x"));
  // Fed in pieces: the same tag.
  FillTag pieces(key, "/srv0/f", 1000, 4096, 0, bytes.size(), 1764800000);
  pieces.add(bytes.data(), 5);
  pieces.add(bytes.data() + 5, bytes.size() - 5);
  EXPECT_EQ(pieces.tag(), tag);
  EXPECT_TRUE(same_tag(tag, tag));
  EXPECT_FALSE(same_tag(tag, tag.substr(0, 74) + (tag.back() == '0' ? "1" : "0")));
  EXPECT_FALSE(same_tag(tag, tag.substr(0, 74)));
}

// A tag made within the second of the file's mtime, or the second after it, cannot tell that
// version from a rewrite of the same size (mtimes are kept to the second), so it is not settled.
TEST(FillTagTest, ATagTellsAVersionApartOnlyTwoSecondsAfterItsMtimesSecond) {
  constexpr int64_t kNs = 1000000000;
  EXPECT_EQ(FillTag::kSettled.count(), 2);
  for (const int64_t mtime : {int64_t{1764800000} * kNs, int64_t{1764800000} * kNs + kNs - 1}) {
    EXPECT_FALSE(FillTag::settled(1764799999, mtime)) << mtime;
    EXPECT_FALSE(FillTag::settled(1764800000, mtime)) << mtime;
    EXPECT_FALSE(FillTag::settled(1764800001, mtime)) << mtime;
    EXPECT_TRUE(FillTag::settled(1764800002, mtime)) << mtime;
    EXPECT_TRUE(FillTag::settled(1764803600, mtime)) << mtime;
  }
  // Before 1970 the second is the one below: -0.5 s lies in second -1.
  EXPECT_FALSE(FillTag::settled(0, -kNs / 2));
  EXPECT_TRUE(FillTag::settled(1, -kNs / 2));
  EXPECT_TRUE(FillTag::settled(0, -2 * kNs));
  EXPECT_FALSE(FillTag::settled(-1, -2 * kNs));
}

}  // namespace
}  // namespace skein::client
