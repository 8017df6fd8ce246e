// Sizes as admins write them; see size.hpp.
#include "skein/size.hpp"

#include <cctype>
#include <string>

namespace skein {

std::optional<uint64_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  uint64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && isdigit((unsigned char)text[i]); ++i) {
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == 0) return std::nullopt;
  std::string unit(text.substr(i));
  for (auto& ch : unit) ch = static_cast<char>(toupper(ch));
  if (unit == "IB" || unit == "B") unit = "";
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();
  int shift = 0;
  if (unit == "K")
    shift = 10;
  else if (unit == "M")
    shift = 20;
  else if (unit == "G")
    shift = 30;
  else if (unit == "T")
    shift = 40;
  else if (!unit.empty())
    return std::nullopt;
  if (shift && v > (UINT64_MAX >> shift)) return std::nullopt;
  return v << shift;
}

std::optional<std::chrono::seconds> parse_duration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && isdigit((unsigned char)text[i]); ++i) {
    if (v > (INT64_MAX - 9) / 10 / 86400) return std::nullopt;
    v = v * 10 + (text[i] - '0');
  }
  if (i == 0 || i + 1 < text.size()) return std::nullopt;
  int64_t unit = 1;
  if (i < text.size()) {
    switch (text[i]) {
      case 's':
        unit = 1;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      default:
        return std::nullopt;
    }
  }
  if (v > kLongestDuration.count() / unit) return std::nullopt;
  return std::chrono::seconds(v * unit);
}

}  // namespace skein
