// Confinement of paths on one SSH server. SFTP names files by path and the server resolves each
// path itself, following every symlink in it; the gateway must never let a path lead outside a
// backend's root. So a path is sent only once every directory between the root and its last
// component is known to be a real directory, not a symlink: the semantics of
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) for every component but the last.
//
// PathGuard keeps, per server, the directories verified so (by an LSTAT, a listing or a mkdir),
// for a short time and until a change through the gateway or one the server's watcher reports
// drops them. Its lock closes the window between a check and the request it covers: operations
// that can put a symlink where a directory was (rename, symlink, link) hold it exclusively,
// every other path operation holds it shared, from the check until the reply. Holds are
// reentrant per thread (a Backend operation calls others, e.g. to diagnose a failure), and a
// waiting exclusive holder keeps new shared ones out, so renames are not starved.
//
// One PathGuard serves every Backend that reaches the same server (host and port), so that two
// backends with nested roots see each other's changes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backend/path_epochs.hpp"

namespace skein {

class PathGuard {
 public:
  // The guard of the server at host:port (host compared without case), made on first use.
  static std::shared_ptr<PathGuard> of(const std::string& host, int port);
  // How long a verified directory is trusted without a new look (default 1 s). Changes made
  // through the gateway drop entries at once; this bounds how long one made directly on the
  // server, without a watcher to report it, can go unseen.
  static void set_ttl(std::chrono::milliseconds ttl);

  enum class Mode { shared, exclusive };
  // A hold of the guard's lock for the current thread; released when it goes. A nested hold of
  // a lock the thread already has costs nothing.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : guard_(other.guard_) { other.guard_ = nullptr; }
    Hold& operator=(Hold&& other) noexcept;
    ~Hold() { release(); }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    friend class PathGuard;
    explicit Hold(PathGuard* g) : guard_(g) {}
    void release();
    PathGuard* guard_ = nullptr;
  };
  Hold hold(Mode mode);
  // Shared holds of several guards at once, taken in one global order (so that two threads
  // holding several never wait for each other in a cycle).
  static std::vector<Hold> hold_all(std::vector<PathGuard*> guards);

  // Whether the absolute server path `dir` was verified a real directory within the TTL.
  bool verified(std::string_view dir);
  void mark_verified(const std::string& dir);
  // Forgets `path` and everything verified below it.
  void forget_tree(const std::string& path);

  // Which file each path on the server names, as far as the gateway knows (remote_file.hpp).
  PathEpochs epochs;

 private:
  void lock(Mode mode);
  void unlock();

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  int readers_ = 0;
  bool writer_ = false;
  int writers_waiting_ = 0;
  std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> verified_;
};

}  // namespace skein
