// Aligned tables and human units; see table.hpp.
#include "table.hpp"

#include <algorithm>
#include <cstdio>

namespace skein::ctl {
namespace {

// Width on a terminal: UTF-8 code points (paths and names may hold any of them).
size_t display_width(const std::string& s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

}  // namespace

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(std::max(cells.size(), columns_.size()));
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out) const {
  size_t n = columns_.size();
  for (auto& r : rows_) n = std::max(n, r.size());
  std::vector<size_t> width(n, 0);
  std::vector<bool> right(n, false);
  for (size_t i = 0; i < columns_.size(); ++i) {
    width[i] = display_width(columns_[i].header);
    right[i] = columns_[i].right;
  }
  for (auto& r : rows_)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], display_width(r[i]));

  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string pad(width[i] - display_width(cells[i]), ' ');
      if (i) text += "  ";
      text += right[i] ? pad + cells[i] : cells[i] + pad;
    }
    text.erase(text.find_last_not_of(' ') + 1);
    out << text << "\n";
  };
  bool has_header = std::any_of(columns_.begin(), columns_.end(),
                                [](const Column& c) { return !c.header.empty(); });
  if (has_header) {
    std::vector<std::string> headers;
    for (auto& c : columns_) headers.push_back(c.header);
    line(headers);
  }
  for (auto& r : rows_) line(r);
}

std::string human_size(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  snprintf(buf, sizeof buf, v < 10 ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
}

std::string human_duration(uint64_t s) {
  char buf[64];
  if (s < 60)
    snprintf(buf, sizeof buf, "%llus", (unsigned long long)s);
  else if (s < 3600)
    snprintf(buf, sizeof buf, "%llum %02llus", (unsigned long long)(s / 60),
             (unsigned long long)(s % 60));
  else if (s < 86400)
    snprintf(buf, sizeof buf, "%lluh %02llum", (unsigned long long)(s / 3600),
             (unsigned long long)(s % 3600 / 60));
  else
    snprintf(buf, sizeof buf, "%llud %02lluh", (unsigned long long)(s / 86400),
             (unsigned long long)(s % 86400 / 3600));
  return buf;
}

}  // namespace skein::ctl
