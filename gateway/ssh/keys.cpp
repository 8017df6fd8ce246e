// SSH public and private keys over libcrypto; see keys.hpp.
#include "ssh/keys.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "ssh/wire.hpp"

namespace skein::ssh {
namespace {

struct Curve {
  const char* ssh;      // nistp256
  const char* openssl;  // prime256v1
  Hash hash;
};
constexpr Curve kCurves[] = {{"nistp256", "prime256v1", Hash::sha256},
                             {"nistp384", "secp384r1", Hash::sha384},
                             {"nistp521", "secp521r1", Hash::sha512}};

const Curve* curve_by_ssh(std::string_view name) {
  for (auto& c : kCurves)
    if (name == c.ssh) return &c;
  return nullptr;
}
const Curve* curve_by_openssl(std::string_view name) {
  for (auto& c : kCurves)
    if (name == c.openssl) return &c;
  if (name == "P-256") return &kCurves[0];
  if (name == "P-384") return &kCurves[1];
  if (name == "P-521") return &kCurves[2];
  return nullptr;
}

struct BnFree {
  void operator()(BIGNUM* b) const { BN_clear_free(b); }
};
using Bn = std::unique_ptr<BIGNUM, BnFree>;
Bn bn(std::string_view magnitude) {
  return Bn(BN_bin2bn(reinterpret_cast<const unsigned char*>(magnitude.data()),
                      int(magnitude.size()), nullptr));
}
std::string bn_bytes(const BIGNUM* b) {
  std::string out(size_t(BN_num_bytes(b)), '\0');
  BN_bn2bin(b, reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

// A key from OSSL_PARAMs: `type` "EC" or "RSA"; `selection` EVP_PKEY_PUBLIC_KEY or
// EVP_PKEY_KEYPAIR. `build` pushes the parameters.
template <typename Build>
Pkey pkey_from(const char* type, int selection, Build&& build) {
  OSSL_PARAM_BLD* bld = OSSL_PARAM_BLD_new();
  if (!bld) return nullptr;
  OSSL_PARAM* params = nullptr;
  EVP_PKEY_CTX* ctx = nullptr;
  EVP_PKEY* key = nullptr;
  if (build(bld) && (params = OSSL_PARAM_BLD_to_param(bld)) &&
      (ctx = EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr)) &&
      EVP_PKEY_fromdata_init(ctx) == 1) {
    if (EVP_PKEY_fromdata(ctx, &key, selection, params) != 1) key = nullptr;
  }
  EVP_PKEY_CTX_free(ctx);
  OSSL_PARAM_free(params);
  OSSL_PARAM_BLD_free(bld);
  return Pkey(key);
}

Pkey ec_key(const Curve& c, std::string_view point, const BIGNUM* priv) {
  return pkey_from("EC", priv ? EVP_PKEY_KEYPAIR : EVP_PKEY_PUBLIC_KEY, [&](OSSL_PARAM_BLD* b) {
    return OSSL_PARAM_BLD_push_utf8_string(b, OSSL_PKEY_PARAM_GROUP_NAME, c.openssl, 0) == 1 &&
           OSSL_PARAM_BLD_push_octet_string(b, OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                            point.size()) == 1 &&
           (!priv || OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_PRIV_KEY, priv) == 1);
  });
}

// ECDSA signatures travel as (mpint r, mpint s); libcrypto wants DER.
std::string ecdsa_der(std::string_view r, std::string_view s) {
  ECDSA_SIG* sig = ECDSA_SIG_new();
  BIGNUM* br = BN_bin2bn(reinterpret_cast<const unsigned char*>(r.data()), int(r.size()), nullptr);
  BIGNUM* bs = BN_bin2bn(reinterpret_cast<const unsigned char*>(s.data()), int(s.size()), nullptr);
  std::string out;
  if (sig && br && bs && ECDSA_SIG_set0(sig, br, bs) == 1) {
    br = bs = nullptr;  // owned by sig now
    unsigned char* der = nullptr;
    const int n = i2d_ECDSA_SIG(sig, &der);
    if (n > 0) out.assign(reinterpret_cast<char*>(der), size_t(n));
    OPENSSL_free(der);
  }
  BN_free(br);
  BN_free(bs);
  ECDSA_SIG_free(sig);
  return out;
}

bool verify_raw(EVP_PKEY* key, const EVP_MD* md, std::string_view sig, std::string_view data) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      ctx && EVP_DigestVerifyInit(ctx, nullptr, md, nullptr, key) == 1 &&
      EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                       reinterpret_cast<const unsigned char*>(data.data()), data.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

std::string sign_raw(EVP_PKEY* key, const EVP_MD* md, std::string_view data) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  std::string sig;
  size_t n = 0;
  auto d = reinterpret_cast<const unsigned char*>(data.data());
  if (ctx && EVP_DigestSignInit(ctx, nullptr, md, nullptr, key) == 1 &&
      EVP_DigestSign(ctx, nullptr, &n, d, data.size()) == 1) {
    sig.resize(n);
    if (EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &n, d, data.size()) ==
        1) {
      sig.resize(n);
    } else {
      sig.clear();
    }
  }
  EVP_MD_CTX_free(ctx);
  return sig;
}

// The public key blob of a libcrypto key; sets the transport's view of it.
bool describe_public(EVP_PKEY* key, std::string& blob, std::string& algorithm, Hash& hash,
                     bool& ed25519, bool& ecdsa, std::string& error) {
  switch (EVP_PKEY_get_base_id(key)) {
    case EVP_PKEY_ED25519: {
      std::string pub(32, '\0');
      size_t n = pub.size();
      if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(pub.data()), &n) != 1) {
        break;
      }
      pub.resize(n);
      blob = Writer().str("ssh-ed25519").str(pub).take();
      algorithm = "ssh-ed25519";
      ed25519 = true;
      return true;
    }
    case EVP_PKEY_EC: {
      char group[64] = {};
      size_t glen = 0;
      if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group,
                                         &glen) != 1) {
        break;
      }
      const Curve* c = curve_by_openssl(group);
      if (!c) {
        error = std::string("unsupported ECDSA curve ") + group;
        return false;
      }
      EVP_PKEY_set_utf8_string_param(key, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT,
                                     "uncompressed");
      std::string point(256, '\0');
      size_t plen = 0;
      if (EVP_PKEY_get_octet_string_param(key, OSSL_PKEY_PARAM_PUB_KEY,
                                          reinterpret_cast<unsigned char*>(point.data()),
                                          point.size(), &plen) != 1) {
        break;
      }
      point.resize(plen);
      algorithm = std::string("ecdsa-sha2-") + c->ssh;
      blob = Writer().str(algorithm).str(c->ssh).str(point).take();
      hash = c->hash;
      ecdsa = true;
      return true;
    }
    case EVP_PKEY_RSA: {
      BIGNUM *n = nullptr, *e = nullptr;
      const bool ok = EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_N, &n) == 1 &&
                      EVP_PKEY_get_bn_param(key, OSSL_PKEY_PARAM_RSA_E, &e) == 1;
      if (ok) blob = Writer().str("ssh-rsa").mpint(bn_bytes(e)).mpint(bn_bytes(n)).take();
      BN_free(n);
      BN_free(e);
      if (!ok) break;
      algorithm = "rsa-sha2-512";
      hash = Hash::sha512;
      return true;
    }
    default:
      error = "unsupported key type (ssh-ed25519, ecdsa-sha2-nistp256/384/521 and RSA are)";
      return false;
  }
  error = "cannot read the key's public part";
  return false;
}

// OpenSSH's private key format (PROTOCOL.key), unencrypted.
Pkey parse_openssh_key(std::string_view text, std::string& error) {
  const std::string_view begin = "-----BEGIN OPENSSH PRIVATE KEY-----";
  const std::string_view end = "-----END OPENSSH PRIVATE KEY-----";
  const size_t b = text.find(begin), e = text.find(end);
  if (b == std::string_view::npos || e == std::string_view::npos || e < b) {
    error = "not an OpenSSH private key";
    return nullptr;
  }
  bool ok = false;
  const std::string raw = base64_decode(text.substr(b + begin.size(), e - b - begin.size()), ok);
  const std::string_view magic("openssh-key-v1\0", 15);
  if (!ok || raw.compare(0, magic.size(), magic) != 0) {
    error = "malformed OpenSSH private key";
    return nullptr;
  }
  Reader r(std::string_view(raw).substr(magic.size()));
  std::string_view cipher, kdf, kdf_options, pub, priv;
  uint32_t nkeys = 0;
  if (!r.str(cipher) || !r.str(kdf) || !r.str(kdf_options) || !r.u32(nkeys) || nkeys != 1 ||
      !r.str(pub) || !r.str(priv)) {
    error = "malformed OpenSSH private key";
    return nullptr;
  }
  if (cipher != "none" || kdf != "none") {
    error =
        "the key is protected by a passphrase; the gateway needs an unencrypted key "
        "(readable by it alone)";
    return nullptr;
  }
  Reader k(priv);
  uint32_t check1 = 0, check2 = 0;
  std::string_view type;
  if (!k.u32(check1) || !k.u32(check2) || check1 != check2 || !k.str(type)) {
    error = "malformed OpenSSH private key";
    return nullptr;
  }
  if (type == "ssh-ed25519") {
    std::string_view p, s;
    if (!k.str(p) || !k.str(s) || p.size() != 32 || s.size() != 64) {
      error = "malformed ssh-ed25519 private key";
      return nullptr;
    }
    return Pkey(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr,
                                             reinterpret_cast<const unsigned char*>(s.data()), 32));
  }
  if (type.starts_with("ecdsa-sha2-")) {
    std::string_view curve, point, d;
    const Curve* c = nullptr;
    if (!k.str(curve) || !k.str(point) || !k.mpint(d) || !(c = curve_by_ssh(curve))) {
      error = "malformed or unsupported ECDSA private key";
      return nullptr;
    }
    Bn priv_bn = bn(d);
    return ec_key(*c, point, priv_bn.get());
  }
  if (type == "ssh-rsa") {
    std::string_view n, e, d, iqmp, p, q;
    if (!k.mpint(n) || !k.mpint(e) || !k.mpint(d) || !k.mpint(iqmp) || !k.mpint(p) || !k.mpint(q)) {
      error = "malformed RSA private key";
      return nullptr;
    }
    Bn bn_n = bn(n), bn_e = bn(e), bn_d = bn(d), bn_p = bn(p), bn_q = bn(q), bn_iqmp = bn(iqmp);
    Bn dmp1(BN_new()), dmq1(BN_new()), p1(BN_new()), q1(BN_new());
    BN_CTX* bctx = BN_CTX_new();
    const bool crt = bctx && BN_sub(p1.get(), bn_p.get(), BN_value_one()) &&
                     BN_sub(q1.get(), bn_q.get(), BN_value_one()) &&
                     BN_mod(dmp1.get(), bn_d.get(), p1.get(), bctx) &&
                     BN_mod(dmq1.get(), bn_d.get(), q1.get(), bctx);
    BN_CTX_free(bctx);
    if (!crt) {
      error = "malformed RSA private key";
      return nullptr;
    }
    return pkey_from("RSA", EVP_PKEY_KEYPAIR, [&](OSSL_PARAM_BLD* b) {
      return OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_N, bn_n.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_E, bn_e.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_D, bn_d.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_FACTOR1, bn_p.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_FACTOR2, bn_q.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_EXPONENT1, dmp1.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_EXPONENT2, dmq1.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_COEFFICIENT1, bn_iqmp.get()) == 1;
    });
  }
  error = "unsupported private key type " + std::string(type);
  return nullptr;
}

int no_passphrase(char*, int, int, void* asked) {
  *static_cast<bool*>(asked) = true;
  return -1;
}

}  // namespace

std::optional<PublicKey> PublicKey::parse(std::string_view blob, std::string& error) {
  Reader r(blob);
  std::string_view type;
  if (!r.str(type)) {
    error = "malformed public key";
    return std::nullopt;
  }
  PublicKey k;
  k.type_ = std::string(type);
  k.blob_ = std::string(blob);
  if (type == "ssh-ed25519") {
    std::string_view pub;
    if (!r.str(pub) || pub.size() != 32) {
      error = "malformed ssh-ed25519 key";
      return std::nullopt;
    }
    k.pkey_.reset(EVP_PKEY_new_raw_public_key(
        EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(pub.data()), 32));
  } else if (type.starts_with("ecdsa-sha2-")) {
    std::string_view curve, point;
    const Curve* c = nullptr;
    if (!r.str(curve) || !r.str(point) || !(c = curve_by_ssh(curve)) || type.substr(11) != curve) {
      error = "malformed or unsupported ECDSA key";
      return std::nullopt;
    }
    k.pkey_ = ec_key(*c, point, nullptr);
  } else if (type == "ssh-rsa") {
    std::string_view e, n;
    if (!r.mpint(e) || !r.mpint(n)) {
      error = "malformed RSA key";
      return std::nullopt;
    }
    Bn bn_e = bn(e), bn_n = bn(n);
    if (BN_num_bits(bn_n.get()) < 1024) {
      error = "RSA key shorter than 1024 bits";
      return std::nullopt;
    }
    k.pkey_ = pkey_from("RSA", EVP_PKEY_PUBLIC_KEY, [&](OSSL_PARAM_BLD* b) {
      return OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_N, bn_n.get()) == 1 &&
             OSSL_PARAM_BLD_push_BN(b, OSSL_PKEY_PARAM_RSA_E, bn_e.get()) == 1;
    });
  } else {
    error = "unsupported host key type " + k.type_;
    return std::nullopt;
  }
  if (!k.pkey_) {
    error = "invalid " + k.type_ + " key";
    return std::nullopt;
  }
  return k;
}

std::string PublicKey::algorithms() const {
  if (type_ == "ssh-rsa") return "rsa-sha2-512,rsa-sha2-256";
  return type_;
}

std::string PublicKey::fingerprint() const {
  std::string b64 = base64_encode(digest(Hash::sha256, blob_));
  while (!b64.empty() && b64.back() == '=') b64.pop_back();
  return "SHA256:" + b64;
}

bool PublicKey::verify(std::string_view algorithm, std::string_view signature,
                       std::string_view data) const {
  Reader r(signature);
  std::string_view name, sig;
  if (!pkey_ || !r.str(name) || !r.str(sig) || name != algorithm) return false;
  if (type_ == "ssh-ed25519") {
    return algorithm == "ssh-ed25519" && sig.size() == 64 &&
           verify_raw(pkey_.get(), nullptr, sig, data);
  }
  if (type_.starts_with("ecdsa-sha2-")) {
    const Curve* c = curve_by_ssh(type_.substr(11));
    Reader rs(sig);
    std::string_view rr, ss;
    if (!c || algorithm != type_ || !rs.mpint(rr) || !rs.mpint(ss)) return false;
    const std::string der = ecdsa_der(rr, ss);
    return !der.empty() && verify_raw(pkey_.get(), evp_md(c->hash), der, data);
  }
  if (type_ == "ssh-rsa") {
    const EVP_MD* md = algorithm == "rsa-sha2-512"   ? EVP_sha512()
                       : algorithm == "rsa-sha2-256" ? EVP_sha256()
                                                     : nullptr;
    return md && verify_raw(pkey_.get(), md, sig, data);
  }
  return false;
}

std::optional<PrivateKey> PrivateKey::load(const std::string& path, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read identity file " + path;
    return std::nullopt;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  auto key = parse(text, error);
  if (!key) error = "identity file " + path + ": " + error;
  return key;
}

std::optional<PrivateKey> PrivateKey::parse(std::string_view text, std::string& error) {
  PrivateKey k;
  if (text.find("-----BEGIN OPENSSH PRIVATE KEY-----") != std::string_view::npos) {
    k.pkey_ = parse_openssh_key(text, error);
    if (!k.pkey_) {
      if (error.empty()) error = "invalid private key";
      return std::nullopt;
    }
  } else {
    BIO* bio = BIO_new_mem_buf(text.data(), int(text.size()));
    bool asked = false;
    k.pkey_.reset(bio ? PEM_read_bio_PrivateKey(bio, nullptr, no_passphrase, &asked) : nullptr);
    BIO_free(bio);
    if (!k.pkey_) {
      error = asked ? "the key is protected by a passphrase; the gateway needs an unencrypted key "
                      "(readable by it alone)"
                    : "not a private key in OpenSSH or PEM format";
      return std::nullopt;
    }
  }
  if (!describe_public(k.pkey_.get(), k.public_blob_, k.algorithm_, k.hash_, k.ed25519_, k.ecdsa_,
                       error)) {
    return std::nullopt;
  }
  return k;
}

std::string PrivateKey::sign(std::string_view data) const {
  if (ed25519_) {
    const std::string sig = sign_raw(pkey_.get(), nullptr, data);
    return sig.empty() ? sig : Writer().str(algorithm_).str(sig).take();
  }
  const std::string sig = sign_raw(pkey_.get(), evp_md(hash_), data);
  if (sig.empty()) return sig;
  if (!ecdsa_) return Writer().str(algorithm_).str(sig).take();
  // DER (r, s) to the SSH form.
  auto p = reinterpret_cast<const unsigned char*>(sig.data());
  ECDSA_SIG* es = d2i_ECDSA_SIG(nullptr, &p, long(sig.size()));
  if (!es) return {};
  const BIGNUM *r = nullptr, *s = nullptr;
  ECDSA_SIG_get0(es, &r, &s);
  std::string inner = Writer().mpint(bn_bytes(r)).mpint(bn_bytes(s)).take();
  ECDSA_SIG_free(es);
  return Writer().str(algorithm_).str(inner).take();
}

}  // namespace skein::ssh
