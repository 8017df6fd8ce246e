// Human output of skeinctl: aligned text tables and the units people read (sizes, durations).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace skein::ctl {

class Table {
 public:
  struct Column {
    std::string header;
    bool right = false;  // numbers: right-aligned
  };
  // An empty header list makes a table without a header line (key/value listings).
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void add_row(std::vector<std::string> cells);
  // Columns separated by two spaces, no trailing blanks.
  void print(std::ostream& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// 0 B, 512 B, 1.5 KiB, 12 MiB, 3.2 GiB... (powers of 1024).
std::string human_size(uint64_t bytes);
// 45s, 3m 05s, 2h 03m, 4d 02h.
std::string human_duration(uint64_t seconds);

}  // namespace skein::ctl
