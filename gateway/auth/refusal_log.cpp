// Rate-limited log of refused calls; see refusal_log.hpp.
#include "auth/refusal_log.hpp"

#include <spdlog/spdlog.h>

namespace skein {

void RefusalLog::note(const std::string& peer, const std::string& cn) const {
  uint64_t before = 0;
  {
    std::lock_guard lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (now - last_ < std::chrono::seconds(1)) {
      ++suppressed_;
      return;
    }
    last_ = now;
    before = suppressed_;
    suppressed_ = 0;
  }
  std::string who = peer + (cn.empty() ? "" : " (certificate CN=" + cn + ")");
  if (before)
    spdlog::warn("refused {} from {} ({} more refused in the second before)", what_, who, before);
  else
    spdlog::warn("refused {} from {}", what_, who);
}

}  // namespace skein
