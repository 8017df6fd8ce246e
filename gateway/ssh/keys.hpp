// SSH public keys (a server's host key) and private keys (the gateway's identity): the key types
// OpenSSH uses by default, ssh-ed25519, ecdsa-sha2-nistp256/384/521 and RSA (signing with
// rsa-sha2-512 or rsa-sha2-256, never SHA-1), over libcrypto.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ssh/crypto.hpp"

namespace skein::ssh {

class PublicKey {
 public:
  // Parses a public key blob (RFC 4253 section 6.6). nullopt, with `error`, for a type this
  // transport does not know or a malformed blob.
  static std::optional<PublicKey> parse(std::string_view blob, std::string& error);
  // Checks `signature` (a signature blob: algorithm name and signature) over `data`, made with
  // `algorithm` (the negotiated host key algorithm, e.g. rsa-sha2-512).
  bool verify(std::string_view algorithm, std::string_view signature, std::string_view data) const;
  // The key type as known_hosts names it: ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, ...
  const std::string& type() const { return type_; }
  const std::string& blob() const { return blob_; }
  // The host key algorithms that sign with a key of this type, preferred first.
  std::string algorithms() const;
  // "SHA256:..." as ssh-keygen -l prints it.
  std::string fingerprint() const;

 private:
  std::string type_;
  std::string blob_;
  Pkey pkey_;
};

class PrivateKey {
 public:
  // Reads an unencrypted private key: OpenSSH's own format ("BEGIN OPENSSH PRIVATE KEY") or PEM
  // (PKCS#1, SEC1, PKCS#8). nullopt, with `error` saying why, otherwise (a passphrase-protected
  // key is refused: the gateway runs unattended).
  static std::optional<PrivateKey> load(const std::string& path, std::string& error);
  static std::optional<PrivateKey> parse(std::string_view text, std::string& error);
  // The algorithm the key signs user authentication with (rsa-sha2-512 for RSA).
  const std::string& algorithm() const { return algorithm_; }
  const std::string& public_blob() const { return public_blob_; }
  // A signature blob over `data` for algorithm(); empty if libcrypto failed.
  std::string sign(std::string_view data) const;

 private:
  std::string algorithm_;
  std::string public_blob_;
  Pkey pkey_;
  Hash hash_ = Hash::sha256;  // for ECDSA and RSA
  bool ed25519_ = false;
  bool ecdsa_ = false;
};

}  // namespace skein::ssh
