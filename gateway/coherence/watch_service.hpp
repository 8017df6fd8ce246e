// The Watch service: one bidirectional stream per mount, carrying invalidations from the broker
// and acknowledgements back. Built on gRPC's callback API: one reactor per stream, one write in
// flight at a time, nothing blocking inside a reaction.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "coherence/invalidation_broker.hpp"
#include "service/namespace_registry.hpp"
#include "skein/v1/watch.grpc.pb.h"

namespace skein {

class WatchService final : public v1::Watch::CallbackService {
 public:
  WatchService(InvalidationBroker& broker, const NamespaceRegistry& registry)
      : broker_(broker), registry_(registry) {}
  grpc::ServerBidiReactor<v1::WatchRequest, v1::WatchEvent>* Stream(
      grpc::CallbackServerContext* ctx) override;
  // Streams whose call gRPC has not yet ended (each ends once its reactor has finished).
  size_t open_streams() const { return open_.load(); }

 private:
  InvalidationBroker& broker_;
  const NamespaceRegistry& registry_;
  std::atomic<size_t> open_{0};
};

}  // namespace skein
