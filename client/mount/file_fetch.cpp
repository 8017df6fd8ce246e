// The control socket's fetch-files command; see file_fetch.hpp.
#include "file_fetch.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "caller_buffer.hpp"
#include "permission.hpp"
#include "wire/limits.hpp"

namespace skein::client {
namespace {

std::string err(const std::string& what) { return "error: fetch-files: " + what + "\n"; }

// The gateway's limits on one ReadFiles call.
constexpr std::size_t kMaxFiles = wire::kMaxReadFiles;
constexpr uint64_t kMaxCallBytes = wire::kMaxIoSize;
// Most paths in one command.
constexpr std::size_t kMaxPaths = 4096;
// The most buffer one command of a caller who is not privileged may have the mount fill (its
// pages are the mount's to allocate); skein-mpi's stage-in passes about 8 MiB.
constexpr uint64_t kMaxOthersBuffer = 64u << 20;

std::string too_much_for_others() {
  return err("at most " + std::to_string(kMaxOthersBuffer) +
             " bytes of buffer for callers other than root and the mount's user");
}

std::string older_gateway() {
  return err(
      "the gateway does not answer the attributes of the files it read (an older gateway), by "
      "which callers other than root and the mount's user are judged; upgrade it");
}

}  // namespace

bool may_read(const FileAttr& attr, uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
  return may_access(attr, uid, gid, groups, 4);
}

AttrsByPath local_attrs() {
  return [](const std::string& path) -> std::optional<FileAttr> {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    FileAttr a;
    a.mode = st.st_mode;
    a.uid = st.st_uid;
    a.gid = st.st_gid;
    return a;
  };
}

PathAccess::PathAccess(const ControlPeer& peer, AttrsByPath dir_attrs)
    : peer_(peer),
      groups_(peer.uid == 0 ? std::vector<gid_t>{}
              : peer.groups ? *peer.groups
                            : supplementary_groups(peer.pid)),
      dir_attrs_(std::move(dir_attrs)) {}

bool PathAccess::may_reach(const std::string& ns_path) {
  if (peer_.uid == 0) return true;
  if (ns_path.empty() || ns_path[0] != '/') return false;
  // "/", then "/a", "/a/b", ... up to the file's directory.
  for (std::size_t end = 0; end != std::string::npos && end < ns_path.size();
       end = ns_path.find('/', end + 1)) {
    const std::string dir = end == 0 ? "/" : ns_path.substr(0, end);
    auto [it, fresh] = searchable_.try_emplace(dir, false);
    if (fresh) {
      const std::optional<FileAttr> attr = dir_attrs_ ? dir_attrs_(dir) : std::nullopt;
      it->second =
          attr && S_ISDIR(attr->mode) && may_access(*attr, peer_.uid, peer_.gid, groups_, 1);
    }
    if (!it->second) return false;
  }
  return true;
}

bool PathAccess::may_read(const std::string& ns_path, const FileAttr& attr) {
  return may_reach(ns_path) && skein::client::may_read(attr, peer_.uid, peer_.gid, groups_);
}

int PathAccess::may_change_names_in(const std::string& dir) {
  if (peer_.uid == 0) return 0;
  if (!may_reach(dir == "/" ? "/x" : dir + "/x")) return EACCES;
  const std::optional<FileAttr> attr = dir_attrs_ ? dir_attrs_(dir) : std::nullopt;
  if (!attr || !S_ISDIR(attr->mode) || !may_access(*attr, peer_.uid, peer_.gid, groups_, 3))
    return EACCES;
  if ((attr->mode & S_ISVTX) && attr->uid != peer_.uid) return EPERM;
  return 0;
}

std::vector<gid_t> supplementary_groups(pid_t pid) {
  std::vector<gid_t> groups;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream in(line.substr(7));
    for (gid_t g; in >> g;) groups.push_back(g);
    break;
  }
  return groups;
}

std::string fetch_files(const FileFetchContext& mount, const std::string& args, int buf_fd,
                        const ControlPeer& peer) {
  std::istringstream in(args);
  uint64_t max_bytes = 0, list_length = 0;
  std::string rest;
  if (!(in >> max_bytes >> list_length) || (in >> rest))
    return err("usage: fetch-files MAX_BYTES LIST_LENGTH (the paths in the buffer)");
  if (max_bytes == 0 || max_bytes > kMaxCallBytes)
    return err("MAX_BYTES must be 1 to " + std::to_string(kMaxCallBytes));
  if (list_length == 0) return "ok 0\n";
  if (!peer.privileged && list_length > kMaxOthersBuffer) return too_much_for_others();
  // The list first (read-only), to know how large the rest must be.
  std::vector<std::string> paths;
  {
    CallerBuffer list;
    if (std::string e =
            mount.buffers.map("fetch-files", buf_fd, 0, list_length, false, peer.pid, list);
        !e.empty())
      return "error: " + e + "\n";
    const std::string_view names(list.data, list_length);
    for (std::size_t at = 0; at < names.size();) {
      // Counted as they come: a list of NUL bytes alone must not make millions of strings.
      if (paths.size() == kMaxPaths)
        return err("more than " + std::to_string(kMaxPaths) + " paths in one command");
      const std::size_t end = names.find('\0', at);
      if (end == std::string_view::npos) return err("the last path does not end with a NUL byte");
      paths.emplace_back(names.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const std::string& p : paths) {
    if (p.empty() || p[0] != '/') return err("paths must be absolute: '" + p + "'");
  }
  if (!peer.privileged && list_length + paths.size() * max_bytes > kMaxOthersBuffer)
    return too_much_for_others();
  CallerBuffer out;
  if (std::string e = mount.buffers.map("fetch-files", buf_fd, list_length,
                                        paths.size() * max_bytes, true, peer.pid, out);
      !e.empty())
    return "error: " + e + "\n";

  PathAccess access(peer, mount.dir_attrs);
  struct Answer {
    int error = 0;
    uint64_t offset = 0, length = 0;
    uint32_t mode = 0;
    int64_t mtime_ns = 0;
  };
  std::vector<Answer> answers(paths.size());
  // Calls of at most kMaxFiles paths and 1 MiB; paths this mount does not know are not asked.
  const std::size_t per_call =
      std::max<std::size_t>(1, std::min<uint64_t>(kMaxFiles, kMaxCallBytes / max_bytes));
  uint64_t written = 0;
  for (std::size_t first = 0; first < paths.size(); first += per_call) {
    const std::size_t last = std::min(paths.size(), first + per_call);
    std::vector<std::string> ask;
    std::vector<std::size_t> index;
    for (std::size_t i = first; i < last; ++i) {
      // A path below a directory the caller may not search: EACCES, whether or not it exists.
      if (!access.may_reach(paths[i])) {
        answers[i].error = EACCES;
      } else if (mount.known(paths[i])) {
        ask.push_back(paths[i]);
        index.push_back(i);
      } else {
        answers[i].error = ENOENT;
      }
    }
    if (ask.empty()) continue;
    // Callers who are not privileged are judged by the attributes of the files read (a name may
    // lead to another file by the time it is read); others by those the gateway saw at the open.
    auto got = mount.read_files(ask, static_cast<uint32_t>(max_bytes), !peer.privileged);
    if (!got) return err(std::string("the gateway's ReadFiles: ") + std::strerror(got.error()));
    for (std::size_t k = 0; k < ask.size(); ++k) {
      GatewayClient::WholeFile& f = (*got)[k];
      Answer& a = answers[index[k]];
      if (f.error != 0) {
        a.error = f.error;
      } else if (!peer.privileged && !f.attr_of_file) {
        return older_gateway();
      } else if (!access.may_read(ask[k], f.attr)) {
        a.error = EACCES;
      } else if (f.data.size() > max_bytes) {
        a.error = EFBIG;
      } else {
        a.offset = list_length + written;
        a.length = f.data.size();
        a.mode = f.attr.mode;
        a.mtime_ns = f.attr.mtime_ns;
        std::memcpy(out.data + written, f.data.data(), f.data.size());
        written += f.data.size();
      }
    }
  }
  std::string answer = "ok " + std::to_string(paths.size()) + "\n";
  for (const Answer& a : answers) {
    answer += std::to_string(a.error) + " " + std::to_string(a.offset) + " " +
              std::to_string(a.length) + " " + std::to_string(a.mode) + " " +
              std::to_string(a.mtime_ns) + "\n";
  }
  return answer;
}

}  // namespace skein::client
