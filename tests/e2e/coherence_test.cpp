// Coherent caching across mounts: mounts cache with long (3600 s) kernel lifetimes while their
// Watch stream is healthy, yet a change made through one mount is seen by the others on their very
// next access; changes made directly on a server arrive through revalidation or the remote inotify
// watcher; a gateway that dies puts mounts in safe mode, and a mount that stops answering loses
// its lease without stalling the others. Each test first shows that the old state really was
// cached, so that it fails without the invalidation it is about.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Polls `done` every 20 ms until it holds or `timeout` passes; returns the seconds it took, or
// -1 when it never held.
double wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto start = Clock::now();
  while (Clock::now() - start < timeout) {
    if (done()) return seconds_since(start);
    std::this_thread::sleep_for(20ms);
  }
  return done() ? seconds_since(start) : -1;
}

// How many times `what` is in the file at `path` (a log).
size_t times_in_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

off_t size_of(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string skein_mount_bin() { return build_dir() + "/client/skein-mount"; }

// The command line of process `pid`, its arguments apart; empty once it is gone.
std::vector<std::string> argv_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::string> argv;
  std::istringstream args(cmdline);
  for (std::string arg; std::getline(args, arg, '\0');) argv.push_back(arg);
  return argv;
}

// The parent of process `pid`, or -1.
int parent_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const size_t end = stat.rfind(')');  // after the command's name, which may hold anything
  if (end == std::string::npos) return -1;
  std::istringstream rest(stat.substr(end + 1));
  std::string state;
  int ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

// The inotifywait processes that watch `dir` (a remote watcher's, on a local server).
std::set<int> inotifywaits_of(const std::string& dir) {
  std::set<int> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto argv = argv_of(std::stoi(name));
    if (argv.size() > 1 && argv.front() == "inotifywait" && argv.back() == dir)
      pids.insert(std::stoi(name));
  }
  return pids;
}

// The pid of the skein-mount daemon serving `mountpoint`.
int mount_pid(const std::string& mountpoint) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    std::vector<std::string> argv;
    std::istringstream args(cmdline);
    for (std::string arg; std::getline(args, arg, '\0');) argv.push_back(arg);
    if (argv.empty() || argv[0].find("skein-mount") == std::string::npos) continue;
    for (const auto& arg : argv) {
      if (arg == mountpoint) return std::stoi(name);
    }
  }
  return -1;
}

// Rewrites a file on the server behind the gateway's back, keeping its size and mtime: only a
// cache that was dropped can show the new bytes.
void rewrite_keeping_size_and_mtime(const std::string& path, const std::string& data) {
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_EQ(static_cast<size_t>(before.st_size), data.size());
  ASSERT_TRUE(write_file(path, data));
  timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

// A skein-gateway of the test's own (the cluster's config with other [gateway] settings) and
// mounts of its default namespace.
struct CustomGateway {
  std::unique_ptr<GatewayProcess> process;  // declared first: stopped after the mounts
  std::vector<std::unique_ptr<FuseMount>> mounts;
  std::string config, address, log;

  // Starts (or restarts) the gateway on `address`.
  bool start(std::string& error) {
    process = GatewayProcess::start(config, address, log, error);
    return process != nullptr;
  }
  void kill_hard() {
    if (process && process->pid() > 0) ::kill(process->pid(), SIGKILL);
    process.reset();  // reaps it
  }
  std::string mount(size_t i) const { return mounts.at(i)->path(); }
};

class Coherence : public ClusterSuite<1, 2> {
 protected:
  static void SetUpTestSuite() {
    ClusterSuite::SetUpTestSuite();
    if (!cluster_) return;
    // The mounts A, B, C of these tests hear of changes only through the Watch stream: no
    // remote watcher, and revalidation as rare as the gateway allows.
    std::string error;
    main_ = start_gateway("main",
                          "lease_timeout_ms = 500\nrevalidate_interval_ms = 3600000\n"
                          "remote_watch = false\n",
                          3, error);
    if (!main_) start_error_ = error;
  }
  static void TearDownTestSuite() {
    main_.reset();
    ClusterSuite::TearDownTestSuite();
  }
  void SetUp() override {
    ClusterSuite::SetUp();
    ASSERT_TRUE(main_) << "custom gateway did not start:\n" << start_error_;
    for (size_t i = 0; i < main_->mounts.size(); ++i) {
      ASSERT_GE(wait_until([&] { return watch_healthy(main_->mount(i)); }, 10s), 0)
          << "mount " << i << " never became healthy:\n"
          << status_of(main_->mount(i));
    }
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(::mkdir(s("").c_str(), 0755), 0) << strerror(errno);
  }

  // A gateway with `settings` in its [gateway] section, and `mounts` mounts of it.
  static std::unique_ptr<CustomGateway> start_gateway(const std::string& name,
                                                      const std::string& settings, int mounts,
                                                      std::string& error) {
    auto g = std::make_unique<CustomGateway>();
    const std::string dir = cluster_->state() + "/custom-" + name;
    ::mkdir(dir.c_str(), 0755);
    g->address = "127.0.0.1:" + std::to_string(free_port());
    g->config = dir + "/gateway.toml";
    g->log = dir + "/gateway.log";
    std::ifstream file(cluster_->state() + "/gateway.toml");
    std::istringstream in(without_jobs(std::string(std::istreambuf_iterator<char>(file), {})));
    std::ofstream out(g->config);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("listen", 0) == 0) line = "listen = \"" + g->address + "\"";
      for (const char* key :
           {"lease_timeout_ms", "revalidate_interval_ms", "remote_watch", "timeout_ms"}) {
        if (line.rfind(key, 0) == 0) line = "# " + line;
      }
      out << line << "\n";
      if (line == "[gateway]") out << settings;
    }
    out.close();
    if (!g->start(error)) return nullptr;
    for (int i = 0; i < mounts; ++i) {
      auto m = FuseMount::start(g->address, dir + "/mnt-" + std::to_string(i), "default", error,
                                cluster_->mount_credentials());
      if (!m) return nullptr;
      g->mounts.push_back(std::move(m));
    }
    return g;
  }

  // This test's directory on server 0: through mount i of the main gateway, and on the server.
  std::string m(size_t i, const std::string& rel) const {
    return main_->mount(i) + "/srv0/" + name_ + "/" + rel;
  }
  std::string s(const std::string& rel) const {
    return cluster_->export_dir(0) + "/" + name_ + "/" + rel;
  }

  static inline std::unique_ptr<CustomGateway> main_;
  std::string name_;
};

constexpr size_t A = 0, B = 1, C = 2;

TEST_F(Coherence, MountsCacheLongerThanTheSafeTtlWhileHealthy) {
  // Each attempt in a directory of its own. A write to /proc/sys/vm/drop_caches by another program
  // empties B's caches too (the kernel then looks names up again and gets the new attributes), so
  // an attempt across one tells nothing and is repeated.
  std::string dir;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const long long drops = system_cache_drops();
    dir = "try" + std::to_string(attempt);
    ASSERT_EQ(::mkdir(s(dir).c_str(), 0755), 0) << strerror(errno);
    auto in = [&](const std::string& rel) { return dir + "/" + rel; };
    ASSERT_TRUE(write_file(m(A, in("attrs")), "12345"));
    ASSERT_TRUE(write_file(m(A, in("pages")), "old pages"));
    EXPECT_EQ(size_of(m(B, in("attrs"))), 5);
    EXPECT_EQ(read_file(m(B, in("pages"))), "old pages");
    const std::set<std::string> listed = list_names(m(B, dir));
    EXPECT_EQ(listed.count("attrs"), 1u);
    // Behind the gateway's back (it watches nothing here): only an expired cache would notice.
    ASSERT_TRUE(write_file(s(in("attrs")), "1234567890"));
    rewrite_keeping_size_and_mtime(s(in("pages")), "new pages");
    ASSERT_TRUE(write_file(s(in("unseen")), "made on the server"));
    std::this_thread::sleep_for(1500ms);  // longer than the safe TTL of 1 s
    std::vector<std::string> lost;        // what B did not keep
    if (size_of(m(B, in("attrs"))) != 5) lost.push_back("attributes were not cached for long");
    if (read_file(m(B, in("pages"))) != "old pages")
      lost.push_back("page cache was not kept across opens");
    if (list_names(m(B, dir)) != listed) lost.push_back("the listing was not kept across opendirs");
    struct stat dir_st;
    ASSERT_EQ(::stat(m(B, dir).c_str(), &dir_st), 0);
    EXPECT_EQ(dir_st.st_mode & 07777, 0755u);
    ASSERT_EQ(::chmod(s(dir).c_str(), 0711), 0);  // behind the gateway's back
    std::this_thread::sleep_for(1500ms);
    // The kernel asks for the directory's attributes again after a listing.
    (void)list_names(m(B, dir));
    ASSERT_EQ(::stat(m(B, dir).c_str(), &dir_st), 0);
    if ((dir_st.st_mode & 07777) != 0755u) lost.push_back("directory attributes were not kept");
    ASSERT_EQ(::chmod(s(dir).c_str(), 0755), 0);
    if (lost.empty()) break;
    if (system_cache_drops() == drops || attempt == 2) {
      for (const std::string& what : lost) ADD_FAILURE() << what;
      break;
    }
  }
  // A change through the gateway drops the listing on the other mounts at once.
  ASSERT_TRUE(write_file(m(A, dir + "/through-a"), "x"));
  EXPECT_EQ(list_names(m(B, dir)).count("through-a"), 1u)
      << "a cached listing survived an invalidation";
  std::string status = status_of(main_->mount(B));
  EXPECT_NE(status.find("entry ttl: 3600 s"), std::string::npos) << status;
  EXPECT_NE(status.find("attr ttl: 3600 s"), std::string::npos) << status;
}

TEST_F(Coherence, ChangesThroughOneMountAreSeenAtOnceByMountsThatCachedTheOldState) {
  ASSERT_TRUE(write_file(m(A, "data"), "old-data-1234"));
  ASSERT_TRUE(write_file(m(A, "trunc"), "0123456789"));
  ASSERT_TRUE(write_file(m(A, "from"), "renamed"));
  ASSERT_TRUE(write_file(m(A, "gone"), "unlinked"));
  ASSERT_TRUE(write_file(m(A, "mode"), "chmod"));
  ASSERT_EQ(::chmod(m(A, "mode").c_str(), 0644), 0);
  // B and C cache the old state: names, attributes, pages. (A read makes the kernel ask for
  // attributes again, for atime, so each file read is also stat-ed afterwards.)
  for (size_t i : {B, C}) {
    EXPECT_EQ(read_file(m(i, "data")), "old-data-1234");
    EXPECT_EQ(read_file(m(i, "trunc")), "0123456789");
    EXPECT_EQ(size_of(m(i, "trunc")), 10);
    EXPECT_EQ(read_file(m(i, "from")), "renamed");
    EXPECT_TRUE(exists(m(i, "from")));
    EXPECT_TRUE(exists(m(i, "gone")));
    struct stat st;
    ASSERT_EQ(::stat(m(i, "mode").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0644u);
    EXPECT_FALSE(exists(m(i, "to")));  // failed lookups are not cached: these need no invalidation
    EXPECT_FALSE(exists(m(i, "newdir")));
  }

  auto seen_by_b_and_c = [&](const char* what, const std::function<void(size_t)>& check) {
    SCOPED_TRACE(what);
    for (size_t i : {B, C}) {
      SCOPED_TRACE(i == B ? "mount B" : "mount C");
      check(i);
    }
  };

  ASSERT_TRUE(write_file(m(A, "data"), "new-data-5678"));  // same size, likely the same mtime
  seen_by_b_and_c("write", [&](size_t i) { EXPECT_EQ(read_file(m(i, "data")), "new-data-5678"); });

  ASSERT_EQ(::truncate(m(A, "trunc").c_str(), 4), 0);
  seen_by_b_and_c("truncate", [&](size_t i) {
    EXPECT_EQ(size_of(m(i, "trunc")), 4);
    EXPECT_EQ(read_file(m(i, "trunc")), "0123");
  });

  ASSERT_EQ(::rename(m(A, "from").c_str(), m(A, "to").c_str()), 0);
  seen_by_b_and_c("rename", [&](size_t i) {
    EXPECT_FALSE(exists(m(i, "from")));
    EXPECT_EQ(read_file(m(i, "to")), "renamed");
  });

  ASSERT_EQ(::unlink(m(A, "gone").c_str()), 0);
  seen_by_b_and_c("unlink", [&](size_t i) {
    EXPECT_FALSE(exists(m(i, "gone")));
    EXPECT_EQ(list_names(m(i, "")).count("gone"), 0u);
  });

  ASSERT_EQ(::chmod(m(A, "mode").c_str(), 0600), 0);
  seen_by_b_and_c("chmod", [&](size_t i) {
    struct stat st;
    ASSERT_EQ(::stat(m(i, "mode").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
  });

  ASSERT_EQ(::mkdir(m(A, "newdir").c_str(), 0755), 0);
  seen_by_b_and_c("mkdir", [&](size_t i) {
    struct stat st;
    ASSERT_EQ(::stat(m(i, "newdir").c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(list_names(m(i, "")).count("newdir"), 1u);
  });

  // Directory attributes: the mounts keep them (the kernel asks again after every listing), and
  // a change through any mount replaces them at once.
  ASSERT_EQ(::chmod(m(A, "newdir").c_str(), 0700), 0);
  seen_by_b_and_c("chmod of a directory", [&](size_t i) {
    EXPECT_EQ(list_names(m(i, "newdir")).size(), 2u);  // "." and ".."
    struct stat st;
    ASSERT_EQ(::stat(m(i, "newdir").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
  });
  ASSERT_EQ(::chmod(m(B, "newdir").c_str(), 0750), 0);  // B's own change, seen by B too
  for (size_t i : {A, B, C}) {
    struct stat st;
    ASSERT_EQ(::stat(m(i, "newdir").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0750u) << "mount " << i;
  }
}

// The mount that renames keeps its cache under the new names (its kernel moves them), so the
// gateway must count it among those that cache the new paths at once: another mount's change
// there right after the rename reaches it.
TEST_F(Coherence, ChangesBelowARenamedDirectoryReachTheMountThatRenamedIt) {
  ASSERT_EQ(::mkdir(m(A, "dir").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(m(A, "dir/sub").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(m(A, "dir/sub/f"), "old-data-1234"));
  ASSERT_TRUE(write_file(m(A, "file"), "old-file-1234"));
  ASSERT_EQ(read_file(m(A, "dir/sub/f")), "old-data-1234");
  ASSERT_EQ(read_file(m(A, "file")), "old-file-1234");
  ASSERT_EQ(::rename(m(A, "dir").c_str(), m(A, "moved").c_str()), 0);
  ASSERT_EQ(::rename(m(A, "file").c_str(), m(A, "moved-file").c_str()), 0);
  // B rewrites both before A looks at them again (A's next open of a file would tell the
  // gateway that A caches it): A sees the new bytes at once.
  ASSERT_TRUE(write_file(m(B, "moved/sub/f"), "new-data-5678"));
  EXPECT_EQ(read_file(m(A, "moved/sub/f")), "new-data-5678");
  ASSERT_TRUE(write_file(m(B, "moved-file"), "new-file-5678"));
  EXPECT_EQ(read_file(m(A, "moved-file")), "new-file-5678");
  // And a name B makes in the moved directory is no absent name for A.
  ASSERT_TRUE(write_file(m(B, "moved/sub/g"), "g"));
  EXPECT_EQ(read_file(m(A, "moved/sub/g")), "g");
  EXPECT_EQ(list_names(m(A, "moved/sub")).count("g"), 1u);
}

// A listing gives a mount its subdirectories' attributes, which its kernel keeps without looking
// them up (readdirplus): a name made in one of them through another mount shows in the lister's
// stat of it at once, as it would after a lookup.
TEST_F(Coherence, ASubdirectorysAttributesFromAListingFollowNamesMadeInIt) {
  ASSERT_EQ(::mkdir(m(A, "top").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(m(A, "top/d").c_str(), 0755), 0);
  EXPECT_EQ(list_names(m(B, "top")).count("d"), 1u);
  struct stat listed;
  ASSERT_EQ(::stat(m(B, "top/d").c_str(), &listed), 0);
  std::this_thread::sleep_for(1100ms);  // SFTP's mtimes are whole seconds
  ASSERT_EQ(::mkdir(m(A, "top/d/sub").c_str(), 0755), 0);
  struct stat on_server, after;
  ASSERT_EQ(::stat(s("top/d").c_str(), &on_server), 0);
  ASSERT_GT(on_server.st_mtime, listed.st_mtime);
  ASSERT_EQ(::stat(m(B, "top/d").c_str(), &after), 0);
  EXPECT_EQ(after.st_mtime, on_server.st_mtime) << "B kept the mtime its listing gave it";
  // And a name removed in it, through A again.
  std::this_thread::sleep_for(1100ms);
  ASSERT_EQ(::rmdir(m(A, "top/d/sub").c_str()), 0);
  ASSERT_EQ(::stat(s("top/d").c_str(), &on_server), 0);
  ASSERT_EQ(::stat(m(B, "top/d").c_str(), &after), 0);
  EXPECT_EQ(after.st_mtime, on_server.st_mtime) << "B kept the mtime of the name's creation";
}

// A file open for writing on one mount, renamed through another: the writer's mount still names
// it by its old path, but its writes reach the mounts that cache it under the new one.
TEST_F(Coherence, WritesToAFileRenamedThroughAnotherMountReachTheMountsOfItsNewName) {
  ASSERT_TRUE(write_file(m(A, "open"), "version-1"));
  const int fd = ::open(m(A, "open").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(read_file(m(B, "open")), "version-1");
  ASSERT_EQ(::rename(m(B, "open").c_str(), m(B, "renamed").c_str()), 0) << strerror(errno);
  EXPECT_EQ(read_file(m(B, "renamed")), "version-1");  // cached by B under its new name
  EXPECT_EQ(read_file(m(C, "renamed")), "version-1");  // and by C, which looked it up there
  ASSERT_EQ(::pwrite(fd, "version-2", 9, 0), 9);       // same size: only an invalidation shows it
  ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
  EXPECT_EQ(read_file(m(B, "renamed")), "version-2");
  EXPECT_EQ(read_file(m(C, "renamed")), "version-2");
  ASSERT_EQ(::ftruncate(fd, 7), 0) << strerror(errno);
  EXPECT_EQ(read_file(m(B, "renamed")), "version");
  EXPECT_EQ(read_file(m(C, "renamed")), "version");
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(read_file(s("renamed")), "version");
}

// A file with two names linked through the gateway: SFTP tells nobody they are one file, but the
// gateway made the link and follows the names, so a change through one name reaches the mounts
// that cache the other (as a file of its own: inode numbers name paths), the writer's too, and a
// rename moves it.
TEST_F(Coherence, AChangeThroughOneNameOfAHardLinkReachesMountsThatCacheTheOther) {
  ASSERT_TRUE(write_file(m(A, "linked"), "version-1"));
  ASSERT_EQ(::link(m(A, "linked").c_str(), m(A, "other-name").c_str()), 0) << strerror(errno);
  EXPECT_EQ(read_file(m(B, "other-name")), "version-1");  // cached by B under the other name
  EXPECT_EQ(read_file(m(A, "other-name")), "version-1");  // and by A, as a file of its own
  const int fd = ::open(m(A, "linked").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::pwrite(fd, "version-2", 9, 0), 9);  // same size: only an invalidation shows it
  ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
  EXPECT_EQ(read_file(m(B, "other-name")), "version-2");
  EXPECT_EQ(read_file(m(A, "other-name")), "version-2") << "the writer's own mount";
  ASSERT_EQ(::ftruncate(fd, 7), 0) << strerror(errno);
  EXPECT_EQ(size_of(m(B, "other-name")), 7) << "B kept the other name's old size";
  ASSERT_EQ(::close(fd), 0);
  // Renamed through B, the names are still one file's; a change through A's name reaches C.
  ASSERT_EQ(::rename(m(B, "other-name").c_str(), m(B, "moved-name").c_str()), 0);
  EXPECT_EQ(read_file(m(C, "moved-name")), "version");
  ASSERT_TRUE(write_file(m(A, "linked"), "version-3", O_WRONLY));
  EXPECT_EQ(read_file(m(C, "moved-name")), "version-3");
  EXPECT_EQ(read_file(s("moved-name")), "version-3");
}

TEST_F(Coherence, AppendByOneMountIsReadWholeByAnother) {
  std::string expected;
  for (int i = 0; i < 20; ++i) {
    std::string line =
        "line " + std::to_string(i) + " " + std::string(static_cast<size_t>(i) * 37, 'x') + "\n";
    ASSERT_TRUE(write_file(m(A, "log"), line, O_WRONLY | O_CREAT | O_APPEND));
    expected += line;
    ASSERT_EQ(read_file(m(B, "log")), expected) << "after append " << i;
    ASSERT_EQ(size_of(m(C, "log")), static_cast<off_t>(expected.size())) << "after append " << i;
  }
}

TEST_F(Coherence, CloseOnOneMountThenOpenOnAnotherSeesTheNewContents) {
  ASSERT_TRUE(write_file(m(A, "cto"), std::string(100000, 'a')));
  EXPECT_EQ(read_file(m(B, "cto")), std::string(100000, 'a'));
  double worst = 0;
  for (char c = 'b'; c <= 'k'; ++c) {
    ASSERT_TRUE(write_file(m(A, "cto"), std::string(100000, c)));  // ends with close
    auto start = Clock::now();
    ASSERT_EQ(read_file(m(B, "cto")), std::string(100000, c));
    worst = std::max(worst, seconds_since(start));
  }
  std::printf("[ coherence ] close on A -> read of 100 kB on B: worst %.1f ms\n", worst * 1e3);
}

// A TCP relay (deploy/delay-relay.py, no delay) from a port of its own to `target_port`, to cut a
// connection off without closing it: freeze() stops it (SIGSTOP), thaw() lets it go on. Killed
// (thawed first) on destruction.
class Relay {
 public:
  explicit Relay(int target_port) : port_(free_port()) {
    const std::string script = source_dir() + "/deploy/delay-relay.py";
    const std::string listen = std::to_string(port_), target = std::to_string(target_port);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("python3", "python3", script.c_str(), listen.c_str(), target.c_str(), "0",
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Relay() {
    if (pid_ <= 0) return;
    thaw();
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  // Whether it accepts connections, within a few seconds.
  bool ready() const {
    for (int i = 0; i < 200; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port_));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      ::close(fd);
      if (ok) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  bool freeze() const { return pid_ > 0 && ::kill(pid_, SIGSTOP) == 0; }
  void thaw() const {
    if (pid_ > 0) ::kill(pid_, SIGCONT);
  }

 private:
  int port_;
  int pid_ = -1;
};

// A mount cut off from the gateway (its connection stalls, nothing is closed) stops trusting its
// caches within the lease: the gateway goes on with a change whose invalidation did not reach it
// after one lease, and the mount must not serve the old bytes from then on. It once served its
// caches until gRPC's keepalive gave up on the connection, about 15 s.
TEST_F(Coherence, AMountCutOffFromTheGatewayDropsItsCachesWithinTheLease) {
  const std::string& gw = main_->address;
  Relay relay(std::stoi(gw.substr(gw.rfind(':') + 1)));
  ASSERT_TRUE(relay.ready()) << "relay did not start";
  std::string error;
  const std::string mountpoint = cluster_->state() + "/custom-main/mnt-relayed";
  auto relayed = FuseMount::start(relay.address(), mountpoint, "default", error,
                                  cluster_->mount_credentials());
  ASSERT_TRUE(relayed) << error;
  struct ThawFirst {  // before the mount goes: an unmount must not wait on a frozen relay
    const Relay& relay;
    ~ThawFirst() { relay.thaw(); }
  } thaw_first{relay};
  const std::string d = mountpoint + "/srv0/" + name_ + "/cut";
  ASSERT_GE(wait_until([&] { return watch_healthy(mountpoint); }, 10s), 0) << status_of(mountpoint);
  ASSERT_TRUE(write_file(m(A, "cut"), "version-1"));
  ASSERT_EQ(read_file(d), "version-1");

  ASSERT_TRUE(relay.freeze());
  const auto cut = Clock::now();
  ASSERT_TRUE(write_file(m(A, "cut"), "version-2"));  // same size: only an invalidation shows it
  const double write_took = seconds_since(cut);
  std::printf("[ coherence ] write with a mount cut off: %.2f s (lease 0.5 s)\n", write_took);
  EXPECT_GE(write_took, 0.4) << "the gateway did not wait for the mount cut off";
  // The writer's close has returned: the mount no longer trusts what it cached (its status is
  // answered by the mount itself), and a read of the file is not answered from the kernel's
  // cache: it waits for the gateway, which the relay holds back.
  const std::string status = status_of(mountpoint);
  EXPECT_EQ(status.find("watch: healthy"), std::string::npos) << status;
  auto read = std::async(std::launch::async, [&] { return read_file(d); });
  if (read.wait_for(500ms) == std::future_status::ready) {
    EXPECT_NE(read.get(), "version-1") << "the mount cut off served its cache";
    relay.thaw();
  } else {
    relay.thaw();
    EXPECT_EQ(read.get(), "version-2");
  }
  // Back: it subscribes again (the gateway ended its stream) and is kept coherent again.
  EXPECT_GE(wait_until([&] { return watch_healthy(mountpoint); }, 10s), 0) << status_of(mountpoint);
  EXPECT_EQ(read_file(d), "version-2");
  ASSERT_TRUE(write_file(m(A, "cut"), "version-3"));
  EXPECT_EQ(read_file(d), "version-3");
}

TEST_F(Coherence, DropCachesCommandMakesAMountSeeChangesMadeBehindTheGatewaysBack) {
  ASSERT_TRUE(write_file(m(A, "behind"), "before the drop"));
  ASSERT_TRUE(write_file(m(A, "grows"), "1"));
  EXPECT_EQ(read_file(m(B, "behind")), "before the drop");
  EXPECT_EQ(size_of(m(B, "grows")), 1);
  rewrite_keeping_size_and_mtime(s("behind"), "after! the drop");
  ASSERT_TRUE(write_file(s("grows"), "12345"));
  EXPECT_EQ(read_file(m(B, "behind")), "before the drop") << "not cached: the test proves nothing";
  EXPECT_EQ(size_of(m(B, "grows")), 1) << "not cached: the test proves nothing";

  std::string out;
  ASSERT_EQ(
      run_command("'" + skein_mount_bin() + "' --drop-caches '" + main_->mount(B) + "'", &out), 0)
      << out;
  EXPECT_NE(out.find("dropped"), std::string::npos) << out;
  EXPECT_EQ(read_file(m(B, "behind")), "after! the drop");
  EXPECT_EQ(size_of(m(B, "grows")), 5);

  // Unknown mount points and commands are refused with a reason.
  EXPECT_NE(run_command("'" + skein_mount_bin() + "' --drop-caches /nonexistent/mnt", &out), 0);
  EXPECT_NE(out.find("no skein mount"), std::string::npos) << out;
}

TEST_F(Coherence, StatusShowsGatewayNamespaceWatchAndTtls) {
  std::string status = status_of(main_->mount(A));
  EXPECT_NE(status.find("gateway: " + main_->address), std::string::npos) << status;
  EXPECT_NE(status.find("namespace: default"), std::string::npos) << status;
  EXPECT_NE(status.find("watch: healthy"), std::string::npos) << status;
  EXPECT_NE(status.find("lease: 500 ms"), std::string::npos) << status;
  EXPECT_NE(status.find("entry ttl: 3600 s"), std::string::npos) << status;
  EXPECT_GT(status_number(status, "inodes"), 0) << status;
}

TEST_F(Coherence, FileDeletedWhileOpenStaysUsableUntilItsLastClose) {
  ASSERT_TRUE(write_file(m(A, "doomed"), "still here"));
  int fd = ::open(m(A, "doomed").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::unlink(m(A, "doomed").c_str()), 0) << strerror(errno);

  EXPECT_FALSE(exists(m(A, "doomed")));
  for (size_t i : {A, B}) {
    auto names = list_names(m(i, ""));
    EXPECT_EQ(names, (std::set<std::string>{".", ".."})) << "mount " << i;
  }
  // On the server it lives on under a hidden name, until the last close.
  std::set<std::string> on_server = list_names(s(""));
  ASSERT_EQ(on_server.size(), 3u);
  EXPECT_EQ(on_server.rbegin()->rfind(".skein-deleted-", 0), 0u) << *on_server.rbegin();

  char buf[64] = {};
  EXPECT_EQ(::pread(fd, buf, sizeof buf, 0), 10) << strerror(errno);
  EXPECT_EQ(std::string(buf), "still here");
  EXPECT_EQ(::pwrite(fd, "!", 1, 10), 1) << strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_size, 11);
  ASSERT_EQ(::close(fd), 0);

  // Release is asynchronous: the hidden file goes shortly after close returns.
  EXPECT_GE(wait_until([&] { return list_names(s("")).size() == 2; }, 5s), 0)
      << "left on the server: " << *list_names(s("")).rbegin();
  EXPECT_FALSE(exists(m(A, "doomed")));
}

TEST_F(Coherence, RestartedGatewayBringsMountsBackFromSafeMode) {
  ASSERT_TRUE(write_file(m(A, "restart"), "before-restart"));
  EXPECT_EQ(read_file(m(B, "restart")), "before-restart");

  main_->kill_hard();
  for (size_t i : {A, B, C}) {
    EXPECT_GE(wait_until([&] { return !watch_healthy(main_->mount(i)); }, 5s), 0) << "mount " << i;
    std::string status = status_of(main_->mount(i));
    EXPECT_NE(status.find("watch: safe"), std::string::npos) << status;
    EXPECT_NE(status.find("entry ttl: 1 s"), std::string::npos) << status;
    EXPECT_NE(status.find("page cache across opens: dropped"), std::string::npos) << status;
  }

  std::string error;
  ASSERT_TRUE(main_->start(error)) << error;
  for (size_t i : {A, B, C}) {
    double took = wait_until([&] { return watch_healthy(main_->mount(i)); }, 15s);
    EXPECT_GE(took, 0) << "mount " << i << " did not resubscribe:\n" << status_of(main_->mount(i));
    std::printf("[ coherence ] mount %zu healthy again %.2f s after the gateway restarted\n", i,
                took);
  }
  // Coherent again: B caches, A changes, B sees it at once.
  EXPECT_EQ(read_file(m(B, "restart")), "before-restart");
  ASSERT_TRUE(write_file(m(A, "restart"), "after--restart"));
  EXPECT_EQ(read_file(m(B, "restart")), "after--restart");
}

TEST_F(Coherence, StoppedMountLosesItsLeaseWithoutStallingOthersAndComesBackCoherent) {
  ASSERT_TRUE(write_file(m(A, "lease"), "before-stop"));
  EXPECT_EQ(read_file(m(C, "lease")), "before-stop");
  long subscriptions = status_number(status_of(main_->mount(C)), "subscriptions");
  ASSERT_GT(subscriptions, 0);
  int pid = mount_pid(main_->mount(C));
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  struct Continue {
    int pid;
    ~Continue() { ::kill(pid, SIGCONT); }
  } resume{pid};

  auto start = Clock::now();
  ASSERT_TRUE(write_file(m(A, "lease"), "after--stop"));
  double took = seconds_since(start);
  std::printf("[ coherence ] write with a stopped mount interested: %.2f s (lease 0.5 s)\n", took);
  EXPECT_GE(took, 0.4) << "the gateway did not wait for the stopped mount at all";
  EXPECT_LT(took, 2.0) << "a stopped mount stalled the writer beyond its lease";
  // Other mounts are unaffected.
  start = Clock::now();
  EXPECT_EQ(read_file(m(B, "lease")), "after--stop");
  ASSERT_TRUE(write_file(m(A, "lease"), "after-stop2"));
  EXPECT_LT(seconds_since(start), 0.4) << "a mount without a lease still stalls writers";

  ::kill(pid, SIGCONT);
  EXPECT_GE(wait_until(
                [&] {
                  std::string st = status_of(main_->mount(C));
                  return st.find("watch: healthy") != std::string::npos &&
                         status_number(st, "subscriptions") > subscriptions;
                },
                10s),
            0)
      << status_of(main_->mount(C));
  EXPECT_EQ(read_file(m(C, "lease")), "after-stop2");
  // And it is kept coherent again.
  ASSERT_TRUE(write_file(m(A, "lease"), "third-write"));
  EXPECT_EQ(read_file(m(C, "lease")), "third-write");
}

// Changes made directly in an export, with a gateway of their own.
TEST_F(Coherence, ServerSideChangeIsSeenWithinThePollInterval) {
  std::string error;
  auto g = start_gateway("poll", "revalidate_interval_ms = 500\nremote_watch = false\n", 1, error);
  ASSERT_TRUE(g) << error;
  ASSERT_GE(wait_until([&] { return watch_healthy(g->mount(0)); }, 10s), 0);
  const std::string mounted = g->mount(0) + "/srv0/" + name_ + "/polled";
  ASSERT_TRUE(write_file(s("polled"), "1"));
  EXPECT_EQ(size_of(mounted), 1);      // cached, for 3600 s unless invalidated
  std::this_thread::sleep_for(600ms);  // one round sees it as it is
  ASSERT_TRUE(write_file(s("polled"), "12345"));
  double took = wait_until([&] { return size_of(mounted) == 5; }, 5s);
  std::printf("[ coherence ] server-side change seen through polling after %.2f s\n", took);
  EXPECT_GE(took, 0) << "never seen";
  EXPECT_LT(took, 1.5) << "slower than the poll interval allows";
}

// Without a remote watcher, a file the mount knows only from a listing (its kernel keeps the
// attributes readdirplus gave it, and a stat asks nothing) is looked at by revalidation too: a
// rewrite on the server leaves its directory as it was.
TEST_F(Coherence, AServerSideChangeOfAFileSeenOnlyInAListingIsSeenWithinThePollInterval) {
  std::string error;
  auto g = start_gateway("poll-listed", "revalidate_interval_ms = 500\nremote_watch = false\n", 1,
                         error);
  ASSERT_TRUE(g) << error;
  ASSERT_GE(wait_until([&] { return watch_healthy(g->mount(0)); }, 10s), 0);
  ASSERT_TRUE(write_file(s("listed"), "1"));
  EXPECT_EQ(list_names(g->mount(0) + "/srv0/" + name_).count("listed"), 1u);
  const std::string mounted = g->mount(0) + "/srv0/" + name_ + "/listed";
  EXPECT_EQ(size_of(mounted), 1);      // from the listing, cached for 3600 s unless invalidated
  std::this_thread::sleep_for(600ms);  // one round sees it as it is
  ASSERT_TRUE(write_file(s("listed"), "12345"));
  double took = wait_until([&] { return size_of(mounted) == 5; }, 5s);
  std::printf("[ coherence ] server-side change of a listed file seen after %.2f s\n", took);
  EXPECT_GE(took, 0) << "never seen";
  EXPECT_LT(took, 1.5) << "slower than the poll interval allows";
}

// A file rewritten on the server through one of its names linked through the gateway: the remote
// watcher reports the name written, and the gateway the file's other names with it, so a mount
// that caches only the other name sees the change (revalidation would take 30 s here).
TEST_F(Coherence, AServerSideChangeOfOneNameOfAHardLinkReachesMountsThatCacheTheOther) {
  std::string error;
  auto g = start_gateway("inotify-links", "revalidate_interval_ms = 30000\nremote_watch = true\n",
                         2, error);
  ASSERT_TRUE(g) << error;
  ASSERT_GE(
      wait_until([&] { return watch_healthy(g->mount(0)) && watch_healthy(g->mount(1)); }, 10s), 0);
  const std::string watching =
      "backend srv0: watching " + cluster_->export_dir(0) + " with inotifywait";
  ASSERT_GE(wait_until(
                [&] {
                  std::ifstream in(g->log);
                  return std::string(std::istreambuf_iterator<char>(in), {}).find(watching) !=
                         std::string::npos;
                },
                10s),
            0)
      << "the remote watcher never started";
  const std::string a = g->mount(0) + "/srv0/" + name_ + "/",
                    b = g->mount(1) + "/srv0/" + name_ + "/";
  ASSERT_TRUE(write_file(a + "first", "version-1"));
  ASSERT_EQ(::link((a + "first").c_str(), (a + "second").c_str()), 0) << strerror(errno);
  // Past the echo window of the link, and of the kernel's short lifetimes of what it looked up
  // while the link's invalidations went on: B then holds the name's attributes for long.
  std::this_thread::sleep_for(1500ms);
  // Read through a descriptor kept open: its reads come from the page cache until an
  // invalidation drops it (an open would look at the file again).
  const int fd = ::open((b + "second").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  const auto read_fd = [&] {
    char buf[16] = {};
    const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
    return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
  };
  EXPECT_EQ(read_fd(), "version-1");
  ASSERT_TRUE(write_file(s("first"), "version-2", O_WRONLY));  // same size, on the server
  const double took = wait_until([&] { return read_fd() == "version-2"; }, 5s);
  EXPECT_GE(took, 0) << "the mount kept the other name's old contents";
  ::close(fd);
}

TEST_F(Coherence, ServerSideChangeIsSeenWithinASecondThroughInotify) {
  std::string error;
  auto g =
      start_gateway("inotify", "revalidate_interval_ms = 30000\nremote_watch = true\n", 1, error);
  ASSERT_TRUE(g) << error;
  ASSERT_GE(wait_until([&] { return watch_healthy(g->mount(0)); }, 10s), 0);
  // srv0's watcher is up once inotifywait has set its watches; it runs on the backend's transport.
  // (Server 0 has a second backend, stripe0, another directory with a watcher of its own.)
  const std::string watching =
      "backend srv0: watching " + cluster_->export_dir(0) + " with inotifywait";
  std::string log;
  ASSERT_GE(wait_until(
                [&] {
                  std::ifstream in(g->log);
                  log.assign(std::istreambuf_iterator<char>(in), {});
                  return log.find(watching) != std::string::npos;
                },
                10s),
            0)
      << "the remote watcher never started (is inotify-tools installed?)";
  EXPECT_NE(log.find(watching + " (" + cluster_->env("SKEIN_SSH_TRANSPORT") + ")"),
            std::string::npos)
      << log;
  const std::string mounted = g->mount(0) + "/srv0/" + name_ + "/watched";
  ASSERT_TRUE(write_file(s("watched"), "1"));
  EXPECT_EQ(size_of(mounted), 1);
  for (int round = 0; round < 3; ++round) {
    std::string data(static_cast<size_t>(round) + 2, 'x');
    ASSERT_TRUE(write_file(s("watched"), data));
    double took =
        wait_until([&] { return size_of(mounted) == static_cast<off_t>(data.size()); }, 5s);
    std::printf("[ coherence ] server-side change seen through inotify after %.3f s\n", took);
    EXPECT_GE(took, 0) << "never seen";
    EXPECT_LT(took, 1.0) << "slower than a second";
  }

  // A directory made through this very mount, listed (so its listing is cached), and a file made
  // in it on the server at once: inotifywait may watch the directory only after the file came,
  // so the report of the new directory itself must reach the mount that made it.
  for (int round = 0; round < 3; ++round) {
    const std::string dir = "fresh" + std::to_string(round);
    const std::string mounted_dir = g->mount(0) + "/srv0/" + name_ + "/" + dir;
    ASSERT_EQ(::mkdir(mounted_dir.c_str(), 0755), 0);
    EXPECT_EQ(list_names(mounted_dir).size(), 2u);
    ASSERT_TRUE(write_file(s(dir + "/made-on-server"), "x"));
    double took =
        wait_until([&] { return list_names(mounted_dir).count("made-on-server") == 1; }, 5s);
    std::printf("[ coherence ] file made on the server in a new directory listed after %.3f s\n",
                took);
    EXPECT_GE(took, 0) << "never listed";
    EXPECT_LT(took, 1.0) << "slower than a second";
  }

  // inotifywait stops on the server (killed, or out of inotify watches): the watcher starts it
  // again, and changes arrive through it as before.
  auto watch_starts = [&] { return times_in_file(g->log, watching); };
  ASSERT_EQ(watch_starts(), 1u);
  ASSERT_EQ(run_command("pkill -f '^inotifywait .*" + cluster_->export_dir(0) + "'"), 0);
  EXPECT_GE(wait_until([&] { return watch_starts() == 2; }, 10s), 0)
      << "inotifywait was not started again";
  ASSERT_TRUE(write_file(s("watched"), "after restart"));
  double took = wait_until([&] { return size_of(mounted) == static_cast<off_t>(13); }, 5s);
  EXPECT_GE(took, 0) << "change after the restart never seen";
  EXPECT_LT(took, 1.0) << "change after the restart slower than a second";
}

// A backend added at runtime to a namespace whose servers were all watched is not watched until
// its own watcher has set up its watches, and never when its server is down: the mounts hear at
// once that the namespace is no longer all watched (they would otherwise go on opening files
// without a call and answering from names they know, for the new server's files too).
TEST_F(Coherence, ABackendAddedAtRuntimeIsNotTakenForWatchedBeforeItIs) {
  std::string error;
  auto g =
      start_gateway("added", "revalidate_interval_ms = 30000\nremote_watch = true\n", 1, error);
  ASSERT_TRUE(g) << error;
  auto watched = [&] { return servers_watched(g->mount(0)); };
  ASSERT_GE(wait_until(watched, 15s), 0) << status_of(g->mount(0));
  // A server that is down: nothing listens on the port.
  std::string out;
  ASSERT_EQ(
      run_command(cluster_->admin_env() + build_dir() + "/client/skeinctl --gateway " + g->address +
                      " backends add down --host 127.0.0.1 --port " + std::to_string(free_port()) +
                      " --user nobody --identity '" + cluster_->env("SKEIN_SSH_KEY") +
                      "' --known-hosts '" + cluster_->env("SKEIN_KNOWN_HOSTS") +
                      "' --root /srv --namespace default --path /down --no-check 2>&1",
                  &out),
      0)
      << out;
  const double unwatched = wait_until([&] { return !watched(); }, 5s);
  EXPECT_GE(unwatched, 0) << "the mount still takes every server for watched\n"
                          << status_of(g->mount(0));
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(watched()) << status_of(g->mount(0));
}

// A watcher's session that falls silent without closing (its connection dropped by a firewall's
// idle timeout, or its host reset: nothing says so). Here the sshd process serving it is stopped,
// the server's other sessions untouched. The remote command prints a heartbeat every 2 s (the
// deadline, timeout_ms, in whole seconds), so within that and a deadline (4 s) the gateway ends
// the session and reports the server not watched, and then watches it again through a new one;
// a session that is merely quiet lives on.
TEST_F(Coherence, AWatcherSessionThatFallsSilentIsReportedNotWatchedAndStartedAgain) {
  const std::string exported = cluster_->export_dir(0);
  const std::set<int> others = inotifywaits_of(exported);  // the cluster's own gateway's
  std::string error;
  auto g = start_gateway("silent",
                         "revalidate_interval_ms = 30000\nremote_watch = true\ntimeout_ms = 2000\n",
                         1, error);
  ASSERT_TRUE(g) << error;
  auto watched = [&] { return servers_watched(g->mount(0)); };
  ASSERT_GE(wait_until(watched, 15s), 0) << status_of(g->mount(0));
  // A quiet server's session lives on its heartbeats: past the 4 s it is still the same one.
  std::this_thread::sleep_for(6s);
  EXPECT_TRUE(watched()) << "a live session taken for a silent one";
  {
    std::ifstream in(g->log);
    const std::string log((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(log.find("nothing heard"), std::string::npos) << log;
  }
  std::vector<int> ours;
  for (int pid : inotifywaits_of(exported))
    if (!others.count(pid)) ours.push_back(pid);
  ASSERT_EQ(ours.size(), 1u) << "this gateway's inotifywait of " << exported;
  // inotifywait, the remote shell that runs it, the sshd process of its session.
  const int sshd = parent_of(parent_of(ours[0]));
  ASSERT_GT(sshd, 1);
  const auto sshd_argv = argv_of(sshd);
  ASSERT_FALSE(sshd_argv.empty());
  ASSERT_EQ(sshd_argv[0].rfind("sshd", 0), 0u) << sshd_argv[0];
  ASSERT_EQ(::kill(sshd, SIGSTOP), 0);
  struct Resume {
    int pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{sshd};

  const double unwatched = wait_until([&] { return !watched(); }, 15s);
  std::printf("[ coherence ] silent watcher session reported after %.2f s\n", unwatched);
  EXPECT_GE(unwatched, 0) << "a silent session kept the server reported watched";
  EXPECT_LT(unwatched, 4.0 + 3.0) << "later than a heartbeat and a deadline allow";
  EXPECT_GE(wait_until(watched, 15s), 0) << "not watched again through a new session\n"
                                         << status_of(g->mount(0));
  // The new session's changes arrive as before.
  const std::string mounted = g->mount(0) + "/srv0/" + name_ + "/after";
  ASSERT_TRUE(write_file(s("after"), "1"));
  EXPECT_EQ(size_of(mounted), 1);
  ASSERT_TRUE(write_file(s("after"), "12"));
  const double took = wait_until([&] { return size_of(mounted) == 2; }, 5s);
  EXPECT_GE(took, 0) << "a change on the server never seen";
  EXPECT_LT(took, 1.0) << "slower than a second: not through the new session";
}

// inotifywait cannot watch a directory made on the server (the user's inotify watches run out):
// it says so, and changes below that directory would go unreported while the server counts as
// watched and mounts trust what they hold. The session ends, a new one watches the tree anew
// (once watches are free again), and a change there is seen as any other.
TEST_F(Coherence, ADirectoryTheWatcherCannotWatchEndsTheSessionAndANewOneWatchesIt) {
  std::string error;
  auto g =
      start_gateway("unwatched", "revalidate_interval_ms = 30000\nremote_watch = true\n", 1, error);
  ASSERT_TRUE(g) << error;
  const std::string watching =
      "backend srv0: watching " + cluster_->export_dir(0) + " with inotifywait";
  auto log_count = [&](const std::string& what) { return times_in_file(g->log, what); };
  ASSERT_GE(wait_until([&] { return log_count(watching) == 1; }, 15s), 0);
  // The cluster's own gateway (idle: the suite's mounts are the custom gateways') watches the same
  // export: it would run out of watches too, and its watcher's end would free room for this one.
  // It is stopped meanwhile, and its inotifywait with it.
  struct Restart {
    ~Restart() { cluster_->start_gateway(); }
  } restart;
  // The inotifywaits of export 0: this test's gateway's, and the cluster's gateway's.
  const auto watchers = [&] {
    std::string out;
    run_command("pgrep -c -f '^inotifywait -m -r .* " + cluster_->export_dir(0) + "$'", &out);
    return std::atoi(out.c_str());
  };
  const int before = watchers();
  ASSERT_TRUE(cluster_->stop_gateway());
  ASSERT_GE(wait_until([&] { return watchers() < before; }, 10s), 0)
      << "the cluster's gateway's inotifywait did not end (" << before << " before)";
  // Every watch in use now (the user's, root's, counts against the limit), and room for two more.
  const std::string limit_file = "/proc/sys/fs/inotify/max_user_watches";
  std::string old_limit, used;
  ASSERT_EQ(run_command("cat " + limit_file, &old_limit), 0);
  while (!old_limit.empty() && old_limit.back() == '\n') old_limit.pop_back();
  struct Restore {
    std::string file, value;
    ~Restore() { run_command("echo " + value + " > " + file); }
  } restore{limit_file, old_limit};
  ASSERT_EQ(run_command("cat /proc/[0-9]*/fdinfo/* 2>/dev/null | grep -c '^inotify wd'", &used), 0);
  ASSERT_EQ(run_command("echo " + std::to_string(std::stoul(used) + 2) + " > " + limit_file), 0);
  ASSERT_EQ(::mkdir(s("many").c_str(), 0755), 0);
  for (int i = 0; i < 8; ++i) ASSERT_EQ(::mkdir(s("many/d" + std::to_string(i)).c_str(), 0755), 0);
  ASSERT_GE(wait_until([&] { return log_count("Couldn't watch new directory") >= 1; }, 10s), 0)
      << "inotifywait never ran out of watches";
  run_command("echo " + old_limit + " > " + limit_file);
  EXPECT_GE(wait_until([&] { return log_count(watching) >= 2; }, 15s), 0)
      << "not watched again through a new session";
  // A file in the last directory, read through the mount (held as current), then changed on the
  // server: seen at once, through the new session's watch.
  const std::string mounted = g->mount(0) + "/srv0/" + name_ + "/many/d7/f";
  ASSERT_TRUE(write_file(s("many/d7/f"), "1"));
  EXPECT_GE(wait_until([&] { return size_of(mounted) == 1; }, 5s), 0);
  ASSERT_TRUE(write_file(s("many/d7/f"), "12"));
  const double took = wait_until([&] { return size_of(mounted) == 2; }, 5s);
  EXPECT_GE(took, 0) << "a change in a directory made while watches ran out never seen";
  EXPECT_LT(took, 1.0) << "slower than a second: not through a watch";
}

// A directory moved away on the server and another made at its name, with a file of the same
// name in it: a mount that held the old directory's file (its name, its attributes as current,
// its pages) reads the new one's, at once, through the watcher; and the old one where it went.
TEST_F(Coherence, ADirectoryReplacedOnTheServerIsReadAnewBelowIt) {
  std::string error;
  auto g = start_gateway("dir-replaced", "revalidate_interval_ms = 30000\nremote_watch = true\n", 1,
                         error);
  ASSERT_TRUE(g) << error;
  auto watched = [&] { return servers_watched(g->mount(0)); };
  ASSERT_GE(wait_until(watched, 15s), 0) << status_of(g->mount(0));
  ASSERT_EQ(::mkdir(s("d").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(s("d/f"), "old contents\n"));
  const std::string mounted = g->mount(0) + "/srv0/" + name_;
  std::this_thread::sleep_for(1500ms);  // past any echo window
  EXPECT_EQ(read_file(mounted + "/d/f"), "old contents\n");
  const int held = ::open((mounted + "/d/f").c_str(), O_RDONLY);  // its inode in use
  ASSERT_GE(held, 0);
  ASSERT_EQ(::rename(s("d").c_str(), s("d.old").c_str()), 0);
  ASSERT_EQ(::mkdir(s("d").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(s("d/f"), "NEW contents\n"));  // as long as the old
  const double took =
      wait_until([&] { return read_file(mounted + "/d/f") == "NEW contents\n"; }, 5s);
  EXPECT_GE(took, 0) << "the old directory's file still read: " << read_file(mounted + "/d/f");
  EXPECT_LT(took, 1.0) << "slower than a second: not through the watcher";
  EXPECT_EQ(read_file(mounted + "/d.old/f"), "old contents\n");
  ::close(held);
}

// Files whose names hold a newline or end in spaces, read through a mount (held as current) and
// changed on the server: each change is seen at once, under the file's own name, through the
// session that watched before (a name's part after its newline once came as a line of its own,
// which ended the session, and every mount dropped what it held of the backend).
TEST_F(Coherence,
       NamesWithNewlinesAndTrailingSpacesChangedOnTheServerAreSeenThroughTheSameSession) {
  std::string error;
  auto g =
      start_gateway("odd-names", "revalidate_interval_ms = 30000\nremote_watch = true\n", 1, error);
  ASSERT_TRUE(g) << error;
  const std::string watching =
      "backend srv0: watching " + cluster_->export_dir(0) + " with inotifywait";
  ASSERT_GE(wait_until([&] { return times_in_file(g->log, watching) == 1; }, 15s), 0);
  const std::vector<std::string> names = {"new\nline", "trail  ", "two\nlines\n"};
  for (const auto& name : names) ASSERT_TRUE(write_file(s(name), "1"));
  const std::string mounted = g->mount(0) + "/srv0/" + name_ + "/";
  for (const auto& name : names)
    EXPECT_GE(wait_until([&] { return size_of(mounted + name) == 1; }, 5s), 0) << name;
  std::this_thread::sleep_for(1500ms);  // past any echo window
  for (const auto& name : names) {
    ASSERT_TRUE(write_file(s(name), "12"));
    const double took = wait_until([&] { return size_of(mounted + name) == 2; }, 5s);
    EXPECT_GE(took, 0) << "a change of \"" << name << "\" on the server never seen";
    EXPECT_LT(took, 1.0) << "slower than a second: not through the watcher";
  }
  EXPECT_EQ(times_in_file(g->log, watching), 1u) << "the watcher's session ended";
  EXPECT_EQ(times_in_file(g->log, "remote watcher ended"), 0u);
}

// skein-local's own gateway: stop-gateway and start-gateway, as an admin would.
// While every server is watched, an open for reading of a file the mount holds as current asks
// nothing of the gateway, which opens the file at the first read: a file removed on the server in
// between fails that read, as on NFS. Without watchers (the main gateway) the open asks the
// gateway, whose SFTP handle keeps a removed file readable until the close; and a server's
// change is seen at the next open (close-to-open, DataPath.ServerSideChangeBetweenOpensIsSeen).
TEST_F(Coherence, OpensForReadingSkipTheGatewayOnlyWhileTheServersAreWatched) {
  std::string error;
  auto g =
      start_gateway("deferred", "revalidate_interval_ms = 30000\nremote_watch = true\n", 1, error);
  ASSERT_TRUE(g) << error;
  ASSERT_GE(wait_until([&] { return servers_watched(g->mount(0)); }, 15s), 0)
      << status_of(g->mount(0));
  EXPECT_NE(status_of(main_->mount(A)).find("servers watched: no"), std::string::npos)
      << "the main gateway has no remote watcher";
  const std::string watched = g->mount(0) + "/srv0/" + name_ + "/";
  for (const char* f : {"removed", "kept", "changed"}) ASSERT_TRUE(write_file(s(f), "old"));

  // Watched: the open is deferred, so the first read finds the file gone.
  struct stat st;
  ASSERT_EQ(::stat((watched + "removed").c_str(), &st), 0) << strerror(errno);
  int fd = ::open((watched + "removed").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::unlink(s("removed").c_str()), 0);
  char buf[16];
  errno = 0;
  EXPECT_EQ(::read(fd, buf, sizeof buf), -1);
  EXPECT_EQ(errno, ENOENT);
  ::close(fd);

  // Not watched: the gateway opened it, and its handle reads on.
  ASSERT_EQ(::stat(m(A, "kept").c_str(), &st), 0) << strerror(errno);
  fd = ::open(m(A, "kept").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::unlink(s("kept").c_str()), 0);
  EXPECT_EQ(::read(fd, buf, sizeof buf), 3) << strerror(errno);
  ::close(fd);

  // Watched: a server's change reaches the open through the watcher, within a second.
  EXPECT_EQ(read_file(watched + "changed"), "old");
  ASSERT_TRUE(write_file(s("changed"), "new!"));
  double took = wait_until([&] { return read_file(watched + "changed") == "new!"; }, 5s);
  EXPECT_GE(took, 0) << "never seen";
  EXPECT_LT(took, 1.0) << "slower than a second";
}

// A deferred open (no call: the servers are watched and the mount holds the file as current)
// reads from the kernel's pages; when a rename replaces the file and the pages go (another
// mount's rename drops them, memory pressure takes them), the open must not read on in the file
// that took the name, as the gateway would open it by path: ESTALE, as on NFS. So for a rename
// through the mount itself.
TEST_F(Coherence, ADeferredOpenWhoseFileARenameReplacedFailsWithEstale) {
  std::string error;
  auto g =
      start_gateway("replaced", "revalidate_interval_ms = 30000\nremote_watch = true\n", 2, error);
  ASSERT_TRUE(g) << error;
  for (size_t i : {0, 1})
    ASSERT_GE(wait_until([&] { return servers_watched(g->mount(i)); }, 15s), 0)
        << status_of(g->mount(i));
  const std::string at_a = g->mount(0) + "/srv0/" + name_ + "/";
  const std::string at_b = g->mount(1) + "/srv0/" + name_ + "/";
  const std::string old_bytes(64 << 10, 'o'), new_bytes(64 << 10, 'n');
  for (const char* name : {"data", "mine"}) {
    ASSERT_TRUE(write_file(at_a + name, old_bytes));
    ASSERT_EQ(read_file(at_b + name), old_bytes);  // B's pages and attributes
  }
  auto first_then_rest = [&](const std::string& path, const std::function<void()>& replace) {
    // A deferred open asks the gateway nothing. One that did ask (B's attributes of the file
    // were dropped: a report of the watcher's, a busy machine's late one) holds the gateway's
    // handle of the old file and rightly reads on in it: opened again, with the attributes that
    // open brought.
    int fd = -1;
    for (int attempt = 0; attempt < 10 && fd < 0; ++attempt) {
      const long calls = status_number(status_of(g->mount(1)), "gateway calls");
      fd = ::open(path.c_str(), O_RDONLY);
      if (fd < 0 || status_number(status_of(g->mount(1)), "gateway calls") == calls) break;
      ::close(fd);
      fd = -1;
      std::this_thread::sleep_for(100ms);
    }
    EXPECT_GE(fd, 0) << "no open of " << path << " was deferred: " << strerror(errno);
    if (fd < 0) return;
    // All of it: a shorter first read may leave the kernel's read-ahead of the rest on its way,
    // whose pages (the old file's, read before the replacement) no fadvise can drop meanwhile.
    std::string all(old_bytes.size(), '\0');
    EXPECT_EQ(::pread(fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));
    EXPECT_TRUE(all == old_bytes);
    replace();
    std::string buf(4096, '\0');
    // The old file's pages would serve the read (another mount's rename drops them; this
    // mount's own leaves them, and the read is right): gone, as memory pressure would take them.
    EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    errno = 0;
    const ssize_t n = ::pread(fd, buf.data(), buf.size(), 32 << 10);
    const int err = errno;
    EXPECT_EQ(n, -1) << "read on in the file that replaced it: " << buf.substr(0, 8);
    EXPECT_EQ(err, ESTALE) << strerror(err);
    ::close(fd);
  };
  first_then_rest(at_b + "data", [&] {
    ASSERT_TRUE(write_file(at_a + "data.tmp", new_bytes));
    ASSERT_EQ(::rename((at_a + "data.tmp").c_str(), (at_a + "data").c_str()), 0);
  });
  EXPECT_EQ(read_file(at_b + "data"), new_bytes) << "a new open reads the new file";
  first_then_rest(at_b + "mine", [&] {
    ASSERT_TRUE(write_file(at_b + "mine.tmp", new_bytes));
    ASSERT_EQ(::rename((at_b + "mine.tmp").c_str(), (at_b + "mine").c_str()), 0);
  });
  EXPECT_EQ(read_file(at_b + "mine"), new_bytes);
}

TEST_F(Coherence, SkeinLocalStopAndStartGatewaySwitchesMountsToSafeModeAndBack) {
  const std::string script =
      "SKEIN_BUILD_DIR='" + build_dir() + "' '" + source_dir() + "/deploy/skein-local'";
  const std::string mount0 = cluster_->mount(0);
  ASSERT_GE(wait_until([&] { return watch_healthy(mount0); }, 10s), 0) << status_of(mount0);
  std::string out;
  ASSERT_EQ(run_command(script + " stop-gateway --kill --state '" + cluster_->state() + "'", &out),
            0)
      << out;
  EXPECT_GE(wait_until([&] { return !watch_healthy(mount0); }, 5s), 0) << status_of(mount0);
  EXPECT_NE(status_of(mount0).find("entry ttl: 1 s"), std::string::npos) << status_of(mount0);
  ASSERT_EQ(run_command(script + " start-gateway --state '" + cluster_->state() + "'", &out), 0)
      << out;
  EXPECT_GE(wait_until([&] { return watch_healthy(mount0); }, 15s), 0) << status_of(mount0);
  EXPECT_NE(status_of(mount0).find("entry ttl: 3600 s"), std::string::npos) << status_of(mount0);
  // The other mount reconnects on its own schedule: wait for it too before reading through it.
  const std::string mount1 = cluster_->mount(1);
  EXPECT_GE(wait_until([&] { return watch_healthy(mount1); }, 15s), 0) << status_of(mount1);
  ASSERT_TRUE(write_file(mount0 + "/srv0/after-restart", "ok"));
  EXPECT_EQ(read_file(mount1 + "/srv0/after-restart"), "ok");
}

// A mount killed with files open (at a job's end, by the OOM killer) sends no Release: its files
// stay open at the gateway, each an sftp-server's descriptor, only until its Watch stream has
// been gone for the orphan timeout. A live mount's file, idle all that time, stays open and works.
TEST_F(Coherence, TheFilesOfAKilledMountAreReleasedAfterTheOrphanTimeout) {
  std::string error;
  auto g = start_gateway("orphans", "orphan_timeout_ms = 2000\n", 2, error);
  ASSERT_TRUE(g) << error;
  for (size_t i = 0; i < 2; ++i)
    ASSERT_GE(wait_until([&] { return watch_healthy(g->mount(i)); }, 10s), 0)
        << status_of(g->mount(i));
  auto open_files = [&] {
    return skeinctl_number(*cluster_, "namespaces", "default", "open_files", g->address);
  };
  auto on = [&](size_t i, int f) {
    return g->mount(i) + "/srv0/" + name_ + "/f" + std::to_string(f);
  };
  for (int f = 0; f < 5; ++f)
    ASSERT_TRUE(write_file(s("f" + std::to_string(f)), "file " + std::to_string(f)));
  std::vector<int> fds;
  char c;
  for (int f = 0; f < 5; ++f) {
    fds.push_back(::open(on(0, f).c_str(), O_RDWR));
    ASSERT_GE(fds.back(), 0) << strerror(errno);
    ASSERT_EQ(::pread(fds.back(), &c, 1, 0), 1);
  }
  const int kept = ::open(on(1, 0).c_str(), O_RDWR);
  ASSERT_GE(kept, 0) << strerror(errno);
  ASSERT_EQ(::pread(kept, &c, 1, 0), 1);
  ASSERT_GE(wait_until([&] { return open_files() == 6; }, 5s), 0) << open_files();
  std::string out;
  // ([s]: not the shell that runs pkill, whose command line holds the pattern.)
  ASSERT_EQ(
      run_command("pkill -KILL -f -- '[s]kein-mount.* " + g->mount(0) + " --namespace'", &out), 0)
      << out;
  for (int fd : fds) ::close(fd);
  const double took = wait_until([&] { return open_files() == 1; }, 20s);
  EXPECT_GE(took, 0) << open_files() << " files still open at the gateway";
  EXPECT_GE(took, 1.0) << "released before the orphan timeout";
  ASSERT_EQ(::pwrite(kept, "F", 1, 0), 1) << strerror(errno);
  EXPECT_EQ(::close(kept), 0) << strerror(errno);
  EXPECT_EQ(read_file(s("f0")), "File 0");
  EXPECT_EQ(open_files(), 0);
}

}  // namespace
}  // namespace skein::test
