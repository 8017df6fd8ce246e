// OpenSSL primitives for the SSH transport; see crypto.hpp.
#include "ssh/crypto.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace skein::ssh {

void PkeyFree::operator()(evp_pkey_st* p) const { EVP_PKEY_free(p); }

const EVP_MD* evp_md(Hash h) {
  switch (h) {
    case Hash::sha1:
      return EVP_sha1();
    case Hash::sha256:
      return EVP_sha256();
    case Hash::sha384:
      return EVP_sha384();
    case Hash::sha512:
      return EVP_sha512();
  }
  return EVP_sha256();
}

std::string digest(Hash h, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data.data(), data.size(), md, &n, evp_md(h), nullptr) != 1) {
    throw std::runtime_error("libcrypto digest failed");
  }
  return std::string(reinterpret_cast<char*>(md), n);
}

std::string hmac_sha1(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (!HMAC(EVP_sha1(), key.data(), int(key.size()),
            reinterpret_cast<const unsigned char*>(data.data()), data.size(), md, &n)) {
    return {};
  }
  return std::string(reinterpret_cast<char*>(md), n);
}

void random_bytes(char* out, size_t n) {
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out), int(n)) != 1) {
    throw std::runtime_error("libcrypto has no randomness");
  }
}

bool equal_secret(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

X25519::X25519() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr);
  EVP_PKEY* key = nullptr;
  if (ctx && EVP_PKEY_keygen_init(ctx) == 1 && EVP_PKEY_keygen(ctx, &key) == 1) {
    key_.reset(key);
    public_.resize(32);
    size_t n = 32;
    if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(public_.data()), &n) !=
            1 ||
        n != 32) {
      key_.reset();
    }
  }
  EVP_PKEY_CTX_free(ctx);
}

std::optional<std::string> X25519::shared_secret(std::string_view peer) const {
  if (!key_ || peer.size() != 32) return std::nullopt;
  Pkey theirs(EVP_PKEY_new_raw_public_key(
      EVP_PKEY_X25519, nullptr, reinterpret_cast<const unsigned char*>(peer.data()), peer.size()));
  if (!theirs) return std::nullopt;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new(key_.get(), nullptr);
  std::string secret(32, '\0');
  size_t n = secret.size();
  const bool ok =
      ctx && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_derive_set_peer(ctx, theirs.get()) == 1 &&
      EVP_PKEY_derive(ctx, reinterpret_cast<unsigned char*>(secret.data()), &n) == 1 && n == 32;
  EVP_PKEY_CTX_free(ctx);
  if (!ok || equal_secret(secret, std::string(32, '\0'))) return std::nullopt;
  return secret;
}

GcmCipher::GcmCipher(bool encrypt, std::string_view key, std::string_view iv) : encrypt_(encrypt) {
  const EVP_CIPHER* cipher = key.size() == 16   ? EVP_aes_128_gcm()
                             : key.size() == 32 ? EVP_aes_256_gcm()
                                                : nullptr;
  ctx_ = EVP_CIPHER_CTX_new();
  if (!cipher || !ctx_ || iv.size() != kIvSize) return;
  auto k = reinterpret_cast<const unsigned char*>(key.data());
  // The whole 12-byte IV is "fixed"; EVP_CTRL_GCM_IV_GEN then uses it and increments its last
  // 8 bytes for the next packet, as OpenSSH does.
  unsigned char ivbuf[kIvSize];
  std::copy(iv.begin(), iv.end(), reinterpret_cast<char*>(ivbuf));
  ok_ = EVP_CipherInit_ex(ctx_, cipher, nullptr, nullptr, nullptr, encrypt ? 1 : 0) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_IVLEN, int(kIvSize), nullptr) == 1 &&
        EVP_CipherInit_ex(ctx_, nullptr, nullptr, k, nullptr, -1) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_IV_FIXED, -1, ivbuf) == 1;
}

GcmCipher::~GcmCipher() { EVP_CIPHER_CTX_free(ctx_); }

bool GcmCipher::next_iv() {
  unsigned char last[8];
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_IV_GEN, 1, last) == 1;
}

bool GcmCipher::seal(std::string_view aad, std::span<const std::string_view> parts, char* out,
                     char* tag) {
  if (!ok_ || !encrypt_ || !next_iv()) return false;
  int n = 0;
  if (EVP_EncryptUpdate(ctx_, nullptr, &n, reinterpret_cast<const unsigned char*>(aad.data()),
                        int(aad.size())) != 1) {
    return false;
  }
  auto o = reinterpret_cast<unsigned char*>(out);
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    if (EVP_EncryptUpdate(ctx_, o, &n, reinterpret_cast<const unsigned char*>(part.data()),
                          int(part.size())) != 1) {
      return false;
    }
    o += n;
  }
  return EVP_EncryptFinal_ex(ctx_, o, &n) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, int(kTagSize), tag) == 1;
}

bool GcmCipher::begin(std::string_view aad) {
  int n = 0;
  return ok_ && !encrypt_ && next_iv() &&
         EVP_DecryptUpdate(ctx_, nullptr, &n, reinterpret_cast<const unsigned char*>(aad.data()),
                           int(aad.size())) == 1;
}

bool GcmCipher::update(const char* in, char* out, size_t n) {
  int outl = 0;
  return n == 0 || EVP_DecryptUpdate(ctx_, reinterpret_cast<unsigned char*>(out), &outl,
                                     reinterpret_cast<const unsigned char*>(in), int(n)) == 1;
}

bool GcmCipher::finish(const char* tag) {
  unsigned char t[kTagSize];
  std::copy(tag, tag + kTagSize, reinterpret_cast<char*>(t));
  unsigned char last[16];
  int outl = 0;
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, int(kTagSize), t) == 1 &&
         EVP_DecryptFinal_ex(ctx_, last, &outl) == 1;
}

bool GcmCipher::open(std::string_view aad, char* data, size_t n, const char* tag) {
  return begin(aad) && update(data, data, n) && finish(tag);
}

}  // namespace skein::ssh
