// SFTP connection over an SSH channel with an I/O thread; see connection.hpp.
//
// The channel (LibsshChannel or OpensshChannel) is not thread-safe: whoever touches it holds
// ssh_mu_. That is the I/O thread, which sleeps in poll() on the session socket and an eventfd
// that send() signals, and on wake-up writes queued requests and drains every reply the channel
// has; or a caller of call() on an idle connection, which writes its request and polls for its
// reply itself, so that no thread hand-off is paid. While nothing is pending the I/O thread watches
// the socket only for a hang-up, so it does not wake for replies that are a direct caller's; once
// a second it reads what came meanwhile, which answers the server's keepalives.
#include "sftp/connection.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace skein::sftp {
namespace {
std::future<Result<Reply>> ready_failure(int err) {
  std::promise<Result<Reply>> p;
  p.set_value(Result<Reply>::failure(err));
  return p.get_future();
}

// The data a READ may bring back (its length field), 0 for any other request.
size_t read_bytes_of(const Request& request) {
  const std::string& framed = request.framed;
  if (request.type() != FXP_READ || !request.tail.empty() || framed.size() < 13) return 0;
  const auto* b = reinterpret_cast<const unsigned char*>(framed.data() + framed.size() - 4);
  return static_cast<size_t>(b[0]) << 24 | static_cast<size_t>(b[1]) << 16 |
         static_cast<size_t>(b[2]) << 8 | b[3];
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

bool Connection::handshake(std::string& error) {
  const std::string who = endpoint_.who();
  channel_ = open_channel(endpoint_, {ChannelService::subsystem, "sftp"}, error);
  if (!channel_) return false;
  read_window_ =
      endpoint_.transport == SshTransport::openssh ? kOpensshReadWindow : kLibsshReadWindow;
  // OpenSSH's client logs in only now, in its own process: a refusal shows as the channel
  // closing, and the channel's error is then ssh's own message.
  auto failed = [&](const char* what) {
    const std::string detail = channel_->error();
    return who + ": " + (detail.empty() ? std::string(what) : detail);
  };

  std::string init = PacketWriter(FXP_INIT, false).u32(3).take();
  const auto deadline = std::chrono::steady_clock::now() + endpoint_.timeout;
  if (!channel_->write(init, {}, deadline)) {
    error = failed("sftp init failed");
    return false;
  }
  std::string hdr, body;
  if (!read_exact(hdr, 4)) {
    error = failed("no sftp version reply");
    return false;
  }
  uint32_t len = static_cast<uint32_t>(static_cast<uint8_t>(hdr[0])) << 24 |
                 static_cast<uint32_t>(static_cast<uint8_t>(hdr[1])) << 16 |
                 static_cast<uint32_t>(static_cast<uint8_t>(hdr[2])) << 8 |
                 static_cast<uint8_t>(hdr[3]);
  if (len < 5 || len > 65536 || !read_exact(body, len) || body[0] != FXP_VERSION) {
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
    // Its reply read whole, or the connection is not used: bytes of it left unread (a reply
    // cut by the deadline, one too long to read) would be taken for the next replies' headers.
    bool in_step = false;
    if (channel_->write(req, {}, deadline) && read_exact(hdr, 4)) {
      len = static_cast<uint32_t>(static_cast<uint8_t>(hdr[0])) << 24 |
            static_cast<uint32_t>(static_cast<uint8_t>(hdr[1])) << 16 |
            static_cast<uint32_t>(static_cast<uint8_t>(hdr[2])) << 8 | static_cast<uint8_t>(hdr[3]);
      in_step = len >= 1 && len < 65536 && read_exact(body, len);
      if (in_step && len >= 5 && static_cast<uint8_t>(body[0]) == FXP_EXTENDED_REPLY) {
        PacketReader lr(std::string_view(body).substr(5));
        auto mp = lr.u64(), mr = lr.u64(), mw = lr.u64(), mh = lr.u64();
        if (mp && mr && mw && mh) {
          limits_ = {*mp, *mr, *mw, *mh};
          limits_from_server_ = true;
        }
      }
    }
    if (!in_step) {
      error = failed("no whole answer to limits@openssh.com");
      return false;
    }
  }
  return true;
}

bool Connection::read_exact(std::string& out, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + endpoint_.timeout;
  out.resize(n);
  size_t got = 0;
  while (got < n) {
    const long r = channel_->read(out.data() + got, n - got);
    if (r < 0) return false;
    got += static_cast<size_t>(r);
    if (r > 0) continue;
    const int ms = ms_left(deadline);
    pollfd p{channel_->fd(), short(POLLIN | (channel_->wants_write() ? POLLOUT : 0)), 0};
    if (ms == 0 || poll(&p, 1, ms) == 0) return false;
    if ((p.revents & POLLOUT) && !channel_->flush()) return false;
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
  channel_.reset();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (abort_fd_ >= 0) close(abort_fd_);
}

std::string Connection::why(const char* what) const {
  const std::string detail = channel_ ? channel_->error() : "";
  return endpoint_.who() + ": " + what + (detail.empty() ? "" : ": " + detail);
}

std::string Connection::deadline_missed() const {
  return endpoint_.who() + ": no reply within " + std::to_string(endpoint_.timeout.count()) + " ms";
}

std::string Connection::write_deadline_missed() const {
  return endpoint_.who() + ": the server took no request within " +
         std::to_string(endpoint_.timeout.count()) + " ms";
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
  p.read_bytes = read_bytes_of(request);
  if (p.read_bytes > 0) {
    std::unique_lock lock(window_mu_);
    window_cv_.wait(lock, [&] {
      return !alive_ || read_bytes_in_flight_ == 0 ||
             read_bytes_in_flight_ + p.read_bytes <= read_window_;
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
  // READs count against the read window: they go direct only while no other READ is out (the
  // small read of a random access, a whole small file), and within the window.
  size_t read_bytes = 0;
  for (auto& f : framed) read_bytes += read_bytes_of(f);
  auto window_taken = [&] {  // lock order: mu_ before window_mu_ (send() takes one at a time)
    if (read_bytes == 0) return true;
    std::lock_guard window(window_mu_);
    if (read_bytes_in_flight_ != 0 || read_bytes > read_window_) return false;
    read_bytes_in_flight_ += read_bytes;
    return true;
  };
  uint32_t first_id = 0;
  if (!framed.empty()) {
    std::lock_guard lock(mu_);
    if (alive_ && !direct_ && queue_.empty() && in_flight_ == 0 &&
        static_cast<uint64_t>(next_id_) + framed.size() <= UINT32_MAX &&  // ids do not wrap
        window_taken()) {
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
    release_read_bytes(read_bytes);
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

bool Connection::write_request(const Request& r, Deadline deadline) {
  return channel_->write(r.framed, r.tail, deadline);
}

bool Connection::write_joining(const Request& r, std::string& joined, Deadline deadline) {
  const size_t size = r.size();
  if (size >= kJoinedWrite) return flush_joined(joined, deadline) && write_request(r, deadline);
  if (joined.size() + size > kJoinedWrite && !flush_joined(joined, deadline)) return false;
  joined.append(r.framed);
  for (std::string_view piece : r.tail) joined.append(piece);
  return true;
}

bool Connection::flush_joined(std::string& joined, Deadline deadline) {
  if (joined.empty()) return true;
  const bool ok = channel_->write(joined, {}, deadline);
  joined.clear();
  return ok;
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
  std::string joined;
  bool written = true;
  for (auto& f : framed) {
    written = write_joining(f, joined, deadline);
    if (!written) break;
  }
  if (!written || !flush_joined(joined, deadline)) {
    // Out of time rather than broken: the server is hung (as for a reply that does not come),
    // and the pool must hear it, or every caller would wait a deadline on a new connection.
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string reason = write_deadline_missed();
      mark_dead(reason);
      report_hung(reason);
      return finish();
    }
    mark_dead(why("write failed"));
    return finish();
  }
  bool hangup = false;
  for (;;) {
    if (!drain_replies(hangup, first_id, &got)) {
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
    pollfd fds[2] = {{channel_->fd(), short(POLLIN | (channel_->wants_write() ? POLLOUT : 0)), 0},
                     {abort_fd_, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(ms)) < 0 && errno != EINTR) {
      mark_dead(endpoint_.who() + ": poll failed");
      return finish();
    }
    if (fds[1].revents & POLLIN) return finish();  // shut down by its owner meanwhile
    if ((fds[0].revents & POLLOUT) && !channel_->flush()) {
      mark_dead(why("write failed"));
      return finish();
    }
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
    const long n = channel_->read(space.data, space.size);
    if (n < 0) return false;
    if (n == 0 && hangup) return false;  // the socket hung up and the channel has nothing more
    if (n == 0) return true;
    hangup = false;
    in_.got(static_cast<size_t>(n));
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
    // Each request is registered before anything that holds it is written.
    std::string joined;
    Deadline last_deadline{};
    auto deadline = [&] {
      return last_deadline = std::chrono::steady_clock::now() + endpoint_.timeout;
    };
    for (auto& [request, p] : batch) {
      const std::string& framed = request.framed;
      uint32_t id = static_cast<uint32_t>(static_cast<uint8_t>(framed[5])) << 24 |
                    static_cast<uint32_t>(static_cast<uint8_t>(framed[6])) << 16 |
                    static_cast<uint32_t>(static_cast<uint8_t>(framed[7])) << 8 |
                    static_cast<uint8_t>(framed[8]);
      pending_.emplace(id, std::move(p));
      if (!write_joining(request, joined, deadline())) {
        // Requests of this batch not yet registered still need an answer.
        std::lock_guard lock(mu_);
        for (auto& rest : batch)
          if (!rest.first.framed.empty() && &rest.first != &request)
            queue_.push_back(std::move(rest));
        write_failed = true;
        break;
      }
      request.framed.clear();  // written (or joined)
      request.tail.clear();
    }
    if (!write_failed && !flush_joined(joined, deadline())) write_failed = true;
    if (write_failed) {
      if (std::chrono::steady_clock::now() >= last_deadline) {  // hung, as in call_direct
        const std::string reason = write_deadline_missed();
        fail_all(reason);
        ssh.unlock();
        report_hung(reason);
        return;
      }
      fail_all(why("write failed"));
      return;
    }

    // 2. Drain every reply that has arrived.
    if (!drain_replies(hangup)) {
      fail_all(why("connection lost"));
      return;
    }

    // 3. Sleep until the socket or a caller wakes us, or the oldest request's deadline. With
    // nothing pending, only a hang-up of the socket matters (replies to direct calls are their
    // callers' to read), and a look at what came meanwhile every kIdleServiceMs (keepalives).
    auto now = std::chrono::steady_clock::now();
    int timeout_ms = pending_.empty() ? kIdleServiceMs : -1;
    for (auto& [_, p] : pending_) {
      if (p.deadline <= now) {
        const std::string reason = deadline_missed();
        fail_all(reason);
        ssh.unlock();
        report_hung(reason);
        return;
      }
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count() + 1;
      if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(ms);
    }
    const short socket_events =
        short((pending_.empty() ? POLLRDHUP : POLLIN) | (channel_->wants_write() ? POLLOUT : 0));
    pollfd fds[2] = {{channel_->fd(), socket_events, 0}, {wake_fd_, POLLIN, 0}};
    ssh.unlock();
    {
      std::lock_guard lock(mu_);
      if (!queue_.empty()) continue;
    }
    if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) {
      std::lock_guard relock(ssh_mu_);
      fail_all(endpoint_.who() + ": poll failed");
      return;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t v;
      (void)!read(wake_fd_, &v, sizeof v);
    }
    // A hang-up is reported by the next drain, after what the channel buffered has been read.
    hangup = fds[0].revents & (POLLHUP | POLLERR | POLLRDHUP);
    if (fds[0].revents & POLLOUT) {
      std::lock_guard relock(ssh_mu_);
      if (!channel_->flush()) {
        fail_all(why("write failed"));
        return;
      }
    }
  }
  std::lock_guard ssh(ssh_mu_);
  if (alive_) fail_all(endpoint_.who() + ": connection closed");
}

}  // namespace skein::sftp
