// A session channel through the system's OpenSSH client: `ssh` runs as a child process with its
// standard input and output on one end of a socket pair, and skein speaks SFTP (or reads a
// command's output) on the other. OpenSSH itself reads ssh_config, checks the host key
// (StrictHostKeyChecking=yes, @cert-authority included), authenticates (identity file, user
// certificate, agent) and does the crypto, in its own process; BatchMode=yes: it never prompts.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "sftp/byte_channel.hpp"
#include "sftp/endpoint.hpp"

namespace skein::sftp {

// The `ssh` command line for an endpoint and a service (argv[0] = "ssh").
std::vector<std::string> openssh_command(const Endpoint& endpoint, const ChannelService& service);

class OpensshChannel : public ByteChannel {
 public:
  // Starts `ssh` for `service` on `endpoint`. The login happens in the child: a refused host key
  // or login shows as the channel closing, and error() then gives ssh's own message. Returns
  // null only when ssh cannot be started.
  static std::unique_ptr<OpensshChannel> open(const Endpoint& endpoint,
                                              const ChannelService& service, std::string& error);
  ~OpensshChannel() override;

  int fd() const override { return sock_; }
  bool write(std::string_view head, std::span<const std::string_view> pieces,
             Deadline deadline) override;
  long read(char* dst, size_t n) override;
  // What ssh said on its standard error (its refusals: "Host key verification failed.", ...)
  // and how it ended, once the channel has closed; "" while it works.
  std::string error() const override;
  pid_t pid() const { return pid_; }

 private:
  OpensshChannel() = default;
  // Reads what ssh wrote to its stderr; with `until_eof`, until ssh closes it (bounded).
  void collect_stderr(bool until_eof) const;

  int sock_ = -1;
  mutable int err_fd_ = -1;
  mutable pid_t pid_ = -1;  // -1 once reaped
  bool closed_ = false;
  std::string failure_;
  // What arrived while write() waited for room: read() hands it out first.
  std::string inbox_;
  size_t inbox_at_ = 0;
  mutable std::string stderr_;
  unsigned idle_reads_ = 0;
};

}  // namespace skein::sftp
