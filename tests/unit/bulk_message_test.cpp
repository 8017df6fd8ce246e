// Hand-framed Data messages (proto/wire/bulk_message.hpp) against protobuf's own encoding.
#include "wire/bulk_message.hpp"

#include <grpcpp/support/slice.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "skein/v1/fs.pb.h"

namespace skein::wire {
namespace {

namespace pb = ::skein::v1;

std::string flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string s;
  for (auto& slice : slices) s.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  return s;
}

// The same bytes cut into slices of `size` (1: every byte its own slice).
grpc::ByteBuffer cut(const std::string& bytes, std::size_t size) {
  std::vector<grpc::Slice> slices;
  for (std::size_t at = 0; at < bytes.size(); at += size)
    slices.emplace_back(bytes.data() + at, std::min(size, bytes.size() - at));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string pattern(std::size_t n) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 131 + i / 977);
  return s;
}

pb::WriteRequest head() {
  pb::WriteRequest w;
  w.mutable_file()->set_ns("scratch");
  w.mutable_file()->set_path("/a/b");
  w.mutable_file()->set_handle(42);
  w.set_offset(uint64_t{5} << 33);
  return w;
}

TEST(BulkMessage, SerializedIsWhatProtobufParses) {
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{16383}, std::size_t{16384},
                           std::size_t{1} << 20}) {
    const std::string data = pattern(size);
    pb::WriteRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(
        flatten(serialize_with_bytes(head(), pb::WriteRequest::kDataFieldNumber, data))))
        << size;
    EXPECT_EQ(parsed.file().path(), "/a/b");
    EXPECT_EQ(parsed.file().handle(), 42u);
    EXPECT_EQ(parsed.offset(), uint64_t{5} << 33);
    EXPECT_EQ(parsed.data(), data) << size;
  }
}

TEST(BulkMessage, BytesInPiecesAreSentFromWhereTheyAreAndKeptAliveUntilSent) {
  for (std::size_t size : {std::size_t{100}, std::size_t{300000}}) {
    auto owner = std::make_shared<const std::string>(pattern(size));
    std::vector<std::string_view> pieces;
    for (std::size_t at = 0; at < size; at += 70000)
      pieces.push_back(std::string_view(*owner).substr(at, 70000));
    std::weak_ptr<const std::string> watch = owner;
    grpc::ByteBuffer message;
    {
      SharedBytes bytes(pieces, owner);
      owner.reset();
      pb::ReadReply head;
      head.set_error(0);
      message = serialize_with_bytes(head, pb::ReadReply::kDataFieldNumber, bytes);
    }
    pb::ReadReply parsed;
    ASSERT_TRUE(parsed.ParseFromString(flatten(message))) << size;
    EXPECT_EQ(parsed.data(), pattern(size)) << size;
    if (size >= 16384) {
      std::vector<grpc::Slice> slices;
      ASSERT_TRUE(message.Dump(&slices).ok());
      EXPECT_EQ(slices.size(), 1 + pieces.size());  // the head, then each piece as it was
      EXPECT_FALSE(watch.expired());                // the slices hold the owner
    }
    message.Clear();
    EXPECT_TRUE(watch.expired()) << size;
  }
}

TEST(BulkMessage, ParsesProtobufEncodingAcrossAnySlicing) {
  pb::ReadReply reply;
  reply.set_error(0);
  reply.set_data(pattern(300000));
  const std::string encoded = reply.SerializeAsString();
  for (std::size_t slice :
       {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{65536}, encoded.size()}) {
    pb::ReadReply rest;
    SharedBytes data;
    ASSERT_TRUE(parse_with_bytes(cut(encoded, slice), pb::ReadReply::kDataFieldNumber, rest, data))
        << slice;
    EXPECT_EQ(data.size(), reply.data().size());
    EXPECT_EQ(data.flatten(), reply.data()) << slice;
    EXPECT_TRUE(rest.data().empty());
  }
}

TEST(BulkMessage, OtherFieldsGoToTheHead) {
  pb::WriteRequest w = head();
  w.set_data(pattern(70000));
  SharedBytes data;
  pb::WriteRequest rest;
  ASSERT_TRUE(parse_with_bytes(cut(w.SerializeAsString(), 1000), pb::WriteRequest::kDataFieldNumber,
                               rest, data));
  EXPECT_EQ(rest.file().ns(), "scratch");
  EXPECT_EQ(rest.offset(), uint64_t{5} << 33);
  EXPECT_EQ(data.flatten(), w.data());

  pb::ReadReply error;
  error.set_error(28);  // no data field at all
  ASSERT_TRUE(parse_with_bytes(cut(error.SerializeAsString(), 1), pb::ReadReply::kDataFieldNumber,
                               error, data));
  EXPECT_EQ(error.error(), 28);
  EXPECT_TRUE(data.empty());
}

TEST(BulkMessage, TruncatedMessageIsRefused) {
  pb::ReadReply reply;
  reply.set_data(pattern(5000));
  std::string encoded = reply.SerializeAsString();
  encoded.resize(encoded.size() - 1);
  pb::ReadReply rest;
  SharedBytes data;
  EXPECT_FALSE(parse_with_bytes(cut(encoded, 512), pb::ReadReply::kDataFieldNumber, rest, data));
  EXPECT_FALSE(parse_with_bytes(cut(std::string("\x12\xff", 2), 1), pb::ReadReply::kDataFieldNumber,
                                rest, data));
}

TEST(SharedBytes, ViewsAcrossPieces) {
  auto whole = std::make_shared<const std::string>("abcdefghij");
  std::string_view all(*whole);
  SharedBytes b({all.substr(0, 3), all.substr(3, 1), all.substr(4, 6)}, whole);
  ASSERT_EQ(b.size(), 10u);
  std::vector<std::string_view> out;
  EXPECT_EQ(b.view(2, 5, out), 5u);
  std::string got;
  for (auto p : out) got += p;
  EXPECT_EQ(got, "cdefg");
  out.clear();
  EXPECT_EQ(b.view(8, 100, out), 2u);
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], "ij");
  out.clear();
  EXPECT_EQ(b.view(10, 1, out), 0u);
  EXPECT_EQ(b.flatten(), "abcdefghij");
}

}  // namespace
}  // namespace skein::wire
