// The mount's Watch stream; see watch_stream.hpp.
#include "watch_stream.hpp"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
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

void WatchStream::set_state(bool healthy, const std::string& why, uint32_t lease_ms) {
  std::lock_guard lock(mu_);
  if (state_.healthy != healthy) state_.since = std::chrono::steady_clock::now();
  state_.healthy = healthy;
  state_.why = why;
  if (healthy) {
    state_.lease_ms = lease_ms;
    ++state_.subscriptions;
  }
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
        // Caches first, then long lifetimes: nothing cached before the welcome survives it.
        listener_.subscribed();
        listener_.servers_watched(event.servers_watched());
        set_state(true, "", event.lease_ms());
        spdlog::info("watch stream subscribed (lease {} ms{}): long cache lifetimes",
                     event.lease_ms(),
                     event.servers_watched() ? ", servers watched" : ", servers not watched");
        continue;
      }
      if (event.seq() == 0) {  // nothing to apply nor to acknowledge
        spdlog::info("watch stream: the namespace's servers are {}watched",
                     event.servers_watched() ? "" : "no longer ");
        listener_.servers_watched(event.servers_watched());
        continue;
      }
      std::vector<Invalidation> items;
      items.reserve(static_cast<size_t>(event.invalidations_size()));
      for (const auto& i : event.invalidations()) items.push_back(from_proto(i));
      listener_.invalidate(items);
      pb::WatchRequest ack;
      ack.set_ack(event.seq());
      if (!stream->Write(ack)) {
        why = "acknowledgement could not be sent";
        break;
      }
      std::lock_guard lock(mu_);
      ++state_.events;
    }
  }
  if (!why.empty()) context.TryCancel();
  grpc::Status status = stream->Finish();
  return why.empty() ? describe(status) : why;
}

}  // namespace skein::client
