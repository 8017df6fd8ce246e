// The name of a copy in progress beside the file it becomes: ".NAME.skein-partial", renamed over
// NAME once whole (skein-mpi's stage-in and stage-out, the gateway's staging).
#pragma once

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace skein {

inline constexpr std::string_view kPartialSuffix = ".skein-partial";

// ".NAME.skein-partial" for the file named NAME (one entry name, no '/'). A NAME too long for it
// to fit in NAME_MAX with room for 11 bytes more (skein-mpi's ".chunks" record, a ".N" of its
// own) is cut to its first 212 bytes and given a hash of the whole (FNV-1a, the same in every run
// and build, so that a rerun finds what a stopped run left):
// ".NNN…N~0123456789abcdef.skein-partial".
inline std::string partial_name_of(std::string_view name) {
  constexpr std::size_t kRoom = NAME_MAX - 1 - kPartialSuffix.size() - 11;  // 229
  std::string kept(name);
  if (name.size() > kRoom) {
    uint64_t h = 14695981039346656037ull;
    for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
    char tail[18];
    std::snprintf(tail, sizeof tail, "~%016llx", static_cast<unsigned long long>(h));
    kept = std::string(name.substr(0, kRoom - 17)) + tail;
  }
  return "." + kept + std::string(kPartialSuffix);
}

}  // namespace skein
