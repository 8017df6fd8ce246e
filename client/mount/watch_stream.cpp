// The mount's Watch stream; see watch_stream.hpp.
#include "watch_stream.hpp"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>

#include "skein/v1/watch.grpc.pb.h"

namespace skein::client {
namespace {

namespace pb = ::skein::v1;

constexpr char kTokenMetadata[] = "x-skein-token";
constexpr char kMountMetadata[] = "x-skein-mount";

Invalidation from_proto(const pb::Invalidation& i) {
  Invalidation out;
  switch (i.kind()) {
    case pb::Invalidation::ENTRY:
      out.kind = Invalidation::Kind::kEntry;
      break;
    case pb::Invalidation::TREE:
      out.kind = Invalidation::Kind::kTree;
      break;
    case pb::Invalidation::ALL:
      out.kind = Invalidation::Kind::kAll;
      break;
    default:  // INODE, or a kind newer than this mount: drop the path's cache at least
      out.kind = i.kind() == pb::Invalidation::INODE ? Invalidation::Kind::kInode
                                                     : Invalidation::Kind::kTree;
      break;
  }
  out.path = i.path();
  out.replaced = i.replaced() && out.kind == Invalidation::Kind::kEntry;
  if (out.kind != Invalidation::Kind::kAll && out.path.empty()) out.kind = Invalidation::Kind::kAll;
  return out;
}

std::string describe(const grpc::Status& status) {
  if (status.ok()) return "the gateway ended the stream";
  std::string what = status.error_message();
  if (what.empty()) what = "gRPC status " + std::to_string(status.error_code());
  return what;
}

}  // namespace

WatchStream::WatchStream(std::shared_ptr<grpc::Channel> channel, Options options,
                         Listener& listener)
    : channel_(std::move(channel)), options_(std::move(options)), listener_(listener) {
  state_.why = "not subscribed yet";
  state_.since = std::chrono::steady_clock::now();
}

WatchStream::~WatchStream() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void WatchStream::start() {
  if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
}

WatchStream::State WatchStream::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

void WatchStream::set_state(bool healthy, const std::string& why, uint32_t lease_ms,
                            bool welcomed) {
  std::lock_guard lock(mu_);
  if (state_.healthy != healthy) state_.since = std::chrono::steady_clock::now();
  state_.healthy = healthy;
  state_.why = why;
  if (healthy) {
    state_.lease_ms = lease_ms;
    if (welcomed) ++state_.subscriptions;
  }
}

struct WatchStream::Lease {
  using Clock = std::chrono::steady_clock;
  explicit Lease(std::chrono::milliseconds length, Clock::time_point subscribed)
      : length(length), confirmed(subscribed) {}
  const std::chrono::milliseconds length;
  std::mutex mu;  // a leaf
  // When the last renew the gateway answered was sent (at first: the subscription's request,
  // which the welcome answered).
  Clock::time_point confirmed;
  std::map<uint64_t, Clock::time_point> sent;  // renews not answered yet, by id
  uint64_t next_id = 1;
  bool expired = false;
  // Trusted until this long after `confirmed`: short of the whole lease, so that the caches are
  // gone before the gateway can have gone on without this mount.
  std::chrono::milliseconds trusted() const { return length * 85 / 100; }
  std::chrono::milliseconds tick() const {
    return std::max(std::chrono::milliseconds(5), length / 10);
  }
};

template <typename Stream>
void WatchStream::keep_lease(std::stop_token stop, Stream& stream, Lease& lease) {
  std::mutex sleep_mu;
  std::condition_variable_any sleep_cv;
  for (uint64_t tick = 0; !stop.stop_requested(); ++tick) {
    if (tick % 2 == 0) {
      pb::WatchRequest renew;
      {
        std::lock_guard lock(lease.mu);
        renew.set_renew(lease.next_id++);
        lease.sent.emplace(renew.renew(), Lease::Clock::now());
        while (lease.sent.size() > 256) lease.sent.erase(lease.sent.begin());
      }
      std::lock_guard lock(write_mu_);
      if (!stream.Write(renew)) return;  // the stream is ending: its reader says why
    }
    auto overdue = [&] {
      std::lock_guard lock(lease.mu);
      return !lease.expired && Lease::Clock::now() >= lease.confirmed + lease.trusted();
    };
    if (overdue()) {
      // Decided again with the Listener held, as the reader brings a lease back: an answer read
      // meanwhile is either seen here or comes after the loss, so a lease is never left lost
      // while answered.
      std::lock_guard listening(listener_mu_);
      if (overdue()) {
        {
          std::lock_guard lock(lease.mu);
          lease.expired = true;
        }
        const std::string why = "no answer from the gateway within " +
                                std::to_string(lease.trusted().count()) + " ms of its " +
                                std::to_string(lease.length.count()) + " ms lease";
        spdlog::warn("watch stream: {}: short cache lifetimes until it answers", why);
        set_state(false, why, 0);
        listener_.lost(why);
      }
    }
    std::unique_lock lock(sleep_mu);
    sleep_cv.wait_for(lock, stop, lease.tick(), [] { return false; });
  }
}

void WatchStream::trust(bool watched, uint32_t lease_ms, bool welcomed) {
  // Caches first, then long lifetimes: nothing cached before (a welcome's: before it; a lease's
  // that came back: for short meanwhile) survives it.
  listener_.subscribed();
  listener_.servers_watched(watched);
  set_state(true, "", lease_ms, welcomed);
}

bool WatchStream::renewed(Lease& lease, uint64_t id) {
  std::lock_guard lock(lease.mu);
  auto it = lease.sent.find(id);
  if (it == lease.sent.end()) return false;
  lease.confirmed = std::max(lease.confirmed, it->second);
  lease.sent.erase(lease.sent.begin(), std::next(it));
  if (!lease.expired || Lease::Clock::now() >= lease.confirmed + lease.trusted()) return false;
  lease.expired = false;
  return true;
}

bool WatchStream::sleep_for(std::stop_token stop, std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  wake_.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

void WatchStream::run(std::stop_token stop) {
  // Cancels the call in progress, so a blocked Read returns at once.
  std::stop_callback cancel(stop, [this] {
    std::lock_guard lock(mu_);
    if (context_ != nullptr) context_->TryCancel();
  });
  std::mt19937_64 rng{std::random_device{}()};
  auto backoff = options_.min_backoff;
  while (!stop.stop_requested()) {
    const uint64_t before = state().subscriptions;
    std::string why = stream_once(stop);
    if (stop.stop_requested()) break;
    const bool was_healthy = state().healthy;
    if (state().subscriptions != before) backoff = options_.min_backoff;  // it did work for a while
    set_state(false, why, 0);
    if (was_healthy) {
      spdlog::warn("watch stream lost ({}): short cache lifetimes until it is back", why);
      std::lock_guard listening(listener_mu_);
      listener_.lost(why);
    } else {
      spdlog::debug("watch stream: cannot subscribe: {}", why);
    }
    // Full jitter in the upper half: mounts that lost the same gateway do not come back at once.
    std::uniform_int_distribution<long> jitter(backoff.count() / 2, backoff.count());
    if (!sleep_for(stop, std::chrono::milliseconds(jitter(rng)))) break;
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

std::string WatchStream::stream_once(std::stop_token stop) {
  grpc::ClientContext context;
  if (!options_.token.empty()) context.AddMetadata(kTokenMetadata, options_.token);
  context.AddMetadata(kMountMetadata, options_.mount_id);
  {
    std::lock_guard lock(mu_);
    if (stop.stop_requested()) return "stopping";
    context_ = &context;
  }
  struct Unpublish {
    WatchStream* self;
    ~Unpublish() {
      std::lock_guard lock(self->mu_);
      self->context_ = nullptr;
    }
  } unpublish{this};

  auto stub = pb::Watch::NewStub(channel_);
  auto stream = stub->Stream(&context);
  pb::WatchRequest subscribe;
  subscribe.mutable_subscribe()->set_ns(options_.ns);
  subscribe.mutable_subscribe()->set_mount_id(options_.mount_id);
  std::string why;
  const auto subscribed_at = std::chrono::steady_clock::now();
  std::optional<Lease> lease;
  std::jthread keeper;  // renews the lease while the stream lasts (stopped before Finish)
  bool watched = false;
  if (stream->Write(subscribe)) {
    pb::WatchEvent event;
    bool welcomed = false;
    while (stream->Read(&event)) {
      if (!welcomed) {
        if (event.seq() != 0) {
          why = "the gateway did not start with a welcome";
          break;
        }
        welcomed = true;
        watched = event.servers_watched();
        {
          std::lock_guard listening(listener_mu_);
          trust(watched, event.lease_ms(), true);
        }
        spdlog::info("watch stream subscribed (lease {} ms{}{}): long cache lifetimes",
                     event.lease_ms(), watched ? ", servers watched" : ", servers not watched",
                     event.renews() ? ", renewed" : "");
        if (event.renews() && event.lease_ms() > 0) {
          lease.emplace(std::chrono::milliseconds(event.lease_ms()), subscribed_at);
          keeper = std::jthread(
              [this, &stream, &lease](std::stop_token s) { keep_lease(s, *stream, *lease); });
        }
        continue;
      }
      if (event.seq() == 0 && event.renewed() != 0) {
        if (!lease) continue;
        std::lock_guard listening(listener_mu_);  // with the keeper's loss, one after the other
        if (renewed(*lease, event.renewed())) {
          spdlog::info("watch stream: the gateway answers again: long cache lifetimes");
          trust(watched, static_cast<uint32_t>(lease->length.count()), false);
        }
        continue;
      }
      if (event.seq() == 0) {  // nothing to apply nor to acknowledge
        spdlog::info("watch stream: the namespace's servers are {}watched",
                     event.servers_watched() ? "" : "no longer ");
        watched = event.servers_watched();
        std::lock_guard listening(listener_mu_);
        listener_.servers_watched(watched);
        continue;
      }
      std::vector<Invalidation> items;
      items.reserve(static_cast<size_t>(event.invalidations_size()));
      for (const auto& i : event.invalidations()) items.push_back(from_proto(i));
      {
        std::lock_guard listening(listener_mu_);
        listener_.invalidate(items);
      }
      pb::WatchRequest ack;
      ack.set_ack(event.seq());
      bool written;
      {
        std::lock_guard writing(write_mu_);
        written = stream->Write(ack);
      }
      if (!written) {
        why = "acknowledgement could not be sent";
        break;
      }
      std::lock_guard lock(mu_);
      ++state_.events;
    }
  }
  if (!why.empty()) context.TryCancel();
  // The stream is over (the gateway ended it, or it was cancelled): a renew's Write fails at once.
  keeper.request_stop();
  if (keeper.joinable()) keeper.join();
  grpc::Status status = stream->Finish();
  return why.empty() ? describe(status) : why;
}

}  // namespace skein::client
