// Watch stream reactors; see watch_service.hpp.
#include "coherence/watch_service.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "wire/limits.hpp"

namespace skein {
namespace {

class WatchReactor final : public grpc::ServerBidiReactor<v1::WatchRequest, v1::WatchEvent>,
                           public InvalidationBroker::Stream {
 public:
  WatchReactor(InvalidationBroker& broker, const NamespaceRegistry& registry,
               grpc::CallbackServerContext* ctx, std::atomic<size_t>& open)
      : broker_(broker), registry_(registry), ctx_(ctx), open_(open) {
    ++open_;
    StartRead(&request_);
  }

  // --- InvalidationBroker::Stream (called with the broker's lock held) ---
  void send(const v1::WatchEvent& event) override {
    std::lock_guard lock(mu_);
    if (finishing_) return;
    queue_.push_back(event);
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void end(const std::string& why) override {
    std::lock_guard lock(mu_);
    finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, why));
  }

  // --- reactions ---
  void OnReadDone(bool ok) override {
    if (!ok) {  // the mount closed its side, or the call is gone
      std::lock_guard lock(mu_);
      finish_locked(grpc::Status::OK);
      return;
    }
    if (request_.has_subscribe()) {
      subscribe(request_.subscribe());
    } else if (request_.msg_case() == v1::WatchRequest::kRenew) {
      // Behind every event queued before it, so that the mount takes its lease as renewed only
      // once it has those events too.
      v1::WatchEvent renewed;
      renewed.set_seq(0);
      renewed.set_renewed(request_.renew());
      if (session_) send(renewed);
    } else if (session_) {
      broker_.acked(session_, request_.ack());
    }
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    queue_.pop_front();
    if (ok && !queue_.empty() && !finishing_) {
      StartWrite(&queue_.front());
      return;
    }
    // No write in flight from here: a failed one (the mount went away, the call was cancelled)
    // ends the stream, and a stream ending meanwhile finishes now. gRPC calls OnDone only after
    // Finish, so a path that missed it would keep the call, and its session, for good.
    writing_ = false;
    if (!ok) finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    if (finishing_ && !finished_) {
      finished_ = true;
      Finish(final_status_);
    }
  }

  void OnDone() override {
    if (session_) broker_.detach(session_);
    --open_;
    delete this;
  }

 private:
  void subscribe(const v1::Subscribe& sub) {
    grpc::Status status;
    if (session_ || sub.mount_id().empty() || sub.mount_id().size() > wire::kMaxMountIdBytes) {
      std::lock_guard lock(mu_);
      finish_locked(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 session_ ? "already subscribed"
                                          : "subscribe needs a mount_id of 1 to " +
                                                std::to_string(wire::kMaxMountIdBytes) + " bytes"));
      return;
    }
    auto ns = registry_.authorize(ctx_, sub.ns(), status);
    if (!ns) {
      std::lock_guard lock(mu_);
      finish_locked(status);
      return;
    }
    v1::WatchEvent welcome;
    welcome.set_seq(0);
    welcome.set_lease_ms(static_cast<uint32_t>(broker_.lease().count()));
    welcome.set_renews(true);
    session_ = broker_.attach(sub.ns(), sub.mount_id(), this, &welcome);
    // A namespace destroyed between the check and the attach ended its streams without this one:
    // it ends here, as theirs did (a job namespace made anew under the name is another one).
    if (registry_.find(sub.ns()) != ns) end("namespace " + sub.ns() + " was destroyed");
  }

  // Caller holds mu_.
  void finish_locked(grpc::Status status) {
    if (finishing_) return;
    finishing_ = true;
    final_status_ = std::move(status);
    if (!writing_) {
      finished_ = true;
      Finish(final_status_);
    }
  }

  InvalidationBroker& broker_;
  const NamespaceRegistry& registry_;
  grpc::CallbackServerContext* ctx_;
  std::atomic<size_t>& open_;
  v1::WatchRequest request_;
  SessionId session_ = 0;

  std::mutex mu_;  // guards the write queue and the finishing state
  std::deque<v1::WatchEvent> queue_;
  bool writing_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

}  // namespace

grpc::ServerBidiReactor<v1::WatchRequest, v1::WatchEvent>* WatchService::Stream(
    grpc::CallbackServerContext* ctx) {
  return new WatchReactor(broker_, registry_, ctx, open_);
}

}  // namespace skein
