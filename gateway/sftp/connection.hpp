// One SSH session running the SFTP subsystem, with its own I/O thread. Requests from any thread
// are queued, written in order and matched to replies by id, so many stay in flight at once
// (reads and writes alike). Every request has a deadline; a connection that misses one, or whose
// transport fails, is dead: every waiter gets EIO and the owner replaces it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "sftp/protocol.hpp"
#include "skein/result.hpp"

struct ssh_session_struct;
struct ssh_channel_struct;

namespace skein::sftp {

struct Endpoint {
  std::string host;
  int port = 22;
  std::string user;
  std::string identity_file;
  std::string known_hosts;
  std::chrono::milliseconds timeout{15000};
};

// Connects to `endpoint`, verifies its host key against the endpoint's known_hosts (an unknown or
// changed key is refused) and authenticates with its identity file. Returns null with a message
// naming the endpoint and the cause in `error`. The caller owns the session (ssh_free).
ssh_session_struct* open_ssh_session(const Endpoint& endpoint, std::string& error);

class Connection {
 public:
  // Connects, checks the host key against the endpoint's known_hosts (an unknown or changed key is
  // refused), authenticates with the identity file and starts SFTP. On failure returns null and
  // sets `error` to a message naming the endpoint and the cause.
  static std::unique_ptr<Connection> connect(const Endpoint& ep, std::string& error);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a packet built by PacketWriter; the future yields its reply or EIO.
  std::future<Result<Reply>> send(std::string framed);
  Result<Reply> call(std::string framed) { return send(std::move(framed)).get(); }

  bool alive() const { return alive_.load(); }
  size_t in_flight() const { return in_flight_.load(); }
  const Limits& limits() const { return limits_; }
  bool has_extension(const std::string& name) const { return extensions_.count(name) > 0; }
  // Why the connection died, for logs.
  std::string failure() const;

 private:
  Connection() = default;
  void io_loop();
  void fail_all(const std::string& why);
  bool handshake(std::string& error);

  struct Pending {
    std::promise<Result<Reply>> promise;
    std::chrono::steady_clock::time_point deadline;
    size_t read_bytes = 0;  // data a READ may bring back
  };
  void release_read_bytes(size_t n);

  ssh_session_struct* session_ = nullptr;
  ssh_channel_struct* channel_ = nullptr;
  Endpoint endpoint_;
  Limits limits_;
  std::set<std::string> extensions_;
  int wake_fd_ = -1;

  // Queue of framed requests not yet written; guarded by mu_.
  mutable std::mutex mu_;
  std::deque<std::pair<std::string, Pending>> queue_;
  std::string failure_;
  uint32_t next_id_ = 1;

  // Owned by the I/O thread alone.
  std::unordered_map<uint32_t, Pending> pending_;
  std::string inbuf_;

  // Bytes that outstanding READs may bring back. Kept under libssh's channel window (1.28 MB), so
  // replies always fit it: the server then never stalls writing a reply while we are blocked
  // writing a request to it, which would deadlock the channel until the deadline.
  static constexpr size_t kReadWindow = 1000000;
  std::mutex window_mu_;
  std::condition_variable window_cv_;
  size_t read_bytes_in_flight_ = 0;

  std::atomic<bool> alive_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> in_flight_{0};
  std::thread io_thread_;
};

}  // namespace skein::sftp
