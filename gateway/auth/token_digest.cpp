// Token digests; see token_digest.hpp.
#include "auth/token_digest.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace skein {
namespace {

TokenDigest::Bytes sha256(std::string_view data) {
  TokenDigest::Bytes out{};
  unsigned len = 0;
  if (EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != out.size())
    throw std::runtime_error("SHA-256 failed");
  return out;
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

void random_bytes(uint8_t* p, size_t n) {
  if (RAND_bytes(p, static_cast<int>(n)) != 1)
    throw std::runtime_error("no random bytes from OpenSSL");
}

}  // namespace

TokenDigest TokenDigest::of(std::string_view token) {
  TokenDigest d;
  d.bytes_ = sha256(token);
  return d;
}

TokenDigest TokenDigest::unmatchable() {
  TokenDigest d;
  random_bytes(d.bytes_.data(), d.bytes_.size());
  return d;
}

bool TokenDigest::from_hex(std::string_view hex, TokenDigest& out) {
  if (hex.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.bytes_[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

bool TokenDigest::matches(std::string_view presented) const { return same(of(presented)); }

bool TokenDigest::same(const TokenDigest& other) const {
  return CRYPTO_memcmp(other.bytes_.data(), bytes_.data(), bytes_.size()) == 0;
}

std::string TokenDigest::hex() const { return to_hex(bytes_.data(), bytes_.size()); }

TokenSet TokenSet::of_all(const std::vector<std::string>& tokens) {
  TokenSet set;
  for (const std::string& token : tokens) set.digests_.push_back(TokenDigest::of(token));
  return set;
}

TokenSet TokenSet::of(std::string_view token) {
  TokenSet set;
  set.digests_.push_back(TokenDigest::of(token));
  return set;
}

bool TokenSet::matches(std::string_view presented) const {
  // Hashed once: a job namespace holds a digest per node credential issued, thousands for a
  // large job, and every call of the namespace is checked against all of them.
  const TokenDigest given = TokenDigest::of(presented);
  bool any = false;
  for (auto& d : digests_) any |= d.same(given);
  return any;
}

std::string new_random_token() {
  uint8_t raw[32];
  random_bytes(raw, sizeof raw);
  return to_hex(raw, sizeof raw);
}

}  // namespace skein
