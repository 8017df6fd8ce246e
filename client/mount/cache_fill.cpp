// The control socket's fill command; see cache_fill.hpp.
#include "cache_fill.hpp"

#include <fcntl.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "caller_buffer.hpp"
#include "wire/limits.hpp"

namespace skein::client {
namespace {

constexpr uint64_t kPiece = wire::kMaxIoSize;  // one gateway read, one notify_store
constexpr uint64_t kWindow = 8;                // pieces fetched at once
// The most one command of a caller who is not privileged moves (a tagged store's bytes are
// copied out of the caller's buffer and checked whole before any is stored); skein-mpi's are at
// most a chunk (bcast: 4 MiB by default) or 8 MiB (stage-in's fill read).
constexpr uint64_t kMaxOthersLength = 64u << 20;

// The most files, and bytes of their list, in one fill-files command.
constexpr std::size_t kMaxFillFiles = 1024;
constexpr uint64_t kMaxFillFilesList = 16u << 20;

std::string err(const std::string& what) { return "error: " + what + "\n"; }

}  // namespace

AttrsByPath mount_attrs(MountDaemon& mount) {
  return [&mount](const std::string& path) -> std::optional<FileAttr> {
    // Kept attributes only while every server is watched: a change made on a server then comes
    // as an invalidation, which drops them.
    if (auto ino = mount.inodes.find(path); ino && mount.cache.servers_watched()) {
      if (auto kept = mount.cache.dir_attrs(*ino)) return kept->first;
      if (auto current = mount.cache.current_attrs(*ino)) return current;
    }
    auto got = mount.gateway->getattr(path);
    if (!got) return std::nullopt;
    return *got;
  };
}

namespace {

// One `fill` command, parsed and checked.
struct Fill {
  std::string mode, tag, path;
  int64_t mtime_ns = 0;
  uint64_t size = 0, offset = 0, length = 0, buf_offset = 0;
  InodeNumber ino = 0;
  bool fetch = false, store = false, tagged = false;
  int64_t made = 0;  // when its tag was made (a store), else now
  pid_t caller = 0;  // the process that sent the command
  // What the caller may read, for a caller that is not privileged (else null): its path is
  // judged before anything moves, and the file whose bytes come is judged by its own attributes
  // before any byte reaches the caller (judged_bytes).
  std::shared_ptr<PathAccess> access;
};

std::string older_gateway() {
  return err(
      "fill: the gateway does not answer the attributes of the file it opened (an older "
      "gateway), by which callers other than root and the mount's user are judged; upgrade it");
}

// Whether the bytes of the file with attributes `attr` (the file's own, `of_file`: not a look at
// its path) may reach the caller of `f`; "" if so, else the command's answer. The path was judged
// before the open, and may have led to another file by the time of the open.
std::string judged_bytes(const Fill& f, const std::optional<FileAttr>& attr, bool of_file) {
  if (!f.access) return "";
  if (!attr || !of_file) return older_gateway();
  if (!f.access->may_read(f.path, *attr)) return err(f.path + ": Permission denied");
  return "";
}

// What a caller that is not privileged may read (null for a privileged one), one for a command.
std::shared_ptr<PathAccess> access_of(MountDaemon& mount, const ControlPeer& peer) {
  if (peer.privileged) return nullptr;
  return std::make_shared<PathAccess>(peer, mount_attrs(mount));
}

// Parses and checks `args` (a `fill` command without "fill "). Returns "" when the command may go
// on, with `f` filled in; otherwise its answer: an error, or "ok 0" for a length of 0.
std::string prepare_fill(MountDaemon& mount, const std::string& args, const ControlPeer& peer,
                         const std::shared_ptr<PathAccess>& access, Fill& f) {
  f.caller = peer.pid;
  f.access = access;
  std::istringstream in(args);
  std::string& mode = f.mode;
  std::string& tag = f.tag;
  int64_t& mtime_ns = f.mtime_ns;
  uint64_t &size = f.size, &offset = f.offset, &length = f.length, &buf_offset = f.buf_offset;
  const bool parsed =
      static_cast<bool>(in >> mode >> mtime_ns >> size >> offset >> length >> buf_offset);
  // "fetch:tag" asks for the tag of what is fetched; "store:TAG" hands the fetching mount's tag.
  if (const auto colon = mode.find(':'); colon != std::string::npos) {
    tag = mode.substr(colon + 1);
    mode.resize(colon);
  }
  if (!parsed || (mode != "fetch" && mode != "store" && mode != "read") ||
      (mode == "fetch" && !tag.empty() && tag != "tag") || (mode == "read" && !tag.empty())) {
    return err(
        "usage: fill fetch[:tag]|store[:TAG]|read MTIME_NS SIZE OFFSET LENGTH BUF_OFFSET NS_PATH");
  }
  std::string field;
  std::getline(in >> std::ws, field);
  const auto named = ControlSocket::path_of_field(field);
  if (!named) return err("fill: NS_PATH: a bad %-encoding: " + field);
  f.path = *named;
  const std::string& path = f.path;
  if (path.empty() || path[0] != '/') return err("fill: NS_PATH must be absolute");
  if (offset > size || length > size - offset) return err("fill: range beyond the file's size");
  if (!peer.privileged && length > kMaxOthersLength)
    return err("fill: at most " + std::to_string(kMaxOthersLength) +
               " bytes at once for callers other than root and the mount's user");
  if (access) {
    const std::optional<FileAttr> attr = mount_attrs(mount)(path);
    if (!attr || !access->may_read(path, *attr)) return err(path + ": Permission denied");
  }
  auto ino = mount.inodes.find(path);
  if (!ino) return err(path + " is not open through this mount");
  f.ino = *ino;
  if (!mount.cache.open_matches(*ino, mtime_ns, size))
    return err(path + " changed (it is not as this mount's last open of it saw it)");
  if (length == 0) return "ok 0\n";
  // Bytes into the page cache that every user of the node reads come from the gateway, or from a
  // privileged caller, or with the tag of the mount that fetched them from the gateway. For the
  // other callers the mount stores and signs only its own copy of the bytes: the caller's buffer
  // may change under it.
  f.fetch = mode != "store";
  f.store = mode != "read";
  f.tagged = (mode == "fetch" && (tag == "tag" || !peer.privileged)) ||
             (mode == "store" && !peer.privileged);
  const bool tagged = f.tagged;
  if (mode == "store" && !peer.privileged && tag.empty())
    return err(
        "fill store: only root and the mount's own user may store bytes of their own; others "
        "hand the tag that the fetching mount's `fill fetch` answered (store:TAG)");
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // When the tag in hand was made (a store), else now (a fetch that is to answer one).
  int64_t& made = f.made;
  made = now;
  if (mode == "store" && tagged) {
    const auto said = FillTag::made_of(tag);
    if (!said) return err(std::string(FillTag::kRefused) + "not a tag: " + tag);
    if (*said + FillTag::kMaxAge.count() < now || *said > now + FillTag::kMaxAge.count())
      return err(std::string(FillTag::kRefused) + "the tag was made at " + std::to_string(*said) +
                 ", too long ago (or ahead of this node's clock) to be taken");
    made = *said;
    if (!FillTag::settled(made, mtime_ns))
      return err(std::string(FillTag::kRefused) + path + " was fetched for its tag less than " +
                 std::to_string(FillTag::kSettled.count()) +
                 " s after the second of its mtime, when a rewrite of the same size would still "
                 "keep its version (mtime to the second, size); fetch it again from then on");
  }
  return "";
}

// Moves the bytes of a prepared command; returns its answer. A fetch reads the range from the
// gateway, unless `fetched` holds it already (a ReadFiles answer, checked against the version).
std::string move_fill(MountDaemon& mount, const Fill& f, int buf_fd,
                      const std::string* fetched = nullptr) {
  const std::string &mode = f.mode, &tag = f.tag, &path = f.path;
  const int64_t mtime_ns = f.mtime_ns, made = f.made;
  const uint64_t size = f.size, offset = f.offset, length = f.length, buf_offset = f.buf_offset;
  const bool fetch = f.fetch, store = f.store, tagged = f.tagged;
  const InodeNumber ino = f.ino;
  CallerBuffer buf;
  if (std::string e =
          mount.caller_buffers.map("fill", buf_fd, buf_offset, length, fetch, f.caller, buf);
      !e.empty())
    return err(e);
  std::vector<char> own;  // the mount's own copy of the bytes (tagged)
  std::optional<FillTag> signer;
  if (tagged) signer.emplace(mount.fill_key, path, mtime_ns, size, offset, length, made);
  if (mode == "store" && tagged) {
    own.assign(buf.data, buf.data + length);
    signer->add(own.data(), own.size());
    if (!same_tag(signer->tag(), tag))
      return err(std::string(FillTag::kRefused) +
                 "the bytes are not what a mount of this namespace fetched for " + path +
                 " at that range and version (the tag does not match: another node's bytes, or "
                 "its mount holds another token of the namespace)");
  }

  // Fetches read through one gateway handle of the file, kept by the session while the caller
  // holds the file open (one open for all of a file's chunks).
  MountSession::FillHandle handle;
  if (fetch && !fetched) {
    auto opened = mount.session->fill_handle(ino, path, mtime_ns, size, f.access != nullptr);
    if (!opened && opened.error() == ESTALE)
      return err(path + " changed (the gateway's size or mtime differs)");
    if (!opened) return err("fill: open " + path + ": " + std::strerror(opened.error()));
    handle = *opened;
    if (std::string refused = judged_bytes(f, handle.attr, true); !refused.empty()) {
      if (!handle.kept) mount.gateway->release_async(FileRef{path, handle.handle, O_RDONLY});
      return refused;
    }
  }
  // A caller who is not privileged: a gateway that no longer holds the handle re-opens it by path
  // only as judged for that caller (FileRef.as_user).
  const FileRef ref{
      path,     handle.handle,
      O_RDONLY, false,
      0,        f.access ? std::make_shared<const Credentials>(f.access->credentials()) : nullptr};
  std::string failure;
  // Fetch and read: up to kWindow pieces in flight at once (read_async), each copied into the
  // buffer as it arrives; fetch and store then store each from the buffer, in order.
  for (uint64_t done = 0; done < length && failure.empty();) {
    const uint64_t window = std::min<uint64_t>(length - done, kWindow * kPiece);
    const std::size_t count = static_cast<std::size_t>((window + kPiece - 1) / kPiece);
    if (tagged && fetch) own.resize(static_cast<std::size_t>(window));
    if (fetch && fetched) {
      std::memcpy(tagged ? own.data() : buf.data + done, fetched->data() + done,
                  static_cast<std::size_t>(window));
    } else if (fetch) {
      std::mutex mu;
      std::condition_variable cv;
      std::size_t left = count;
      std::vector<int> errors(count, 0);
      std::vector<uint64_t> got_bytes(count, 0);
      for (std::size_t i = 0; i < count; ++i) {
        const uint64_t at = done + i * kPiece;
        const uint64_t n = std::min(kPiece, length - at);
        char* to = tagged ? own.data() + i * kPiece : buf.data + at;
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
    if (fetch && tagged && failure.empty()) {
      signer->add(own.data(), static_cast<std::size_t>(window));
      std::memcpy(buf.data + done, own.data(), static_cast<std::size_t>(window));
    }
    for (std::size_t i = 0; store && i < count && failure.empty(); ++i) {
      const uint64_t at = done + i * kPiece;
      const uint64_t n = std::min(kPiece, length - at);
      const char* from = !tagged ? buf.data + at
                         : fetch ? own.data() + (at - done)
                                 : own.data() + at;
      // Each piece only while the file is as this mount's last open saw it: an invalidation
      // acknowledged meanwhile (another mount's write returned) must not be followed by old bytes.
      const int rc = mount.kernel_cache->store_if(
          ino, offset + at, from, n, [&] { return mount.cache.open_matches(ino, mtime_ns, size); });
      if (rc == -ESTALE)
        failure = path + " changed while its pages were stored";
      else if (rc != 0)
        failure = "notify_store " + path + ": " + std::strerror(-rc);
    }
    done += window;
  }
  if (handle.handle != 0 && !handle.kept) mount.gateway->release_async(ref);
  // Checked again: an invalidation during the command may have come before the bytes landed.
  if (failure.empty() && !mount.cache.open_matches(ino, mtime_ns, size))
    failure =
        path + (store ? " changed while its pages were stored" : " changed while it was read");
  if (!failure.empty()) {
    // Pages stored before the failure may be of the old version, stored after the invalidation
    // that dropped it; an open of the new version would keep them. They go.
    if (store) mount.kernel_cache->pages_stale(ino);
    return err(failure);
  }
  return "ok " + std::to_string(length) + (mode == "fetch" && tagged ? " " + signer->tag() : "") +
         "\n";
}

// The end of a prepared fetch of a whole file whose bytes came in a ReadFiles answer: checked
// against the version, then moved as the command's own reads would be.
std::string finish_whole_fetch(MountDaemon& mount, const Fill& f, const GatewayClient::WholeFile& w,
                               int buf_fd) {
  if (w.error != 0) return err("fill: read " + f.path + ": " + std::strerror(w.error));
  if (std::string refused = judged_bytes(f, w.attr, w.attr_of_file); !refused.empty())
    return refused;
  if (w.attr.mtime_ns != f.mtime_ns || w.data.size() != f.size)
    return err(f.path + " changed (the gateway's size or mtime differs)");
  return move_fill(mount, f, buf_fd, &w.data);
}

}  // namespace

std::string cache_fill(MountDaemon& mount, const std::string& args, int buf_fd,
                       const ControlPeer& peer) {
  Fill f;
  if (std::string answer = prepare_fill(mount, args, peer, access_of(mount, peer), f);
      !answer.empty())
    return answer;
  return move_fill(mount, f, buf_fd);
}

std::string cache_fill_files(MountDaemon& mount, const std::string& args, int buf_fd,
                             const ControlPeer& peer) {
  std::istringstream in(args);
  std::string mode, rest;
  uint64_t list_offset = 0, list_length = 0;
  if (!(in >> mode >> list_offset >> list_length) || (in >> rest) ||
      (mode != "fetch" && mode != "fetch:tag" && mode != "store"))
    return err(
        "usage: fill-files fetch[:tag]|store LIST_OFFSET LIST_LENGTH (the files listed in the "
        "buffer, a line each: MTIME_NS SIZE BUF_OFFSET TAG NS_PATH)");
  if (list_length > kMaxFillFilesList)
    return err("fill-files: a list of at most " + std::to_string(kMaxFillFilesList) + " bytes");
  std::vector<std::string> lines;
  if (list_length > 0) {
    CallerBuffer list;
    if (std::string e = mount.caller_buffers.map("fill-files", buf_fd, list_offset, list_length,
                                                 false, peer.pid, list);
        !e.empty())
      return err(e);
    // Copied out first: the caller can still change its buffer, and a list read in place could
    // lose its last newline between the check and the split.
    const std::string text(list.data, list_length);
    if (text.back() != '\n') return err("fill-files: the list's last line has no newline");
    for (std::size_t at = 0; at < text.size();) {
      // Counted as they come: a list of newlines alone must not make millions of strings.
      if (lines.size() == kMaxFillFiles)
        return err("fill-files: at most " + std::to_string(kMaxFillFiles) + " files at once");
      const std::size_t end = text.find('\n', at);
      lines.emplace_back(text.substr(at, end - at));
      at = end + 1;
    }
  }
  // Each line is the `fill` command of a whole file, prepared as one.
  const std::size_t n = lines.size();
  std::vector<Fill> fills(n);
  std::vector<std::string> answers(n);
  const std::shared_ptr<PathAccess> access = access_of(mount, peer);
  uint64_t bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::istringstream line(lines[i]);
    std::string mtime, size, buf_offset, tag, field;
    line >> mtime >> size >> buf_offset >> tag;
    std::getline(line >> std::ws, field);
    const std::string fill_mode = mode != "store" ? mode : tag == "-" ? "store" : "store:" + tag;
    answers[i] = prepare_fill(
        mount, fill_mode + " " + mtime + " " + size + " 0 " + size + " " + buf_offset + " " + field,
        peer, access, fills[i]);
    // Only what will be fetched or stored counts; a refused line's length is whatever the caller
    // wrote, and could wrap the sum.
    if (answers[i].empty() && __builtin_add_overflow(bytes, fills[i].length, &bytes))
      bytes = UINT64_MAX;
  }
  if (!peer.privileged && bytes > kMaxOthersLength)
    return err("fill-files: at most " + std::to_string(kMaxOthersLength) +
               " bytes at once for callers other than root and the mount's user");
  // Whole files of at most one piece are fetched with ReadFiles calls, many files to a call (at
  // most the gateway's limits: kMaxReadFiles files, one piece of bytes).
  if (mode != "store") {
    std::vector<std::size_t> slice;
    uint64_t largest = 0;
    auto read_slice = [&] {
      if (slice.empty()) return;
      std::vector<std::string> paths;
      for (std::size_t i : slice) paths.push_back(fills[i].path);
      auto got =
          mount.gateway->read_files(paths, static_cast<uint32_t>(largest), access != nullptr);
      for (std::size_t k = 0; k < slice.size(); ++k) {
        const Fill& f = fills[slice[k]];
        answers[slice[k]] = got ? finish_whole_fetch(mount, f, (*got)[k], buf_fd)
                                : err("fill: read " + f.path + ": " + std::strerror(got.error()));
      }
      slice.clear();
      largest = 0;
    };
    for (std::size_t i = 0; i < n; ++i) {
      if (!answers[i].empty() || fills[i].length > kPiece) continue;
      const uint64_t larger = std::max(largest, fills[i].length);
      if (slice.size() == wire::kMaxReadFiles || (slice.size() + 1) * larger > kPiece) read_slice();
      largest = std::max(largest, fills[i].length);
      slice.push_back(i);
    }
    read_slice();
  }
  std::string answer = "ok " + std::to_string(n) + "\n";
  for (std::size_t i = 0; i < n; ++i) {
    if (answers[i].empty()) answers[i] = move_fill(mount, fills[i], buf_fd);
    answer += ControlSocket::one_line(answers[i]);  // a line a file, whatever the names
  }
  return answer;
}

}  // namespace skein::client
