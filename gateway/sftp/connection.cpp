// SFTP connection over libssh with an I/O thread; see connection.hpp.
//
// libssh sessions are not thread-safe: whoever touches the session holds ssh_mu_. That is the I/O
// thread, which sleeps in poll() on the session socket and an eventfd that send() signals, and on
// wake-up writes queued requests and drains every reply libssh has buffered; or a caller of
// call() on an idle connection, which writes its request and polls for its reply itself, so that
// no thread hand-off is paid. While nothing is pending the I/O thread watches the socket only for
// a hang-up, so it does not wake for replies that are a direct caller's.
#include "sftp/connection.hpp"

#include <libssh/libssh.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace skein::sftp {
namespace {
constexpr const char* kCiphers =
    "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr";

std::string describe(const Endpoint& ep) {
  return ep.user + "@" + ep.host + ":" + std::to_string(ep.port);
}

std::future<Result<Reply>> ready_failure(int err) {
  std::promise<Result<Reply>> p;
  p.set_value(Result<Reply>::failure(err));
  return p.get_future();
}

// Blocking read of exactly `n` bytes during the handshake, bounded by the session timeout.
bool read_exact(ssh_channel ch, std::string& out, size_t n, int timeout_ms) {
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    int r = ssh_channel_read_timeout(ch, out.data() + got, uint32_t(n - got), 0, timeout_ms);
    if (r <= 0) return false;
    got += size_t(r);
  }
  return true;
}
}  // namespace

std::unique_ptr<Connection> Connection::connect(const Endpoint& ep, std::string& error,
                                                OnHung on_hung) {
  std::unique_ptr<Connection> c(new Connection());
  c->endpoint_ = ep;
  c->on_hung_ = std::move(on_hung);
  if (!c->handshake(error)) return nullptr;
  c->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  c->abort_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->wake_fd_ < 0 || c->abort_fd_ < 0) {
    error = "eventfd failed";
    return nullptr;
  }
  c->alive_ = true;
  c->io_thread_ = std::thread([raw = c.get()] { raw->io_loop(); });
  return c;
}

ssh_session open_ssh_session(const Endpoint& ep, std::string& error) {
  const std::string who = describe(ep);
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
  long timeout_s = std::max<long>(1, long(ep.timeout.count() / 1000));
  bool no = false;
  ssh_options_set(session, SSH_OPTIONS_PROCESS_CONFIG, &no);
  ssh_options_set(session, SSH_OPTIONS_HOST, ep.host.c_str());
  ssh_options_set(session, SSH_OPTIONS_PORT, &port);
  ssh_options_set(session, SSH_OPTIONS_USER, ep.user.c_str());
  ssh_options_set(session, SSH_OPTIONS_NODELAY, &yes);
  ssh_options_set(session, SSH_OPTIONS_TIMEOUT, &timeout_s);
  ssh_options_set(session, SSH_OPTIONS_KNOWNHOSTS, ep.known_hosts.c_str());
  ssh_options_set(session, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null");
  ssh_options_set(session, SSH_OPTIONS_CIPHERS_C_S, kCiphers);
  ssh_options_set(session, SSH_OPTIONS_CIPHERS_S_C, kCiphers);
  ssh_options_set(session, SSH_OPTIONS_COMPRESSION, "no");

  if (ssh_connect(session) != SSH_OK) {
    return fail(who + ": cannot connect: " + ssh_get_error(session));
  }
  switch (ssh_session_is_known_server(session)) {
    case SSH_KNOWN_HOSTS_OK:
      break;
    case SSH_KNOWN_HOSTS_CHANGED:
      return fail(who + ": host key CHANGED from the one in " + ep.known_hosts +
                  " (possible man-in-the-middle); refusing to connect");
    case SSH_KNOWN_HOSTS_OTHER:
      return fail(who + ": host key type differs from the one in " + ep.known_hosts +
                  "; refusing to connect");
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      return fail(who + ": host key is not in " + ep.known_hosts +
                  " (unknown server); refusing to connect");
    default:
      return fail(who + ": cannot check the host key: " + ssh_get_error(session));
  }

  ssh_key key = nullptr;
  if (ssh_pki_import_privkey_file(ep.identity_file.c_str(), nullptr, nullptr, nullptr, &key) !=
      SSH_OK) {
    return fail(who + ": cannot read identity file " + ep.identity_file);
  }
  int auth = ssh_userauth_publickey(session, nullptr, key);
  ssh_key_free(key);
  if (auth != SSH_AUTH_SUCCESS) {
    return fail(who + ": public key authentication failed: " + ssh_get_error(session));
  }

  return session;
}

bool Connection::handshake(std::string& error) {
  const std::string who = describe(endpoint_);
  session_ = open_ssh_session(endpoint_, error);
  if (!session_) return false;
  channel_ = ssh_channel_new(session_);
  if (!channel_ || ssh_channel_open_session(channel_) != SSH_OK ||
      ssh_channel_request_subsystem(channel_, "sftp") != SSH_OK) {
    error = who + ": cannot start the sftp subsystem: " + ssh_get_error(session_);
    return false;
  }

  std::string init = PacketWriter(FXP_INIT, false).u32(3).take();
  if (ssh_channel_write(channel_, init.data(), uint32_t(init.size())) != int(init.size())) {
    error = who + ": sftp init failed: " + ssh_get_error(session_);
    return false;
  }
  const int tmo = int(endpoint_.timeout.count());
  std::string hdr, body;
  if (!read_exact(channel_, hdr, 4, tmo)) {
    error = who + ": no sftp version reply";
    return false;
  }
  uint32_t len = uint32_t(uint8_t(hdr[0])) << 24 | uint32_t(uint8_t(hdr[1])) << 16 |
                 uint32_t(uint8_t(hdr[2])) << 8 | uint8_t(hdr[3]);
  if (len < 5 || len > 65536 || !read_exact(channel_, body, len, tmo) || body[0] != FXP_VERSION) {
    error = who + ": bad sftp version reply";
    return false;
  }
  PacketReader r(std::string_view(body).substr(1));
  auto version = r.u32();
  if (!version || *version != 3) {
    error = who + ": server does not speak SFTP version 3";
    return false;
  }
  while (r.remaining() > 0) {
    auto name = r.str();
    auto data = r.str();
    if (!name || !data) break;
    extensions_.insert(std::string(*name));
  }

  // OpenSSH caps reads and writes; ask once, fall back to the protocol's safe size.
  limits_ = {34000, 32768, 32768, 0};
  if (has_extension("limits@openssh.com")) {
    std::string req = PacketWriter(FXP_EXTENDED).str("limits@openssh.com").take();
    patch_request_id(req, 0);
    if (ssh_channel_write(channel_, req.data(), uint32_t(req.size())) == int(req.size()) &&
        read_exact(channel_, hdr, 4, tmo)) {
      len = uint32_t(uint8_t(hdr[0])) << 24 | uint32_t(uint8_t(hdr[1])) << 16 |
            uint32_t(uint8_t(hdr[2])) << 8 | uint8_t(hdr[3]);
      if (len >= 5 && len < 65536 && read_exact(channel_, body, len, tmo) &&
          uint8_t(body[0]) == FXP_EXTENDED_REPLY) {
        PacketReader lr(std::string_view(body).substr(5));
        auto mp = lr.u64(), mr = lr.u64(), mw = lr.u64(), mh = lr.u64();
        if (mp && mr && mw && mh) limits_ = {*mp, *mr, *mw, *mh};
      }
    }
  }
  return true;
}

Connection::~Connection() {
  stopping_ = true;
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
  if (io_thread_.joinable()) io_thread_.join();
  {
    std::lock_guard ssh(ssh_mu_);
    fail_all("connection closed");
  }
  if (channel_) {
    ssh_channel_free(channel_);
  }
  if (session_) {
    ssh_disconnect(session_);
    ssh_free(session_);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (abort_fd_ >= 0) close(abort_fd_);
}

std::string Connection::why(const char* what) const {
  const char* detail = ssh_get_error(session_);
  return describe(endpoint_) + ": " + what + (detail[0] ? std::string(": ") + detail : "");
}

std::string Connection::deadline_missed() const {
  return describe(endpoint_) + ": no reply within " + std::to_string(endpoint_.timeout.count()) +
         " ms";
}

void Connection::report_hung(const std::string& why) {
  if (on_hung_ && !hung_reported_.exchange(true)) on_hung_(why);
}

std::string Connection::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

std::future<Result<Reply>> Connection::send(Request request) {
  Pending p;
  std::string& framed = request.framed;
  if (request.type() == FXP_READ && request.tail.empty() && framed.size() >= 13) {
    const auto* b = reinterpret_cast<const unsigned char*>(framed.data() + framed.size() - 4);
    p.read_bytes = size_t(b[0]) << 24 | size_t(b[1]) << 16 | size_t(b[2]) << 8 | b[3];
    std::unique_lock lock(window_mu_);
    window_cv_.wait(lock, [&] {
      return !alive_ || read_bytes_in_flight_ == 0 ||
             read_bytes_in_flight_ + p.read_bytes <= kReadWindow;
    });
    read_bytes_in_flight_ += p.read_bytes;
  }
  p.deadline = std::chrono::steady_clock::now() + endpoint_.timeout;
  auto fut = p.promise.get_future();
  {
    std::lock_guard lock(mu_);
    if (!alive_) {
      release_read_bytes(p.read_bytes);
      return ready_failure(EIO);
    }
    if (next_id_ == 0) next_id_ = 1;  // 0 is the handshake's
    patch_request_id(framed, next_id_++);
    queue_.emplace_back(std::move(request), std::move(p));
    ++in_flight_;
  }
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
  return fut;
}

Result<Reply> Connection::call(Request request) {
  std::vector<Request> one;
  one.push_back(std::move(request));
  return std::move(call_all(std::move(one)).front());
}

std::vector<Result<Reply>> Connection::call_all(std::vector<Request> framed) {
  // READs keep to the I/O thread: they are counted against the read window.
  bool any_read = false;
  for (auto& f : framed) any_read |= f.type() == FXP_READ;
  uint32_t first_id = 0;
  if (!any_read && !framed.empty()) {
    std::lock_guard lock(mu_);
    if (alive_ && !direct_ && queue_.empty() && in_flight_ == 0 &&
        uint64_t(next_id_) + framed.size() <= UINT32_MAX) {  // ids do not wrap within it
      direct_ = true;
      if (next_id_ == 0) next_id_ = 1;
      first_id = next_id_;
      for (auto& f : framed) patch_request_id(f.framed, next_id_++);
      in_flight_ += framed.size();
    }
  }
  if (first_id != 0) {
    auto replies = call_direct(framed, first_id);
    bool queued;
    {
      std::lock_guard lock(mu_);
      direct_ = false;
      in_flight_ -= framed.size();
      queued = !queue_.empty();
    }
    if (queued) {  // requests that came meanwhile wait for the I/O thread
      uint64_t one = 1;
      (void)!write(wake_fd_, &one, sizeof one);
    }
    return replies;
  }
  std::vector<std::future<Result<Reply>>> futures;
  for (auto& f : framed) futures.push_back(send(std::move(f)));
  std::vector<Result<Reply>> replies;
  for (auto& f : futures) replies.push_back(f.get());
  return replies;
}

bool Connection::write_request(const Request& r) {
  // libssh makes at least one SSH packet of every write, and sshd takes at most 32 KiB in one.
  // So the pieces go in writes of whole 32 KiB multiples, and what straddles a boundary between
  // them (the packet's header first) is gathered in a small buffer: a request in pieces costs no
  // more packets than the same bytes in one buffer.
  auto write = [&](const char* p, size_t n) {
    return ssh_channel_write(channel_, p, uint32_t(n)) == int(n);
  };
  if (r.tail.empty()) return write(r.framed.data(), r.framed.size());
  std::string& gather = gather_;  // kept between calls: no allocation per request
  gather.assign(r.framed);
  for (std::string_view piece : r.tail) {
    if (!gather.empty()) {
      const size_t take = std::min(piece.size(), kSshPacket - gather.size());
      gather.append(piece.substr(0, take));
      piece.remove_prefix(take);
      if (gather.size() < kSshPacket) continue;  // the piece is used up
      if (!write(gather.data(), gather.size())) return false;
      gather.clear();
    }
    const size_t whole = piece.size() / kSshPacket * kSshPacket;
    if (whole > 0 && !write(piece.data(), whole)) return false;
    gather.assign(piece.substr(whole));
  }
  return gather.empty() || write(gather.data(), gather.size());
}

std::vector<Result<Reply>> Connection::call_direct(const std::vector<Request>& framed,
                                                   uint32_t first_id) {
  const auto deadline = std::chrono::steady_clock::now() + endpoint_.timeout;
  std::vector<std::optional<Reply>> got(framed.size());
  auto finish = [&] {
    std::vector<Result<Reply>> out;
    for (auto& g : got)
      out.push_back(g ? Result<Reply>(std::move(*g)) : Result<Reply>::failure(EIO));
    return out;
  };
  std::lock_guard ssh(ssh_mu_);
  if (!alive_) return finish();
  for (auto& f : framed) {
    if (!write_request(f)) {
      mark_dead(why("write failed"));
      return finish();
    }
  }
  bool hangup = false;
  for (;;) {
    if (!drain_replies(hangup, first_id, &got) || !ssh_is_connected(session_)) {
      mark_dead(why("connection lost"));
      return finish();
    }
    if (std::all_of(got.begin(), got.end(), [](auto& g) { return g.has_value(); })) {
      return finish();
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      const std::string reason = deadline_missed();
      mark_dead(reason);
      report_hung(reason);
      return finish();
    }
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    pollfd fds[2] = {{ssh_get_fd(session_), POLLIN, 0}, {abort_fd_, POLLIN, 0}};
    if (poll(fds, 2, int(ms)) < 0 && errno != EINTR) {
      mark_dead(describe(endpoint_) + ": poll failed");
      return finish();
    }
    if (fds[1].revents & POLLIN) return finish();  // shut down by its owner meanwhile
    hangup = fds[0].revents & (POLLHUP | POLLERR);
  }
}

void Connection::mark_dead(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (alive_ || failure_.empty()) failure_ = why;
    alive_ = false;
  }
  {
    std::lock_guard lock(window_mu_);  // no sender may miss this between its check and its wait
  }
  window_cv_.notify_all();
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);   // the I/O thread fails the rest and stops
  (void)!write(abort_fd_, &one, sizeof one);  // a direct caller stops waiting
}

void Connection::release_read_bytes(size_t n) {
  if (n == 0) return;
  {
    std::lock_guard lock(window_mu_);
    read_bytes_in_flight_ -= n;
  }
  window_cv_.notify_all();
}

void Connection::fail_all(const std::string& why) {
  std::deque<std::pair<Request, Pending>> queued;
  {
    std::lock_guard lock(mu_);
    if (alive_ || failure_.empty()) failure_ = why;
    alive_ = false;
    queued.swap(queue_);
  }
  for (auto& [_, p] : queued) {
    release_read_bytes(p.read_bytes);
    p.promise.set_value(Result<Reply>::failure(EIO));
  }
  for (auto& [_, p] : pending_) {
    release_read_bytes(p.read_bytes);
    p.promise.set_value(Result<Reply>::failure(EIO));
  }
  {
    std::lock_guard lock(window_mu_);  // no sender may miss this between its check and its wait
  }
  window_cv_.notify_all();  // senders waiting for room: the connection is gone
  in_flight_ -= queued.size() + pending_.size();
  pending_.clear();
}

bool Connection::drain_replies(bool hangup, uint32_t first_id,
                               std::vector<std::optional<Reply>>* wanted) {
  Reply reply;
  for (;;) {
    auto space = in_.want();
    int n = ssh_channel_read_nonblocking(channel_, space.data, uint32_t(space.size), 0);
    if (n == SSH_ERROR || (n == 0 && ssh_channel_is_eof(channel_))) return false;
    if (n == 0 && hangup) return false;  // the socket hung up and libssh has nothing more for us
    if (n <= 0) return true;
    hangup = false;
    in_.got(size_t(n));
    uint32_t id;
    bool bad;
    while (in_.take(reply, id, bad)) {
      if (wanted && id - first_id < wanted->size()) {
        (*wanted)[id - first_id] = std::move(reply);
        continue;
      }
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;  // e.g. a reply to a request that timed out
      release_read_bytes(it->second.read_bytes);
      it->second.promise.set_value(std::move(reply));
      pending_.erase(it);
      --in_flight_;
    }
    if (bad) return false;
  }
}

void Connection::io_loop() {
  bool hangup = false;
  while (!stopping_) {
    std::unique_lock ssh(ssh_mu_);
    if (!alive_) {  // a direct call found the connection dead
      fail_all(failure());
      return;
    }
    // 1. Write what callers queued.
    std::deque<std::pair<Request, Pending>> batch;
    {
      std::lock_guard lock(mu_);
      batch.swap(queue_);
    }
    bool write_failed = false;
    for (auto& [request, p] : batch) {
      const std::string& framed = request.framed;
      uint32_t id = uint32_t(uint8_t(framed[5])) << 24 | uint32_t(uint8_t(framed[6])) << 16 |
                    uint32_t(uint8_t(framed[7])) << 8 | uint8_t(framed[8]);
      pending_.emplace(id, std::move(p));
      if (!write_request(request)) {
        // Requests of this batch not yet registered still need an answer.
        std::lock_guard lock(mu_);
        for (auto& rest : batch)
          if (!rest.first.framed.empty() && &rest.first != &request)
            queue_.push_back(std::move(rest));
        write_failed = true;
        break;
      }
      request.framed.clear();  // written
      request.tail.clear();
    }
    if (write_failed || !ssh_is_connected(session_)) {
      fail_all(why("write failed"));
      return;
    }

    // 2. Drain every reply that has arrived.
    if (!drain_replies(hangup) || !ssh_is_connected(session_)) {
      fail_all(why("connection lost"));
      return;
    }

    // 3. Sleep until the socket or a caller wakes us, or the oldest request's deadline. With
    // nothing pending, only a hang-up of the socket matters: replies to direct calls are their
    // callers' to read.
    auto now = std::chrono::steady_clock::now();
    int timeout_ms = -1;
    for (auto& [_, p] : pending_) {
      if (p.deadline <= now) {
        const std::string reason = deadline_missed();
        fail_all(reason);
        ssh.unlock();
        report_hung(reason);
        return;
      }
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count() + 1;
      if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = int(ms);
    }
    const short socket_events = pending_.empty() ? POLLRDHUP : POLLIN;
    pollfd fds[2] = {{ssh_get_fd(session_), socket_events, 0}, {wake_fd_, POLLIN, 0}};
    ssh.unlock();
    {
      std::lock_guard lock(mu_);
      if (!queue_.empty()) continue;
    }
    if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) {
      std::lock_guard relock(ssh_mu_);
      fail_all(describe(endpoint_) + ": poll failed");
      return;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    // A hang-up is reported by the next drain, after what libssh buffered has been read.
    hangup = fds[0].revents & (POLLHUP | POLLERR | POLLRDHUP);
  }
  std::lock_guard ssh(ssh_mu_);
  if (alive_) fail_all(describe(endpoint_) + ": connection closed");
}

}  // namespace skein::sftp
