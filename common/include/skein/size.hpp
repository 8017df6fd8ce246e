// Sizes and durations as admins write them, in configuration files and on command lines ("64K",
// "4M", "2G"; "90s", "30m", "24h", "7d").
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace skein {

// "4096", "64K", "4M", "2G", "1T" (powers of 1024; "KiB", "KB" and "k" alike) to bytes; nullopt
// when it is not a size or does not fit in 64 bits.
std::optional<uint64_t> parse_size(std::string_view text);

// The longest duration skein takes anywhere (a lifetime, a grace period): 100 years. Longer ones
// are refused rather than let a time plus the duration overflow (a namespace made with a lifetime
// of 2^63 s expired at once).
constexpr std::chrono::seconds kLongestDuration{36525LL * 86400};

// "90" or "90s" (seconds), "30m", "24h", "7d" to seconds; nullopt when it is not a duration or
// is longer than kLongestDuration.
std::optional<std::chrono::seconds> parse_duration(std::string_view text);

}  // namespace skein
