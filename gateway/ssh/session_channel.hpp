// One session channel (RFC 4254 section 6) on skein's own SSH transport, running a subsystem
// (sftp) or a command, as a ByteChannel: writes are cut into CHANNEL_DATA packets within the
// server's window and packet size, encrypted straight from the caller's buffers; reads deliver
// the channel's data into the caller's buffer as packets are decrypted. The transport belongs to
// the channel: one channel per SSH connection.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ssh/byte_channel.hpp"
#include "ssh/transport.hpp"

namespace skein::ssh {

class SessionChannel : public ByteChannel {
 public:
  // Connects (Transport::connect) and starts the `subsystem` on a new session channel. On
  // failure returns null with `error` and `why` set as Transport::connect does.
  static std::unique_ptr<SessionChannel> subsystem(const TransportOptions& options,
                                                   std::string_view subsystem, std::string& error,
                                                   ConnectFailure& why);
  // Connects and runs `command` on a new session channel.
  static std::unique_ptr<SessionChannel> exec(const TransportOptions& options,
                                              std::string_view command, std::string& error,
                                              ConnectFailure& why);

  int fd() const override { return transport_->fd(); }
  bool write(std::string_view head, std::span<const std::string_view> pieces,
             Deadline deadline) override;
  long read(char* dst, size_t n) override;
  bool wants_write() const override { return transport_->unsent() > 0; }
  bool flush() override { return transport_->flush(); }
  std::string error() const override { return transport_->error(); }

  // The remote side sent EOF or closed the channel.
  bool at_eof() const { return eof_ || closed_; }
  // The command's exit status, once the server has sent it; -1 before.
  int exit_status() const { return exit_status_; }
  // What the command wrote to stderr (its last 4 KiB), for messages.
  const std::string& stderr_text() const { return stderr_; }
  const Transport& transport() const { return *transport_; }

  // Our window and largest packet for the server's data.
  static constexpr uint32_t kLocalWindow = 8 * 1024 * 1024;
  static constexpr uint32_t kLocalMaxPacket = kMaxPacket - 1024;

 private:
  SessionChannel() = default;
  static std::unique_ptr<SessionChannel> start(const TransportOptions& options,
                                               std::string_view type, std::string_view argument,
                                               std::string& error, ConnectFailure& why);
  bool on_message(std::string_view payload, size_t direct);
  bool deliver(std::string_view data, size_t direct);

  std::unique_ptr<Transport> transport_;
  uint32_t remote_id_ = 0;
  uint32_t remote_window_ = 0, remote_max_packet_ = 0;
  uint32_t local_window_ = kLocalWindow;
  bool confirmed_ = false, eof_ = false, closed_ = false, close_sent_ = false;
  std::string open_failure_;
  int request_result_ = 0;  // 0 pending, 1 success, -1 failure
  int exit_status_ = -1;
  std::string stderr_;
  // Data received but not yet read: [inbox_pos_, size).
  std::string inbox_;
  size_t inbox_pos_ = 0;
  // read()'s buffer while it pumps the transport, where the transport decrypts data to.
  char* target_ = nullptr;
  size_t target_size_ = 0, target_filled_ = 0;
  DataTarget direct_;
};

}  // namespace skein::ssh
