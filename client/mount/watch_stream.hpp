// WatchStream: the mount's end of the gateway's Watch service (proto/skein/v1/watch.proto). A
// thread of its own subscribes, hands each event's invalidations to a Listener, acknowledges the
// event once the Listener has applied it, and subscribes again with backoff (100 ms to 2 s, with
// jitter) whenever the stream ends. Knows nothing of FUSE: the Listener does the invalidating.
//
// The lease: a gateway that goes on with a change after a lease without this mount's
// acknowledgement ends its stream, but a mount cut off from it would hear of that only when gRPC's
// keepalive gave up (about 15 s), serving its caches meanwhile. So, where the gateway answers
// renews (its welcome's `renews`), a second thread renews the lease every fifth of it, looks at it
// every tenth and, once no renew sent within 0.85 of the lease before now has been answered,
// tells the Listener the stream is lost (its caches go, as for an ended stream) before the
// gateway can have gone on without it. The next answer makes it subscribed() again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace skein::client {

// One invalidation of an event, as watch.proto's Invalidation.
struct Invalidation {
  enum class Kind { kInode, kEntry, kTree, kAll };
  Kind kind = Kind::kInode;
  std::string path;       // normalised virtual path; empty for kAll
  bool replaced = false;  // kEntry: a rename replaced the file the name named
};

class WatchStream {
 public:
  // Called one call at a time, from the stream's thread or its lease keeper.
  class Listener {
   public:
    virtual ~Listener() = default;
    // The gateway welcomed a subscription: from now on it reports every change. Events may have
    // been missed before, so everything cached must go.
    virtual void subscribed() = 0;
    // The stream ended (or could not be set up), or the gateway left the lease unrenewed: nothing
    // will be reported until subscribed(). Called once per loss, not for each failed attempt to
    // come back.
    virtual void lost(const std::string& why) = 0;
    // Apply one event; it is acknowledged when this returns.
    virtual void invalidate(const std::vector<Invalidation>& items) = 0;
    // Whether the gateway's remote watchers report every change on the namespace's servers: told
    // right after subscribed(), and again whenever it changes.
    virtual void servers_watched(bool /*watched*/) {}
  };

  struct Options {
    std::string ns;
    std::string mount_id;  // the `x-skein-mount` of every gateway call
    std::string token;     // sent as x-skein-token when not empty
    std::chrono::milliseconds min_backoff{100};
    std::chrono::milliseconds max_backoff{2000};
  };

  // What status output shows.
  struct State {
    bool healthy = false;
    std::string why;  // when not healthy: why not
    uint32_t lease_ms = 0;
    uint64_t subscriptions = 0;                   // welcomes received so far
    uint64_t events = 0;                          // events applied and acknowledged so far
    std::chrono::steady_clock::time_point since;  // of the current state
  };

  WatchStream(std::shared_ptr<grpc::Channel> channel, Options options, Listener& listener);
  // Stops the thread: cancels the stream and joins.
  ~WatchStream();
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  // Starts the thread (once).
  void start();
  State state() const;

 private:
  void run(std::stop_token stop);
  // One subscription, until the stream ends; returns why it ended.
  std::string stream_once(std::stop_token stop);
  struct Lease;
  // The lease keeper of one subscription: renews and watches `lease` until stopped or a renew
  // cannot be written.
  template <typename Stream>
  void keep_lease(std::stop_token stop, Stream& stream, Lease& lease);
  // The stream is to be trusted (a welcome, or a lease that came back; `welcomed`: the first):
  // tells the Listener (held by the caller) and sets the state.
  void trust(bool watched, uint32_t lease_ms, bool welcomed);
  // Renewed (the answer to renew `id`): true when that brings an expired lease back.
  bool renewed(Lease& lease, uint64_t id);
  // `welcomed`: a new subscription (counted), not a lease that came back.
  void set_state(bool healthy, const std::string& why, uint32_t lease_ms, bool welcomed = true);
  // Sleeps `d` unless stopped first; returns false when stopped.
  bool sleep_for(std::stop_token stop, std::chrono::milliseconds d);

  std::shared_ptr<grpc::Channel> channel_;
  Options options_;
  Listener& listener_;

  std::mutex listener_mu_;  // one Listener call at a time (taken before mu_)
  std::mutex write_mu_;     // one Write on the stream at a time (acks, renews)
  mutable std::mutex mu_;   // a leaf
  State state_;             // guarded by mu_
  // The call in progress, cancelled by the destructor; guarded by mu_.
  grpc::ClientContext* context_ = nullptr;
  std::condition_variable_any wake_;  // with mu_: ends a backoff sleep early at stop

  std::jthread thread_;  // last: stopped and joined first
};

}  // namespace skein::client
