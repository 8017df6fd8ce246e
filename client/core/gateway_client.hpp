// The mount's client of one gateway namespace: typed filesystem calls over the Namespace and Data
// gRPC services, each returning a value or a positive errno. Nothing here knows about FUSE, so it
// can be tested against an in-process server. Every call has a deadline: a gateway that is gone
// costs EIO within the timeout, never a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "file_attr.hpp"
#include "skein/permission.hpp"
#include "skein/result.hpp"
#include "skein/shared_bytes.hpp"
#include "wire/tls.hpp"

namespace grpc {
class Channel;
}

namespace skein::client {

struct FsStats {
  uint64_t block_size = 0;
  uint64_t fragment_size = 0;
  uint64_t blocks = 0;
  uint64_t blocks_free = 0;
  uint64_t blocks_available = 0;
  uint64_t files = 0;
  uint64_t files_free = 0;
  uint64_t files_available = 0;
  uint64_t name_max = 0;
};

// Which attributes a setattr changes, and to what. The bits are SetAttrRequest.Field's.
struct SetAttrArgs {
  enum Field : uint32_t {
    kMode = 1,
    kUid = 2,
    kGid = 4,
    kSize = 8,
    kAtime = 16,
    kMtime = 32,
    kAtimeNow = 64,
    kMtimeNow = 128,
  };
  uint32_t fields = 0;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  uint64_t handle = 0;  // the gateway handle of an open file to act on (ftruncate), or 0
  // The change of a user the mount does not trust: judged at the gateway (SetAttrRequest.as_user).
  const Credentials* as_user = nullptr;
};

// An open file as the gateway knows it: its handle, plus what it needs to re-open the file by path
// when it no longer knows the handle.
struct FileRef {
  std::string path;
  uint64_t handle = 0;
  uint32_t flags = 0;  // open(2) flags the file was opened with
  // An asynchronous create's first call: the gateway creates the file under `handle` (fs.proto).
  bool create = false;
  uint32_t create_mode = 0;
  // Opened for this user (open()'s as_user): a re-open by path is judged for it (fs.proto).
  std::shared_ptr<const Credentials> as_user = nullptr;
};

struct OpenedFile {
  uint64_t handle = 0;
  FileAttr attr;
  std::optional<FileAttr> parent_attr;  // create: the directory right after, when the gateway knew
  // `attr` are the opened file's own (its FSTAT at the gateway), as open(..., attrs_of_file) asks;
  // else a look at its path beside the open.
  bool attr_of_file = false;
  bool judged = false;  // the open was judged for the user open() or create() named (as_user)
};

// What the mount-time check found, so the caller can word the message for its user.
struct NamespaceCheck {
  enum class Outcome { kOk, kUnreachable, kNoNamespace, kDenied, kFailed };
  Outcome outcome = Outcome::kOk;
  std::string detail;  // the gateway's or gRPC's own words
};

struct GatewayOptions {
  std::string ns;     // namespace every request names
  std::string token;  // sent as x-skein-token when not empty
  std::chrono::milliseconds timeout{15000};
  // Follow the channel's connectivity from a thread of its own: logs losing and finding the
  // gateway, and reconnects promptly when it is back. Needs a real (not in-process) channel.
  bool watch_connection = false;
  // Sent as x-skein-mount when not empty, so the gateway knows whose cache each reply fills.
  std::string mount_id{};
};

// A mount credential of a job's namespace, as the gateway gives it to a node.
struct JobCredential {
  std::string ns;
  std::string token;
  uint32_t uid = 0, gid = 0;
};

class GatewayClient {
 public:
  // Asks the gateway for a mount credential of job `job_id`'s namespace, with the node's
  // certificate (the channel's, mutual TLS). nullopt with `error` in the gateway's words.
  static std::optional<JobCredential> job_mount_credential(
      const std::shared_ptr<grpc::Channel>& channel, const std::string& job_id,
      std::chrono::milliseconds deadline, std::string& error);

  // A channel to `target` ("host:port") tuned for the mount: TLS as `tls` says, 8 MiB messages,
  // keepalive pings so a vanished gateway is noticed between calls, quick reconnects once it is
  // back. Null with `error` when the TLS files are not usable.
  static std::shared_ptr<grpc::Channel> connect(const std::string& target,
                                                const wire::ClientTls& tls, std::string& error);

  GatewayClient(std::shared_ptr<grpc::Channel> channel, GatewayOptions options);
  ~GatewayClient();
  GatewayClient(const GatewayClient&) = delete;
  GatewayClient& operator=(const GatewayClient&) = delete;

  const std::string& ns() const { return options_.ns; }

  // Asks for the attributes of "/" within `deadline`: is the gateway there, does it serve the
  // namespace, does it accept our token.
  NamespaceCheck check_namespace(std::chrono::milliseconds deadline) const;
  // Gateway calls this client has started so far, of every kind (skein-mount --status).
  uint64_t calls_started() const;

  Result<FileAttr> getattr(const std::string& path) const;
  Result<FileAttr> setattr(const std::string& path, const SetAttrArgs& change) const;
  Result<std::vector<DirEntry>> readdir(const std::string& path) const;
  Result<FileAttr> mkdir(const std::string& path, uint32_t mode) const;
  Status rmdir(const std::string& path) const;
  // The directory's attributes right after the unlink when the gateway gave them, else nullopt.
  Result<std::optional<FileAttr>> unlink(const std::string& path) const;
  // The attributes of a rename's two directories right after it, each where the gateway gave
  // them.
  struct RenamedDirs {
    std::optional<FileAttr> from_dir, to_dir;
  };
  // flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE, as renameat2(2).
  Result<RenamedDirs> rename(const std::string& from, const std::string& to, uint32_t flags) const;
  Result<FileAttr> symlink(const std::string& path, const std::string& target) const;
  Result<std::string> readlink(const std::string& path) const;
  Result<FileAttr> link(const std::string& existing, const std::string& path) const;
  Result<FsStats> statfs(const std::string& path) const;

  // `attrs_of_file`: the attributes answered are the opened file's own, not a look at its path
  // (OpenRequest.attrs_of_file), for a caller that judges permission by them; OpenedFile says
  // whether the gateway did so. `as_user`: the open of a user the mount does not trust, judged
  // at the gateway by the file opened (OpenRequest.as_user; EACCES).
  Result<OpenedFile> open(const std::string& path, uint32_t flags, bool attrs_of_file = false,
                          const Credentials* as_user = nullptr) const;
  // `as_user`: as open()'s, for a file found at the name (OpenRequest.as_user).
  Result<OpenedFile> create(const std::string& path, uint32_t flags, uint32_t mode,
                            const Credentials* as_user = nullptr) const;
  // Returns fewer bytes than asked only at end of file. `whole_file`: see ReadRequest.whole_file.
  Result<std::string> read(const FileRef& file, uint64_t offset, uint32_t size,
                           bool whole_file = false) const;
  // `parent_attr`, when given, gets the directory's attributes right after the create a write
  // with `file.create` made, if the gateway sent them; `file_attr` the file's right after the
  // write, which the gateway sends for such a write from offset 0, or when asked
  // (`report_attrs`, for a write from offset 0).
  Result<uint32_t> write(const FileRef& file, uint64_t offset, std::string_view data,
                         std::optional<FileAttr>* parent_attr = nullptr,
                         std::optional<FileAttr>* file_attr = nullptr,
                         bool report_attrs = false) const;
  Status fsync(const FileRef& file, bool datasync) const;
  Status release(const FileRef& file) const;
  // Whole small files in one call (ReadFiles, at most wire::kMaxReadFiles paths and paths x
  // max_bytes at most 1 MiB): for each path, in order, its contents and attributes, or its own
  // errno (EFBIG: longer than `max_bytes`). The call fails as a whole only for its own errors (the
  // gateway, the token, the arguments).
  struct WholeFile {
    int error = 0;
    FileAttr attr;
    std::string data;
    bool attr_of_file = false;  // `attr` are the file read's own (attrs_of_files was done)
  };
  // `attrs_of_files`: each file's attributes are those of the file read, not a look at its path
  // (ReadFilesRequest.attrs_of_files), for a caller that judges permission by them.
  Result<std::vector<WholeFile>> read_files(const std::vector<std::string>& paths,
                                            uint32_t max_bytes, bool attrs_of_files = false) const;
  // Whole small files made in one call (WriteFiles, at most wire::kMaxWriteFiles files and 1 MiB
  // of data): each written under its partial name (beside it), given its mode and times and
  // renamed over its path. For each, in order, the file's and its directory's attributes, or its
  // own errno. The call fails as a whole only for its own errors (EIO: a gateway without it too).
  struct NewFile {
    std::string path, partial;
    std::string_view data;
    uint32_t mode = 0;
    int64_t atime_ns = 0, mtime_ns = 0;
  };
  struct FileWritten {
    int error = 0;
    FileAttr attr;
    std::optional<FileAttr> parent_attr;
  };
  Result<std::vector<FileWritten>> write_files(const std::vector<NewFile>& files) const;

  // Release without waiting for the answer. One the gateway does not answer is sent again once
  // another is answered.
  void release_async(const FileRef& file) const;
  // Read and Write without waiting, for read-ahead and write-behind: `done` runs exactly once, on
  // a gRPC thread (so it must not block), with what read() or write() would have returned. The
  // destructor waits for every call still in flight. Neither copies the contents on the way:
  // read_async's come as views of the received message, write_async's go from `data` itself.
  using ReadDone = std::function<void(Result<SharedBytes>)>;
  using WriteDone = std::function<void(Result<uint32_t>)>;
  void read_async(const FileRef& file, uint64_t offset, uint32_t size, ReadDone done) const;
  void write_async(const FileRef& file, uint64_t offset, std::string data, WriteDone done) const;
  // write_async(), with the file's attributes right after the write where the gateway gives them
  // (report_attrs: an FSTAT behind the WRITE, in the same round trip).
  using WriteReportedDone = std::function<void(Result<uint32_t>, std::optional<FileAttr>)>;
  void write_async_reporting(const FileRef& file, uint64_t offset, std::string data,
                             WriteReportedDone done) const;
  // Writes of one file at several offsets in one call, applied in order (none may overlap
  // another); `done` gets the bytes of all of them, or the first error.
  struct Extent {
    uint64_t offset = 0;
    std::string data;
  };
  void write_many_async(const FileRef& file, std::vector<Extent> extents, WriteDone done) const;

 private:
  // write_async and write_async_reporting.
  void start_write(const FileRef& file, uint64_t offset, std::string data, bool report_attrs,
                   WriteReportedDone done) const;
  struct Stubs;
  GatewayOptions options_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace skein::client
