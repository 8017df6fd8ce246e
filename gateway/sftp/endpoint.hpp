// Where a backend's SFTP server is and how to reach it.
#pragma once

#include <memory>
#include <string>

#include "ssh/byte_channel.hpp"
#include "ssh/transport_options.hpp"

namespace skein::sftp {

// Which SSH implementation carries a backend's SFTP sessions.
enum class SshStack {
  automatic,  // skein's own transport; libssh for a server that offers none of its algorithms
  native,     // skein's own transport only
  libssh,     // libssh only
};

// host, port, user, identity file, known_hosts and timeout, as the SSH transport takes them,
// and which implementation to use.
struct Endpoint : ssh::TransportOptions {
  SshStack stack = SshStack::automatic;
};

// "auto", "native" or "libssh" as the configuration spells them; false for another word.
bool parse_ssh_stack(const std::string& word, SshStack& out);
const char* ssh_stack_name(SshStack s);

// What a session channel runs: a subsystem ("sftp") or a command.
struct ChannelService {
  enum Kind { subsystem, exec } kind;
  std::string what;
};

// Connects to the endpoint (its host key checked against its known_hosts, logged in with its
// identity file) and starts `service` on a session channel, on the endpoint's SSH stack: skein's
// own transport, or libssh for "libssh" and, under "auto", for a server that offers none of the
// own transport's algorithms (logged). A refused host key or login is never retried on libssh.
// Returns null with `error` naming the endpoint and the cause; `used` is the stack it runs on.
std::unique_ptr<ssh::ByteChannel> open_channel(const Endpoint& endpoint,
                                               const ChannelService& service, std::string& error,
                                               SshStack& used);

}  // namespace skein::sftp
