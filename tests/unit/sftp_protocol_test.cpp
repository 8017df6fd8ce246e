// The SFTP codec: framing, field encoding, attribute records and status mapping.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cerrno>

#include "sftp/protocol.hpp"

using namespace skein::sftp;

TEST(SftpCodec, FramesRequestWithLengthTypeAndId) {
  std::string p = PacketWriter(FXP_LSTAT).str("/x").take();
  patch_request_id(p, 0x01020304);
  ASSERT_EQ(p.size(), 4u + 1 + 4 + 4 + 2);
  EXPECT_EQ(p.substr(0, 4), std::string("\0\0\0\x0b", 4));
  EXPECT_EQ(uint8_t(p[4]), FXP_LSTAT);
  EXPECT_EQ(p.substr(5, 4), "\x01\x02\x03\x04");
  EXPECT_EQ(p.substr(9), std::string("\0\0\0\x02/x", 6));
}

TEST(SftpCodec, TakePacketSplitsStreamAndWaitsForWholePackets) {
  std::string a = PacketWriter(FXP_STATUS).u32(FX_EOF).take();
  patch_request_id(a, 7);
  std::string b = PacketWriter(FXP_DATA).str("hello").take();
  patch_request_id(b, 8);
  std::string buf = a + b.substr(0, 6);
  uint8_t type;
  uint32_t id;
  std::string body;
  bool bad;
  ASSERT_TRUE(take_packet(buf, type, id, body, bad));
  EXPECT_EQ(type, FXP_STATUS);
  EXPECT_EQ(id, 7u);
  EXPECT_EQ(PacketReader(body).u32(), FX_EOF);
  EXPECT_FALSE(take_packet(buf, type, id, body, bad));
  EXPECT_FALSE(bad);
  buf += b.substr(6);
  ASSERT_TRUE(take_packet(buf, type, id, body, bad));
  EXPECT_EQ(id, 8u);
  EXPECT_EQ(PacketReader(body).str(), "hello");
  EXPECT_TRUE(buf.empty());
}

TEST(SftpCodec, RejectsAbsurdLength) {
  std::string buf("\x7f\0\0\0\x65", 5);
  uint8_t type;
  uint32_t id;
  std::string body;
  bool bad;
  EXPECT_FALSE(take_packet(buf, type, id, body, bad));
  EXPECT_TRUE(bad);
}

TEST(SftpCodec, AttrsRoundTripOnlyFlaggedFields) {
  Attrs a;
  a.flags = ATTR_SIZE | ATTR_PERMISSIONS | ATTR_ACMODTIME;
  a.size = 1ull << 40;
  a.permissions = 0100644;
  a.atime = 11;
  a.mtime = 22;
  a.uid = 999;  // not flagged: not sent
  std::string p = PacketWriter(FXP_ATTRS, false).attrs(a).take();
  PacketReader r(std::string_view(p).substr(5));
  auto back = r.attrs();
  ASSERT_TRUE(back);
  EXPECT_EQ(back->size, a.size);
  EXPECT_EQ(back->permissions, a.permissions);
  EXPECT_EQ(back->mtime, 22u);
  EXPECT_EQ(back->uid, 0u);
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(SftpCodec, TruncatedFieldsFail) {
  PacketReader r(
      std::string_view("\0\0\0\x09"
                       "abc",
                       7));
  EXPECT_FALSE(r.str());
}

TEST(SftpCodec, StatusCodesMapToErrno) {
  EXPECT_EQ(status_to_errno(FX_OK), 0);
  EXPECT_EQ(status_to_errno(FX_NO_SUCH_FILE), ENOENT);
  EXPECT_EQ(status_to_errno(FX_PERMISSION_DENIED), EACCES);
  EXPECT_EQ(status_to_errno(FX_OP_UNSUPPORTED), ENOTSUP);
  EXPECT_EQ(status_to_errno(FX_CONNECTION_LOST), EIO);
}

TEST(SftpCodec, OpenFlagsMapToPflags) {
  EXPECT_EQ(open_flags_to_pflags(O_RDONLY), FXF_READ);
  EXPECT_EQ(open_flags_to_pflags(O_WRONLY | O_CREAT | O_TRUNC), FXF_WRITE | FXF_CREAT | FXF_TRUNC);
  EXPECT_EQ(open_flags_to_pflags(O_RDWR | O_APPEND), FXF_READ | FXF_WRITE | FXF_APPEND);
  EXPECT_EQ(open_flags_to_pflags(O_WRONLY | O_CREAT | O_EXCL), FXF_WRITE | FXF_CREAT | FXF_EXCL);
}
