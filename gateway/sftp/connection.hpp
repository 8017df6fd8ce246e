// One SSH session running the SFTP subsystem, with its own I/O thread. Requests from any thread
// are queued, written in order and matched to replies by id, so many stay in flight at once
// (reads and writes alike). Every request has a deadline; a connection that misses one, or whose
// transport fails, is dead: every waiter gets EIO and the owner replaces it.
//
// A synchronous call() on an idle connection skips the I/O thread: the caller writes its request
// and reads the reply itself. On this kind of machine a thread hand-off costs about as much as the
// server's work, and a metadata call would otherwise pay four of them.
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
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "sftp/byte_channel.hpp"
#include "sftp/endpoint.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein::sftp {

class Connection {
 public:
  // Connects on the endpoint's transport (libssh or OpenSSH's client; the host key checked, an
  // unknown or changed key refused; logged in with the identity file, its certificate or the
  // agent) and starts SFTP. On failure returns null and sets `error` to a message naming the
  // endpoint and the cause.
  // `on_hung` is called once if a request misses its deadline (the server stopped answering),
  // from the thread that noticed; it must not call back into this connection except shutdown().
  using OnHung = std::function<void(const std::string& why)>;
  static std::unique_ptr<Connection> connect(const Endpoint& ep, std::string& error,
                                             OnHung on_hung = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Queues a packet built by PacketWriter; the future yields its reply or EIO.
  std::future<Result<Reply>> send(Request request);
  // send() and wait; on an idle connection, in the calling thread (see above).
  Result<Reply> call(Request request);
  // Several requests at once, all in flight together, replies in the same order; on an idle
  // connection, in the calling thread.
  std::vector<Result<Reply>> call_all(std::vector<Request> requests);

  bool alive() const { return alive_.load(); }
  // Bytes that READs in flight may ask for at once; call_all() sends READs of up to this many
  // itself (more wait for the I/O thread).
  size_t read_window() const { return read_window_; }
  size_t in_flight() const { return in_flight_.load(); }
  const Limits& limits() const { return limits_; }
  // True when a READ of at most limits().max_read bytes that comes back short has reached the end
  // of the file: the server said its limits (limits@openssh.com), and OpenSSH's sftp-server, the
  // one that does, answers a READ with one read(2), which on a regular file is short only there.
  bool short_read_is_eof() const { return limits_from_server_; }
  bool has_extension(const std::string& name) const { return extensions_.count(name) > 0; }
  // The SSH implementation this connection runs on.
  SshTransport transport() const { return endpoint_.transport; }
  // Why the connection died, for logs.
  std::string failure() const;
  // Declares the connection dead: every waiter, queued, pending or in a direct call, gets EIO now.
  void shutdown(const std::string& why) { mark_dead(why); }

 private:
  Connection() = default;
  void io_loop();
  // Fails every queued and pending request; the caller holds ssh_mu_.
  void fail_all(const std::string& why);
  bool handshake(std::string& error);
  // call_all() in the calling thread; framed[i] carries id first_id + i. A connection that dies
  // meanwhile is marked dead (the I/O thread is told) and every reply not yet read is EIO.
  std::vector<Result<Reply>> call_direct(const std::vector<Request>& requests, uint32_t first_id);
  // With nothing pending the I/O thread watches the socket for a hang-up only, so that replies to
  // direct calls do not wake it; every kIdleServiceMs it still reads what came meanwhile, which
  // answers the server's keepalives (an sshd with ClientAliveInterval drops a client that leaves
  // them unanswered).
  static constexpr int kIdleServiceMs = 1000;
  // Requests smaller than this, their separate data (a small WRITE's) included, are written
  // together, up to this much a channel write: the server then decrypts and hands on one SSH
  // packet for them, not one each, and the gateway makes one send, not one each.
  static constexpr size_t kJoinedWrite = 32 * 1024;
  // Reads exactly n bytes (the handshake's replies), bounded by the timeout.
  bool read_exact(std::string& out, size_t n);
  // Writes one request to the channel by `deadline`; false if the channel failed or took no more
  // bytes by then. Caller holds ssh_mu_.
  bool write_request(const Request& request, Deadline deadline);
  // Writes `request`, or (a small one, with its separate data) appends it to `joined`, which is
  // written first when it would grow past kJoinedWrite; flush_joined() writes what is left. False
  // if the channel failed. Caller holds ssh_mu_.
  bool write_joining(const Request& request, std::string& joined, Deadline deadline);
  bool flush_joined(std::string& joined, Deadline deadline);
  // Marks the connection dead from a caller's thread; the I/O thread fails the rest and stops.
  void mark_dead(const std::string& why);
  // Reads what libssh has and hands out complete replies: those with ids first_id..first_id +
  // wanted->size() - 1 (if any) go to *wanted, others to their pending requests. Returns false when
  // the channel is broken. Caller holds ssh_mu_.
  bool drain_replies(bool hangup, uint32_t first_id = 0,
                     std::vector<std::optional<Reply>>* wanted = nullptr);

  struct Pending {
    std::promise<Result<Reply>> promise;
    std::chrono::steady_clock::time_point deadline;
    size_t read_bytes = 0;  // data a READ may bring back
  };
  void release_read_bytes(size_t n);

  void report_hung(const std::string& why);
  // Why the connection died, naming it: "user@host:port: WHAT[: the channel's error]", and the
  // message of a missed deadline.
  std::string why(const char* what) const;
  std::string deadline_missed() const;
  // The same for a write that the server did not take in time (its sftp-server stopped reading:
  // a hung export's write(2)).
  std::string write_deadline_missed() const;

  OnHung on_hung_;
  std::atomic<bool> hung_reported_{false};
  int abort_fd_ = -1;  // readable once the connection is dead: wakes a direct caller's poll
  std::unique_ptr<ByteChannel> channel_;
  Endpoint endpoint_;
  Limits limits_;
  bool limits_from_server_ = false;
  std::set<std::string> extensions_;
  int wake_fd_ = -1;

  // Queue of framed requests not yet written; guarded by mu_.
  mutable std::mutex mu_;
  std::deque<std::pair<Request, Pending>> queue_;
  std::string failure_;
  uint32_t next_id_ = 1;
  bool direct_ = false;  // a call() is being served in its caller's thread

  // The channel and what is read from it: used by the I/O thread and by a direct call(),
  // one at a time. Lock order: ssh_mu_ before mu_ and window_mu_.
  std::mutex ssh_mu_;
  std::unordered_map<uint32_t, Pending> pending_;  // written, waiting for their replies
  PacketAssembler in_;

  // Bytes that outstanding READs may bring back. On libssh, kept under its channel window (1.28
  // MB), so replies always fit it: the server then never stalls writing a reply while we are
  // blocked writing a request to it, which would deadlock the channel until the deadline.
  static constexpr size_t kLibsshReadWindow = 1000000;
  // OpenSSH's client has windows of its own (2 MiB and growing) and OpensshChannel reads while it
  // waits to write, so more may be on its way: a whole 4 MiB run of a file (RemoteFile::fetch)
  // with room for the next.
  static constexpr size_t kOpensshReadWindow = 6000000;
  size_t read_window_ = kLibsshReadWindow;
  std::mutex window_mu_;
  std::condition_variable window_cv_;
  size_t read_bytes_in_flight_ = 0;

  std::atomic<bool> alive_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<size_t> in_flight_{0};
  std::thread io_thread_;
};

}  // namespace skein::sftp
