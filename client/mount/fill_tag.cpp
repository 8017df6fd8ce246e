// Fill tags; see fill_tag.hpp.
#include "fill_tag.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <cstdio>
#include <stdexcept>

namespace skein::client {
namespace {

constexpr char kKeyLabel[] = "skein fill tag key v1";

EVP_MAC_CTX* new_hmac(const unsigned char* key, std::size_t key_size) {
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) throw std::runtime_error("OpenSSL has no HMAC");
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  EVP_MAC_free(mac);
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (!ctx || EVP_MAC_init(ctx, key, key_size, params) != 1) {
    EVP_MAC_CTX_free(ctx);
    throw std::runtime_error("cannot start an HMAC-SHA256");
  }
  return ctx;
}

}  // namespace

FillTag::Key FillTag::key_for(std::string_view ns, std::string_view token) {
  EVP_MAC_CTX* ctx = new_hmac(reinterpret_cast<const unsigned char*>(token.data()), token.size());
  Key key{};
  std::size_t n = 0;
  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(kKeyLabel), sizeof kKeyLabel);
  EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(ns.data()), ns.size());
  EVP_MAC_final(ctx, key.data(), &n, key.size());
  EVP_MAC_CTX_free(ctx);
  return key;
}

FillTag::FillTag(const Key& key, const std::string& ns_path, int64_t mtime_ns, uint64_t size,
                 uint64_t offset, uint64_t length, int64_t made)
    : made_(made) {
  EVP_MAC_CTX* ctx = new_hmac(key.data(), key.size());
  ctx_ = ctx;
  // The path with its NUL, then the numbers: no two (path, version, range, time) give the same
  // prefix.
  const std::string head = ns_path + std::string(1, '\0') + std::to_string(mtime_ns) + " " +
                           std::to_string(size) + " " + std::to_string(offset) + " " +
                           std::to_string(length) + " " + std::to_string(made) + "\n";
  add(head.data(), head.size());
}

std::optional<int64_t> FillTag::made_of(std::string_view tag) {
  if (tag.size() != kSize || tag[10] != '.') return std::nullopt;
  int64_t made = 0;
  for (std::size_t i = 0; i < 10; ++i) {
    if (tag[i] < '0' || tag[i] > '9') return std::nullopt;
    made = made * 10 + (tag[i] - '0');
  }
  return made;
}

int64_t FillTag::settled_from(int64_t mtime_ns) {
  constexpr int64_t kNs = 1000000000;
  const int64_t second = mtime_ns / kNs - (mtime_ns % kNs < 0 ? 1 : 0);  // rounded down
  return second + kSettled.count();
}

FillTag::~FillTag() { EVP_MAC_CTX_free(static_cast<EVP_MAC_CTX*>(ctx_)); }

void FillTag::add(const char* data, std::size_t n) {
  EVP_MAC_update(static_cast<EVP_MAC_CTX*>(ctx_), reinterpret_cast<const unsigned char*>(data), n);
}

std::string FillTag::tag() {
  unsigned char mac[32];
  std::size_t n = 0;
  EVP_MAC_final(static_cast<EVP_MAC_CTX*>(ctx_), mac, &n, sizeof mac);
  char made[12];
  std::snprintf(made, sizeof made, "%010lld.", static_cast<long long>(made_));
  std::string out = made;
  char two[3];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof two, "%02x", mac[i]);
    out += two;
  }
  return out;
}

bool same_tag(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace skein::client
