// A session channel over libssh: the fallback for servers that offer none of the algorithms of
// skein's own transport (ssh::Transport). open_channel (endpoint.hpp) chooses.
#pragma once

#include <memory>
#include <string>

#include "sftp/endpoint.hpp"
#include "ssh/byte_channel.hpp"

struct ssh_session_struct;
struct ssh_channel_struct;

namespace skein::sftp {

class LibsshChannel : public ssh::ByteChannel {
 public:
  // Connects to `endpoint`, verifies its host key against the endpoint's known_hosts (an unknown
  // or changed key is refused), authenticates with its identity file and starts `service` on a
  // session channel. Returns null with a message naming the endpoint and the cause in `error`.
  static std::unique_ptr<LibsshChannel> open(const Endpoint& endpoint,
                                             const ChannelService& service, std::string& error);
  ~LibsshChannel() override;

  int fd() const override;
  bool write(std::string_view head, std::span<const std::string_view> pieces,
             ssh::Deadline deadline) override;
  long read(char* dst, size_t n) override;
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
