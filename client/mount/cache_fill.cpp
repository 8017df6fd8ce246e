// The control socket's fill command; see cache_fill.hpp.
#include "cache_fill.hpp"

#include <fcntl.h>

#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "caller_buffer.hpp"
#include "wire/limits.hpp"

namespace skein::client {
namespace {

constexpr uint64_t kPiece = wire::kMaxIoSize;  // one gateway read, one notify_store
constexpr uint64_t kWindow = 8;                // pieces fetched at once

std::string err(const std::string& what) { return "error: " + what + "\n"; }

}  // namespace

DirAttrs directory_attrs(MountDaemon& mount) {
  return [&mount](const std::string& path) -> std::optional<FileAttr> {
    if (auto ino = mount.inodes.find(path)) {
      if (auto kept = mount.cache.dir_attrs(*ino)) return kept->first;
    }
    auto got = mount.gateway->getattr(path);
    if (!got) return std::nullopt;
    return *got;
  };
}

std::string cache_fill(MountDaemon& mount, const std::string& args, int buf_fd,
                       const ControlPeer& peer) {
  std::istringstream in(args);
  std::string mode;
  int64_t mtime_ns = 0;
  uint64_t size = 0, offset = 0, length = 0, buf_offset = 0;
  if (!(in >> mode >> mtime_ns >> size >> offset >> length >> buf_offset) ||
      (mode != "fetch" && mode != "store" && mode != "read")) {
    return err("usage: fill fetch|store|read MTIME_NS SIZE OFFSET LENGTH BUF_OFFSET NS_PATH");
  }
  std::string path;
  std::getline(in >> std::ws, path);
  if (path.empty() || path[0] != '/') return err("fill: NS_PATH must be absolute");
  if (offset > size || length > size - offset) return err("fill: range beyond the file's size");
  if (peer.uid != 0) {
    PathAccess access(peer, directory_attrs(mount));
    auto attr = mount.gateway->getattr(path);
    if (!attr || !access.may_read(path, *attr)) return err(path + ": Permission denied");
  }
  auto ino = mount.inodes.find(path);
  if (!ino) return err(path + " is not open through this mount");
  if (!mount.cache.open_matches(*ino, mtime_ns, size))
    return err(path + " changed (it is not as this mount's last open of it saw it)");
  if (length == 0) return "ok 0\n";
  if (mode == "store" && !peer.privileged)
    return err(
        "fill store is for root and the mount's own user: its bytes would go into the page cache "
        "that every user of this node reads the file from (a user's bcast needs a mount of its "
        "own, or its job's namespace)");

  CallerBuffer buf;
  const bool fetch = mode != "store", store = mode != "read";
  if (std::string e = map_caller_buffer("fill", buf_fd, buf_offset, length, fetch, buf); !e.empty())
    return err(e);

  // Fetches read through one gateway handle of the file, kept by the session while the caller
  // holds the file open (one open for all of a file's chunks).
  MountSession::FillHandle handle;
  if (fetch) {
    auto opened = mount.session->fill_handle(*ino, path, mtime_ns, size);
    if (!opened && opened.error() == ESTALE)
      return err(path + " changed (the gateway's size or mtime differs)");
    if (!opened) return err("fill: open " + path + ": " + std::strerror(opened.error()));
    handle = *opened;
  }
  const FileRef ref{path, handle.handle, O_RDONLY};
  std::string failure;
  // Fetch and read: up to kWindow pieces in flight at once (read_async), each copied into the
  // buffer as it arrives; fetch and store then store each from the buffer, in order.
  for (uint64_t done = 0; done < length && failure.empty();) {
    const uint64_t window = std::min<uint64_t>(length - done, kWindow * kPiece);
    const std::size_t count = static_cast<std::size_t>((window + kPiece - 1) / kPiece);
    if (fetch) {
      std::mutex mu;
      std::condition_variable cv;
      std::size_t left = count;
      std::vector<int> errors(count, 0);
      std::vector<uint64_t> got_bytes(count, 0);
      for (std::size_t i = 0; i < count; ++i) {
        const uint64_t at = done + i * kPiece;
        const uint64_t n = std::min(kPiece, length - at);
        char* to = buf.data + at;
        mount.gateway->read_async(ref, offset + at, static_cast<uint32_t>(n),
                                  [&, i, n, to](Result<SharedBytes> got) {
                                    uint64_t copied = 0;
                                    int e = 0;
                                    if (got) {
                                      for (auto p : got->pieces()) {
                                        const uint64_t k = std::min<uint64_t>(p.size(), n - copied);
                                        std::memcpy(to + copied, p.data(), k);
                                        copied += k;
                                      }
                                    } else {
                                      e = got.error();
                                    }
                                    std::lock_guard lock(mu);
                                    got_bytes[i] = copied;
                                    errors[i] = e;
                                    if (--left == 0) cv.notify_all();
                                  });
      }
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return left == 0; });
      for (std::size_t i = 0; i < count && failure.empty(); ++i) {
        const uint64_t n = std::min(kPiece, length - (done + i * kPiece));
        if (errors[i] != 0)
          failure = "read " + path + ": " + std::strerror(errors[i]);
        else if (got_bytes[i] != n)
          failure = path + " changed (shorter than its size)";
      }
    }
    for (std::size_t i = 0; store && i < count && failure.empty(); ++i) {
      const uint64_t at = done + i * kPiece;
      const uint64_t n = std::min(kPiece, length - at);
      const int rc = mount.kernel_cache->store(*ino, offset + at, buf.data + at, n);
      if (rc != 0) failure = "notify_store " + path + ": " + std::strerror(-rc);
    }
    done += window;
  }
  if (handle.handle != 0 && !handle.kept) mount.gateway->release_async(ref);
  if (!failure.empty()) return err(failure);
  // Checked again: an invalidation during the command may have come before the bytes landed.
  if (!mount.cache.open_matches(*ino, mtime_ns, size))
    return err(path +
               (store ? " changed while its pages were stored" : " changed while it was read"));
  return "ok " + std::to_string(length) + "\n";
}

}  // namespace skein::client
