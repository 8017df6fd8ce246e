// Failures never hang: a storage server killed mid-read gives an error within the deadline, its
// files come back when it does (without remounting, even through descriptors opened before),
// and a mount whose gateway stops answering fails operations within its deadline.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>
#include <utility>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class BackendFailure : public ClusterSuite<2, 1> {
 protected:
  std::string m(const std::string& rel) { return cluster_->mount() + "/srv0/" + rel; }
  std::string s(const std::string& rel) { return cluster_->export_dir(0) + "/" + rel; }
};

TEST_F(BackendFailure, ServerKilledDuringReadFailsFastAndComesBackWithoutRemount) {
  const size_t size = 512u << 20;
  {
    std::string piece = random_bytes(1 << 20, 5);
    std::ofstream out(s("stream"), std::ios::binary);
    for (size_t i = 0; i < size / piece.size(); ++i) out << piece;
  }
  int held = ::open(m("stream").c_str(), O_RDONLY);  // survives the restart below
  ASSERT_GE(held, 0);

  // Read the file in a loop, the page cache dropped as it goes, so that the kill lands mid-read.
  // `killed` is set before the kill begins and `gone` once it is done (on a loaded machine
  // `skein-local stop-server` took 9 s): the reader starts over at the end of the file until the
  // server is gone, and once more after, since the pass under way then may end in what the mount
  // had fetched already.
  std::atomic<bool> killed{false}, gone{false};
  std::atomic<int> read_errno{0};
  Clock::time_point kill_time;
  std::atomic<double> fail_after{-1};
  std::thread reader([&] {
    int fd = ::open(m("stream").c_str(), O_RDONLY);
    if (fd < 0) {
      read_errno = errno;
      return;
    }
    std::string buf(1 << 20, '\0');
    bool passed_after_gone = false;
    for (;;) {
      ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0) {
        read_errno = errno;
        if (killed) fail_after = seconds_since(kill_time);
        break;
      }
      if (n == 0) {
        if (gone && std::exchange(passed_after_gone, true)) break;
        ::lseek(fd, 0, SEEK_SET);
      }
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
    ::close(fd);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill_time = Clock::now();
  killed = true;
  const bool stopped = cluster_->stop_server(0);
  const double gone_after = seconds_since(kill_time);
  gone = true;
  reader.join();
  ASSERT_TRUE(stopped);
  EXPECT_EQ(read_errno.load(), EIO) << strerror(read_errno.load());
  EXPECT_GE(fail_after.load(), 0.0) << "the read did not fail after the kill";
  // Within the deadline of the server's going, which came between the two.
  EXPECT_LT(fail_after.load() - gone_after, 15.0)
      << "the error took longer than the deadline (the kill took " << gone_after << " s)";

  // The other server is unaffected.
  ASSERT_TRUE(write_file(cluster_->mount() + "/srv1/still-here", "yes"));
  EXPECT_EQ(read_file(cluster_->mount() + "/srv1/still-here"), "yes");

  // Back up: new opens and the descriptor held across the outage both read again.
  ASSERT_TRUE(cluster_->start_server(0));
  auto start = Clock::now();
  std::string head;
  while (seconds_since(start) < 20) {
    head = read_file(m("stream")).substr(0, 16);
    if (head.size() == 16 && head[0] != '<') break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(head, random_bytes(16, 5))
      << "not readable " << seconds_since(start) << " s after restart";
  std::string buf(4096, '\0');
  ASSERT_EQ(::pread(held, buf.data(), buf.size(), 4096), 4096) << strerror(errno);
  EXPECT_EQ(buf, random_bytes(1 << 20, 5).substr(4096, 4096));
  ::close(held);
}

TEST_F(BackendFailure, HungServerFailsMetadataCallsWithinTheDeadlineAndComesBack) {
  // A server that stops answering with its connections open: the case where sshfs hangs. Calls
  // made in the caller's thread (lookups, creates) must give up at the deadline like the rest.
  ASSERT_TRUE(write_file(m("before-freeze"), "x"));
  ASSERT_TRUE(eventually([&] { return servers_watched(cluster_->mount()); }))
      << "the remote watchers never set their watches";
  ASSERT_TRUE(cluster_->freeze_server(0));
  LocalCluster::ThawOnExit thaw(*cluster_, 0);
  auto start = Clock::now();
  struct stat st;
  EXPECT_NE(::stat(m("never-looked-up").c_str(), &st), 0);
  EXPECT_EQ(errno, EIO) << strerror(errno);
  const double failed_after = seconds_since(start);
  EXPECT_LT(failed_after, 15.0 + 5.0) << "the lookup outlived the 15 s deadline";
  // Down: its watcher's session, as silent as the rest, is ended at once, and the mount no longer
  // trusts its caches as watched (the heartbeat alone would take 25 s).
  EXPECT_TRUE(eventually([&] { return !servers_watched(cluster_->mount()); }, 2s))
      << "the server still reported watched while it is down";
  // Meanwhile the other server answers at once.
  start = Clock::now();
  ASSERT_TRUE(write_file(cluster_->mount() + "/srv1/during-freeze", "yes"));
  EXPECT_LT(seconds_since(start), 2.0);
  // The server is marked down: further calls fail fast instead of waiting again.
  start = Clock::now();
  int fd = ::open(m("created-while-down").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_LT(fd, 0) << "created on a frozen server";
  if (fd >= 0) ::close(fd);
  EXPECT_LT(seconds_since(start), 2.0) << "a down backend made a create wait";

  ASSERT_TRUE(cluster_->thaw_server(0));
  start = Clock::now();
  bool back = false;
  while (seconds_since(start) < 30 && !back) {
    back = write_file(m("after-thaw"), "again");
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(back) << "not writable " << seconds_since(start) << " s after the thaw";
  EXPECT_EQ(read_file(m("after-thaw")), "again");
  EXPECT_TRUE(eventually([&] { return servers_watched(cluster_->mount()); }))
      << "not watched again once the server answers";
}

class GatewayFailure : public ClusterSuite<1, 1> {};

TEST_F(GatewayFailure, StoppedGatewayFailsOperationsWithinDeadlineThenRecovers) {
  std::string f = cluster_->mount() + "/srv0/probe";
  ASSERT_TRUE(write_file(f, "before"));
  int pid = cluster_->gateway_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  // kill() returns before every thread has stopped: one running on the other CPU could still
  // answer. Wait until all of them are stopped ('T' in /proc/PID/task/*/stat).
  auto all_stopped = [pid] {
    std::string out;
    run_command("cat /proc/" + std::to_string(pid) +
                    "/task/*/stat 2>/dev/null | sed 's/.*) //' | cut -c1 | sort -u",
                &out);
    return out == "T\n";
  };
  for (int i = 0; i < 100 && !all_stopped(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(all_stopped()) << "the gateway did not stop";
  auto start = Clock::now();
  struct stat st;
  int err = SKEIN_ERRNO_OF(::stat((cluster_->mount() + "/srv0/uncached-name").c_str(), &st));
  double took = seconds_since(start);
  ::kill(pid, SIGCONT);
  EXPECT_EQ(err, EIO);
  EXPECT_LT(took, 20.0) << "a hung gateway must not hang the mount";
  // Once it answers again, so does the mount.
  start = Clock::now();
  std::string content;
  while (seconds_since(start) < 10 && (content = read_file(f)) != "before")
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(content, "before");
}

TEST_F(GatewayFailure, KilledGatewayFailsOperationsAtOnce) {
  int pid = cluster_->gateway_pid();
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  auto start = Clock::now();
  struct stat st;
  int err = SKEIN_ERRNO_OF(::stat((cluster_->mount() + "/srv0/another-name").c_str(), &st));
  EXPECT_EQ(err, EIO);
  EXPECT_LT(seconds_since(start), 16.0);
}

}  // namespace
}  // namespace skein::test
