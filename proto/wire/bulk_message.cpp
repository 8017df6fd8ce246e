#include "wire/bulk_message.hpp"

#include <google/protobuf/message_lite.h>
#include <grpcpp/support/slice.h>

#include <memory>
#include <vector>

namespace skein::wire {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Copying the contents costs less than a slice of their own below this size.
constexpr std::size_t kCopyBelow = 16 << 10;

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads bytes across the slices of a message.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : slices_(slices) { skip_empty(); }

  bool at_end() const { return index_ == slices_.size(); }

  bool byte(uint8_t& b) {
    if (at_end()) return false;
    b = slices_[index_].begin()[offset_];
    advance(1);
    return true;
  }

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!byte(b)) return false;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }

  // Hands the next `n` bytes to `sink(const char*, size_t)`, piece by piece.
  template <typename Sink>
  bool take(uint64_t n, Sink&& sink) {
    while (n > 0) {
      if (at_end()) return false;
      const grpc::Slice& s = slices_[index_];
      const std::size_t part = std::min<uint64_t>(n, s.size() - offset_);
      sink(reinterpret_cast<const char*>(s.begin()) + offset_, part);
      advance(part);
      n -= part;
    }
    return true;
  }

 private:
  void advance(std::size_t n) {
    offset_ += n;
    if (offset_ == slices_[index_].size()) {
      ++index_;
      offset_ = 0;
      skip_empty();
    }
  }
  void skip_empty() {
    while (index_ < slices_.size() && slices_[index_].size() == 0) ++index_;
  }

  const std::vector<grpc::Slice>& slices_;
  std::size_t index_ = 0;
  std::size_t offset_ = 0;
};

// `head` serialized, then the tag and length of a bytes field `field` of `size` bytes: all of a
// message but the bytes themselves.
std::string head_and_field_prefix(const google::protobuf::MessageLite& head, int field,
                                  std::size_t size) {
  std::string prefix;
  head.AppendToString(&prefix);
  append_varint(prefix, (static_cast<uint64_t>(field) << 3) | kLengthDelimited);
  append_varint(prefix, size);
  return prefix;
}

}  // namespace

grpc::ByteBuffer serialize_with_bytes(const google::protobuf::MessageLite& head, int field,
                                      std::string data) {
  std::string prefix = head_and_field_prefix(head, field, data.size());
  if (data.size() < kCopyBelow) {
    prefix += data;
    grpc::Slice one(prefix);
    return grpc::ByteBuffer(&one, 1);
  }
  auto* owned = new std::string(std::move(data));
  grpc::Slice slices[2] = {grpc::Slice(prefix),
                           grpc::Slice(
                               owned->data(), owned->size(),
                               [](void* p) { delete static_cast<std::string*>(p); }, owned)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::ByteBuffer serialize_with_bytes(const google::protobuf::MessageLite& head, int field,
                                      const SharedBytes& data) {
  if (data.size() < kCopyBelow || !data.owner()) {
    return serialize_with_bytes(head, field, data.flatten());
  }
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + data.pieces().size());
  slices.emplace_back(head_and_field_prefix(head, field, data.size()));
  for (std::string_view piece : data.pieces()) {
    auto* keep = new std::shared_ptr<const void>(data.owner());
    slices.emplace_back(
        const_cast<char*>(piece.data()), piece.size(),
        [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, keep);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

bool parse_with_bytes(const grpc::ByteBuffer& message, int field,
                      google::protobuf::MessageLite& head, SharedBytes& bytes) {
  auto slices = std::make_shared<std::vector<grpc::Slice>>();
  if (!message.Dump(slices.get()).ok()) return false;
  Cursor in(*slices);
  std::string rest;  // the other fields, re-encoded as they came
  std::vector<std::string_view> views;
  bool found = false;
  auto copy = [&](const char* p, std::size_t n) { rest.append(p, n); };
  while (!in.at_end()) {
    uint64_t tag, v;
    if (!in.varint(tag)) return false;
    const auto type = static_cast<uint32_t>(tag & 7);
    if (tag >> 3 == static_cast<uint64_t>(field) && type == kLengthDelimited) {
      if (!in.varint(v)) return false;
      views.clear();
      if (!in.take(v, [&](const char* p, std::size_t n) { views.emplace_back(p, n); }))
        return false;
      found = true;
      continue;
    }
    append_varint(rest, tag);
    switch (type) {
      case kVarint:
        if (!in.varint(v)) return false;
        append_varint(rest, v);
        break;
      case kFixed64:
        if (!in.take(8, copy)) return false;
        break;
      case kFixed32:
        if (!in.take(4, copy)) return false;
        break;
      case kLengthDelimited:
        if (!in.varint(v)) return false;
        append_varint(rest, v);
        if (!in.take(v, copy)) return false;
        break;
      default:  // groups: not in this contract
        return false;
    }
  }
  if (!head.ParseFromString(rest)) return false;
  bytes = found ? SharedBytes(std::move(views), std::move(slices)) : SharedBytes();
  return true;
}

}  // namespace skein::wire
