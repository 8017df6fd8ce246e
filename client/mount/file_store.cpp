// The control socket's store-files command; see file_store.hpp.
#include "file_store.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>

#include "caller_buffer.hpp"
#include "skein/path.hpp"
#include "wire/limits.hpp"

namespace skein::client {
namespace {

std::string err(const std::string& what) { return "error: store-files: " + what + "\n"; }

// Most files in one command, and the most buffer it may name (the list and the contents): for
// callers other than root and the mount's user, as much as their other commands may move.
constexpr std::size_t kMaxFiles = 4096;
constexpr uint64_t kMaxBuffer = 256u << 20;
constexpr uint64_t kMaxOthersBuffer = 64u << 20;

struct Entry {
  uint32_t mode = 0;
  int64_t mtime_ns = 0;
  uint64_t length = 0, offset = 0;  // its bytes in the buffer
  std::string path, partial;        // partial: the whole path
  int error = 0;
};

// "MODE MTIME_NS LENGTH PATH\0PARTIAL\0" from `at` in `list`; moves `at` past it. "" or why not.
std::string parse_entry(std::string_view list, std::size_t& at, Entry& e) {
  const std::size_t end = list.find('\0', at);
  if (end == std::string_view::npos) return "an entry does not end with a NUL byte";
  const std::size_t name_end = list.find('\0', end + 1);
  if (name_end == std::string_view::npos) return "an entry's partial name does not end with a NUL";
  const char* p = list.data() + at;
  const char* const head_end = list.data() + end;
  auto number = [&](auto& n, int base) {
    auto r = std::from_chars(p, head_end, n, base);
    if (r.ec != std::errc() || r.ptr == head_end || *r.ptr != ' ') return false;
    p = r.ptr + 1;
    return true;
  };
  if (!number(e.mode, 8) || !number(e.mtime_ns, 10) || !number(e.length, 10))
    return "an entry must be 'MODE MTIME_NS LENGTH PATH'";
  e.path.assign(p, head_end);
  const std::string_view name = list.substr(end + 1, name_end - end - 1);
  if (e.path.empty() || e.path[0] != '/' || e.path.size() < 2 || e.path.back() == '/')
    return "paths must be absolute file paths: '" + e.path + "'";
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
    return "a partial name must be a name without '/': '" + std::string(name) + "'";
  if (e.mode > 07777) return "MODE must be permission bits (octal, at most 7777)";
  e.partial = parent_path(e.path);
  if (e.partial != "/") e.partial += '/';
  e.partial += name;
  if (e.partial == e.path) return "a file's partial name is its own name: '" + e.path + "'";
  at = name_end + 1;
  return "";
}

}  // namespace

std::string store_files(const FileStoreContext& mount, const std::string& args, int buf_fd,
                        const ControlPeer& peer) {
  uint64_t list_length = 0;
  {
    const char* b = args.data();
    const char* e = b + args.size();
    auto r = std::from_chars(b, e, list_length);
    if (r.ec != std::errc() || r.ptr != e)
      return err("usage: store-files LIST_LENGTH (the list and the contents in the buffer)");
  }
  if (list_length == 0) return "ok 0\n";
  const uint64_t max_buffer = peer.privileged ? kMaxBuffer : kMaxOthersBuffer;
  if (list_length > max_buffer) return err("LIST_LENGTH over " + std::to_string(max_buffer));
  std::vector<Entry> entries;
  uint64_t contents = 0;
  {
    CallerBuffer list;
    if (std::string e =
            mount.buffers.map("store-files", buf_fd, 0, list_length, false, peer.pid, list);
        !e.empty())
      return "error: " + e + "\n";
    const std::string_view text(list.data, list_length);
    for (std::size_t at = 0; at < text.size();) {
      if (entries.size() == kMaxFiles)
        return err("more than " + std::to_string(kMaxFiles) + " files in one command");
      Entry e;
      if (std::string why = parse_entry(text, at, e); !why.empty()) return err(why);
      // Checked before it is added, so that no sum of lengths can wrap around (list_length +
      // contents <= max_buffer holds throughout).
      if (e.length > max_buffer - list_length - contents)
        return err("the list and contents are over " + std::to_string(max_buffer) + " bytes");
      e.offset = contents;
      contents += e.length;
      entries.push_back(std::move(e));
    }
  }
  CallerBuffer data;
  if (contents > 0) {
    if (std::string e =
            mount.buffers.map("store-files", buf_fd, list_length, contents, false, peer.pid, data);
        !e.empty())
      return "error: " + e + "\n";
  }

  PathAccess access(peer, mount.dir_attrs);
  for (Entry& e : entries) {
    if (e.length > wire::kMaxIoSize) {
      e.error = EFBIG;
    } else if (int no = access.may_change_names_in(parent_path(e.path)); no != 0) {
      e.error = no;
    } else if (peer.uid != 0 && (e.mode & 07000)) {
      e.error = EPERM;
    }
  }
  // Calls of at most the gateway's limits: kMaxWriteFiles files and 1 MiB of contents.
  std::vector<GatewayClient::NewFile> call;
  std::vector<Entry*> in_call;
  uint64_t call_bytes = 0;
  auto send = [&]() -> std::string {
    if (call.empty()) return "";
    auto got = mount.write_files(call);
    if (!got) {
      // The gateway may have made some of them before the call failed (a deadline, a dropped
      // connection): none is known here now.
      for (Entry* e : in_call) mount.made(e->path);
      return err(std::string("the gateway's WriteFiles: ") + std::strerror(got.error()));
    }
    for (std::size_t k = 0; k < in_call.size(); ++k) {
      in_call[k]->error = (*got)[k].error;
      // A file that failed may have replaced its name all the same (its rename made, the answer
      // lost): this mount's kernel drops the name and the file either way.
      if ((*got)[k].error != EDQUOT && (*got)[k].error != EFBIG) mount.made(in_call[k]->path);
    }
    call.clear();
    in_call.clear();
    call_bytes = 0;
    return "";
  };
  for (Entry& e : entries) {
    if (e.error != 0) continue;
    if (call.size() == static_cast<std::size_t>(wire::kMaxWriteFiles) ||
        call_bytes + e.length > wire::kMaxIoSize) {
      if (std::string failed = send(); !failed.empty()) return failed;
    }
    call.push_back({e.path, e.partial, std::string_view(data.data + e.offset, e.length), e.mode,
                    e.mtime_ns, e.mtime_ns});
    in_call.push_back(&e);
    call_bytes += e.length;
  }
  if (std::string failed = send(); !failed.empty()) return failed;
  std::string answer = "ok " + std::to_string(entries.size()) + "\n";
  for (const Entry& e : entries) answer += std::to_string(e.error) + "\n";
  return answer;
}

}  // namespace skein::client
