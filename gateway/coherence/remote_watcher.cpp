// inotifywait over SSH; see remote_watcher.hpp.
#include "coherence/remote_watcher.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "coherence/inotify_output.hpp"
#include "sftp/endpoint.hpp"

namespace skein {
namespace {

// Single-quotes a word for the remote shell.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

constexpr const char* kNoInotify = "SKEIN-NO-INOTIFYWAIT";
constexpr const char* kHeartbeat = "SKEIN-HEARTBEAT";

}  // namespace

std::chrono::seconds RemoteWatcher::heartbeat_interval(std::chrono::milliseconds timeout) {
  const auto whole = std::chrono::ceil<std::chrono::seconds>(timeout);
  return std::clamp<std::chrono::seconds>(whole, std::chrono::seconds(1), kHeartbeatMax);
}

RemoteWatcher::RemoteWatcher(std::shared_ptr<SftpBackend> backend, OnChange on_change,
                             OnWatching on_watching)
    : backend_(std::move(backend)),
      on_change_(std::move(on_change)),
      on_watching_(std::move(on_watching)) {
  thread_ = std::thread([this] { run(); });
}

void RemoteWatcher::set_watching(bool watching) {
  if (watching_.exchange(watching) != watching && on_watching_) on_watching_(watching);
}

RemoteWatcher::~RemoteWatcher() {
  stopping_ = true;
  thread_.join();
}

void RemoteWatcher::run() {
  // After a session that never got its watches set up (no connection, or inotifywait failing at
  // once: the server's inotify watch limit, an unreadable root), wait twice as long as before
  // the next try, up to kRetryMax: every try walks the whole tree.
  constexpr std::chrono::milliseconds kRetryMin(2000), kRetryMax(30000);
  std::chrono::milliseconds delay = kRetryMin;
  while (!stopping_) {
    if (backend_->up()) {
      const Ended how = watch_once();
      if (how == Ended::no_inotify) return;
      delay = how == Ended::after_watching ? kRetryMin : std::min(delay * 2, kRetryMax);
    }
    set_watching(false);
    for (auto slept = std::chrono::milliseconds(0); slept < delay && !stopping_;
         slept += std::chrono::milliseconds(100))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

RemoteWatcher::Ended RemoteWatcher::watch_once() {
  const std::string root = backend_->config().root;
  const sftp::Endpoint& endpoint = backend_->config().endpoint;
  const auto heartbeat = heartbeat_interval(endpoint.timeout);
  // close_write rather than modify: one event per writer, not one per write. inotifywait's
  // messages (stderr) come in the same stream as its events. The shell waits for inotifywait,
  // and a background `cat` of the channel kills it when the channel closes, so inotifywait ends
  // with the connection even when no event ever comes to end it, and the session ends with
  // inotifywait (the watcher then starts another). A background list reads /dev/null unless told
  // otherwise: hence the channel on fd 3. Beside inotifywait a loop prints a heartbeat line every
  // `heartbeat` seconds (its `sleep` holds no end of the channel, so killing the loop when
  // inotifywait ends lets the session end at once; a write to a closed channel ends it too).
  // An inotifywait that knows --no-newline ends each event with a NUL, so that a name with a
  // newline in it comes whole (InotifyOutput).
  const std::string cmd =
      "command -v inotifywait >/dev/null 2>&1 || { echo " + std::string(kNoInotify) +
      "; exit 0; }; f='%e %w%f'; n=; if inotifywait --help 2>&1 | grep -q -e --no-newline; "
      "then f='%e %w%f%0'; n=--no-newline; echo " +
      InotifyOutput::kNulEvents +
      "; fi; inotifywait -m -r -e close_write,attrib,create,delete,moved_from,"
      "moved_to,delete_self --format \"$f\" $n " +
      shell_quote(root) +
      " </dev/null 2>&1 & w=$!; exec 3<&0; { cat <&3; kill $w; } >/dev/null 2>&1 & exec 3<&-; "
      "while sleep " +
      std::to_string(heartbeat.count()) + " >/dev/null 2>&1; do echo " + kHeartbeat +
      "; done & h=$!; wait $w; kill $h 2>/dev/null";
  // A session that brings nothing for a heartbeat and a deadline is dead, though its connection
  // may never say so (a firewall that dropped it, a host that was reset, a frozen sshd): it is
  // ended, the server reported not watched, and another session started.
  const auto silence_limit = heartbeat + endpoint.timeout;
  std::string error;
  auto ch = sftp::open_channel(endpoint, {sftp::ChannelService::exec, cmd}, error);
  if (!ch) {
    spdlog::debug("backend {}: remote watcher cannot connect: {}", backend_->name(), error);
    return Ended::before_watching;
  }
  bool have_inotify = true;
  InotifyOutput out;
  char buf[8192];
  // Reports are held kSettle before they go out, merged by path meanwhile. The gateway notes a
  // change it made only once the server has answered, and the server's inotify event for it can
  // come first; held a moment, the broker recognises it as an echo (InvalidationBroker).
  using Clock = std::chrono::steady_clock;
  constexpr auto kSettle = std::chrono::milliseconds(50);
  std::deque<std::pair<Clock::time_point, std::string>> held;
  std::unordered_map<std::string, Report> held_paths;  // what the reports of each said, merged
  bool ended = false;
  std::string cut;  // why the watcher ended a session that had not ended itself
  auto heard = Clock::now();
  while (!stopping_ && !ended && have_inotify) {
    long n;
    while ((n = ch->read(buf, sizeof buf)) > 0) {
      out.append(buf, static_cast<size_t>(n));
      heard = Clock::now();
    }
    ended = n < 0;
    if (!ended && Clock::now() - heard > silence_limit) {
      cut =
          "nothing heard from it for " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(silence_limit).count()) +
          " s";
    } else if (!ended && !backend_->up()) {
      // The server stopped answering the gateway's SFTP requests: its watcher's session is as
      // likely gone, and watched must not be claimed while calls fail.
      cut = "the backend is down";
    }
    ended = ended || !cut.empty();
    while (auto item = out.next()) {
      if (!item->event) {
        const std::string& line = item->text;
        if (line == kHeartbeat) continue;
        if (line == kNoInotify) {
          have_inotify = false;
          spdlog::info(
              "backend {}: no inotifywait on the server; changes made there are found by "
              "revalidation only",
              backend_->name());
          break;
        }
        if (line.starts_with("Watches established")) {
          set_watching(true);
          spdlog::info("backend {}: watching {} with inotifywait ({})", backend_->name(), root,
                       sftp::ssh_transport_name(endpoint.transport));
        } else if (!line.starts_with("Setting up watches")) {
          spdlog::warn("backend {}: inotifywait: {}", backend_->name(), line);
          // Once watching, what inotifywait says is a failure (a new directory it could not
          // watch: out of watches): changes there go unreported while the server counts as
          // watched. The session ends; the next one watches the tree anew, and every mount
          // drops what it holds of the backend when it does. (From an inotifywait that ends
          // events at a newline, the line may be the rest of a name with a newline in it,
          // whose change went out under the name's first part: as much a loss.)
          if (watching_ && cut.empty()) cut = "inotifywait: " + line;
        }
        continue;
      }
      const std::string events = "," + item->events + ",";
      if (events.find(",Q_OVERFLOW,") != std::string::npos) {
        // The kernel's queue overflowed: events were lost, which ones is unknown.
        if (cut.empty()) cut = "inotify's event queue overflowed: changes were lost";
        continue;
      }
      const std::string& path = item->path;
      if (path.compare(0, root.size(), root) != 0) continue;
      std::string rel = root == "/" ? path : path.substr(root.size());
      while (rel.size() > 1 && rel.back() == '/') rel.pop_back();
      if (rel.empty()) rel = "/";
      if (rel.front() != '/') continue;  // a sibling of root with the same prefix
      const bool new_dir = events.find(",ISDIR,") != std::string::npos &&
                           (events.find(",CREATE,") != std::string::npos ||
                            events.find(",MOVED_TO,") != std::string::npos);
      // The name may lead to another file now (PathEpochs), where it went or came by a move or
      // a removal.
      const bool replaced = events.find(",DELETE") != std::string::npos ||
                            events.find(",MOVED_") != std::string::npos;
      const bool dir_gone = events.find(",ISDIR,") != std::string::npos &&
                            (events.find(",DELETE,") != std::string::npos ||
                             events.find(",MOVED_FROM,") != std::string::npos);
      // Held apart from reports of the same path by a NUL, which no name holds.
      if (new_dir) rel.push_back('\0');
      auto [at, first_report] = held_paths.emplace(rel, Report{});
      at->second.replaced = at->second.replaced || replaced;
      at->second.dir_gone = at->second.dir_gone || dir_gone;
      if (first_report) held.emplace_back(Clock::now(), std::move(rel));
    }
    ended = ended || !cut.empty();
    while (!held.empty() && (ended || Clock::now() - held.front().first >= kSettle)) {
      std::string rel = std::move(held.front().second);
      Report report;
      if (auto at = held_paths.find(rel); at != held_paths.end()) {
        report = at->second;
        held_paths.erase(at);
      }
      held.pop_front();
      report.new_dir = !rel.empty() && rel.back() == '\0';
      if (report.new_dir) rel.pop_back();
      on_change_(rel, report);
    }
    if (ended || !have_inotify) break;
    int wait_ms = 200;
    if (!held.empty()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(held.front().first +
                                                                        kSettle - Clock::now())
                      .count();
      wait_ms = static_cast<int>(std::clamp<long long>(left, 1, 200));
    }
    pollfd p{ch->fd(), short(POLLIN | (ch->wants_write() ? POLLOUT : 0)), 0};
    if (poll(&p, 1, wait_ms) > 0 && (p.revents & POLLOUT) && !ch->flush()) break;
  }
  const bool watched = watching_;
  set_watching(false);
  if (!have_inotify) return Ended::no_inotify;
  if (ended && !stopping_) {
    const std::string why = !cut.empty()          ? cut
                            : ch->error().empty() ? "inotifywait stopped"
                                                  : ch->error();
    if (watched) {
      spdlog::warn("backend {}: remote watcher ended ({}); starting it again{}", backend_->name(),
                   why, backend_->up() ? "" : " once the backend is back up");
    } else {
      spdlog::debug("backend {}: remote watcher ended before its watches were set ({})",
                    backend_->name(), why);
    }
  }
  return watched ? Ended::after_watching : Ended::before_watching;
}

}  // namespace skein
