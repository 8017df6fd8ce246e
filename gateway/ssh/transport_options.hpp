// Where an SSH server is and how to log in to it: what ssh::Transport connects with, and the
// part of a backend's sftp::Endpoint that is not about SFTP.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace skein::ssh {

struct TransportOptions {
  std::string host;
  int port = 22;
  std::string user;
  std::string identity_file;
  std::string known_hosts;
  // Bounds the whole handshake, and every later wait of the transport's own.
  std::chrono::milliseconds timeout{15000};
  // A new key exchange after this many bytes either way under one key (OpenSSH's own default
  // for AES-GCM is 64 GiB; RFC 4253 suggests rekeying after each gigabyte).
  uint64_t rekey_bytes = uint64_t(4) << 30;

  // user@host:port, as messages name the server.
  std::string who() const { return user + "@" + host + ":" + std::to_string(port); }
};

}  // namespace skein::ssh
