// A Backend is one storage server's exported directory (user@host:port:/root), reached through a
// pool of SFTP connections. It confines every path to its root, reconnects lost connections with
// backoff and jitter, and turns SFTP's coarse status codes into the errno a POSIX caller expects.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "sftp/connection.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein {

struct BackendConfig {
  std::string name;
  sftp::Endpoint endpoint;
  std::string root;  // absolute directory on the server
  int connections = 4;
};

class RemoteFile;

class Backend : public std::enable_shared_from_this<Backend> {
 public:
  explicit Backend(BackendConfig cfg);
  const std::string& name() const { return cfg_.name; }
  const BackendConfig& config() const { return cfg_; }
  // True when the last attempt to reach the server worked.
  bool up() const { return up_.load(); }

  // Server path of a backend-relative path ("/" is the root itself).
  std::string remote_path(std::string_view rel) const;

  Result<sftp::Attrs> lstat(std::string_view rel);
  Result<sftp::Attrs> stat(std::string_view rel);
  Status setstat(std::string_view rel, const sftp::Attrs& attrs);
  Result<std::vector<sftp::NameEntry>> list_dir(std::string_view rel);
  Status mkdir(std::string_view rel, uint32_t mode);
  Status rmdir(std::string_view rel);
  Status unlink(std::string_view rel);
  // flags: 0, or RENAME_NOREPLACE (1). Uses posix-rename@openssh.com (atomic replace) when offered.
  Status rename(std::string_view from, std::string_view to, unsigned flags);
  Status symlink(std::string_view target, std::string_view rel);
  Result<std::string> readlink(std::string_view rel);
  Status link(std::string_view existing, std::string_view rel);
  Result<sftp::StatVfs> statvfs(std::string_view rel);
  // Opens (or creates, with O_CREAT and `mode`) a file; `flags` are open(2) flags.
  Result<std::shared_ptr<RemoteFile>> open(std::string_view rel, int flags, uint32_t mode);

  // Connection pool. A slot's connection is replaced when it dies; attempts to reconnect a slot
  // back off exponentially with jitter, and while one is not due the caller gets EIO at once.
  size_t slot_count() const { return slots_.size(); }
  size_t pick_slot();
  Result<std::shared_ptr<sftp::Connection>> connection(size_t slot);
  // Sends a request on some live connection; retries once on a fresh connection when the one
  // used died, which is safe only for requests that can be repeated (`idempotent`).
  Result<sftp::Reply> call(const std::string& framed, bool idempotent);

  // Bytes and operations served, for stats.
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, ops{0};

 private:
  friend class RemoteFile;
  Status expect_status(Result<sftp::Reply> r);
  // Refines SFTP's generic failure for `op` on `rel` by looking at what is there now.
  int diagnose_failure(std::string_view op, std::string_view rel, std::string_view other = {});

  struct Slot {
    std::mutex mu;
    std::shared_ptr<sftp::Connection> conn;
    int failures = 0;
    std::chrono::steady_clock::time_point next_attempt{};
  };

  BackendConfig cfg_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::atomic<size_t> round_robin_{0};
  std::atomic<bool> up_{true};
};

// An open file on one backend. It holds one SFTP handle per pool connection it uses, opened on
// demand, so large reads and writes spread over the pool; a handle lost with its connection is
// re-opened by path (never with O_CREAT, O_EXCL or O_TRUNC again).
class RemoteFile {
 public:
  RemoteFile(std::shared_ptr<Backend> backend, std::string rel, int flags);
  ~RemoteFile();
  RemoteFile(const RemoteFile&) = delete;
  RemoteFile& operator=(const RemoteFile&) = delete;

  const std::string& rel_path() const { return rel_; }
  Backend& backend() { return *backend_; }
  int flags() const { return flags_; }

  // Opens the first handle with the caller's flags; errors are the caller's.
  Status open_first(uint32_t mode);
  // Reads up to `size` bytes; shorter only at end of file. Requests are kept in flight over
  // several connections and short server replies are continued.
  Result<std::string> read(uint64_t offset, uint32_t size);
  // Writes all of `data`, pipelined over several connections; the first error is returned.
  Result<uint32_t> write(uint64_t offset, std::string_view data);
  Status fsync();
  Status truncate(uint64_t size);
  Result<sftp::Attrs> fstat();
  // Closes every handle. Further calls re-open.
  Status close();
  // Moves the file's identity after a rename, so re-opens find it.
  void renamed(std::string new_rel);

 private:
  struct Handle {
    std::shared_ptr<sftp::Connection> conn;
    std::string handle;
  };
  // The handle on `slot`, opening it when needed.
  Result<Handle> handle_on(size_t slot);
  Result<Handle> any_handle();

  std::shared_ptr<Backend> backend_;
  std::mutex mu_;  // guards rel_ and handles_
  std::string rel_;
  int flags_;
  std::vector<Handle> handles_;  // by slot; empty handle string = not open
};

}  // namespace skein
