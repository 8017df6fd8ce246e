// SSH binary packets; see packet_codec.hpp.
#include "ssh/packet_codec.hpp"

#include <algorithm>
#include <cstring>

#include "ssh/wire.hpp"

namespace skein::ssh {
namespace {
constexpr size_t kClearBlock = 8;
constexpr size_t kGcmBlock = 16;
}  // namespace

bool PacketSealer::set_gcm(std::string_view key, std::string_view iv) {
  auto c = std::make_unique<GcmCipher>(true, key, iv);
  if (!c->ok()) return false;
  gcm_ = std::move(c);
  return true;
}

char* OutputBuffer::extend(size_t n) {
  if (size_ + n > capacity_) {
    const size_t capacity = std::max(size_ + n, std::max<size_t>(2 * capacity_, 64 * 1024));
    auto bigger = std::make_unique_for_overwrite<char[]>(capacity);
    if (size_) std::memcpy(bigger.get(), data_.get(), size_);
    data_ = std::move(bigger);
    capacity_ = capacity;
  }
  char* at = data_.get() + size_;
  size_ += n;
  return at;
}

void OutputBuffer::append(std::string_view s) {
  if (!s.empty()) std::memcpy(extend(s.size()), s.data(), s.size());
}

bool PacketSealer::seal(OutputBuffer& out, std::string_view head,
                        std::span<const std::string_view> pieces) {
  size_t payload = head.size();
  for (auto p : pieces) payload += p.size();
  // Padding: at least 4 bytes, so that what is encrypted is a multiple of the block size; under
  // GCM the 4 length bytes are not encrypted and do not count.
  const size_t block = gcm_ ? kGcmBlock : kClearBlock;
  const size_t counted = (gcm_ ? 0 : 4) + 1 + payload;
  size_t pad = block - counted % block;
  if (pad < 4) pad += block;
  const uint32_t packet_length = uint32_t(1 + payload + pad);

  const size_t tag = gcm_ ? GcmCipher::kTagSize : 0;
  char* p = out.extend(4 + packet_length + tag);
  put_u32(p, packet_length);
  p[4] = char(pad);
  ++sequence_;
  if (!gcm_) {
    char* q = p + 5;
    std::memcpy(q, head.data(), head.size());
    q += head.size();
    for (auto piece : pieces) {
      std::memcpy(q, piece.data(), piece.size());
      q += piece.size();
    }
    random_bytes(q, pad);  // only the key exchange's few packets go in the clear
    return true;
  }
  // Encrypted from where the bytes are: the padding-length byte with the head (copied next to
  // it, encrypted in place), the pieces, then zero padding; each byte written once.
  static const char zeros[2 * kGcmBlock] = {};
  std::memcpy(p + 5, head.data(), head.size());
  std::string_view stack_parts[16];
  std::unique_ptr<std::string_view[]> heap_parts;
  const size_t nparts = 1 + pieces.size() + 1;
  std::string_view* parts = stack_parts;
  if (nparts > std::size(stack_parts)) {
    heap_parts = std::make_unique<std::string_view[]>(nparts);
    parts = heap_parts.get();
  }
  parts[0] = std::string_view(p + 4, 1 + head.size());
  for (size_t i = 0; i < pieces.size(); ++i) parts[1 + i] = pieces[i];
  parts[nparts - 1] = std::string_view(zeros, pad);
  const std::string_view aad(p, 4);
  return gcm_->seal(aad, std::span(parts, nparts), p + 4, p + 4 + packet_length);
}

bool PacketOpener::open_routed(char* data, uint32_t len, DataTarget& target) {
  // Encrypted: padding length (1), message number (1), recipient channel (4), data length (4),
  // data, padding. The first 10 bytes say whether and where the data goes.
  constexpr size_t kHead = 10;
  char* enc = data + 4;
  if (!gcm_->begin(std::string_view(data, 4)) || !gcm_->update(enc, enc, kHead)) return false;
  size_t direct = 0;
  if (uint8_t(enc[1]) == 94 /* CHANNEL_DATA */) {
    const size_t pad = uint8_t(enc[0]);
    const size_t data_len = get_u32(enc + 6);
    if (kHead + data_len + pad == len) direct = std::min(data_len, target.room);
  }
  if (!gcm_->update(enc + kHead, target.dst, direct) ||
      !gcm_->update(enc + kHead + direct, enc + kHead + direct, len - kHead - direct) ||
      !gcm_->finish(data + 4 + len)) {
    return false;
  }
  target.delivered = direct;
  return true;
}

bool PacketOpener::set_gcm(std::string_view key, std::string_view iv) {
  auto c = std::make_unique<GcmCipher>(false, key, iv);
  if (!c->ok()) return false;
  gcm_ = std::move(c);
  return true;
}

PacketOpener::Status PacketOpener::open(char* data, size_t avail, std::string_view& payload,
                                        size_t& consumed, DataTarget* target) {
  consumed = 0;
  if (target) target->delivered = 0;
  if (avail < 4) return Status::need_more;
  const uint32_t len = get_u32(data);
  const size_t block = gcm_ ? kGcmBlock : kClearBlock;
  const size_t counted = gcm_ ? len : len + 4;
  if (len < 5 || len > kMaxPacket || counted % block != 0) return Status::bad;
  const size_t tag = gcm_ ? GcmCipher::kTagSize : 0;
  const size_t total = 4 + size_t(len) + tag;
  consumed = total;
  if (avail < total) return Status::need_more;
  if (gcm_ && target && target->room > 0 && len >= 16) {
    if (!open_routed(data, len, *target)) return Status::bad;
  } else if (gcm_ && !gcm_->open(std::string_view(data, 4), data + 4, len, data + 4 + len)) {
    return Status::bad;
  }
  const uint8_t pad = uint8_t(data[4]);
  if (pad < 4 || size_t(pad) + 1 >= len) return Status::bad;
  payload = std::string_view(data + 5, len - 1 - pad);
  ++sequence_;
  return Status::packet;
}

}  // namespace skein::ssh
