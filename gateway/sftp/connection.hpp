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

#include "sftp/endpoint.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"
#include "ssh/byte_channel.hpp"

namespace skein::sftp {

class Connection {
 public:
  // Connects, checks the host key against the endpoint's known_hosts (an unknown or changed key is
  // refused), authenticates with the identity file and starts SFTP, on the endpoint's SSH stack
  // (skein's own transport unless it says libssh; with "auto", libssh when the server offers
  // none of the algorithms of skein's). On failure returns null and sets `error` to a message
  // naming the endpoint and the cause.
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
  size_t in_flight() const { return in_flight_.load(); }
  const Limits& limits() const { return limits_; }
  bool has_extension(const std::string& name) const { return extensions_.count(name) > 0; }
  // The SSH implementation this connection runs on: native or libssh.
  SshStack stack() const { return stack_; }
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
  // Whether poll() reports the socket readable only once kReadBatch bytes are in (SO_RCVLOWAT):
  // turned on while at least kBatchReadsAbove bytes of READ replies are outstanding, so the I/O
  // thread wakes every 128 KiB rather than for every 32 KiB SSH packet (a wake-up costs about
  // as much as handling the packet); its poll then also ends after kBatchWaitMs, should fewer
  // bytes come (a short read at the end of a file). True if it is on. Caller holds ssh_mu_.
  bool batch_reads(bool on);
  static constexpr size_t kReadBatch = 128 * 1024;
  static constexpr size_t kBatchReadsAbove = 512 * 1024;
  static constexpr int kBatchWaitMs = 2;
  bool batching_ = false;
  // With nothing pending the I/O thread watches the socket for a hang-up only, so that replies to
  // direct calls do not wake it; every kIdleServiceMs it still reads what came meanwhile, which
  // answers the server's keepalives (an sshd with ClientAliveInterval drops a client that leaves
  // them unanswered).
  static constexpr int kIdleServiceMs = 1000;
  // Reads exactly n bytes (the handshake's replies), bounded by the timeout.
  bool read_exact(std::string& out, size_t n);
  // Writes one request to the channel; false if the channel failed. Caller holds ssh_mu_.
  bool write_request(const Request& request);
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

  OnHung on_hung_;
  std::atomic<bool> hung_reported_{false};
  int abort_fd_ = -1;  // readable once the connection is dead: wakes a direct caller's poll
  std::unique_ptr<ssh::ByteChannel> channel_;
  SshStack stack_ = SshStack::native;
  Endpoint endpoint_;
  Limits limits_;
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

  // Bytes that outstanding READs may bring back. Kept under libssh's channel window (1.28 MB), so
  // replies always fit it: the server then never stalls writing a reply while we are blocked
  // writing a request to it, which would deadlock the channel until the deadline. (skein's own
  // transport reads while it waits to write, and its window is larger.)
  static constexpr size_t kLibsshReadWindow = 1000000;
  // Under ssh::SessionChannel's 8 MiB. A whole 4 MiB run of a file (RemoteFile::fetch) fits with
  // room for the next; at half of it, four readers of one backend cost the gateway more CPU per
  // GiB waiting for room and the servers' sshd more per GiB (docs/benchmarks.md, "Four readers").
  static constexpr size_t kNativeReadWindow = 6000000;
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
