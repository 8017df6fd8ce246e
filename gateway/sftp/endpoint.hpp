// Where a backend's SFTP server is, how to log in to it, and which trusted SSH implementation
// carries its sessions (docs/ssh.md).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "sftp/byte_channel.hpp"

namespace skein::sftp {

// Which SSH implementation carries a backend's SFTP sessions and its remote watcher.
enum class SshTransport {
  libssh,   // libssh in the gateway's process (the default)
  openssh,  // the system's `ssh` client, one child process per session
};

struct Endpoint {
  std::string host;  // a name or address; with an ssh_config, possibly a Host alias of it
  int port = 22;
  std::string user;
  // Private key to log in with ("": the agent, then the identities ssh_config names).
  std::string identity_file;
  // User certificate for that key ("": identity_file + "-cert.pub" if it exists, as OpenSSH does).
  std::string certificate_file;
  // Host keys (and @cert-authority lines) trusted for the server; "": the site's known_hosts
  // files (~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts, or what ssh_config says).
  std::string known_hosts;
  // The ssh_config file to read; "": the site's (~/.ssh/config, /etc/ssh/ssh_config).
  std::string ssh_config;
  // A jump host, [user@]host[:port], reached with the same login options; openssh only (libssh
  // 0.10 has no ProxyJump of its own). A chain of them belongs in ssh_config.
  std::string proxy_jump;
  // ssh-agent socket; "": $SSH_AUTH_SOCK of the gateway.
  std::string agent_socket;
  // Bounds the whole handshake, and every later wait of the transport's own.
  std::chrono::milliseconds timeout{15000};
  SshTransport transport = SshTransport::libssh;

  // user@host:port, as messages name the server.
  std::string who() const { return user + "@" + host + ":" + std::to_string(port); }
};

// "libssh" or "openssh" as the configuration spells them. Any other word gives a message for
// the configuration's error (naming the removed "auto" and "native" as such).
std::optional<std::string> parse_ssh_transport(const std::string& word, SshTransport& out);
const char* ssh_transport_name(SshTransport t);

// Why a private key file may not be used: it is missing, unreadable, not a regular file or
// readable by group or others (OpenSSH refuses such a key as "UNPROTECTED"); nullopt if fine.
std::optional<std::string> private_key_problem(const std::string& path);

// What is wrong with the endpoint's settings: a malformed proxy_jump, or what its transport cannot
// do, with the way out (libssh: no ProxyJump); nullopt if all is well.
std::optional<std::string> endpoint_problem(const Endpoint& endpoint);

// What a session channel runs: a subsystem ("sftp") or a command.
struct ChannelService {
  enum Kind { subsystem, exec } kind;
  std::string what;
};

// Connects to the endpoint on its transport (the host key checked against its known_hosts, an
// unknown or changed key refused; logged in with its identity, certificate or agent) and starts
// `service` on a session channel. Returns null with `error` naming the endpoint and the cause.
std::unique_ptr<ByteChannel> open_channel(const Endpoint& endpoint, const ChannelService& service,
                                          std::string& error);

}  // namespace skein::sftp
