// The binary packet protocol of RFC 4253 section 6: frames payloads into packets and cuts received
// bytes into payloads, in the clear (the first key exchange) or with AES-GCM as OpenSSH frames it
// (aes128-gcm@openssh.com, aes256-gcm@openssh.com: the length in the clear as associated data,
// a 16-byte tag). Pure logic over buffers, no I/O, so it is unit-tested on its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ssh/crypto.hpp"

namespace skein::ssh {

// The largest packet either side accepts: OpenSSH's limit (PACKET_MAX_SIZE) for a whole packet.
constexpr size_t kMaxPacket = 256 * 1024;

// Bytes for the socket. It grows without zeroing what it adds (a std::string would write every
// byte of a packet twice: zeros, then the ciphertext).
class OutputBuffer {
 public:
  // `n` more bytes at the end, not initialised; where they start.
  char* extend(size_t n);
  void append(std::string_view s);
  void clear() { size_ = 0; }
  const char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_.get(), size_}; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_ = 0, capacity_ = 0;
};

class PacketSealer {
 public:
  // Appends one packet whose payload is `head` followed by `pieces` to `out`. False only if
  // libcrypto failed.
  bool seal(OutputBuffer& out, std::string_view head,
            std::span<const std::string_view> pieces = {});
  // From now on packets are encrypted with this key and IV (after NEWKEYS).
  bool set_gcm(std::string_view key, std::string_view iv);
  bool encrypted() const { return bool(gcm_); }
  uint32_t sequence() const { return sequence_; }
  void reset_sequence() { sequence_ = 0; }

 private:
  std::unique_ptr<GcmCipher> gcm_;
  uint32_t sequence_ = 0;
};

// Where open() may put the data of a CHANNEL_DATA packet instead of decrypting it in place: the
// reader's own buffer, so that the bytes are written once, by the decryption.
struct DataTarget {
  char* dst = nullptr;
  size_t room = 0;
  size_t delivered = 0;  // set by open(): leading data bytes now at dst (the payload has garbage)
};

class PacketOpener {
 public:
  enum class Status { packet, need_more, bad };
  // Looks at the `avail` bytes at `data`. With a whole packet there: decrypts it in place, points
  // `payload` at its payload and sets `consumed` to its size on the wire. `need_more`: a packet
  // has begun but is not all there (`consumed` then says how many bytes it needs in all, once
  // its length is known). `bad`: a malformed length or padding, or a tag that does not match.
  // With a `target` that has room, an encrypted CHANNEL_DATA packet's data goes there, up to its
  // room; target->delivered says how much.
  Status open(char* data, size_t avail, std::string_view& payload, size_t& consumed,
              DataTarget* target = nullptr);
  bool set_gcm(std::string_view key, std::string_view iv);
  bool encrypted() const { return bool(gcm_); }
  uint32_t sequence() const { return sequence_; }
  void reset_sequence() { sequence_ = 0; }

 private:
  bool open_routed(char* data, uint32_t len, DataTarget& target);
  std::unique_ptr<GcmCipher> gcm_;
  uint32_t sequence_ = 0;
};

}  // namespace skein::ssh
