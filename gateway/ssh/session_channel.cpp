// A session channel on skein's SSH transport; see session_channel.hpp.
#include "ssh/session_channel.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "skein/shared_bytes.hpp"
#include "ssh/wire.hpp"

namespace skein::ssh {
namespace {
// Output kept in the transport's buffer before a write waits for the socket.
constexpr size_t kFlushAt = 256 * 1024;
constexpr size_t kStderrKept = 4096;
// Data received while nobody reads (during a write) is kept up to this much. A server sends only
// replies to what was asked, far less than this; one that sends more is broken or hostile.
constexpr size_t kInboxLimit = 64 << 20;
}  // namespace

std::unique_ptr<SessionChannel> SessionChannel::subsystem(const TransportOptions& options,
                                                          std::string_view name, std::string& error,
                                                          ConnectFailure& why) {
  return start(options, "subsystem", name, error, why);
}

std::unique_ptr<SessionChannel> SessionChannel::exec(const TransportOptions& options,
                                                     std::string_view command, std::string& error,
                                                     ConnectFailure& why) {
  return start(options, "exec", command, error, why);
}

std::unique_ptr<SessionChannel> SessionChannel::start(const TransportOptions& options,
                                                      std::string_view type,
                                                      std::string_view argument, std::string& error,
                                                      ConnectFailure& why) {
  auto transport = Transport::connect(options, error, why);
  if (!transport) return nullptr;
  std::unique_ptr<SessionChannel> c(new SessionChannel());
  c->transport_ = std::move(transport);
  Transport& t = *c->transport_;
  t.set_handler([raw = c.get()](std::string_view payload, size_t direct) {
    return raw->on_message(payload, direct);
  });
  why = ConnectFailure::failed;
  const Deadline deadline = std::chrono::steady_clock::now() + options.timeout;
  const uint32_t local_id = 0;
  if (!t.send(Writer(MSG_CHANNEL_OPEN)
                  .str("session")
                  .u32(local_id)
                  .u32(kLocalWindow)
                  .u32(kLocalMaxPacket)
                  .data()) ||
      !t.wait(
          deadline, [&] { return c->confirmed_ || !c->open_failure_.empty(); },
          "a session channel")) {
    error = t.who() + ": " + t.error();
    return nullptr;
  }
  if (!c->confirmed_) {
    error = t.who() + ": the server refused a session channel: " + c->open_failure_;
    return nullptr;
  }
  if (!t.send(Writer(MSG_CHANNEL_REQUEST)
                  .u32(c->remote_id_)
                  .str(type)
                  .boolean(true)
                  .str(argument)
                  .data()) ||
      !t.wait(
          deadline, [&] { return c->request_result_ != 0 || c->closed_; },
          type == "exec" ? "the command to start" : "the subsystem to start")) {
    error = t.who() + ": " + t.error();
    return nullptr;
  }
  if (c->request_result_ != 1) {
    error = t.who() + ": the server refused to start " +
            (type == "exec" ? "the command " : "the subsystem ") + std::string(argument);
    return nullptr;
  }
  why = ConnectFailure::none;
  return c;
}

bool SessionChannel::deliver(std::string_view data, size_t direct) {
  // The first `direct` bytes were decrypted into the target already.
  target_filled_ += direct;
  data.remove_prefix(direct);
  if (target_ && target_filled_ < target_size_) {
    const size_t n = std::min(data.size(), target_size_ - target_filled_);
    std::memcpy(target_ + target_filled_, data.data(), n);
    target_filled_ += n;
    data.remove_prefix(n);
  }
  direct_.dst = target_ ? target_ + target_filled_ : nullptr;
  direct_.room = target_ ? target_size_ - target_filled_ : 0;
  if (data.empty()) return true;
  if (inbox_.size() - inbox_pos_ + data.size() > kInboxLimit) {
    return transport_->fail("the server sent more than 64 MiB that nobody asked to read yet");
  }
  if (inbox_pos_ == inbox_.size()) {
    inbox_.clear();
    inbox_pos_ = 0;
  } else if (inbox_pos_ > inbox_.size() / 2) {
    inbox_.erase(0, inbox_pos_);
    inbox_pos_ = 0;
  }
  inbox_.append(data);
  return true;
}

bool SessionChannel::on_message(std::string_view payload, size_t direct) {
  const uint8_t type = uint8_t(payload[0]);
  Reader r(payload.substr(1));
  if (type == MSG_CHANNEL_OPEN) {  // the server asks to open one (forwarding): we offer none
    std::string_view kind;
    uint32_t sender = 0;
    if (!r.str(kind) || !r.u32(sender)) return false;
    constexpr uint32_t kAdministrativelyProhibited = 1;
    return transport_->send(Writer(MSG_CHANNEL_OPEN_FAILURE)
                                .u32(sender)
                                .u32(kAdministrativelyProhibited)
                                .str("skein opens no channels for the server")
                                .str("")
                                .data());
  }
  uint32_t recipient = 0;
  if (!r.u32(recipient) || recipient != 0) return false;  // our one channel is number 0
  switch (type) {
    case MSG_CHANNEL_OPEN_CONFIRMATION: {
      uint32_t sender, window, max_packet;
      if (confirmed_ || !r.u32(sender) || !r.u32(window) || !r.u32(max_packet) || max_packet == 0) {
        return false;
      }
      remote_id_ = sender;
      remote_window_ = window;
      remote_max_packet_ = std::min<uint32_t>(max_packet, kLocalMaxPacket);
      confirmed_ = true;
      return true;
    }
    case MSG_CHANNEL_OPEN_FAILURE: {
      uint32_t reason;
      std::string_view text;
      if (!r.u32(reason) || !r.str(text)) return false;
      open_failure_ = text.empty() ? "reason " + std::to_string(reason) : std::string(text);
      return true;
    }
    case MSG_CHANNEL_WINDOW_ADJUST: {
      uint32_t add;
      if (!r.u32(add)) return false;
      remote_window_ = uint32_t(std::min<uint64_t>(uint64_t(remote_window_) + add, UINT32_MAX));
      return true;
    }
    case MSG_CHANNEL_DATA:
    case MSG_CHANNEL_EXTENDED_DATA: {
      uint32_t code = 0;
      std::string_view data;
      if ((type == MSG_CHANNEL_EXTENDED_DATA && !r.u32(code)) || !r.str(data)) return false;
      if (data.size() > local_window_) {
        return transport_->fail("the server sent more than the channel window allows");
      }
      local_window_ -= uint32_t(data.size());
      if (type == MSG_CHANNEL_DATA) {
        if (!deliver(data, direct)) return false;
      } else {
        stderr_.append(data);
        if (stderr_.size() > kStderrKept) stderr_.erase(0, stderr_.size() - kStderrKept);
      }
      if (local_window_ < kLocalWindow / 2) {
        const uint32_t add = kLocalWindow - local_window_;
        local_window_ = kLocalWindow;
        return transport_->send(Writer(MSG_CHANNEL_WINDOW_ADJUST).u32(remote_id_).u32(add).data());
      }
      return true;
    }
    case MSG_CHANNEL_EOF:
      eof_ = true;
      return true;
    case MSG_CHANNEL_CLOSE:
      closed_ = true;
      if (!close_sent_) {
        close_sent_ = true;
        return transport_->send(Writer(MSG_CHANNEL_CLOSE).u32(remote_id_).data());
      }
      return true;
    case MSG_CHANNEL_REQUEST: {
      std::string_view name;
      bool want_reply = false;
      if (!r.str(name) || !r.boolean(want_reply)) return false;
      if (name == "exit-status") {
        uint32_t status;
        if (r.u32(status)) exit_status_ = int(status);
      }
      // keepalive@openssh.com and anything else we do not do.
      return !want_reply || transport_->send(Writer(MSG_CHANNEL_FAILURE).u32(remote_id_).data());
    }
    case MSG_CHANNEL_SUCCESS:
      request_result_ = 1;
      return true;
    case MSG_CHANNEL_FAILURE:
      request_result_ = -1;
      return true;
    default:
      return false;
  }
}

bool SessionChannel::write(std::string_view head, std::span<const std::string_view> pieces,
                           Deadline deadline) {
  Transport& t = *transport_;
  if (t.failed()) return false;
  if (closed_) return t.fail("the server closed the channel");  // EOF ends its half only
  auto sendable = [&] { return t.sendable(); };
  std::vector<std::string_view> all;
  all.reserve(1 + pieces.size());
  all.push_back(head);
  all.insert(all.end(), pieces.begin(), pieces.end());
  const SharedBytes bytes(std::move(all), nullptr);  // views: the caller keeps them alive
  std::vector<std::string_view> parts;
  for (size_t at = 0; at < bytes.size();) {
    if (remote_window_ == 0 && !t.wait(
                                   deadline, [&] { return remote_window_ > 0 || closed_; },
                                   "the server's channel window")) {
      return false;
    }
    if (closed_) return t.fail("the server closed the channel");
    if (!t.sendable() && !t.wait(deadline, sendable, "a key exchange")) return false;
    // One CHANNEL_DATA packet: as much as the window and the server's packet size allow, as
    // views of the caller's buffers.
    parts.clear();
    const size_t n = bytes.view(at, std::min(remote_window_, remote_max_packet_), parts);
    at += n;
    char header[9];
    header[0] = char(MSG_CHANNEL_DATA);
    put_u32(header + 1, remote_id_);
    put_u32(header + 5, uint32_t(n));
    if (!t.send(std::string_view(header, sizeof header), parts)) return false;
    remote_window_ -= uint32_t(n);
    if (t.unsent() >= kFlushAt) {
      if (!t.flush()) return false;
      if (t.unsent() >= 4 * kFlushAt &&
          !t.wait(
              deadline, [&] { return t.unsent() < kFlushAt; }, "the socket to take a write")) {
        return false;
      }
    }
  }
  return t.wait(
      deadline, [&] { return t.unsent() == 0; }, "the socket to take a write");
}

long SessionChannel::read(char* dst, size_t n) {
  size_t got = 0;
  if (inbox_pos_ < inbox_.size()) {
    got = std::min(n, inbox_.size() - inbox_pos_);
    std::memcpy(dst, inbox_.data() + inbox_pos_, got);
    inbox_pos_ += got;
    if (inbox_pos_ == inbox_.size()) {
      inbox_.clear();
      inbox_pos_ = 0;
    }
  }
  bool ok = !transport_->failed();
  if (got < n && ok) {
    target_ = dst + got;
    target_size_ = n - got;
    target_filled_ = 0;
    direct_ = DataTarget{target_, target_size_, 0};
    transport_->set_data_target(&direct_);
    ok = transport_->pump([&] { return target_filled_ < target_size_; });
    transport_->set_data_target(nullptr);
    got += target_filled_;
    target_ = nullptr;
  }
  if (ok) ok = transport_->flush();  // window adjustments made meanwhile
  if (got > 0) return long(got);
  return !ok || at_eof() ? -1 : 0;
}

}  // namespace skein::ssh
