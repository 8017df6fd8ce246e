// The SFTP codec: framing, field encoding, attribute records and status mapping.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "sftp/protocol.hpp"

using namespace skein::sftp;

TEST(SftpCodec, FramesRequestWithLengthTypeAndId) {
  std::string p = PacketWriter(FXP_LSTAT).str("/x").take();
  patch_request_id(p, 0x01020304);
  ASSERT_EQ(p.size(), 4u + 1 + 4 + 4 + 2);
  EXPECT_EQ(p.substr(0, 4), std::string("\0\0\0\x0b", 4));
  EXPECT_EQ(static_cast<uint8_t>(p[4]), FXP_LSTAT);
  EXPECT_EQ(p.substr(5, 4), "\x01\x02\x03\x04");
  EXPECT_EQ(p.substr(9), std::string("\0\0\0\x02/x", 6));
}

// Feeds `stream` to an assembler in reads of at most `step` bytes (as libssh hands them out) and
// returns every reply taken, in order.
std::vector<std::pair<uint32_t, Reply>> assemble(const std::string& stream, size_t step,
                                                 bool* bad_out = nullptr) {
  PacketAssembler in;
  std::vector<std::pair<uint32_t, Reply>> out;
  size_t at = 0;
  bool bad = false;
  while (at < stream.size() && !bad) {
    auto space = in.want();
    size_t n = std::min({step, space.size, stream.size() - at});
    memcpy(space.data, stream.data() + at, n);
    at += n;
    in.got(n);
    Reply r;
    uint32_t id;
    while (in.take(r, id, bad)) out.emplace_back(id, std::move(r));
  }
  if (bad_out) *bad_out = bad;
  return out;
}

TEST(SftpCodec, AssemblerSplitsStreamAtAnyReadSize) {
  std::string stream;
  std::vector<std::string> datas;
  // Small and large replies mixed: status, data of every size class around the thresholds.
  for (size_t size : {size_t{0}, size_t{5}, size_t{16000}, size_t{16384}, size_t{70000},
                      size_t{261120}, size_t{3}, size_t{65536}}) {
    std::string data(size, '\0');
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 7 + size);
    std::string a = PacketWriter(FXP_STATUS).u32(FX_EOF).take();
    patch_request_id(a, static_cast<uint32_t>(100 + datas.size()));
    std::string b = PacketWriter(FXP_DATA).str(data).take();
    patch_request_id(b, static_cast<uint32_t>(200 + datas.size()));
    stream += a + b;
    datas.push_back(data);
  }
  for (size_t step : {size_t{1}, size_t{7}, size_t{4096}, size_t{32768}, size_t{1} << 20}) {
    auto got = assemble(stream, step);
    ASSERT_EQ(got.size(), 2 * datas.size()) << step;
    for (size_t k = 0; k < datas.size(); ++k) {
      EXPECT_EQ(got[2 * k].first, 100 + k);
      EXPECT_EQ(got[2 * k].second.type, FXP_STATUS);
      EXPECT_EQ(PacketReader(got[2 * k].second.body).u32(), FX_EOF);
      EXPECT_EQ(got[2 * k + 1].first, 200 + k);
      EXPECT_EQ(got[2 * k + 1].second.type, FXP_DATA);
      EXPECT_EQ(PacketReader(got[2 * k + 1].second.body).str(), datas[k]) << step << " " << k;
    }
  }
}

TEST(SftpCodec, RequestWithTailIsTheSamePacketAsACopy) {
  const std::string data(70000, 'x');
  std::string whole = PacketWriter(FXP_WRITE).str("h1").u64(1 << 20).str(data).take();
  Request r = PacketWriter(FXP_WRITE).str("h1").u64(1 << 20).take_with_str({data});
  EXPECT_EQ(r.type(), FXP_WRITE);
  ASSERT_EQ(r.tail.size(), 1u);
  EXPECT_EQ(r.tail[0].data(), data.data());  // not copied
  EXPECT_EQ(r.size(), whole.size());
  EXPECT_EQ(r.framed + std::string(r.tail[0]), whole);
  // The same data in pieces.
  std::string_view all(data);
  Request p = PacketWriter(FXP_WRITE).str("h1").u64(1 << 20).take_with_str(
      {all.substr(0, 10), all.substr(10, 0), all.substr(10)});
  std::string joined = p.framed;
  for (auto piece : p.tail) joined += piece;
  EXPECT_EQ(joined, whole);
}

TEST(SftpCodec, AssemblerWaitsForWholePackets) {
  std::string a = PacketWriter(FXP_DATA).str("hello").take();
  patch_request_id(a, 8);
  EXPECT_TRUE(assemble(a.substr(0, a.size() - 1), 1).empty());
  auto got = assemble(a, 3);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, 8u);
}

TEST(SftpCodec, RejectsAbsurdLength) {
  bool bad = false;
  EXPECT_TRUE(assemble(std::string("\x7f\0\0\0\x65", 5), 5, &bad).empty());
  EXPECT_TRUE(bad);
  EXPECT_TRUE(assemble(std::string("\0\0\0\0\x65", 5), 5, &bad).empty());
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
