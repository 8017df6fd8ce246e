// Where the blocking work of a gRPC callback handler runs: in the gRPC thread that received the
// call, or on the blocking pool. Handing a call to another thread costs a wake-up, and on a small
// or virtualised machine a wake-up costs as much as the SFTP round trip the call waits for (a 4 KiB
// Read through the gateway took about twice as long with the hand-off as without, see
// docs/benchmarks.md). But gRPC's callback threads also poll for every other call and run the
// Watch streams, so only a few calls at a time may block one of them; the rest, and all large
// transfers, go to the pool. A server that hangs holds an inline call for at most the backend's
// deadline, after which the backend is down and its calls fail at once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <utility>

#include "service/blocking_pool.hpp"

namespace skein {

class CallPlacement {
 public:
  // `max_inline` calls at a time run in the thread that received them (0: none); at most
  // `max_threads` more run on the pool.
  CallPlacement(std::size_t max_threads, std::size_t max_inline)
      : pool_(max_threads), max_inline_(max_inline) {}
  CallPlacement(const CallPlacement&) = delete;
  CallPlacement& operator=(const CallPlacement&) = delete;

  // Runs `work` now, in this thread, when `may_inline` and an inline place is free; otherwise
  // queues it on the pool. Returns whether it ran inline.
  bool run(bool may_inline, std::function<void()> work) {
    if (may_inline && take_inline_place()) {
      work();
      inline_now_.fetch_sub(1, std::memory_order_acq_rel);
      return true;
    }
    pool_.run(std::move(work));
    return false;
  }

  // Runs `work`, which finishes the unary call of `ctx` through `reactor`, where run() puts it. A
  // call whose client gave up before its turn came (its deadline passed while it waited on the
  // pool, or it was cancelled) is finished CANCELLED without running: its client has reported it
  // failed (a write as EIO, say), and what it asked for must not happen after that, over what the
  // application did next.
  bool run_call(grpc::CallbackServerContext* ctx, grpc::ServerUnaryReactor* reactor,
                bool may_inline, std::function<void()> work) {
    return run(may_inline, [ctx, reactor, work = std::move(work)] {
      if (ctx->IsCancelled()) {
        reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                     "the client gave up before the call's turn came"));
        return;
      }
      work();
    });
  }

  // A unary callback handler's reactor, finished with what `handler` returns once it has run
  // where run_call() puts it.
  template <typename Handler>
  grpc::ServerUnaryReactor* serve(grpc::CallbackServerContext* ctx, bool may_inline,
                                  Handler handler) {
    auto* reactor = ctx->DefaultReactor();
    run_call(ctx, reactor, may_inline,
             [reactor, handler = std::move(handler)]() mutable { reactor->Finish(handler()); });
    return reactor;
  }

  // Queues `work` on the pool: a helper of a call running there, which must not wait for it to
  // start (the pool may be full of such calls); see DataService::read_files.
  void help(std::function<void()> work) { pool_.run(std::move(work)); }

  std::size_t max_inline() const { return max_inline_; }

 private:
  bool take_inline_place() {
    std::size_t now = inline_now_.load(std::memory_order_relaxed);
    while (now < max_inline_) {
      if (inline_now_.compare_exchange_weak(now, now + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  }

  BlockingPool pool_;
  const std::size_t max_inline_;
  std::atomic<std::size_t> inline_now_{0};
};

}  // namespace skein
