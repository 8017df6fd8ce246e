// The connection pool of one SFTP backend; see connection_pool.hpp.
#include "backend/connection_pool.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <random>

namespace skein {
using namespace sftp;
namespace {

constexpr auto kBackoffBase = std::chrono::milliseconds(100);
constexpr auto kBackoffMax = std::chrono::milliseconds(3000);
// A backend that stays up this long starts its next outage's backoff from kBackoffBase again; one
// that goes down sooner (a server that comes and goes) goes on from where the last one ended.
constexpr auto kStayedUp = std::chrono::seconds(60);

std::chrono::milliseconds backoff_delay(int failures) {
  thread_local std::mt19937 rng{std::random_device{}()};
  auto d = kBackoffBase * (1 << std::min(failures, 10));
  if (d > kBackoffMax) d = kBackoffMax;
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return std::chrono::milliseconds(
      static_cast<int64_t>(static_cast<double>(d.count()) * jitter(rng)));
}

}  // namespace

ConnectionPool::ConnectionPool(BackendConfig cfg) : cfg_(std::move(cfg)) {
  int n = std::max(1, cfg_.connections);
  for (int i = 0; i < n; ++i) slots_.push_back(std::make_unique<Slot>());
  relay_->pool = this;
}

ConnectionPool::~ConnectionPool() {
  {
    std::lock_guard lock(relay_->mu);
    relay_->pool = nullptr;
  }
  {
    std::lock_guard lock(probe_mu_);
    stopping_ = true;
  }
  probe_cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (warmer_.joinable()) warmer_.join();
}

void ConnectionPool::warm_up() {
  if (warmer_.joinable()) return;
  warmer_ = std::thread([this] {
    for (size_t i = 0; i < slots_.size(); ++i) {
      {
        std::lock_guard lock(probe_mu_);
        if (stopping_) return;
      }
      if (!connection(i)) return;  // down: the prober takes over
    }
  });
}

size_t ConnectionPool::pick_slot() {
  // Prefer a live connection with the fewest requests in flight; among equals, rotate.
  size_t start = round_robin_.fetch_add(1) % slots_.size();
  size_t best = start;
  size_t best_load = SIZE_MAX;
  for (size_t k = 0; k < slots_.size(); ++k) {
    size_t i = (start + k) % slots_.size();
    std::shared_ptr<Connection> c;
    {
      std::unique_lock lock(slots_[i]->mu, std::try_to_lock);
      if (!lock) continue;
      c = slots_[i]->conn;
    }
    size_t load = (c && c->alive()) ? c->in_flight() : SIZE_MAX - 1;
    if (load < best_load) {
      best = i;
      best_load = load;
      if (load == 0) break;
    }
  }
  return best;
}

size_t ConnectionPool::live_connections() const {
  size_t n = 0;
  for (auto& s : slots_) {
    std::lock_guard lock(s->mu);
    if (s->conn && s->conn->alive()) ++n;
  }
  return n;
}

std::string ConnectionPool::ssh_stacks() const {
  for (auto& s : slots_) {
    std::lock_guard lock(s->mu);
    if (s->conn && s->conn->alive()) return sftp::ssh_transport_name(s->conn->transport());
  }
  return "";
}

void ConnectionPool::mark_down(const std::string& why) {
  std::lock_guard lock(probe_mu_);
  if (up_.exchange(false)) {
    spdlog::warn("backend {} is down: {}", cfg_.name, why);
    if (std::chrono::steady_clock::now() - up_since_ >= kStayedUp) failures_ = 0;
  }
  if (probing_ || stopping_) return;
  probing_ = true;
  if (prober_.joinable()) prober_.join();  // a finished earlier prober
  prober_ = std::thread([this] { probe_until_up(); });
}

std::unique_ptr<Connection> ConnectionPool::connect(std::string& error) {
  // The connection calls back on the thread that saw the deadline go by, which may be another
  // connection's I/O thread while the pool's slots are being destroyed: through the relay.
  return Connection::connect(cfg_.endpoint, error, [relay = relay_](const std::string& why) {
    std::lock_guard lock(relay->mu);
    if (relay->pool) relay->pool->hung(why);
  });
}

void ConnectionPool::hung(const std::string& why) {
  mark_down(why);
  for (auto& slot : slots_) {
    std::unique_lock lock(slot->mu, std::try_to_lock);  // a slot reconnecting fails on its own
    if (lock && slot->conn) slot->conn->shutdown("backend " + cfg_.name + " is down: " + why);
  }
}

bool ConnectionPool::export_answers(Connection& c, std::string& error) {
  std::vector<Request> asks;
  asks.push_back(PacketWriter(FXP_LSTAT).str(cfg_.root).take());
  if (c.has_extension("statvfs@openssh.com"))
    asks.push_back(PacketWriter(FXP_EXTENDED).str("statvfs@openssh.com").str(cfg_.root).take());
  // Any reply will do, an error status included: the server answered.
  for (auto& reply : c.call_all(std::move(asks))) {
    if (!reply) {
      error = "the export's root did not answer: " + c.failure();
      return false;
    }
  }
  return true;
}

void ConnectionPool::probe_until_up() {
  // Callers never wait for a server that is down: they get EIO at once while this thread
  // reconnects, backing off exponentially with jitter. A handshake is not enough to mark the
  // server up: an sshd answers it while the export's file system hangs (a hung NFS mount), and
  // every call would then wait out a deadline again, each mount's cache dropped every time.
  int failures = 0;
  {
    std::lock_guard lock(probe_mu_);
    failures = failures_;
  }
  for (;; ++failures) {
    {
      std::unique_lock lock(probe_mu_);
      if (probe_cv_.wait_for(lock, backoff_delay(failures), [this] { return stopping_; })) {
        probing_ = false;
        return;
      }
    }
    std::string error;
    auto c = connect(error);
    if (c && !export_answers(*c, error)) c.reset();
    if (!c) {
      spdlog::debug("backend {}: reconnect attempt {} failed: {}", cfg_.name, failures + 1, error);
      continue;
    }
    std::shared_ptr<Connection> replaced;  // let go of outside the slot's lock, as in connection()
    {
      Slot& s = *slots_[0];
      std::lock_guard lock(s.mu);
      replaced = std::move(s.conn);
      s.conn = std::shared_ptr<Connection>(std::move(c));
    }
    std::vector<std::function<void()>> listeners;
    {
      std::lock_guard lock(probe_mu_);
      probing_ = false;
      up_ = true;
      up_since_ = std::chrono::steady_clock::now();
      failures_ = failures + 1;
      listeners = back_up_;
    }
    spdlog::info("backend {} is back up", cfg_.name);
    for (auto& listener : listeners) listener();
    return;
  }
}

void ConnectionPool::on_back_up(std::function<void()> listener) {
  std::lock_guard lock(probe_mu_);
  back_up_.push_back(std::move(listener));
}

Result<std::shared_ptr<Connection>> ConnectionPool::connection(size_t slot) {
  using R = Result<std::shared_ptr<Connection>>;
  Slot& s = *slots_[slot % slots_.size()];
  // A dead connection is let go of outside the slot's lock: closing its session may wait on the
  // transport (libssh flushes the channel's close for up to the SSH timeout), and the callers of
  // the slot would wait for that too.
  std::shared_ptr<Connection> dead;
  {
    std::lock_guard lock(s.mu);
    if (s.conn && s.conn->alive()) return s.conn;
    if (s.conn) {
      spdlog::warn("backend {}: {}", cfg_.name, s.conn->failure());
      dead = std::move(s.conn);
    }
  }
  dead.reset();
  if (!up_) return R::failure(EIO);
  // The server was answering a moment ago: reconnect this slot now. A caller that waited for the
  // lock while another reconnected looks again: at the connection made, or at the backend marked
  // down when the reconnect failed (never dialing again itself: each would wait out the SSH
  // timeout in turn).
  std::lock_guard lock(s.mu);
  if (s.conn && s.conn->alive()) return s.conn;  // another caller did it meanwhile
  if (!up_) return R::failure(EIO);
  dead = std::move(s.conn);  // one that died meanwhile: destroyed once the lock is released
  std::string error;
  auto c = connect(error);
  if (!c) {
    mark_down(error);  // before the lock is released: the callers waiting for it see it down
    return R::failure(EIO);
  }
  s.conn = std::shared_ptr<Connection>(std::move(c));
  return s.conn;
}

Result<Reply> ConnectionPool::call(const std::string& framed, bool idempotent) {
  count_ops(1);
  for (int attempt = 0;; ++attempt) {
    auto conn = connection(pick_slot());
    if (!conn) return Result<Reply>::failure(conn.error());
    auto r = (*conn)->call(framed);
    if (r || (*conn)->alive() || !idempotent || attempt > 0) return r;
  }
}

std::future<Result<Reply>> ConnectionPool::start(std::string framed) {
  count_ops(1);
  auto conn = connection(pick_slot());
  if (!conn) {
    std::promise<Result<Reply>> p;
    p.set_value(Result<Reply>::failure(conn.error()));
    return p.get_future();
  }
  return (*conn)->send(std::move(framed));
}

BackendCounters ConnectionPool::counters() const {
  return {bytes_read_.load(std::memory_order_relaxed),
          bytes_written_.load(std::memory_order_relaxed), ops_.load(std::memory_order_relaxed)};
}

}  // namespace skein
