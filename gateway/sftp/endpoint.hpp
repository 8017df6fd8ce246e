// Where a backend's SFTP server is and how to reach it.
#pragma once

#include <chrono>
#include <string>

namespace skein::sftp {

// Which SSH implementation carries a backend's SFTP sessions.
enum class SshStack {
  automatic,  // skein's own transport; libssh for a server that offers none of its algorithms
  native,     // skein's own transport only
  libssh,     // libssh only
};

struct Endpoint {
  std::string host;
  int port = 22;
  std::string user;
  std::string identity_file;
  std::string known_hosts;
  std::chrono::milliseconds timeout{15000};
  SshStack stack = SshStack::automatic;
};

// "auto", "native" or "libssh" as the configuration spells them; false for another word.
bool parse_ssh_stack(const std::string& word, SshStack& out);
const char* ssh_stack_name(SshStack s);

}  // namespace skein::sftp
