// Reading a data command's answer from the mount's control socket ("ok N", then a line per
// file), for the unit tests of fetch-files and store-files.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <istream>
#include <sstream>
#include <string>
#include <vector>

namespace skein::client {

// The answer's lines after "ok N" (which must say `n`), each read by `read(in, line)`.
template <typename Line, typename Read>
std::vector<Line> answer_lines(const std::string& answer, std::size_t n, Read read) {
  std::istringstream in(answer);
  std::string ok;
  std::size_t count = 0;
  in >> ok >> count;
  EXPECT_EQ(ok, "ok") << answer;
  EXPECT_EQ(count, n) << answer;
  std::vector<Line> lines(count);
  for (Line& l : lines) read(in, l);
  return lines;
}

}  // namespace skein::client
