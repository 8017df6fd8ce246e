// Endpoint settings and the choice of SSH stack; see endpoint.hpp.
#include "sftp/endpoint.hpp"

#include <spdlog/spdlog.h>

#include "sftp/libssh_channel.hpp"
#include "ssh/session_channel.hpp"

namespace skein::sftp {

bool parse_ssh_stack(const std::string& word, SshStack& out) {
  if (word == "auto") {
    out = SshStack::automatic;
  } else if (word == "native") {
    out = SshStack::native;
  } else if (word == "libssh") {
    out = SshStack::libssh;
  } else {
    return false;
  }
  return true;
}

const char* ssh_stack_name(SshStack s) {
  switch (s) {
    case SshStack::native:
      return "native";
    case SshStack::libssh:
      return "libssh";
    case SshStack::automatic:
      break;
  }
  return "auto";
}

std::unique_ptr<ssh::ByteChannel> open_channel(const Endpoint& ep, const ChannelService& service,
                                               std::string& error, SshStack& used) {
  if (ep.stack != SshStack::libssh) {
    ssh::ConnectFailure why;
    auto ch = service.kind == ChannelService::subsystem
                  ? ssh::SessionChannel::subsystem(ep, service.what, error, why)
                  : ssh::SessionChannel::exec(ep, service.what, error, why);
    if (ch) {
      used = SshStack::native;
      return ch;
    }
    // Only a server that speaks nothing of ours goes to libssh: a refused host key or login is
    // never retried elsewhere.
    if (ep.stack == SshStack::native || why != ssh::ConnectFailure::unsupported) return nullptr;
    spdlog::info("using libssh: {}", error);
  }
  auto ch = LibsshChannel::open(ep, service, error);
  if (ch) used = SshStack::libssh;
  return ch;
}

}  // namespace skein::sftp
