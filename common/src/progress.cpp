// Progress of a copy; see progress.hpp.
#include "skein/progress.hpp"

#include <algorithm>
#include <cstdio>

namespace skein {

std::string size_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (bytes >= 1024 && u < 5) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

double fraction_done(double bytes_done, double bytes_total, double items_done, double items_total) {
  const double f = bytes_total > 0   ? bytes_done / bytes_total
                   : items_total > 0 ? items_done / items_total
                                     : 0.0;
  return std::clamp(f, 0.0, 1.0);
}

std::string progress_bar(double fraction) {
  constexpr int kWidth = 30;
  fraction = std::clamp(fraction, 0.0, 1.0);
  const int filled = static_cast<int>(fraction * kWidth);
  char percent[8];
  std::snprintf(percent, sizeof percent, "%3.0f%%", 100 * fraction);
  return "[" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(kWidth - filled), '.') + "] " + percent;
}

}  // namespace skein
