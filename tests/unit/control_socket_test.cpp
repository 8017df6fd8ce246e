// The mount's control socket, on a real unix socket in a temporary directory: commands are
// answered at once, so a slow one (a `fill fetch` reading from the gateway) holds up no other;
// a file descriptor passed with a command (SCM_RIGHTS, as skein-mpi passes its buffer) reaches
// the handler; a socket opened for another user (a job's) answers that user and root only.
#include "control_socket.hpp"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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

// A socket file nobody listens on, as a mount that was killed leaves it.
void leave_dead_socket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
  ::close(fd);
}

void make_old(const std::string& path) {
  const timespec two_minutes_ago[2] = {{::time(nullptr) - 120, 0}, {::time(nullptr) - 120, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), two_minutes_ago, AT_SYMLINK_NOFOLLOW), 0) << path;
}

// A mount that is stopped (SIGSTOP, a debugger) or whose accepting thread hangs: once its
// socket's backlog is full, a connect waits for room. The request gives up at its timeout.
TEST(ControlSocketTest, ARequestToAMountThatTakesNoConnectionGivesUpAtItsTimeout) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;  // never started: nothing accepts
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(socket->path().size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, socket->path().c_str(), socket->path().size() + 1);
  std::vector<int> queued;  // connections that fill the backlog
  for (int i = 0; i < 1000; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ASSERT_EQ(errno, EAGAIN) << std::strerror(errno);
      ::close(fd);
      break;
    }
    queued.push_back(fd);
  }
  ASSERT_LT(queued.size(), 1000u) << "the backlog never filled";
  std::string answer, request_error;
  auto asked = std::async(std::launch::async, [&] {
    return ControlSocket::request(dir.path + "/sockets", mountpoint, "status", answer,
                                  request_error, -1, std::chrono::seconds(1));
  });
  const bool returned = asked.wait_for(std::chrono::seconds(8)) == std::future_status::ready;
  socket.reset();  // on failure, lets the waiting connect end (refused)
  for (int fd : queued) ::close(fd);
  ASSERT_TRUE(returned) << "the request still waits for the connection";
  EXPECT_FALSE(asked.get());
  EXPECT_NE(request_error.find("did not take the connection within 1 s"), std::string::npos)
      << request_error;
}

// A mount that dies while it answers (killed, crashed) closes the connection with no answer:
// that is a failure, never an empty success (a fill's caller would use bytes never put there).
TEST(ControlSocketTest, AConnectionClosedWithNoAnswerIsAFailure) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  socket->start([](const std::string&, int, const ControlPeer&) { return std::string(); });
  std::string answer = "left from before", request_error;
  EXPECT_FALSE(
      ControlSocket::request(dir.path + "/sockets", mountpoint, "fill x", answer, request_error));
  EXPECT_NE(request_error.find("ended the connection with no answer"), std::string::npos)
      << request_error;
}

// A mount that was killed leaves its socket and its mount point's link behind; the next mount
// that opens a socket in the same directory removes them, and leaves a live mount's socket and
// one too young to tell from a mount that is starting.
TEST(ControlSocketTest, WhatAKilledMountLeftIsRemovedByTheNext) {
  TempDir dir;
  const std::string sockets = dir.path + "/sockets";
  std::string error;
  auto live = ControlSocket::open(sockets, "live", dir.path + "/live", error);
  ASSERT_TRUE(live) << error;
  live->start([](const std::string&, int, const ControlPeer&) { return std::string("ok\n"); });
  make_old(sockets + "/live.sock");
  leave_dead_socket(sockets + "/dead.sock");
  make_old(sockets + "/dead.sock");
  const std::string dead_link = sockets + "/by-mountpoint/%2Fdead";
  ASSERT_EQ(::symlink((sockets + "/dead.sock").c_str(), dead_link.c_str()), 0);
  leave_dead_socket(sockets + "/young.sock");

  auto next = ControlSocket::open(sockets, "next", dir.path + "/next", error);
  ASSERT_TRUE(next) << error;
  namespace fs = std::filesystem;
  EXPECT_FALSE(fs::exists(fs::symlink_status(sockets + "/dead.sock")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(dead_link)));
  EXPECT_TRUE(fs::exists(fs::symlink_status(sockets + "/young.sock")));
  EXPECT_TRUE(fs::exists(sockets + "/live.sock"));
  std::string answer;
  ASSERT_TRUE(ControlSocket::request(sockets, dir.path + "/live", "status", answer, error))
      << error;
  EXPECT_EQ(answer, "ok\n");
}

// A command's path field carries any name: one with a newline (which ends a command line), with
// trailing spaces (which the socket strips) or control bytes goes %-encoded behind a '%', and
// comes out of the socket as it went in; a path the line can carry goes as it is, '%' and all.
TEST(ControlSocketTest, APathFieldCarriesNamesALineCannot) {
  EXPECT_EQ(ControlSocket::path_field("/srv0/a b/c%41.txt"), "/srv0/a b/c%41.txt");
  EXPECT_EQ(ControlSocket::path_field("/srv0/new\nline"), "%/srv0/new%0Aline");
  EXPECT_EQ(ControlSocket::path_field("/srv0/trail "), "%/srv0/trail%20");
  EXPECT_EQ(ControlSocket::path_field("/srv0/50% off\t"), "%/srv0/50%25%20off%09");
  for (const char* bad : {"%/a%4", "%/a%", "%/a%zz", "%/a%g0"})
    EXPECT_FALSE(ControlSocket::path_of_field(bad)) << bad;
  // Every byte a name may hold, alone and at the end of a name.
  for (int b = 1; b < 256; ++b) {
    const std::string path =
        "/d/" + std::string(1, static_cast<char>(b)) + "x" + std::string(1, static_cast<char>(b));
    const std::string field = ControlSocket::path_field(path);
    EXPECT_EQ(field.find_first_of("\n\r"), std::string::npos) << b;
    EXPECT_NE(field.back(), ' ') << b;
    EXPECT_EQ(ControlSocket::path_of_field(field), path) << b;
  }

  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  socket->start([](const std::string& command, int, const ControlPeer&) -> std::string {
    auto path = ControlSocket::path_of_field(command.substr(5));
    return path ? "[" + *path + "]" : std::string("bad");
  });
  for (std::string path : {"/srv0/a b/c%41.txt", "/srv0/new\nline", "/srv0/trail  ", "/srv0/\r\n",
                           "/srv0/\xc3\xbc ber", "/srv0/50% off\t"}) {
    std::string answer;
    ASSERT_TRUE(ControlSocket::request(dir.path + "/sockets", mountpoint,
                                       "fill " + ControlSocket::path_field(path), answer, error))
        << error;
    EXPECT_EQ(answer, "[" + path + "]");
  }
  // A line too long for the socket is refused, never run cut short (a path's prefix may name
  // another file).
  std::string answer;
  ASSERT_TRUE(ControlSocket::request(dir.path + "/sockets", mountpoint,
                                     "fill %/" + std::string(13000, 'a'), answer, error))
      << error;
  EXPECT_EQ(answer.rfind("error: a command line of ", 0), 0u) << answer;
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

// Sends `command` as user `uid` (a child process that drops root) and returns what came back:
// the answer, or "refused: ERROR".
std::string request_as(uid_t uid, const std::string& dir, const std::string& mountpoint,
                       const std::string& command, bool while_busy = false) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string answer, error, out;
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0)
      out = "setuid failed";
    else
      out = (while_busy ? ControlSocket::request_while_busy(dir, mountpoint, command, answer, error)
                        : ControlSocket::request(dir, mountpoint, command, answer, error))
                ? answer
                : "refused: " + error;
    const bool ok = ::write(fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
    ::_exit(ok ? 0 : 1);
  }
  ::close(fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, std::size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return got;
}

TEST(ControlSocketTest, ASocketOpenedForAJobsUserAnswersThatUserAndRootOnly) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
  TempDir dir;
  ::chmod(dir.path.c_str(), 0755);
  const std::string sockets = dir.path + "/sockets", mountpoint = dir.path + "/mnt";
  constexpr uid_t kJobUser = 64001, kOther = 64002;
  std::string error;
  auto socket = ControlSocket::open(sockets, "m1", mountpoint, error, {kJobUser, false});
  ASSERT_TRUE(socket) << error;
  socket->start([](const std::string& command, int, const ControlPeer& peer) {
    return command + " from uid " + std::to_string(peer.uid) + (peer.privileged ? "" : " (other)") +
           "\n";
  });
  struct stat st;
  ASSERT_EQ(::stat(socket->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kJobUser);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  EXPECT_EQ(request_as(kJobUser, sockets, mountpoint, "status"), "status from uid 64001\n");
  std::string answer;
  ASSERT_TRUE(ControlSocket::request(sockets, mountpoint, "status", answer, error)) << error;
  EXPECT_EQ(answer, "status from uid 0\n");
  // Another user: kept out by the socket's mode, with a message that says who may connect...
  const std::string refused = request_as(kOther, sockets, mountpoint, "status");
  EXPECT_NE(refused.find("refused: connect " + socket->path() + ": Permission denied"),
            std::string::npos)
      << refused;
  // ...and by the check of the peer, were the mode opened.
  ASSERT_EQ(::chmod(socket->path().c_str(), 0666), 0);
  EXPECT_EQ(request_as(kOther, sockets, mountpoint, "status"), "error: permission denied\n");
}

// A socket opened for everyone (a mount with allow_other) in a temporary directory others may
// search.
struct ForEveryone {
  TempDir dir;
  std::string sockets = dir.path + "/sockets", mountpoint = dir.path + "/mnt", error;
  std::unique_ptr<ControlSocket> socket;
  ForEveryone() {
    ::chmod(dir.path.c_str(), 0755);
    socket = ControlSocket::open(sockets, "m1", mountpoint, error, {::geteuid(), true});
  }
};

// A mount that serves every user (allow_other) lets every user connect; the handler learns which
// callers are privileged (root, the mount's user) and which are not.
TEST(ControlSocketTest, ASocketForEveryoneTellsTheHandlerWhoIsPrivileged) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
  ForEveryone e;
  ASSERT_TRUE(e.socket) << e.error;
  e.socket->start([](const std::string& command, int, const ControlPeer& peer) {
    return command + " from uid " + std::to_string(peer.uid) +
           (peer.privileged ? " (privileged)" : " (other)") + "\n";
  });
  struct stat st;
  ASSERT_EQ(::stat(e.socket->path().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  EXPECT_EQ(request_as(64003, e.sockets, e.mountpoint, "fill"), "fill from uid 64003 (other)\n");
  std::string answer;
  ASSERT_TRUE(ControlSocket::request(e.sockets, e.mountpoint, "status", answer, e.error))
      << e.error;
  EXPECT_EQ(answer, "status from uid 0 (privileged)\n");
}

// Other users never take the places kept for root and the mount's user: with as many of their
// commands running as they may have, the next one is answered "busy" and root's is answered.
// A socket for everyone whose "hold" commands, sent by user `uid`, take every place other users
// may have until released; other commands are answered at once.
struct OthersHoldingEveryPlace : ForEveryone {
  static constexpr int kOthers = ControlSocket::kMaxAnswering - ControlSocket::kKeptForPrivileged;
  std::atomic<bool> release{false};
  std::atomic<int> holding{0};
  std::vector<std::thread> threads;
  std::vector<std::string> answers = std::vector<std::string>(kOthers);

  // Whether every place of other users is taken.
  bool start(uid_t uid) {
    if (!socket) return false;
    socket->start([this](const std::string& command, int, const ControlPeer&) -> std::string {
      if (command != "hold") return command + " answered\n";
      ++holding;
      for (int i = 0; i < 2000 && !release; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return "held\n";
    });
    for (int i = 0; i < kOthers; ++i)
      threads.emplace_back(
          [this, i, uid] { answers[i] = request_as(uid, sockets, mountpoint, "hold"); });
    for (int i = 0; i < 500 && holding < kOthers; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return holding == kOthers;
  }
  ~OthersHoldingEveryPlace() {
    release = true;
    for (auto& t : threads) t.join();
  }
};

// Other users never take the places kept for root and the mount's user: with as many of their
// commands running as they may have, the next one is answered "busy" and root's is answered.
TEST(ControlSocketTest, OtherUsersLeaveRootItsPlaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
  OthersHoldingEveryPlace e;
  ASSERT_TRUE(e.start(64004)) << e.error;
  EXPECT_EQ(request_as(64004, e.sockets, e.mountpoint, "one more").rfind("error: busy", 0), 0u);
  std::string answer;
  EXPECT_TRUE(ControlSocket::request(e.sockets, e.mountpoint, "status", answer, e.error))
      << e.error;
  EXPECT_EQ(answer, "status answered\n");
  e.release = true;
  for (auto& t : e.threads) t.join();
  e.threads.clear();
  for (const auto& a : e.answers) EXPECT_EQ(a, "held\n");
}

// A fill-files answer or a stage's failure that names a file with newlines is one line.
TEST(ControlSocketTest, OneLineWritesTheNewlinesInsideATextAsBackslashN) {
  EXPECT_EQ(ControlSocket::one_line("error: /d/a\nb changed\n"), "error: /d/a\\nb changed\n");
  EXPECT_EQ(ControlSocket::one_line("/d/x\n\ny: Permission denied"),
            "/d/x\\n\\ny: Permission denied\n");
  EXPECT_EQ(ControlSocket::one_line("ok 4096\n"), "ok 4096\n");
  EXPECT_EQ(ControlSocket::one_line(""), "\n");
}

// skein-mpi's requests wait while the mount is busy with other users' commands (the command was
// not read, so it is sent again): answered once a place is free, where request() is refused.
TEST(ControlSocketTest, ARequestWhileBusyIsAnsweredOnceAPlaceIsFree) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
  OthersHoldingEveryPlace e;
  ASSERT_TRUE(e.start(64005)) << e.error;
  EXPECT_EQ(request_as(64005, e.sockets, e.mountpoint, "one more").rfind("error: busy", 0), 0u);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    e.release = true;
  });
  EXPECT_EQ(request_as(64005, e.sockets, e.mountpoint, "one more", /*while_busy=*/true),
            "one more answered\n");
  releaser.join();
}

// Connects to `path` directly, sends `pieces` (each after `gap`), ends its side, and returns what
// came back.
std::string send_raw(const std::string& path, const std::vector<std::string>& pieces,
                     std::chrono::milliseconds gap) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "?";
  for (const std::string& p : pieces) {
    std::this_thread::sleep_for(gap);
    if (::send(fd, p.data(), p.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(p.size())) break;
  }
  ::shutdown(fd, SHUT_WR);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, std::size_t(n));
  ::close(fd);
  return got;
}

// Connects to `path` as user `uid` (a child process that drops root) and sends a byte every
// 300 ms for `seconds`, the way a caller that wants to hold the mount's places would.
void drip_as(uid_t uid, const std::string& path, int seconds) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(uid) != 0 || ::setuid(uid) != 0) ::_exit(1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(1);
    for (int i = 0; i < seconds * 10 / 3; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (::send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
}

// Callers refused (here: "busy", with every place of other users taken) that go on sending
// bytes slowly take no place of root's: root is answered at once however many of them there are.
TEST(ControlSocketTest, RefusedCallersThatGoOnSendingNeverKeepRootOut) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
  OthersHoldingEveryPlace e;
  ASSERT_TRUE(e.start(64005)) << e.error;
  for (int i = 0; i < 2 * ControlSocket::kMaxAnswering; ++i)
    e.threads.emplace_back([&] { drip_as(64005, e.socket->path(), 8); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto start = std::chrono::steady_clock::now();
  std::string answer;
  EXPECT_TRUE(ControlSocket::request(e.sockets, e.mountpoint, "status", answer, e.error))
      << e.error;
  EXPECT_EQ(answer, "status answered\n");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// A command is its line, or what came before the client ended its side; a client that takes
// longer than the deadline for its line, however it spaces its bytes, gets no command run.
TEST(ControlSocketTest, ACommandMustComeWholeWithinItsDeadline) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  socket->start(
      [](const std::string& command, int, const ControlPeer&) { return "ran " + command + "\n"; });
  EXPECT_EQ(send_raw(socket->path(), {"status\n"}, std::chrono::milliseconds(0)), "ran status\n");
  EXPECT_EQ(send_raw(socket->path(), {"status"}, std::chrono::milliseconds(0)), "ran status\n");
  // A byte a second: each within the 2 s a read waits, the line never within the 5 s.
  EXPECT_EQ(send_raw(socket->path(), {"s", "t", "a", "t", "u", "s", "\n"},
                     std::chrono::milliseconds(1000)),
            "error: no whole command line within 5 s\n");
}

// A line that comes in two parts, the first with a file descriptor and the second after the
// socket's 2 s receive timeout, is one command with that descriptor: the wait is no end of the
// line, and what a receive that got nothing leaves in its control buffer is never taken for
// descriptors (taken so, the mount closed the caller's descriptor, perhaps another's by then, and
// ran the half line with it).
TEST(ControlSocketTest, ALineThatWaitsPastTheReceiveTimeoutKeepsItsDescriptor) {
  TempDir dir;
  const std::string mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(dir.path + "/sockets", "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  socket->start([](const std::string& command, int fd, const ControlPeer&) -> std::string {
    struct stat st;
    if (fd < 0) return command + ": no fd\n";
    if (::fstat(fd, &st) != 0) return command + ": fd closed\n";
    return command + (S_ISREG(st.st_mode) ? ": fd ok\n" : ": fd is something else\n");
  });
  const int memfd = ::memfd_create("control-socket-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket->path().c_str());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  char first[] = "fill";
  iovec iov{first, 4};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &memfd, sizeof memfd);
  ASSERT_EQ(::sendmsg(fd, &msg, MSG_NOSIGNAL), 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(2600));
  ASSERT_EQ(::send(fd, " x\n", 3, MSG_NOSIGNAL), 3);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) got.append(buf, std::size_t(n));
  ::close(fd);
  ::close(memfd);
  EXPECT_EQ(got, "fill x: fd ok\n");
}

TEST(ControlSocketTest, AClientWithoutADirectoryLooksInItsOwnAndThenInRunSkein) {
  const auto dirs = ControlSocket::default_dirs();
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.front(), ControlSocket::default_dir());
  EXPECT_EQ(dirs.back(), std::string(ControlSocket::kSystemDir));
  std::string answer, error;
  EXPECT_FALSE(ControlSocket::request("", "/no/such/mount", "status", answer, error));
  EXPECT_NE(error.find("no control socket for it in " + dirs.front()), std::string::npos) << error;
}

// A link may lead to anybody's socket (another user could make /tmp/skein-UID before the mount
// and link to a socket of its own): the command, and the buffer that may go with it, goes only
// to a mount run by root or by the owner of the directory the link is in. A mount does not put
// its socket in a directory another user made.
TEST(ControlSocketTest, ASocketOfAnotherUserIsNotAskedAndItsDirectoryNotUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to act as other users";
  constexpr uid_t kIntruder = 64005;
  TempDir dir;
  const std::string sockets = dir.path + "/sockets", mountpoint = dir.path + "/mnt";
  std::string error;
  auto socket = ControlSocket::open(sockets, "m1", mountpoint, error);
  ASSERT_TRUE(socket) << error;
  socket->start([](const std::string&, int, const ControlPeer&) { return "the mount\n"; });
  std::string answer;
  ASSERT_TRUE(ControlSocket::request(sockets, mountpoint, "status", answer, error)) << error;
  ASSERT_EQ(answer, "the mount\n");
  // The intruder's socket, in a directory of its own; the mount's link is pointed at it.
  const std::string own = dir.path + "/intruder", planted = own + "/planted.sock";
  ASSERT_EQ(::mkdir(own.c_str(), 0755), 0);
  ASSERT_EQ(::chown(own.c_str(), kIntruder, kIntruder), 0);
  ASSERT_EQ(::chmod(dir.path.c_str(), 0755), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kIntruder) != 0 || ::setuid(kIntruder) != 0)
      ::_exit(1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", planted.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 4) != 0)
      ::_exit(1);
    (void)!::write(ready[1], "r", 1);
    const int c = ::accept(fd, nullptr, nullptr);
    char buf[256];
    (void)!::read(c, buf, sizeof buf);
    (void)!::write(c, "planted\n", 8);
    ::close(c);
    ::_exit(0);
  }
  ::close(ready[1]);
  char r = 0;
  ASSERT_EQ(::read(ready[0], &r, 1), 1);
  ::close(ready[0]);
  std::string link;
  for (const auto& e : std::filesystem::directory_iterator(sockets + "/by-mountpoint"))
    link = e.path().string();
  ASSERT_FALSE(link.empty());
  std::filesystem::remove(link);
  std::filesystem::create_symlink(planted, link);
  answer.clear();
  EXPECT_FALSE(ControlSocket::request(sockets, mountpoint, "status", answer, error)) << answer;
  EXPECT_NE(error.find("served by uid 64005"), std::string::npos) << error;
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  // A directory for sockets that another user made is refused, not taken over.
  std::string refused;
  EXPECT_FALSE(ControlSocket::open(own, "m2", mountpoint, refused));
  EXPECT_NE(refused.find("another user may have made it"), std::string::npos) << refused;
}

}  // namespace
}  // namespace skein::client
