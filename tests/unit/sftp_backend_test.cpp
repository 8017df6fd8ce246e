// SftpBackend's subtree views, without a server: where a view's paths lead on the server, what a
// view is named, which paths it refuses, and that it shares the backend's connection pool (one
// server found down is down for both, their traffic is counted once) and draining state. The
// views against a real sshd, confinement included, are e2e.backend_subtree.
//
// Then the backend's connection pool and its remote watcher against a stand-in server: a script
// named `ssh` first in PATH, which the openssh transport runs, and which refuses, stays silent,
// runs OpenSSH's sftp-server on the pipe, or lets through to it only the SFTP handshake (an sshd
// that answers while the export's file system hangs); a command it runs on the spot.
#include "backend/sftp_backend.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/connection_pool.hpp"
#include "coherence/remote_watcher.hpp"
#include "fake_backend.hpp"
#include "temp_key_dir.hpp"

namespace skein {
namespace {

BackendConfig config_on_port_1(const std::string& root) {
  BackendConfig cfg;
  cfg.name = "srv0";
  cfg.endpoint.host = "127.0.0.1";
  cfg.endpoint.port = 1;  // nothing listens there
  cfg.endpoint.user = "nobody";
  cfg.endpoint.timeout = std::chrono::milliseconds(2000);
  cfg.root = root;
  cfg.connections = 2;
  return cfg;
}

std::shared_ptr<SftpBackend> view_of(SftpBackend& b, std::string_view rel) {
  auto v = b.subtree(rel);
  EXPECT_TRUE(v) << rel;
  return v ? std::dynamic_pointer_cast<SftpBackend>(*v) : nullptr;
}

TEST(SftpBackendSubtree, AViewsPathsLeadBelowItsDirectory) {
  auto b = std::make_shared<SftpBackend>(config_on_port_1("/export/"));
  EXPECT_EQ(b->remote_path("/"), "/export/");
  EXPECT_EQ(b->remote_path("/a"), "/export/a");
  auto job = view_of(*b, "/jobs/42");
  ASSERT_TRUE(job);
  EXPECT_EQ(job->name(), "srv0:/jobs/42");
  EXPECT_EQ(job->remote_path("/"), "/export/jobs/42");
  EXPECT_EQ(job->remote_path("/a/b"), "/export/jobs/42/a/b");
  auto nested = view_of(*job, "/scratch");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->name(), "srv0:/jobs/42/scratch");
  EXPECT_EQ(nested->remote_path("/f"), "/export/jobs/42/scratch/f");
  EXPECT_EQ(nested->config().root, "/export/") << "the export's configuration, shared";
}

TEST(SftpBackendSubtree, OnlyANormalisedPathBelowTheRootMakesAView) {
  auto b = std::make_shared<SftpBackend>(config_on_port_1("/export"));
  for (const char* bad : {"", "jobs", "/jobs/", "/a/../b", "/a/./b", "//a", "/.."})
    EXPECT_EQ(b->subtree(bad).error(), EINVAL) << bad;
  auto same = b->subtree("/");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->get(), b.get()) << "the root's view is the backend itself";
}

TEST(SftpBackendSubtree, AViewSharesTheBackendsPoolAndItsState) {
  auto b = std::make_shared<SftpBackend>(config_on_port_1("/export"));
  auto job = view_of(*b, "/jobs/7");
  ASSERT_TRUE(job);
  EXPECT_EQ(b->live_connections(), 0u) << "making a view opens no connection";
  b->set_draining(true);
  EXPECT_TRUE(job->draining());
  EXPECT_FALSE(job->accepts_new_files());
  b->set_draining(false);

  // The server's path guard is the view's: directories verified there need no new look.
  auto guard = PathGuard::of("127.0.0.1", 1);
  guard->mark_verified("/export/jobs");
  guard->mark_verified("/export/jobs/7");
  ASSERT_TRUE(b->up());
  const auto before = b->counters().ops;
  EXPECT_EQ(job->lstat("/f").error(), EIO) << "the server cannot be reached";
  EXPECT_FALSE(b->up()) << "the view found the server down: so is the backend";
  EXPECT_FALSE(job->up());
  EXPECT_EQ(b->lstat("/f").error(), EIO) << "at once, while it is down";
  EXPECT_GT(b->counters().ops, before) << "the view's requests count as the backend's";
  EXPECT_EQ(job->counters().ops, b->counters().ops);
}

constexpr const char* kSftpServer = "/usr/lib/openssh/sftp-server";
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The stand-in server: what the next SFTP session meets is the word in `mode`: refuse; silent;
// serve; stubborn (serves, but its ssh ignores SIGTERM and outlives its sftp-server);
// hung-export. Each SFTP session adds a line to `starts`, and one that serves writes its
// sftp-server's pid to `served`. A command (the remote watcher's) runs whatever the mode, its
// output passed on by a `cat` whose pid is in `relay`: stopped, the session falls silent.
class StandInServer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kSftpServer, X_OK) != 0) {
      if (getenv("CI")) FAIL() << kSftpServer << " is missing (openssh-sftp-server)";
      GTEST_SKIP() << kSftpServer << " is missing";
    }
    root_ = dir_.dir + "/export";
    std::filesystem::create_directory(root_);
    set_mode("serve");
    const std::string ssh = dir_.dir + "/ssh";
    // The handshake the gateway sends is 40 bytes: INIT (9) and the limits@openssh.com request
    // (31). In hung-export mode sftp-server gets those and nothing more, and holds its end open.
    std::ofstream(ssh) << "#!/bin/sh\n"
                       << "d='" << dir_.dir << "'\n"
                       << "for a; do last=$a; done\n"
                       << "if [ \"$last\" != sftp ]; then\n"
                       << "  exec 3<&0\n"
                       << "  { sh -c \"$last\" <&3 3<&-; } | cat &\n"
                       << "  echo $! >\"$d/relay\"\n"
                       << "  exec 0</dev/null 1>/dev/null 3<&-\n"
                       << "  wait\n"
                       << "  exit\n"
                       << "fi\n"
                       << "echo start >>\"$d/starts\"\n"
                       << "case $(cat \"$d/mode\") in\n"
                       << "refuse) exit 1 ;;\n"
                       << "silent) exec sleep 30 ;;\n"
                       << "stubborn)\n"
                       << "  exec 3<&0\n"
                       << "  " << kSftpServer << " <&3 &\n"
                       << "  echo $! >\"$d/served\"\n"
                       << "  exec 0</dev/null 1>/dev/null 3<&-\n"
                       << "  trap '' TERM\n"
                       << "  exec sleep 30 ;;\n"
                       << "hung-export)\n"
                       << "  exec 3<&0\n"
                       << "  { dd bs=1 count=40 status=none <&3; exec sleep 10; } | " << kSftpServer
                       << " &\n"
                       << "  exec 0</dev/null 3<&-\n"
                       << "  trap 'pkill -P $$' TERM\n"
                       << "  wait\n"
                       << "  exit ;;\n"
                       << "esac\n"
                       << "echo $$ >\"$d/served\"\n"
                       << "exec " << kSftpServer << "\n";
    std::filesystem::permissions(ssh, std::filesystem::perms::owner_all);
    old_path_ = getenv("PATH") ? getenv("PATH") : "";
    setenv("PATH", (dir_.dir + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override { setenv("PATH", old_path_.c_str(), 1); }

  BackendConfig config(std::chrono::milliseconds timeout, int connections) const {
    BackendConfig cfg;
    cfg.name = "srv0";
    cfg.endpoint.host = "127.0.0.1";
    cfg.endpoint.user = "nobody";
    cfg.endpoint.transport = sftp::SshTransport::openssh;
    cfg.endpoint.timeout = timeout;
    cfg.root = root_;
    cfg.connections = connections;
    return cfg;
  }
  void set_mode(const std::string& mode) const {
    std::ofstream(dir_.dir + "/mode.new") << mode << "\n";
    std::filesystem::rename(dir_.dir + "/mode.new", dir_.dir + "/mode");
  }
  size_t starts() const {
    std::ifstream in(dir_.dir + "/starts");
    size_t n = 0;
    for (std::string line; std::getline(in, line);) ++n;
    return n;
  }
  int pid_in(const std::string& file) const {
    std::ifstream in(dir_.dir + "/" + file);
    int pid = 0;
    in >> pid;
    return pid;
  }
  int served_pid() const { return pid_in("served"); }
  // Kills the sftp-server of the session that served last, and waits until `conn` sees it gone.
  void kill_served(const std::shared_ptr<sftp::Connection>& conn) const {
    const int served = served_pid();
    ASSERT_GT(served, 0);
    ASSERT_EQ(::kill(served, SIGKILL), 0);
    const auto killed = Clock::now();
    while (seconds_since(killed) < 5 && conn->alive()) std::this_thread::sleep_for(5ms);
    ASSERT_FALSE(conn->alive());
  }

  test::TempKeyDir dir_{"skein-pool"};
  std::string root_, old_path_;
};

// A connection that dies (its transport closed) while the backend is up: the caller that finds it
// lets go of it outside the slot's lock, and closing it takes a while (here ssh ignores SIGTERM,
// killed after a second), so the other callers meanwhile queue for the slot's reconnect, and so
// does that caller once it is done. The server has stopped answering: the first reconnect fails at
// the deadline (2 s) and marks the backend down, and the callers queued behind it then fail at
// once instead of each dialing in turn, the k-th waiting k deadlines.
TEST_F(StandInServer, CallersQueuedOnAFailingReconnectFailWithinOneDeadline) {
  set_mode("stubborn");
  ConnectionPool pool(config(2000ms, 1));
  {
    auto conn = pool.connection(0);
    ASSERT_TRUE(conn) << strerror(conn.error());
    ASSERT_NO_FATAL_FAILURE(kill_served(*conn));
  }  // the slot holds the dead connection's last reference
  ASSERT_TRUE(pool.up()) << "a closed connection is no sign of a server down";
  set_mode("silent");
  constexpr int kCallers = 4;
  std::vector<std::thread> callers;
  std::vector<double> took(kCallers, -1);
  std::vector<int> error(kCallers, 0);
  const auto start = Clock::now();
  for (size_t i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      auto c = pool.connection(0);
      error[i] = c ? 0 : c.error();
      took[i] = seconds_since(start);
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_FALSE(pool.up());
  for (size_t i = 0; i < kCallers; ++i) {
    EXPECT_EQ(error[i], EIO) << "caller " << i;
    EXPECT_LT(took[i], 3.0) << "caller " << i << " waited past one deadline (2 s)";
  }
}

// An sshd that answers while the export's file system hangs: the prober's handshakes succeed, but
// the backend stays down until a request of the export's root is answered. Marked up after the
// handshake alone, every call would wait out a deadline again and every mount's cache be dropped,
// each time. And a backend that goes down again soon after it came back goes on backing off from
// where it was, instead of trying again within 100 ms.
TEST_F(StandInServer, AServerWhoseExportHangsStaysDownAndOneThatFlapsBacksOff) {
  set_mode("refuse");
  ConnectionPool pool(config(500ms, 1));
  std::atomic<int> back_up{0};
  pool.on_back_up([&] { ++back_up; });
  EXPECT_EQ(pool.connection(0).error(), EIO);
  ASSERT_FALSE(pool.up());

  set_mode("hung-export");
  const size_t before = starts();
  const auto hung_since = Clock::now();
  bool came_up = false;
  while (seconds_since(hung_since) < 3 && !came_up) {
    came_up = pool.up();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(came_up) << "marked up after a handshake while the export does not answer";
  EXPECT_GE(starts() - before, 2u) << "the prober did not try to reconnect";
  EXPECT_EQ(back_up.load(), 0);

  set_mode("serve");
  const auto served_since = Clock::now();
  while (seconds_since(served_since) < 10 && !pool.up()) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(pool.up()) << "not back up once the export answers";
  while (seconds_since(served_since) < 10 && back_up.load() == 0) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(back_up.load(), 1);
  auto conn = pool.connection(0);
  ASSERT_TRUE(conn);
  EXPECT_TRUE((*conn)->alive());

  // Down again at once: the prober's first try waits as long as the last outage's backoff had
  // grown (a few attempts: 0.8 s or more), not the 50 to 100 ms of a first try.
  set_mode("refuse");
  ASSERT_NO_FATAL_FAILURE(kill_served(*conn));
  const size_t before_flap = starts();
  EXPECT_EQ(pool.connection(0).error(), EIO);
  ASSERT_FALSE(pool.up());
  const auto down_since = Clock::now();
  const size_t redial = before_flap + 1;  // the caller's own reconnect
  double first_try = -1;
  while (seconds_since(down_since) < 5 && first_try < 0) {
    if (starts() > redial) first_try = seconds_since(down_since);
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(first_try, 0.5) << "the prober started over at the shortest backoff";
  EXPECT_GE(first_try, 0) << "the prober never tried again";
}

// Whether `done` holds within `limit`, asked every 10 ms; the seconds it took, or -1.
template <typename F>
double seconds_until(F done, std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  while (Clock::now() - start < limit) {
    if (done()) return seconds_since(start);
    std::this_thread::sleep_for(10ms);
  }
  return done() ? seconds_since(start) : -1;
}

// A watcher's session that falls silent without closing (its server frozen, its connection
// dropped by a firewall): it prints a heartbeat every second here (a deadline of 1 s), so after 2 s
// without a line the watcher ends it, reports the server not watched, and starts another.
TEST_F(StandInServer, ARemoteWatcherWhoseSessionFallsSilentStopsWatchingAndStartsAgain) {
  if (access("/usr/bin/inotifywait", X_OK) != 0) GTEST_SKIP() << "no inotifywait";
  auto backend = std::make_shared<SftpBackend>(config(1000ms, 1));
  RemoteWatcher watcher(backend, [](const std::string&, const RemoteWatcher::Report&) {});
  ASSERT_GE(seconds_until([&] { return watcher.watching(); }, 10s), 0) << "never watching";
  const int relay = pid_in("relay");
  ASSERT_GT(relay, 0);
  ASSERT_EQ(::kill(relay, SIGSTOP), 0);
  struct Resume {
    int pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{relay};
  const double stopped = seconds_until([&] { return !watcher.watching(); }, 6s);
  EXPECT_GE(stopped, 0) << "still watching through a silent session";
  EXPECT_LT(stopped, 3.5) << "later than a heartbeat and a deadline (2 s)";
  EXPECT_TRUE(backend->up());
  EXPECT_GE(seconds_until([&] { return watcher.watching(); }, 10s), 0)
      << "no new session after the silent one";
  EXPECT_NE(pid_in("relay"), relay);
}

// A backend the pool marks down: its watcher stops watching at once (its session may be as dead
// as the SFTP connections, and nothing claims the server watched while calls fail), starts no
// session while it is down, and watches again once the server answers.
TEST_F(StandInServer, ARemoteWatcherStopsWatchingWhileItsBackendIsDown) {
  if (access("/usr/bin/inotifywait", X_OK) != 0) GTEST_SKIP() << "no inotifywait";
  auto backend = std::make_shared<SftpBackend>(config(1000ms, 1));
  RemoteWatcher watcher(backend, [](const std::string&, const RemoteWatcher::Report&) {});
  ASSERT_GE(seconds_until([&] { return watcher.watching(); }, 10s), 0) << "never watching";
  set_mode("refuse");
  EXPECT_EQ(backend->lstat("/").error(), EIO);
  ASSERT_FALSE(backend->up());
  const double stopped = seconds_until([&] { return !watcher.watching(); }, 3s);
  EXPECT_GE(stopped, 0) << "still watching a backend that is down";
  EXPECT_LT(stopped, 1.0);
  std::this_thread::sleep_for(3s);  // past the watcher's 2 s before a new session
  EXPECT_FALSE(watcher.watching()) << "a new session while the backend is down";
  set_mode("serve");
  EXPECT_GE(seconds_until([&] { return backend->up() && watcher.watching(); }, 15s), 0)
      << "not watching again once the server answers";
}

// Names with a newline (one whose second line reads like an event) or trailing spaces, made on
// the server: each is reported whole, by the session that watched before. (The part after a
// newline once came as a line of its own, taken for a message of inotifywait's: the session
// ended, and every mount dropped what it held of the backend, at each such name.)
TEST_F(StandInServer, ARemoteWatcherReportsNamesWithNewlinesWholeInTheSameSession) {
  if (access("/usr/bin/inotifywait", X_OK) != 0) GTEST_SKIP() << "no inotifywait";
  auto backend = std::make_shared<SftpBackend>(config(2000ms, 1));
  std::mutex mu;
  std::set<std::string> reported;
  std::atomic<int> stopped{0};
  RemoteWatcher watcher(
      backend,
      [&](const std::string& rel, const RemoteWatcher::Report&) {
        std::lock_guard lock(mu);
        reported.insert(rel);
      },
      [&](bool watching) {
        if (!watching) ++stopped;
      });
  ASSERT_GE(seconds_until([&] { return watcher.watching(); }, 10s), 0) << "never watching";
  const int relay = pid_in("relay");
  const std::vector<std::string> names = {"new\nline", "trail  ", "b\nATTRIB x", "plain"};
  for (const auto& name : names) std::ofstream(root_ + "/" + name) << "x";
  auto all_reported = [&] {
    std::lock_guard lock(mu);
    for (const auto& name : names)
      if (!reported.count("/" + name)) return false;
    return true;
  };
  EXPECT_GE(seconds_until(all_reported, 5s), 0) << "not every name was reported whole";
  std::this_thread::sleep_for(300ms);  // a session's end would be seen by now
  EXPECT_EQ(stopped.load(), 0) << "the session ended";
  EXPECT_TRUE(watcher.watching());
  EXPECT_EQ(pid_in("relay"), relay) << "another session";
  std::lock_guard lock(mu);
  for (const auto& rel : reported)
    EXPECT_TRUE(rel == "/" || std::count(names.begin(), names.end(), rel.substr(1)) == 1)
        << "reported: " << rel;
}

TEST(FakeBackendSubtree, AFakesViewSharesItsTreeAsAnSftpViewSharesItsServer) {
  // The layouts' tests use fakes; their views behave as SftpBackend's do.
  auto b = test::FakeBackend::make("f");
  b->put_dir("/jobs/1");
  auto v = b->subtree("/jobs/1");
  ASSERT_TRUE(v);
  EXPECT_EQ((*v)->name(), "f:/jobs/1");
  ASSERT_TRUE((*v)->mkdir("/d", 0755));
  EXPECT_TRUE(b->has("/jobs/1/d"));
  b->put_symlink("/jobs/2", "/elsewhere");
  auto linked = b->subtree("/jobs/2");
  ASSERT_TRUE(linked);
  EXPECT_EQ((*linked)->lstat("/x").error(), ELOOP) << "a symlink at the view's root";
  b->set_down(true);
  EXPECT_FALSE((*v)->up());
}

}  // namespace
}  // namespace skein
