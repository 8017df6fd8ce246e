// The few OpenSSL (libcrypto) primitives the SSH transport uses, behind small RAII types: hashes,
// HMAC-SHA1 (hashed known_hosts names), random bytes, X25519 key agreement, and AES-GCM in the
// framing of aes128-gcm@openssh.com / aes256-gcm@openssh.com.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

struct evp_pkey_st;
struct evp_cipher_ctx_st;
struct evp_md_st;

namespace skein::ssh {

struct PkeyFree {
  void operator()(evp_pkey_st* p) const;
};
using Pkey = std::unique_ptr<evp_pkey_st, PkeyFree>;

enum class Hash { sha1, sha256, sha384, sha512 };
const evp_md_st* evp_md(Hash h);
std::string digest(Hash h, std::string_view data);
std::string hmac_sha1(std::string_view key, std::string_view data);
void random_bytes(char* out, size_t n);
// Compares in time independent of where the inputs differ.
bool equal_secret(std::string_view a, std::string_view b);

// An ephemeral X25519 key pair (curve25519-sha256, RFC 8731).
class X25519 {
 public:
  X25519();  // generates a fresh pair; ok() is false if libcrypto failed
  bool ok() const { return bool(key_); }
  const std::string& public_key() const { return public_; }
  // The 32-byte shared secret with the peer's public key; nullopt for a malformed key or an
  // all-zero result (a low-order point).
  std::optional<std::string> shared_secret(std::string_view peer_public) const;

 private:
  Pkey key_;
  std::string public_;
};

// AES-GCM as OpenSSH frames SSH packets with it: 12-byte nonce (4 fixed bytes, 8-byte counter
// incremented per packet), the 4-byte packet length as associated data, 16-byte tag after the
// ciphertext.
class GcmCipher {
 public:
  static constexpr size_t kTagSize = 16;
  static constexpr size_t kIvSize = 12;
  // key: 16 bytes (AES-128) or 32 (AES-256); iv: 12 bytes. ok() tells whether it took.
  GcmCipher(bool encrypt, std::string_view key, std::string_view iv);
  ~GcmCipher();
  GcmCipher(const GcmCipher&) = delete;
  GcmCipher& operator=(const GcmCipher&) = delete;
  bool ok() const { return ok_; }

  // Encrypts one packet: `aad` (the 4 length bytes) authenticated, then each of `parts` encrypted
  // to `out` one after the other; the tag goes to `tag`. out may equal a part's data (in place).
  bool seal(std::string_view aad, std::span<const std::string_view> parts, char* out, char* tag);
  // Decrypts `n` bytes at `data` in place after the 4-byte `aad`; false if the tag does not match
  // (the bytes are then garbage and must not be used).
  bool open(std::string_view aad, char* data, size_t n, const char* tag);

  // open() in steps, so that parts of a packet can be decrypted to different places: begin,
  // then update() over the ciphertext in order (out may equal in), then finish() with the tag;
  // nothing decrypted may be used unless finish() returns true.
  bool begin(std::string_view aad);
  bool update(const char* in, char* out, size_t n);
  bool finish(const char* tag);

 private:
  bool next_iv();
  evp_cipher_ctx_st* ctx_ = nullptr;
  bool encrypt_;
  bool ok_ = false;
};

}  // namespace skein::ssh
