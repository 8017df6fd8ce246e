// Endpoint settings and the choice of SSH transport; see endpoint.hpp.
#include "sftp/endpoint.hpp"

#include "sftp/libssh_channel.hpp"
#include "sftp/openssh_channel.hpp"
#include "skein/credential_file.hpp"

namespace skein::sftp {

std::optional<std::string> parse_ssh_transport(const std::string& word, SshTransport& out) {
  if (word == "libssh") {
    out = SshTransport::libssh;
  } else if (word == "openssh") {
    out = SshTransport::openssh;
  } else if (word == "native" || word == "auto") {
    return "ssh_transport \"" + word +
           "\" was removed with skein's own SSH transport; use \"libssh\" (the default) or "
           "\"openssh\" (docs/ssh.md)";
  } else {
    return "ssh_transport must be \"libssh\" or \"openssh\", not \"" + word + "\"";
  }
  return std::nullopt;
}

const char* ssh_transport_name(SshTransport t) {
  return t == SshTransport::openssh ? "openssh" : "libssh";
}

std::optional<std::string> private_key_problem(const std::string& path) {
  // As ssh refuses an "UNPROTECTED PRIVATE KEY FILE".
  return private_file_problem(path, "identity file");
}

namespace {
bool host_name_only(const std::string& s, const char* also) {
  return !s.empty() && s.front() != '-' &&
         s.find_first_not_of(std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789._-[]:") +
                             also) == std::string::npos;
}
}  // namespace

std::optional<std::string> endpoint_problem(const Endpoint& ep) {
  // ssh puts the host into its ProxyCommand's shell command line (%h): names only.
  if (ep.transport == SshTransport::openssh && !host_name_only(ep.host, ""))
    return "host '" + ep.host + "' must be a host name or address for ssh_transport = \"openssh\"";
  // The jump host goes into a shell command line (ssh's ProxyCommand): names only.
  if (!ep.proxy_jump.empty() && !host_name_only(ep.proxy_jump, "@"))
    return "proxy_jump '" + ep.proxy_jump +
           "' must be one jump host, [user@]host[:port] (a chain of them belongs in ssh_config, "
           "as ProxyJump)";
  if (ep.transport == SshTransport::libssh && !ep.proxy_jump.empty())
    return "proxy_jump needs ssh_transport = \"openssh\": libssh 0.10 has no ProxyJump of its own "
           "(docs/ssh.md)";
  return std::nullopt;
}

std::unique_ptr<ByteChannel> open_channel(const Endpoint& ep, const ChannelService& service,
                                          std::string& error) {
  if (auto limit = endpoint_problem(ep)) {
    error = ep.who() + ": " + *limit;
    return nullptr;
  }
  if (!ep.identity_file.empty()) {
    if (auto problem = private_key_problem(ep.identity_file)) {
      error = ep.who() + ": " + *problem;
      return nullptr;
    }
  }
  if (ep.transport == SshTransport::openssh) return OpensshChannel::open(ep, service, error);
  return LibsshChannel::open(ep, service, error);
}

}  // namespace skein::sftp
