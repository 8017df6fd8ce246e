// Tokens as the gateway keeps them: only their SHA-256 digest, compared in constant time whatever
// the length of what a caller presents. A token never goes into a log or a message.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace skein {

class TokenDigest {
 public:
  using Bytes = std::array<uint8_t, 32>;

  // The digest of `token`.
  static TokenDigest of(std::string_view token);
  // A digest no token has (random), for comparing against when there is nothing to compare with,
  // so that the answer takes as long as a real comparison.
  static TokenDigest unmatchable();
  // From the 64 hex digits of a stored digest; false when `hex` is not one.
  static bool from_hex(std::string_view hex, TokenDigest& out);

  // True when `presented` is the token this is the digest of. Constant time in the digest's
  // bytes, and `presented` is only hashed, so its length tells nothing.
  bool matches(std::string_view presented) const;
  // True when both are the digest of one token (constant time).
  bool same(const TokenDigest& other) const;
  std::string hex() const;

 private:
  Bytes bytes_{};
};

// The tokens that grant one thing (a namespace, the Admin service): usually one; two while a
// token is being rotated (a token file may hold several, one per line). Empty grants nothing.
class TokenSet {
 public:
  TokenSet() = default;
  // The tokens of a token file (read_token_lines), one a line.
  static TokenSet of_all(const std::vector<std::string>& tokens);
  static TokenSet of(std::string_view token);
  // True when `presented` is one of the tokens. Every digest is compared, always.
  bool matches(std::string_view presented) const;
  void add(const TokenDigest& d) { digests_.push_back(d); }
  bool empty() const { return digests_.empty(); }
  size_t size() const { return digests_.size(); }

 private:
  std::vector<TokenDigest> digests_;
};

// A new random token: 32 bytes from the system's CSPRNG, as 64 hex digits.
std::string new_random_token();

}  // namespace skein
