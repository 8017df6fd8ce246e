// Sizes as admins write them, in configuration files and on command lines ("64K", "4M", "2G").
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace skein {

// "4096", "64K", "4M", "2G", "1T" (powers of 1024; "KiB", "KB" and "k" alike) to bytes; nullopt
// when it is not a size or does not fit in 64 bits.
std::optional<std::uint64_t> parse_size(std::string_view text);

}  // namespace skein
