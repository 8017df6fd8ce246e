// Refused calls in the log: who was refused, without what they presented, and at most one line a
// second however many arrive (a caller guessing tokens must not flood the log).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace skein {

class RefusalLog {
 public:
  explicit RefusalLog(std::string what) : what_(std::move(what)) {}
  // Notes one refused call from `peer` (gRPC's "ipv4:1.2.3.4:5678"), whose certificate's common
  // name is `cn` ("" without a certificate).
  void note(const std::string& peer, const std::string& cn) const;

 private:
  const std::string what_;
  mutable std::mutex mu_;
  mutable std::chrono::steady_clock::time_point last_{};
  mutable uint64_t suppressed_ = 0;
};

}  // namespace skein
