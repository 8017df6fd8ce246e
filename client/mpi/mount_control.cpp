// Mounts, their control sockets and command buffers; see mount_control.hpp.
#include "mount_control.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "collective.hpp"
#include "control_socket.hpp"

namespace skein::mpi {

std::string skein_mount_of(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string best;
  for (std::string line; std::getline(in, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
    std::istringstream f(line);
    std::string id, parent, dev, root, point;
    f >> id >> parent >> dev >> root >> point;
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream t(line.substr(dash + 3));
    std::string fstype;
    t >> fstype;
    if (fstype != "fuse.skein") continue;
    // Octal escapes (\040 for a space) in the mount point.
    std::string unescaped;
    for (std::size_t i = 0; i < point.size(); ++i) {
      if (point[i] == '\\' && i + 3 < point.size()) {
        unescaped.push_back(static_cast<char>(std::stoi(point.substr(i + 1, 3), nullptr, 8)));
        i += 3;
      } else {
        unescaped.push_back(point[i]);
      }
    }
    if ((path == unescaped || path.rfind(unescaped + "/", 0) == 0 || unescaped == "/") &&
        unescaped.size() > best.size())
      best = unescaped;
  }
  return best;
}

void learn_names(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  while (::readdir(d) != nullptr) {
  }
  ::closedir(d);
}

std::string namespace_path(const std::string& path, const std::string& mount) {
  std::string rel = path.substr(mount.size());
  return rel.empty() ? "/" : rel;
}

int64_t mtime_ns_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
}

std::string fill_command(const char* mode, int64_t mtime_ns, uint64_t size, uint64_t offset,
                         uint64_t length, uint64_t buf_offset, const std::string& ns_path) {
  return "fill " + std::string(mode) + " " + std::to_string(mtime_ns) + " " + std::to_string(size) +
         " " + std::to_string(offset) + " " + std::to_string(length) + " " +
         std::to_string(buf_offset) + " " + client::ControlSocket::path_field(ns_path);
}

std::string Mount::command(const std::string& cmd, std::string* answer, int fd,
                           uint64_t bytes) const {
  std::string a, e;
  const auto timeout =
      client::ControlSocket::kRequestTimeout + std::chrono::seconds(bytes / (16u << 20));
  if (!client::ControlSocket::request_while_busy(control_dir, dir, cmd, a, e, fd, timeout))
    return e;
  if (a.rfind("error: ", 0) == 0) {
    while (!a.empty() && a.back() == '\n') a.pop_back();
    return dir + ": " + a.substr(7);
  }
  if (answer) *answer = a;
  return "";
}

std::string Buffer::open(std::size_t bytes, const Mount& mount) {
  mount_ = mount;
  fd = ::memfd_create("skein-mpi-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return errno_text("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return errno_text("buffer of " + std::to_string(bytes) + " bytes");
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return errno_text("seal the buffer");
  // Kernels before 6.9 give up a tmpfs fallocate (and undo it) when any signal is pending, so an
  // application's timer signals may interrupt it: tried a few times, then the pages are touched.
  int allocated = bytes > 0 ? -1 : 0;
  for (int tries = 0; allocated != 0 && tries < 4; ++tries) {
    allocated = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
    if (allocated != 0 && errno != EINTR) break;
  }
  if (allocated != 0 && (errno == ENOSPC || errno == ENOMEM))
    return errno_text("buffer of " + std::to_string(bytes) + " bytes");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_SHARED | (allocated == 0 ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) return errno_text("map the buffer");
  data = static_cast<char*>(p);
  size = bytes;
  if (allocated != 0) std::memset(data, 0, size);
  return "";
}

Buffer::~Buffer() {
  // An older mount does not know the command; it lets go of the buffer when this process ends.
  if (fd >= 0 && data && !mount_.dir.empty()) mount_.command("forget-buffer", nullptr, fd);
  if (data) ::munmap(data, size);
  if (fd >= 0) ::close(fd);
}

}  // namespace skein::mpi
