// SFTP v3 codec; see protocol.hpp.
#include "sftp/protocol.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

namespace skein::sftp {
namespace {
constexpr uint32_t kMaxPacket = 4u * 1024 * 1024;

void set_u32(char* at, uint32_t v) {
  char c[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
               static_cast<char>(v)};
  std::memcpy(at, c, 4);
}
void put_u32(std::string& b, uint32_t v) {
  b.append(4, '\0');
  set_u32(b.data() + b.size() - 4, v);
}
uint32_t get_u32(const char* p) {
  auto u = reinterpret_cast<const unsigned char*>(p);
  return static_cast<uint32_t>(u[0]) << 24 | static_cast<uint32_t>(u[1]) << 16 |
         static_cast<uint32_t>(u[2]) << 8 | static_cast<uint32_t>(u[3]);
}
}  // namespace

PacketWriter::PacketWriter(uint8_t type, bool with_id) {
  buf_.reserve(64);
  put_u32(buf_, 0);  // length, filled by take()
  buf_.push_back(static_cast<char>(type));
  if (with_id) put_u32(buf_, 0);
}

PacketWriter& PacketWriter::u8(uint8_t v) {
  buf_.push_back(static_cast<char>(v));
  return *this;
}
PacketWriter& PacketWriter::u32(uint32_t v) {
  put_u32(buf_, v);
  return *this;
}
PacketWriter& PacketWriter::u64(uint64_t v) {
  put_u32(buf_, static_cast<uint32_t>(v >> 32));
  put_u32(buf_, static_cast<uint32_t>(v));
  return *this;
}
PacketWriter& PacketWriter::str(std::string_view s) {
  put_u32(buf_, static_cast<uint32_t>(s.size()));
  buf_.append(s);
  return *this;
}
PacketWriter& PacketWriter::attrs(const Attrs& a) {
  u32(a.flags & ~static_cast<uint32_t>(ATTR_EXTENDED));
  if (a.flags & ATTR_SIZE) u64(a.size);
  if (a.flags & ATTR_UIDGID) u32(a.uid).u32(a.gid);
  if (a.flags & ATTR_PERMISSIONS) u32(a.permissions);
  if (a.flags & ATTR_ACMODTIME) u32(a.atime).u32(a.mtime);
  return *this;
}
std::string PacketWriter::take() {
  set_u32(buf_.data(), static_cast<uint32_t>(buf_.size() - 4));
  return std::move(buf_);
}

Request PacketWriter::take_with_str(std::vector<std::string_view> pieces) {
  size_t n = 0;
  for (auto piece : pieces) n += piece.size();
  put_u32(buf_, static_cast<uint32_t>(n));
  set_u32(buf_.data(), static_cast<uint32_t>(buf_.size() - 4 + n));
  return Request(std::move(buf_), std::move(pieces));
}

void patch_request_id(std::string& framed, uint32_t id) { set_u32(framed.data() + 5, id); }

std::optional<uint8_t> PacketReader::u8() {
  if (remaining() < 1) return std::nullopt;
  return static_cast<uint8_t>(data_[pos_++]);
}
std::optional<uint32_t> PacketReader::u32() {
  if (remaining() < 4) return std::nullopt;
  uint32_t v = get_u32(data_.data() + pos_);
  pos_ += 4;
  return v;
}
std::optional<uint64_t> PacketReader::u64() {
  auto hi = u32();
  if (!hi) return std::nullopt;
  auto lo = u32();
  if (!lo) return std::nullopt;
  return uint64_t(*hi) << 32 | *lo;
}
std::optional<std::string_view> PacketReader::str() {
  auto n = u32();
  if (!n || remaining() < *n) return std::nullopt;
  auto s = data_.substr(pos_, *n);
  pos_ += *n;
  return s;
}
std::optional<Attrs> PacketReader::attrs() {
  Attrs a;
  auto f = u32();
  if (!f) return std::nullopt;
  a.flags = *f;
  if (a.flags & ATTR_SIZE) {
    auto v = u64();
    if (!v) return std::nullopt;
    a.size = *v;
  }
  if (a.flags & ATTR_UIDGID) {
    auto u = u32(), g = u32();
    if (!u || !g) return std::nullopt;
    a.uid = *u;
    a.gid = *g;
  }
  if (a.flags & ATTR_PERMISSIONS) {
    auto p = u32();
    if (!p) return std::nullopt;
    a.permissions = *p;
  }
  if (a.flags & ATTR_ACMODTIME) {
    auto at = u32(), mt = u32();
    if (!at || !mt) return std::nullopt;
    a.atime = *at;
    a.mtime = *mt;
  }
  if (a.flags & ATTR_EXTENDED) {
    auto n = u32();
    if (!n) return std::nullopt;
    for (uint32_t i = 0; i < *n; ++i) {
      if (!str() || !str()) return std::nullopt;
    }
  }
  return a;
}

Body::Body(size_t n) : data_(n ? std::make_unique_for_overwrite<char[]>(n) : nullptr), size_(n) {}

Body::Body(std::string_view s) : Body(s.size()) {
  if (!s.empty()) memcpy(data_.get(), s.data(), s.size());
}

PacketAssembler::PacketAssembler() : stage_(std::make_unique_for_overwrite<char[]>(kStage)) {}

PacketAssembler::Space PacketAssembler::want() {
  if (filling_) return {big_.body.data() + big_filled_, big_.body.size() - big_filled_};
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (kStage - end_ < kDirect) {  // a small reply must still fit: move the rest down
    memmove(stage_.get(), stage_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  return {stage_.get() + end_, kStage - end_};
}

void PacketAssembler::got(size_t n) {
  if (filling_)
    big_filled_ += n;
  else
    end_ += n;
}

bool PacketAssembler::take(Reply& reply, uint32_t& id, bool& bad) {
  bad = false;
  if (filling_) {
    if (big_filled_ < big_.body.size()) return false;
    filling_ = false;
    reply = std::move(big_);
    id = big_id_;
    return true;
  }
  const char* p = stage_.get() + begin_;
  const size_t avail = end_ - begin_;
  if (avail < 5) return false;
  const uint32_t len = get_u32(p);
  const uint8_t type = static_cast<uint8_t>(p[4]);
  const size_t header = type == FXP_VERSION ? 5 : 9;
  if (len < 1 || len > kMaxPacket || 4 + static_cast<size_t>(len) < header) {
    bad = true;
    return false;
  }
  if (avail < header) return false;
  const uint32_t packet_id = type == FXP_VERSION ? 0 : get_u32(p + 5);
  const size_t total = 4 + static_cast<size_t>(len);
  if (avail >= total) {
    reply.type = type;
    reply.body = Body(std::string_view(p + header, total - header));
    id = packet_id;
    begin_ += total;
    return true;
  }
  if (total <= kDirect) return false;  // it fits the stage: wait for the rest there
  // Large: give it its own body, move what is staged into it, and read the rest straight in.
  big_.type = type;
  big_.body = Body(total - header);
  big_id_ = packet_id;
  big_filled_ = avail - header;
  memcpy(big_.body.data(), p + header, big_filled_);
  begin_ = end_ = 0;
  filling_ = true;
  return false;
}

int status_to_errno(uint32_t code) {
  switch (code) {
    case FX_OK:
      return 0;
    case FX_EOF:
      return ENODATA;
    case FX_NO_SUCH_FILE:
      return ENOENT;
    case FX_PERMISSION_DENIED:
      return EACCES;
    case FX_BAD_MESSAGE:
      return EINVAL;
    case FX_NO_CONNECTION:
    case FX_CONNECTION_LOST:
      return EIO;
    case FX_OP_UNSUPPORTED:
      return ENOTSUP;
    case FX_FAILURE:
    default:
      return EIO;
  }
}

uint32_t open_flags_to_pflags(int flags) {
  uint32_t p = 0;
  switch (flags & O_ACCMODE) {
    case O_RDONLY:
      p |= FXF_READ;
      break;
    case O_WRONLY:
      p |= FXF_WRITE;
      break;
    default:
      p |= FXF_READ | FXF_WRITE;
      break;
  }
  if (flags & O_APPEND) p |= FXF_APPEND;
  if (flags & O_CREAT) p |= FXF_CREAT;
  if (flags & O_TRUNC) p |= FXF_TRUNC;
  if (flags & O_EXCL) p |= FXF_EXCL;
  return p;
}

}  // namespace skein::sftp
