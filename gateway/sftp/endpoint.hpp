// Where a backend's SFTP server is and how to reach it.
#pragma once

#include <string>

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

}  // namespace skein::sftp
