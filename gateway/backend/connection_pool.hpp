// The SFTP connections to one storage server for one configured backend: a fixed number of slots,
// each holding a connection opened on demand and replaced when it dies. A server that stops
// answering is marked down: every call fails at once with EIO while a background thread
// reconnects, backing off exponentially with jitter, and marks it up only once the server has
// answered a request of the export's root within the deadline (an sshd that answers while the
// export hangs does not). A connection that misses a deadline (a hung server) marks it down and
// shuts every connection to it down, so that callers waiting on a sibling connection do not each
// wait out a deadline of their own. The pool also counts what goes through it, for the admin's
// statistics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "backend/backend_config.hpp"
#include "sftp/connection.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein {

class ConnectionPool {
 public:
  explicit ConnectionPool(BackendConfig cfg);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  const BackendConfig& config() const { return cfg_; }
  // True while the server answers.
  bool up() const { return up_.load(); }
  // Live connections in the pool.
  size_t live_connections() const;
  // What the live connections run on: "libssh" or "openssh", or "" with none.
  std::string ssh_stacks() const;
  // Opens the rest of the pool's connections in the background, so the first large transfer
  // does not pay for SSH handshakes.
  void warm_up();

  size_t slot_count() const { return slots_.size(); }
  // The slot of a live connection with the fewest requests in flight; among equals, in turn.
  size_t pick_slot();
  // The slot's connection. One that died is replaced by the caller that finds it so while the
  // backend is up; a reconnect that fails marks the backend down, and the callers that waited on
  // the slot meanwhile then get EIO at once instead of dialing in turn. While the backend is down
  // every caller gets EIO at once.
  Result<std::shared_ptr<sftp::Connection>> connection(size_t slot);
  // Sends a request on some live connection; retries once on a fresh connection when the one
  // used died, which is safe only for requests that can be repeated (`idempotent`).
  Result<sftp::Reply> call(const std::string& framed, bool idempotent);
  // Sends a request without waiting.
  std::future<Result<sftp::Reply>> start(std::string framed);

  // `listener` runs on the prober's thread each time the server answers again after it was down.
  void on_back_up(std::function<void()> listener);

  void count_ops(uint64_t n) { ops_.fetch_add(n, std::memory_order_relaxed); }
  void count_read(uint64_t bytes) { bytes_read_.fetch_add(bytes, std::memory_order_relaxed); }
  void count_written(uint64_t bytes) { bytes_written_.fetch_add(bytes, std::memory_order_relaxed); }
  BackendCounters counters() const;

 private:
  struct Slot {
    std::mutex mu;
    std::shared_ptr<sftp::Connection> conn;
  };

  void mark_down(const std::string& why);
  // A connection missed a deadline: the server is hung. Down at once, and every connection to it
  // shut down, so that no caller waits for another deadline on a sibling connection.
  void hung(const std::string& why);
  std::unique_ptr<sftp::Connection> connect(std::string& error);
  // Whether the server answers requests of the export's root (LSTAT, and STATVFS where it has
  // the extension) on `c` within the deadline; `error` says why not.
  bool export_answers(sftp::Connection& c, std::string& error);
  void probe_until_up();

  // What a connection's deadline callback reaches the pool through: the pool's connections may
  // outlive it (a caller's reference) or still run while it is destroyed, so the destructor
  // cuts the link first, waiting for a call under way.
  struct HungRelay {
    std::mutex mu;
    ConnectionPool* pool = nullptr;
  };

  BackendConfig cfg_;
  std::shared_ptr<HungRelay> relay_ = std::make_shared<HungRelay>();
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<size_t> round_robin_{0};
  std::atomic<bool> up_{true};
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0}, ops_{0};

  std::mutex probe_mu_;  // guards prober_, probing_, stopping_, back_up_, up_since_, failures_
  std::vector<std::function<void()>> back_up_;
  // When the prober last marked the backend up, and how many reconnects it had tried by then: a
  // backend that goes down again within a minute of that goes on backing off from there.
  std::chrono::steady_clock::time_point up_since_{};
  int failures_ = 0;
  std::condition_variable probe_cv_;
  std::thread prober_;
  std::thread warmer_;
  bool probing_ = false;
  bool stopping_ = false;
};

}  // namespace skein
