// RemoteWatcher: runs `inotifywait` on a storage server over an SSH exec channel, so that changes
// made directly in the export arrive within a moment instead of at the next revalidation round.
// A server without inotifywait is noted once and left to revalidation. A session that ends
// (connection lost, inotifywait stopped) is started again, backing off while none gets as far as
// setting its watches. The remote command also prints a heartbeat line every
// heartbeat_interval(); a session that brings nothing for that long plus the backend's deadline
// (a connection dropped without a word: a firewall's idle timeout, a host reset, a frozen sshd)
// is ended and started again, and so is one whose backend the connection pool marks down: the
// server is not reported watched meanwhile.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "backend/sftp_backend.hpp"

namespace skein {

class RemoteWatcher {
 public:
  // What a report says of its path, beside that it changed.
  struct Report {
    bool new_dir = false;   // a directory appeared there (created or moved in)
    bool replaced = false;  // what was there was removed or moved away or over (the name may
                            // lead to another file now)
    bool dir_gone = false;  // a directory there was removed or moved away: what was below it
                            // is elsewhere or nowhere
  };
  // Called from the watcher's thread with a backend-relative path that changed.
  using OnChange = std::function<void(const std::string& rel, const Report& report)>;
  // Called from the watcher's thread when watching() changes.
  using OnWatching = std::function<void(bool watching)>;
  RemoteWatcher(std::shared_ptr<SftpBackend> backend, OnChange on_change,
                OnWatching on_watching = nullptr);
  ~RemoteWatcher();
  // True while inotifywait runs and its watches are set up.
  bool watching() const { return watching_.load(); }
  // How often the remote command prints its heartbeat for a backend with deadline `timeout`: the
  // deadline in whole seconds, from 1 s up to kHeartbeatMax.
  static constexpr std::chrono::seconds kHeartbeatMax{10};
  static std::chrono::seconds heartbeat_interval(std::chrono::milliseconds timeout);

 private:
  // How a session ended: the server has no inotifywait (stop trying), or it ended after or
  // before inotifywait had set its watches.
  enum class Ended { no_inotify, after_watching, before_watching };
  void run();
  Ended watch_once();
  void set_watching(bool watching);

  std::shared_ptr<SftpBackend> backend_;
  OnChange on_change_;
  OnWatching on_watching_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> watching_{false};
  std::thread thread_;
};

}  // namespace skein
