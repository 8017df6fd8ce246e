// The control socket's fill command; see cache_fill.hpp.
#include "cache_fill.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

namespace skein::client {
namespace {

constexpr uint64_t kPiece = 1 << 20;  // one gateway read, one notify_store
constexpr uint64_t kWindow = 8;       // pieces fetched at once

std::string err(const std::string& what) { return "error: " + what + "\n"; }

bool pwrite_all(int fd, const char* data, std::size_t len, off_t at) {
  while (len > 0) {
    ssize_t n = ::pwrite(fd, data, len, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= std::size_t(n);
    at += n;
  }
  return true;
}

bool pread_all(int fd, char* data, std::size_t len, off_t at) {
  while (len > 0) {
    ssize_t n = ::pread(fd, data, len, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    len -= std::size_t(n);
    at += n;
  }
  return true;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string cache_fill(MountDaemon& mount, const std::string& args) {
  std::istringstream in(args);
  std::string mode, buf_path;
  int64_t mtime_ns = 0;
  uint64_t size = 0, offset = 0, length = 0, buf_offset = 0;
  if (!(in >> mode >> mtime_ns >> size >> offset >> length >> buf_offset >> buf_path) ||
      (mode != "fetch" && mode != "store")) {
    return err("usage: fill fetch|store MTIME_NS SIZE OFFSET LENGTH BUF_OFFSET BUF_PATH NS_PATH");
  }
  std::string path;
  std::getline(in >> std::ws, path);
  if (path.empty() || path[0] != '/') return err("fill: NS_PATH must be absolute");
  if (offset > size || length > size - offset) return err("fill: range beyond the file's size");
  auto ino = mount.inodes.find(path);
  if (!ino) return err(path + " is not open through this mount");
  if (!mount.cache.open_matches(*ino, mtime_ns, size))
    return err(path + " changed (it is not as this mount's last open of it saw it)");
  if (length == 0) return "ok 0\n";

  Fd buf;
  buf.fd = ::open(buf_path.c_str(), (mode == "fetch" ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (buf.fd < 0) return err("fill: " + buf_path + ": " + std::strerror(errno));

  uint64_t handle = 0;
  if (mode == "fetch") {
    auto opened = mount.gateway->open(path, O_RDONLY);
    if (!opened) return err("fill: open " + path + ": " + std::strerror(opened.error()));
    handle = opened->handle;
    if (opened->attr.mtime_ns != mtime_ns || opened->attr.size != size) {
      mount.gateway->release_async(FileRef{path, handle, O_RDONLY});
      return err(path + " changed (the gateway's size or mtime differs)");
    }
  }
  const FileRef ref{path, handle, O_RDONLY};
  std::string failure;
  // Fetch: up to kWindow pieces in flight at once (read_async), then each written to the buffer
  // and stored, in order. Store: piece by piece from the buffer.
  std::vector<std::string> pieces;
  for (uint64_t done = 0; done < length && failure.empty();) {
    const uint64_t window = std::min<uint64_t>(length - done, kWindow * kPiece);
    const std::size_t count = std::size_t((window + kPiece - 1) / kPiece);
    pieces.assign(count, std::string());
    if (mode == "fetch") {
      std::mutex mu;
      std::condition_variable cv;
      std::size_t left = count;
      std::vector<int> errors(count, 0);
      for (std::size_t i = 0; i < count; ++i) {
        const uint64_t at = done + i * kPiece;
        const uint64_t n = std::min(kPiece, length - at);
        mount.gateway->read_async(ref, offset + at, static_cast<uint32_t>(n),
                                  [&, i](Result<SharedBytes> got) {
                                    std::string bytes;
                                    int e = 0;
                                    if (got)
                                      bytes = got->flatten();
                                    else
                                      e = got.error();
                                    std::lock_guard lock(mu);
                                    pieces[i] = std::move(bytes);
                                    errors[i] = e;
                                    if (--left == 0) cv.notify_all();
                                  });
      }
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return left == 0; });
      for (std::size_t i = 0; i < count && failure.empty(); ++i) {
        if (errors[i] != 0) failure = "read " + path + ": " + std::strerror(errors[i]);
      }
    }
    for (std::size_t i = 0; i < count && failure.empty(); ++i) {
      const uint64_t at = done + i * kPiece;
      const uint64_t n = std::min(kPiece, length - at);
      std::string& piece = pieces[i];
      if (mode == "fetch") {
        if (piece.size() != n) {
          failure = path + " changed (shorter than its size)";
          break;
        }
        if (!pwrite_all(buf.fd, piece.data(), n, static_cast<off_t>(buf_offset + at))) {
          failure = "write " + buf_path + ": " + std::strerror(errno);
          break;
        }
      } else {
        piece.resize(n);
        if (!pread_all(buf.fd, piece.data(), n, static_cast<off_t>(buf_offset + at))) {
          failure = "read " + buf_path + ": " + (errno ? std::strerror(errno) : "short file");
          break;
        }
      }
      const int rc = mount.kernel_cache->store(*ino, offset + at, piece.data(), n);
      if (rc != 0) failure = "notify_store " + path + ": " + std::strerror(-rc);
    }
    done += window;
  }
  if (handle != 0) mount.gateway->release_async(ref);
  if (!failure.empty()) return err(failure);
  // Checked again: an invalidation during the command may have come before the pages landed.
  if (!mount.cache.open_matches(*ino, mtime_ns, size))
    return err(path + " changed while its pages were stored");
  return "ok " + std::to_string(length) + "\n";
}

}  // namespace skein::client
