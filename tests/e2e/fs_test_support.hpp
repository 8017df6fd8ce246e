// Small POSIX helpers for end-to-end filesystem tests: whole-file I/O, errno capture, and a
// suite fixture that shares one LocalCluster among the tests of a suite.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "local_cluster.hpp"

namespace skein::test {

// What `skein-mount --status MOUNTPOINT` prints (empty where the mount cannot be asked).
inline std::string status_of(const std::string& mountpoint) {
  std::string out;
  run_command("'" + build_dir() + "/client/skein-mount' --status '" + mountpoint + "'", &out);
  return out;
}

// Whether the mount at `mountpoint` says its Watch stream is healthy.
inline bool watch_healthy(const std::string& mountpoint) {
  return status_of(mountpoint).find("watch: healthy") != std::string::npos;
}

// Whether the mount at `mountpoint` says the gateway reports every server of its namespace
// watched.
inline bool servers_watched(const std::string& mountpoint) {
  return status_of(mountpoint).find("servers watched: yes") != std::string::npos;
}

// The number after "key: " in status_of's output, or -1.
inline long status_number(const std::string& status, const std::string& key) {
  const auto at = status.find("\n" + key + ": ");
  if (at == std::string::npos) return -1;
  return std::strtol(status.c_str() + at + key.size() + 3, nullptr, 10);
}

// Bytes the kernel's DAMON has paged out, summed over its schemes whose action is `pageout` (the
// test VM runs one, proactive reclaim that returns memory to the host). It monitors physical
// memory in regions, so it can page out a file's page read a moment ago along with the cold ones
// around it. 0 without DAMON, or where its counts cannot be refreshed (not root).
inline long long damon_paged_out() {
  const std::string root = "/sys/kernel/mm/damon/admin/kdamonds";
  auto number = [](const std::string& path) {
    long long n = 0;
    std::ifstream(path) >> n;
    return n;
  };
  long long bytes = 0;
  for (long long k = 0, kdamonds = number(root + "/nr_kdamonds"); k < kdamonds; ++k) {
    const std::string kdamond = root + "/" + std::to_string(k);
    std::ofstream(kdamond + "/state") << "update_schemes_stats";
    const std::string contexts = kdamond + "/contexts";
    for (long long c = 0, n = number(contexts + "/nr_contexts"); c < n; ++c) {
      const std::string schemes = contexts + "/" + std::to_string(c) + "/schemes";
      for (long long i = 0, m = number(schemes + "/nr_schemes"); i < m; ++i) {
        const std::string scheme = schemes + "/" + std::to_string(i);
        std::string action;
        std::ifstream(scheme + "/action") >> action;
        if (action == "pageout") bytes += number(scheme + "/stats/sz_applied");
      }
    }
  }
  return bytes;
}

// What may have taken pages, names and attributes from every mount's caches behind its back: how
// many times anyone wrote /proc/sys/vm/drop_caches (drop_pagecache plus drop_slab in
// /proc/vmstat), plus the bytes DAMON paged out. The machine may do either, and so does
// FilesystemOps.AFileKeepsItsInodeNumberWhenTheKernelForgetsIt (its suite's two runs, libssh and
// openssh, may overlap in a full run); a check of what a mount keeps across it tells nothing:
// compare two values for equality only.
inline long long system_cache_drops() {
  std::ifstream vmstat("/proc/vmstat");
  long long drops = 0;
  std::string key;
  long long value = 0;
  while (vmstat >> key >> value) {
    if (key == "drop_pagecache" || key == "drop_slab") drops += value;
  }
  return drops + damon_paged_out();
}

// The least of `rounds` counts that `measure(round)` returns (-1: the measurement failed), not
// counting a round across which the system's caches were dropped (system_cache_drops), for which
// up to `extra` more rounds are made (for a measure that can be repeated); when every round was
// disturbed, the least of them all.
template <typename Measure>
long least_undisturbed(int rounds, int extra, Measure measure) {
  long least = -1, least_any = -1;
  for (int round = 0, counted = 0; counted < rounds && round < rounds + extra; ++round) {
    const long long drops = system_cache_drops();
    const long n = measure(round);
    if (n < 0) return -1;
    if (least_any < 0 || n < least_any) least_any = n;
    if (system_cache_drops() != drops) continue;
    ++counted;
    if (least < 0 || n < least) least = n;
  }
  return least >= 0 ? least : least_any;
}

// Waits until `count()` (a server's SFTP requests so far, as skeinctl reads them) has grown by
// no more than one a reading for `still`, at most `cap`; false if it could not be read or never
// settled. The one is the reading's own: skeinctl's list of backends asks each for its free
// space (a STATVFS, at most once a second). Files a mount has just written bring the gateway's
// own requests after them: the remote watcher reports each write, and the gateway, which takes
// the report for that mount's change, checks the path again (an LSTAT) at the first revalidation
// round a second after the report (InvalidationBroker::due_echo_checks). Measured quiet, the
// last comes some 2.1 s after the write, later on a loaded machine. A count of the requests of
// what follows is the application's only once they are done.
template <typename Count>
bool wait_until_requests_stop(Count count,
                              std::chrono::milliseconds still = std::chrono::milliseconds(2500),
                              std::chrono::milliseconds cap = std::chrono::seconds(20)) {
  const auto start = std::chrono::steady_clock::now();
  long last = count();
  auto since = start;
  while (last >= 0 && std::chrono::steady_clock::now() - start < cap) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    const long now = count();
    if (now < 0) return false;
    if (now - last > 1) since = std::chrono::steady_clock::now();
    last = now;
    if (std::chrono::steady_clock::now() - since >= still) return true;
  }
  return false;
}

inline bool write_file(const std::string& path, const std::string& data,
                       int flags = O_WRONLY | O_CREAT | O_TRUNC, mode_t mode = 0644) {
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      ::close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return ::close(fd) == 0;
}

// Creates `path` as echo and cp do (O_WRONLY | O_CREAT | O_TRUNC), writes `data` and closes it:
// the errno of the first step that failed (an asynchronous create's error comes with the write,
// or at close), or 0.
inline int create_write_close_errno(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return errno;
  int err = 0;
  if (::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

inline std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return "<open failed: " + std::to_string(errno) + ">";
  std::string out;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// The names in a directory, "." and ".." included; "<opendir failed>" when it cannot be listed.
inline std::set<std::string> list_names(const std::string& path) {
  std::set<std::string> names;
  DIR* d = ::opendir(path.c_str());
  if (!d) return {"<opendir failed>"};
  while (auto* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  return names;
}

// errno of a call that must fail, or 0 when it did not fail.
#define SKEIN_ERRNO_OF(expr)       \
  ([&]() -> int {                  \
    errno = 0;                     \
    return (expr) < 0 ? errno : 0; \
  }())

inline std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    memcpy(s.data() + i, &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

// Shares one cluster among the tests of a suite: a cluster takes seconds to start.
template <int Servers = 3, int Mounts = 1>
class ClusterSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ =
        LocalCluster::start(::testing::UnitTest::GetInstance()->current_test_suite()->name(),
                            {.servers = Servers, .mounts = Mounts, .ssh_user = ssh_user_}, error);
    if (!cluster_) start_error_ = error;
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  // The storage servers' account for the next SetUpTestSuite ("": the user running the tests).
  static inline std::string ssh_user_;
  void SetUp() override { ASSERT_TRUE(cluster_) << "cluster did not start:\n" << start_error_; }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::string start_error_;
};

// Whether `f()` comes true within `within`, asked every 100 ms.
template <typename F>
inline bool eventually(F f, std::chrono::milliseconds within = std::chrono::seconds(15)) {
  auto until = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < until) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return f();
}

// Has the mount at `mountpoint` forget what it cached (names, attributes, pages), as after a
// remount, through its control socket (`skein-mount --drop-caches`); its output goes to *out.
inline bool drop_mount_caches(const std::string& mountpoint, std::string* out = nullptr) {
  return run_command("'" + build_dir() + "/client/skein-mount' --drop-caches '" + mountpoint + "'",
                     out) == 0;
}

// A number of one row of `skeinctl --json LIST`: the row of `list` ("backends", "namespaces")
// whose name is `name`, its field `field`; -1 when skeinctl fails or there is no such row. Asked
// of the cluster's gateway, or of `gateway` (a test's own, with the cluster's credentials).
inline long skeinctl_number(const LocalCluster& cluster, const std::string& list,
                            const std::string& name, const std::string& field,
                            const std::string& gateway = "") {
  std::string out;
  if (run_command(cluster.admin_env() + build_dir() + "/client/skeinctl --gateway " +
                      (gateway.empty() ? cluster.env("SKEIN_GATEWAY") : gateway) + " --json " +
                      list + " list 2>/dev/null",
                  &out) != 0)
    return -1;
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains(list)) return -1;
  for (auto& row : j[list])
    if (row["name"] == name) return row[field].get<long>();
  return -1;
}

// Two files of `size` bytes and the same mtime (an hour ago) in `dir`, which everyone may write:
// `pub`, nobody's and readable by everyone ('p' bytes), and `secret`, root's and private ('S'
// bytes). While the object lives a thread swaps them (renameat2's RENAME_EXCHANGE on the server)
// every 0.5 to 2.3 ms, as a user who may rename in the directory could: a name judged for
// another user leads to root's file a moment later.
class SwappingFiles {
 public:
  static constexpr uid_t kNobody = 65534;
  SwappingFiles(const std::string& dir, std::size_t size)
      : pub(dir + "/pub"), secret(dir + "/secret") {
    const time_t t = ::time(nullptr) - 3600;
    const timespec times[2] = {{t, 0}, {t, 0}};
    made = ::chmod(dir.c_str(), 0777) == 0 && write_file(pub, std::string(size, 'p')) &&
           write_file(secret, std::string(size, 'S')) &&
           ::chown(pub.c_str(), kNobody, kNobody) == 0 && ::chmod(pub.c_str(), 0644) == 0 &&
           ::chmod(secret.c_str(), 0600) == 0 &&
           ::utimensat(AT_FDCWD, pub.c_str(), times, 0) == 0 &&
           ::utimensat(AT_FDCWD, secret.c_str(), times, 0) == 0;
    if (!made) return;
    swapper_ = std::thread([this] {
      while (!stop_.load()) {
        if (::renameat2(AT_FDCWD, pub.c_str(), AT_FDCWD, secret.c_str(), RENAME_EXCHANGE) == 0)
          swaps_.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(500 + swaps_.load() % 7 * 300));
      }
    });
  }
  ~SwappingFiles() { stop(); }
  SwappingFiles(const SwappingFiles&) = delete;
  SwappingFiles& operator=(const SwappingFiles&) = delete;
  void stop() {
    stop_ = true;
    if (swapper_.joinable()) swapper_.join();
  }
  int swaps() const { return swaps_.load(); }
  // Root's file, at whichever name the swaps left it (after stop()).
  std::string roots() const {
    struct stat st {};
    return ::stat(pub.c_str(), &st) == 0 && st.st_uid == 0 ? pub : secret;
  }

  const std::string pub, secret;
  bool made = false;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> swaps_{0};
  std::thread swapper_;
};

}  // namespace skein::test
