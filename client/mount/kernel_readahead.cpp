// The kernel's read-ahead of a FUSE mount; see kernel_readahead.hpp.
#include "kernel_readahead.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace skein::client {
namespace {

// mountinfo escapes space, tab, newline and backslash in paths as \ooo.
std::string unescape_mountinfo(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string oct = field.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(oct, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

}  // namespace

std::optional<std::string> mount_device(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  std::optional<std::string> found;
  // Fields: id, parent id, MAJOR:MINOR, root, mount point, ...; a later line for the same mount
  // point is a mount on top of the earlier one.
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    if (!(fields >> id >> parent >> device >> root >> point)) continue;
    if (unescape_mountinfo(point) == mountpoint) found = device;
  }
  return found;
}

bool set_kernel_readahead(const std::string& mountpoint, unsigned kb, std::string& error) {
  auto device = mount_device(mountpoint);
  if (!device) {
    error = mountpoint + " is not in /proc/self/mountinfo";
    return false;
  }
  const std::string knob = "/sys/class/bdi/" + *device + "/read_ahead_kb";
  std::ofstream out(knob);
  out << kb << '\n';
  out.flush();
  if (!out) {
    error = "cannot write " + knob + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace skein::client
