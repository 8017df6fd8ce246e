// A session channel over libssh, in the gateway's process: ssh_config (the site's or the
// backend's), known_hosts, an identity file with its user certificate, or the agent. libssh 0.10
// checks no host certificates (@cert-authority) and has no ProxyJump of its own: for those, the
// openssh transport (openssh_channel.hpp).
#pragma once

#include <memory>
#include <string>

#include "sftp/byte_channel.hpp"
#include "sftp/endpoint.hpp"

struct ssh_session_struct;
struct ssh_channel_struct;

namespace skein::sftp {

class LibsshChannel : public ByteChannel {
 public:
  // Connects to `endpoint`, verifies its host key against the endpoint's known_hosts (an unknown
  // or changed key is refused), authenticates with its identity file (and certificate) or the
  // agent and starts `service` on a session channel. Returns null with a message naming the
  // endpoint and the cause in `error`.
  static std::unique_ptr<LibsshChannel> open(const Endpoint& endpoint,
                                             const ChannelService& service, std::string& error);
  ~LibsshChannel() override;

  int fd() const override;
  bool write(std::string_view head, std::span<const std::string_view> pieces,
             Deadline deadline) override;
  long read(char* dst, size_t n) override;
  // libssh writes what a read queued (the window adjustment that lets the server send more) only
  // once its own poll has seen the socket writable; until then the bytes wait in its buffer, and
  // the caller must poll for POLLOUT and flush, or the server stalls on a closed window.
  bool wants_write() const override;
  bool flush() override;
  std::string error() const override;

 private:
  LibsshChannel() = default;
  ssh_session_struct* session_ = nullptr;
  ssh_channel_struct* channel_ = nullptr;
  // What write() gathers between SSH packet boundaries.
  static constexpr size_t kSshPacket = 32 * 1024;
  std::string gather_;
};

}  // namespace skein::sftp
