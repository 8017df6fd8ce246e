// A session channel over libssh; see libssh_channel.hpp.
#include "sftp/libssh_channel.hpp"

#include <libssh/libssh.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace skein::sftp {
namespace {
constexpr const char* kCiphers =
    "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr";

std::string option(ssh_session session, ssh_options_e which) {
  char* value = nullptr;
  if (ssh_options_get(session, which, &value) != SSH_OK || !value) return "";
  std::string out = value;
  ssh_string_free_char(value);
  return out;
}

// Whether a known_hosts file has @cert-authority lines, which libssh 0.10 does not read.
bool has_cert_authority(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find_first_not_of(" \t");
    if (at != std::string::npos && line.compare(at, 15, "@cert-authority") == 0) return true;
  }
  return false;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

ssh_session open_ssh_session(const Endpoint& ep, std::string& error) {
  const std::string who = ep.who();
  ssh_session session = ssh_new();
  if (!session) {
    error = who + ": cannot allocate an SSH session";
    return nullptr;
  }
  auto fail = [&](std::string message) {
    error = std::move(message);
    ssh_free(session);
    return nullptr;
  };
  int port = ep.port;
  int yes = 1;
  long timeout_s = std::max<long>(1, static_cast<long>(ep.timeout.count() / 1000));
  // The site's ssh_config (or the backend's own) is read once the host is known, so that its
  // Host blocks match; what the backend sets explicitly comes after it and wins.
  bool no = false;
  ssh_options_set(session, SSH_OPTIONS_PROCESS_CONFIG, &no);
  ssh_options_set(session, SSH_OPTIONS_HOST, ep.host.c_str());
  if (!ep.ssh_config.empty()) {
    if (access(ep.ssh_config.c_str(), R_OK) != 0 ||
        ssh_options_parse_config(session, ep.ssh_config.c_str()) != SSH_OK)
      return fail(who + ": cannot read ssh_config " + ep.ssh_config);
  } else if (ssh_options_parse_config(session, nullptr) != SSH_OK) {
    return fail(who + ": cannot read the site's ssh_config: " + ssh_get_error(session));
  }
  ssh_options_set(session, SSH_OPTIONS_PORT, &port);
  ssh_options_set(session, SSH_OPTIONS_USER, ep.user.c_str());
  // Requests and replies are small messages in flight both ways: Nagle would hold them back.
  ssh_options_set(session, SSH_OPTIONS_NODELAY, &yes);
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &timeout_s);
  if (!ep.known_hosts.empty()) {
    ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, ep.known_hosts.c_str());
    ssh_options_set(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
  }
  if (!ep.agent_socket.empty())
    ssh_options_set(session, SSH_OPTIONS_IDENTITY_AGENT, ep.agent_socket.c_str());
  ssh_options_set(session, SSH_OPTIONS_CIPHERS_C_S, kCiphers);
  ssh_options_set(session, SSH_OPTIONS_CIPHERS_S_C, kCiphers);
  ssh_options_set(session, SSH_OPTIONS_COMPRESSION, "no");

  if (ssh_connect(session) != SSH_OK) {
    return fail(who + ": cannot connect: " + ssh_get_error(session));
  }
  const std::string user_kh = option(session, SSH_OPTIONS_KNOWNHOSTS);
  const std::string global_kh = option(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS);
  std::string files = user_kh;
  if (!global_kh.empty() && global_kh != "/dev/null") files += " or " + global_kh;
  switch (ssh_session_is_known_server(session)) {
    case SSH_KNOWN_HOSTS_OK:
      break;
    case SSH_KNOWN_HOSTS_CHANGED:
      return fail(who + ": host key CHANGED from the one in " + files +
                  " (possible man-in-the-middle); refusing to connect");
    case SSH_KNOWN_HOSTS_OTHER:
      return fail(who + ": host key type differs from the one in " + files +
                  "; refusing to connect");
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      if (has_cert_authority(user_kh) || has_cert_authority(global_kh))
        return fail(who + ": host key is not in " + files +
                    "; its @cert-authority lines cannot vouch for it: libssh 0.10 does not "
                    "check host certificates; use ssh_transport = \"openssh\" (docs/ssh.md)");
      return fail(who + ": host key is not in " + files + " (unknown server); refusing to connect");
    default:
      return fail(who + ": cannot check the host key: " + ssh_get_error(session));
  }

  int auth;
  std::string tried;
  if (!ep.identity_file.empty()) {
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(ep.identity_file.c_str(), nullptr, nullptr, nullptr, &key) !=
        SSH_OK) {
      return fail(who + ": cannot read identity file " + ep.identity_file +
                  " (a key protected by a passphrase belongs in an ssh-agent: load it with "
                  "ssh-add and leave identity_file unset)");
    }
    // A user certificate: the one named, or the key's "-cert.pub" beside it, as OpenSSH does.
    std::string cert_file = ep.certificate_file;
    if (cert_file.empty() && exists(ep.identity_file + "-cert.pub"))
      cert_file = ep.identity_file + "-cert.pub";
    if (!cert_file.empty()) {
      ssh_key cert = nullptr;
      const bool ok = ssh_pki_import_cert_file(cert_file.c_str(), &cert) == SSH_OK &&
                      ssh_pki_copy_cert_to_privkey(cert, key) == SSH_OK;
      ssh_key_free(cert);
      if (!ok) {
        ssh_key_free(key);
        return fail(who + ": cannot use certificate " + cert_file + " with identity file " +
                    ep.identity_file);
      }
    }
    auth = ssh_userauth_publickey(session, nullptr, key);
    ssh_key_free(key);
    tried = "identity file " + ep.identity_file +
            (cert_file.empty() ? "" : " with certificate " + cert_file);
  } else {
    // The site's way: the agent ($SSH_AUTH_SOCK or agent_socket) first, then the identities
    // ssh_config names (or ~/.ssh/id_*).
    auth = ssh_userauth_publickey_auto(session, nullptr, nullptr);
    tried = "the agent and the identities of ssh_config";
  }
  if (auth != SSH_AUTH_SUCCESS) {
    return fail(who + ": public key authentication failed (" + tried +
                "): " + ssh_get_error(session));
  }

  return session;
}

}  // namespace

std::unique_ptr<LibsshChannel> LibsshChannel::open(const Endpoint& ep,
                                                   const ChannelService& service,
                                                   std::string& error) {
  std::unique_ptr<LibsshChannel> c(new LibsshChannel());
  c->session_ = open_ssh_session(ep, error);
  if (!c->session_) return nullptr;
  c->channel_ = ssh_channel_new(c->session_);
  const bool sub = service.kind == ChannelService::subsystem;
  if (!c->channel_ || ssh_channel_open_session(c->channel_) != SSH_OK ||
      (sub ? ssh_channel_request_subsystem(c->channel_, service.what.c_str())
           : ssh_channel_request_exec(c->channel_, service.what.c_str())) != SSH_OK) {
    error = ep.who() + ": cannot start " +
            (sub ? "the " + service.what + " subsystem" : std::string("a command")) + ": " +
            ssh_get_error(c->session_);
    return nullptr;
  }
  return c;
}

LibsshChannel::~LibsshChannel() {
  if (channel_) ssh_channel_free(channel_);
  if (session_) {
    ssh_disconnect(session_);
    ssh_free(session_);
  }
}

int LibsshChannel::fd() const { return ssh_get_fd(session_); }

std::string LibsshChannel::error() const {
  const char* detail = ssh_get_error(session_);
  return detail ? detail : "";
}

bool LibsshChannel::write(std::string_view head, std::span<const std::string_view> pieces,
                          Deadline deadline) {
  // libssh makes at least one SSH packet of every write, and sshd takes at most 32 KiB in one.
  // So the pieces go in writes of whole 32 KiB multiples, and what straddles a boundary between
  // them (the packet's header first) is gathered in a small buffer: a request in pieces costs no
  // more packets than the same bytes in one buffer.
  //
  // Each ssh_channel_write may wait, for the server's window and to flush the socket, up to the
  // session's timeout, and past it may report its bytes written all the same, left in its
  // buffer. So each waits at most what is left of the deadline, and a write with bytes still
  // unsent once the deadline has passed fails: a server that stopped reading fails the call at
  // its deadline, not at the transport's timeout.
  auto put = [&](const char* p, size_t n) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    const long s = static_cast<long>(left.count() / 1000000), us = left.count() % 1000000;
    ssh_options_set(session_, SSH_OPTIONS_TIMEOUT, &s);
    ssh_options_set(session_, SSH_OPTIONS_TIMEOUT_USEC, &us);
    if (ssh_channel_write(channel_, p, static_cast<uint32_t>(n)) != static_cast<int>(n))
      return false;
    return std::chrono::steady_clock::now() < deadline ||
           (ssh_get_status(session_) & SSH_WRITE_PENDING) == 0;
  };
  if (pieces.empty()) return put(head.data(), head.size()) && ssh_is_connected(session_);
  std::string& gather = gather_;  // kept between calls: no allocation per request
  gather.assign(head);
  for (std::string_view piece : pieces) {
    if (!gather.empty()) {
      const size_t take = std::min(piece.size(), kSshPacket - gather.size());
      gather.append(piece.substr(0, take));
      piece.remove_prefix(take);
      if (gather.size() < kSshPacket) continue;  // the piece is used up
      if (!put(gather.data(), gather.size())) return false;
      gather.clear();
    }
    const size_t whole = piece.size() / kSshPacket * kSshPacket;
    if (whole > 0 && !put(piece.data(), whole)) return false;
    gather.assign(piece.substr(whole));
  }
  return (gather.empty() || put(gather.data(), gather.size())) && ssh_is_connected(session_);
}

bool LibsshChannel::wants_write() const {
  return (ssh_get_status(session_) & SSH_WRITE_PENDING) != 0;
}

bool LibsshChannel::flush() {
  // One pass of libssh's poll (timeout 0): it sees the socket writable and writes its buffer.
  return ssh_blocking_flush(session_, 0) != SSH_ERROR && ssh_is_connected(session_);
}

long LibsshChannel::read(char* dst, size_t n) {
  const int r = ssh_channel_read_nonblocking(channel_, dst, static_cast<uint32_t>(n), 0);
  if (r == SSH_AGAIN) return 0;
  if (r < 0 || (r == 0 && ssh_channel_is_eof(channel_))) return -1;  // SSH_ERROR, SSH_EOF
  if (r == 0 && !ssh_is_connected(session_)) return -1;
  return r;
}

}  // namespace skein::sftp
