// The mount's control socket, on a real unix socket in a temporary directory: commands are
// answered at once, so a slow one (a `fill fetch` reading from the gateway) holds up no other;
// a file descriptor passed with a command (SCM_RIGHTS, as skein-mpi passes its buffer) reaches
// the handler.
#include "control_socket.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

namespace skein::client {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char name[] = "/tmp/skein-control-test-XXXXXX";
    path = ::mkdtemp(name);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

TEST(ControlSocketTest, AnswersACommandWhileAnotherIsStillBeingAnswered) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> slow_started{0};
  socket->start([&](const std::string& command, int, const ControlPeer&) -> std::string {
    if (command == "slow") {
      ++slow_started;
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(20), [&] { return release; });
      return "slow done\n";
    }
    return "answer to " + command + "\n";
  });
  std::string slow_answer, slow_error;
  std::thread slow([&] {
    ControlSocket::request(dir.path + "/sockets", mountpoint, "slow", slow_answer, slow_error);
  });
  for (int i = 0; i < 500 && slow_started == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(slow_started, 1);

  // The slow command is still being answered; another gets its answer meanwhile.
  const auto start = std::chrono::steady_clock::now();
  std::string answer;
  ASSERT_TRUE(ControlSocket::request(dir.path + "/sockets", mountpoint, "quick", answer, error))
      << error;
  EXPECT_EQ(answer, "answer to quick\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  slow.join();
  EXPECT_EQ(slow_answer, "slow done\n") << slow_error;
}

TEST(ControlSocketTest, DestructionWaitsForTheCommandsBeingAnswered) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  std::atomic<int> started{0}, finished{0};
  socket->start([&](const std::string&, int, const ControlPeer&) -> std::string {
    ++started;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ++finished;
    return "done\n";
  });
  std::string answer;
  std::thread client([&] {
    std::string e;
    ControlSocket::request(dir.path + "/sockets", mountpoint, "x", answer, e);
  });
  for (int i = 0; i < 500 && started == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(started, 1);
  socket.reset();  // while the command is being answered
  EXPECT_EQ(finished, 1);
  client.join();
  EXPECT_EQ(answer, "done\n");
}

TEST(ControlSocketTest, PassesAFileDescriptorWithACommand) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  std::atomic<int> handler_fd{-2};
  socket->start([&](const std::string& command, int fd, const ControlPeer&) -> std::string {
    handler_fd = fd;
    if (fd < 0) return command + ": no fd\n";
    // The handler writes into the caller's file, which only the descriptor names.
    const std::string text = "written by the handler";
    if (::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
      return "error: pwrite\n";
    return command + ": wrote\n";
  });
  const int memfd = ::memfd_create("control-socket-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  std::string answer;
  ASSERT_TRUE(
      ControlSocket::request(dir.path + "/sockets", mountpoint, "with", answer, error, memfd))
      << error;
  EXPECT_EQ(answer, "with: wrote\n");
  char back[64] = {};
  ASSERT_GT(::pread(memfd, back, sizeof back - 1, 0), 0);
  EXPECT_STREQ(back, "written by the handler");
  ::close(memfd);
  // The socket closed its copy once the handler returned: the fd number is free again there, and
  // a command without one gets -1.
  ASSERT_TRUE(ControlSocket::request(dir.path + "/sockets", mountpoint, "without", answer, error))
      << error;
  EXPECT_EQ(answer, "without: no fd\n");
  EXPECT_EQ(handler_fd, -1);
}

}  // namespace
}  // namespace skein::client
