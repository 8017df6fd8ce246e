// Union namespaces end to end: three real sshd servers whose exports hold overlapping trees,
// namespaces with each create policy and branch mode over them, each mounted with FUSE. Every
// branch is its own small tmpfs, so free space differs between branches and can run out.
#include <dirent.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

// Branch sizes: b1 has the most room, b0 the least.
const char* const kBranchSizes[] = {"48m", "192m", "96m"};
const char* const kNamespaces[] = {"ff", "mfs", "rand", "hash", "ro", "minfree"};

class UnionNamespaces : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = LocalCluster::start("union", {.servers = 3, .mounts = 0}, error);
    if (!cluster_) return fail("cluster: " + error);
    for (int i = 0; i < 3; ++i) {
      std::string dir = branch_dir(i);
      ::mkdir(dir.c_str(), 0755);
      if (::mount("tmpfs", dir.c_str(), "tmpfs", 0,
                  (std::string("size=") + kBranchSizes[i]).c_str()) != 0)
        return fail("cannot mount tmpfs on " + dir + ": " + strerror(errno));
      ::chmod(dir.c_str(), 0755);
    }
    std::string config = cluster_->state() + "/union.toml";
    std::string address = "127.0.0.1:" + std::to_string(free_port());
    std::ofstream(config) << config_text(address);
    gateway_ =
        GatewayProcess::start(config, address, cluster_->state() + "/union-gateway.log", error);
    if (!gateway_) return fail("gateway: " + error);
    for (auto ns : kNamespaces) {
      auto m = FuseMount::start(address, cluster_->state() + "/u-" + ns, ns, error,
                                "-o allow_other" + cluster_->mount_credentials());
      if (!m) return fail(std::string("mount ") + ns + ": " + error);
      mounts_[ns] = std::move(m);
    }
  }
  static void TearDownTestSuite() {
    mounts_.clear();
    gateway_.reset();
    if (cluster_)
      for (int i = 0; i < 3; ++i) ::umount2(branch_dir(i).c_str(), MNT_DETACH);
    cluster_.reset();
  }
  static void fail(const std::string& why) { setup_error_ = why; }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static std::string branch_dir(int i) { return cluster_->export_dir(i) + "/u"; }
  // The suite's configuration; `gateway_extra` goes into its [gateway] table.
  static std::string config_text(const std::string& address,
                                 const std::string& gateway_extra = "") {
    std::string key = cluster_->env("SKEIN_SSH_KEY"), kh = cluster_->env("SKEIN_KNOWN_HOSTS");
    auto ports = cluster_->list("SKEIN_SSH_PORTS");
    std::string t = "[gateway]\nlisten = \"" + address + "\"\ntimeout_ms = 5000\n" + gateway_extra +
                    cluster_->gateway_tls_toml();
    auto backend = [&](const std::string& name, int i, const std::string& extra) {
      t += "[[backend]]\nname = \"" + name +
           "\"\nhost = \"127.0.0.1\"\nport = " + ports.at(static_cast<size_t>(i)) + "\nuser = \"" +
           cluster_->env("SKEIN_SSH_USER") + "\"\nidentity_file = \"" + key +
           "\"\nknown_hosts = \"" + kh + "\"\nroot = \"" + branch_dir(i) + "\"\nconnections = 2\n" +
           extra;
    };
    for (int i = 0; i < 3; ++i) backend("b" + std::to_string(i), i, "");
    backend("b0-needs-1g-free", 0, "min_free_space = \"1G\"\n");
    auto ns = [&](const std::string& name, const std::string& policy, const std::string& branches) {
      t += "[[namespace]]\nname = \"" + name + "\"\ncreate_policy = \"" + policy +
           "\"\ntoken_file = \"" + cluster_->token_file() +
           "\"\n[[namespace.mount]]\npath = \"/\"\nbackends = [" + branches + "]\n";
    };
    ns("ff", "ff", "\"b0\", \"b1\", \"b2\"");
    ns("mfs", "mfs", "\"b0\", \"b1\", \"b2\"");
    ns("rand", "rand", "\"b0\", \"b1\", \"b2\"");
    ns("hash", "hash", "\"b0\", \"b1\", \"b2\"");
    ns("ro", "ff", "\"b0=RO\", \"b1=NC\", \"b2\"");
    ns("minfree", "ff", "\"b0-needs-1g-free\", \"b1\", \"b2\"");
    return t;
  }

  // Path through the mount of namespace `ns`, and on branch i's export.
  std::string m(const std::string& ns, const std::string& rel) {
    return mounts_.at(ns)->path() + "/" + rel;
  }
  std::string b(int i, const std::string& rel) { return branch_dir(i) + "/" + rel; }
  // A directory for this test on the given branches (made directly on the servers).
  std::string test_dir(std::initializer_list<int> on = {0, 1, 2}) {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (int i : on) ::mkdir(b(i, name).c_str(), 0755);
    return name;
  }
  // Which branches hold `rel`.
  std::set<int> holders(const std::string& rel) {
    std::set<int> out;
    struct stat st;
    for (int i = 0; i < 3; ++i)
      if (::lstat(b(i, rel).c_str(), &st) == 0) out.insert(i);
    return out;
  }
  std::set<std::string> list(const std::string& path) {
    std::set<std::string> names;
    DIR* d = opendir(path.c_str());
    if (!d) return {"<opendir: " + std::string(strerror(errno)) + ">"};
    while (auto* e = readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.insert(e->d_name);
    closedir(d);
    return names;
  }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::unique_ptr<GatewayProcess> gateway_;
  static inline std::map<std::string, std::unique_ptr<FuseMount>> mounts_;
  static inline std::string setup_error_;
};

TEST_F(UnionNamespaces, LookupIsFirstFoundInBranchOrder) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(b(1, d + "/x"), "from b1"));
  ASSERT_TRUE(write_file(b(2, d + "/x"), "from b2"));
  EXPECT_EQ(read_file(m("ff", d + "/x")), "from b1");
  ASSERT_TRUE(write_file(b(0, d + "/x"), "from b0"));
  // A new name is looked up afresh (the old answer may be cached for a second).
  ASSERT_TRUE(write_file(b(0, d + "/y"), "y0"));
  ASSERT_TRUE(write_file(b(2, d + "/y"), "y2"));
  EXPECT_EQ(read_file(m("ff", d + "/y")), "y0");
}

TEST_F(UnionNamespaces, ReaddirMergesBranchesAndFirstBranchWinsDuplicates) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(b(0, d + "/a"), "a"));
  ASSERT_TRUE(write_file(b(1, d + "/b"), "b"));
  ASSERT_TRUE(write_file(b(2, d + "/c"), "c"));
  ASSERT_TRUE(write_file(b(1, d + "/dup"), "1234"));
  ASSERT_TRUE(write_file(b(2, d + "/dup"), "123456789"));
  ::mkdir(b(2, d + "/only-on-b2").c_str(), 0700);
  EXPECT_EQ(list(m("ff", d)), (std::set<std::string>{"a", "b", "c", "dup", "only-on-b2"}));
  struct stat st;
  ASSERT_EQ(::stat(m("ff", d + "/dup").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4) << "the first branch's copy wins";
  ASSERT_EQ(::stat(m("ff", d + "/only-on-b2").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
}

TEST_F(UnionNamespaces, FirstFoundCreatesOnFirstBranchAndClonesTheParent) {
  auto d = test_dir({2});  // the directory exists only on the last branch
  ::chmod(b(2, d).c_str(), 0750);
  ASSERT_TRUE(write_file(m("ff", d + "/new"), "new"));
  EXPECT_EQ(holders(d + "/new"), (std::set<int>{0}));
  struct stat st;
  ASSERT_EQ(::stat(b(0, d).c_str(), &st), 0) << "parent cloned onto b0";
  EXPECT_EQ(st.st_mode & 07777, 0750u) << "with the model's mode";
  ASSERT_EQ(::mkdir(m("ff", d + "/sub").c_str(), 0755), 0);
  EXPECT_EQ(holders(d + "/sub"), (std::set<int>{0}));
  ASSERT_EQ(::symlink("new", m("ff", d + "/link").c_str()), 0);
  EXPECT_EQ(holders(d + "/link"), (std::set<int>{0}));
}

TEST_F(UnionNamespaces, MostFreeSpaceCreatesOnTheRoomiestBranch) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(m("mfs", d + "/f"), "x"));
  EXPECT_EQ(holders(d + "/f"), (std::set<int>{1}));  // b1 is the 192 MiB tmpfs
  ASSERT_EQ(::mkdir(m("mfs", d + "/dir").c_str(), 0755), 0);
  EXPECT_EQ(holders(d + "/dir"), (std::set<int>{1}));
}

TEST_F(UnionNamespaces, RandomSpreadsNewFiles) {
  auto d = test_dir();
  std::set<int> used;
  for (int i = 0; i < 30; ++i) {
    std::string f = d + "/r" + std::to_string(i);
    ASSERT_TRUE(write_file(m("rand", f), "x"));
    auto h = holders(f);
    ASSERT_EQ(h.size(), 1u);
    used.insert(*h.begin());
  }
  EXPECT_GT(used.size(), 1u) << "30 random placements all on one branch";
}

TEST_F(UnionNamespaces, HashPlacesAPathAlwaysOnTheSameBranch) {
  auto d = test_dir();
  std::map<std::string, int> first;
  std::set<int> used;
  for (int i = 0; i < 30; ++i) {
    std::string f = d + "/h" + std::to_string(i);
    ASSERT_TRUE(write_file(m("hash", f), "x"));
    first[f] = *holders(f).begin();
    used.insert(first[f]);
    ASSERT_EQ(::unlink(m("hash", f).c_str()), 0);
  }
  for (auto& [f, branch] : first) {
    ASSERT_TRUE(write_file(m("hash", f), "again"));
    EXPECT_EQ(holders(f), (std::set<int>{branch})) << f;
  }
  EXPECT_GT(used.size(), 1u);
}

TEST_F(UnionNamespaces, UnlinkChmodTruncateActOnEveryCopy) {
  auto d = test_dir();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(write_file(b(i, d + "/everywhere"), "0123456789"));
  ASSERT_EQ(::chmod(m("ff", d + "/everywhere").c_str(), 0604), 0);
  ASSERT_EQ(::truncate(m("ff", d + "/everywhere").c_str(), 3), 0);
  struct stat st;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(::stat(b(i, d + "/everywhere").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0604u) << "branch " << i;
    EXPECT_EQ(st.st_size, 3) << "branch " << i;
  }
  ASSERT_EQ(::unlink(m("ff", d + "/everywhere").c_str()), 0);
  EXPECT_TRUE(holders(d + "/everywhere").empty());
  for (int i : {0, 2}) ::mkdir(b(i, d + "/twodirs").c_str(), 0755);
  ASSERT_EQ(::rmdir(m("ff", d + "/twodirs").c_str()), 0);
  EXPECT_TRUE(holders(d + "/twodirs").empty());
}

TEST_F(UnionNamespaces, RenameMovesEveryCopyOnItsBranch) {
  auto d = test_dir({0, 2});
  ASSERT_TRUE(write_file(b(0, d + "/old"), "zero"));
  ASSERT_TRUE(write_file(b(2, d + "/old"), "two"));
  ASSERT_EQ(::rename(m("ff", d + "/old").c_str(), m("ff", d + "/new").c_str()), 0)
      << strerror(errno);
  EXPECT_TRUE(holders(d + "/old").empty());
  EXPECT_EQ(holders(d + "/new"), (std::set<int>{0, 2}));
  EXPECT_EQ(read_file(m("ff", d + "/new")), "zero");
  // Into a directory that exists only on another branch: cloned there, then moved.
  ::mkdir(b(1, d + "-elsewhere").c_str(), 0755);
  ASSERT_EQ(::rename(m("ff", d + "/new").c_str(), m("ff", d + "-elsewhere/moved").c_str()), 0)
      << strerror(errno);
  EXPECT_EQ(holders(d + "-elsewhere/moved"), (std::set<int>{0, 2}));
  // Replacing a target that lives on a branch without the source removes that old target.
  ASSERT_TRUE(write_file(b(0, d + "/src"), "src"));
  ::mkdir(b(1, d).c_str(), 0755);
  ASSERT_TRUE(write_file(b(1, d + "/dst"), "old target"));
  ASSERT_EQ(::rename(m("ff", d + "/src").c_str(), m("ff", d + "/dst").c_str()), 0);
  EXPECT_EQ(read_file(m("ff", d + "/dst")), "src");
  EXPECT_EQ(holders(d + "/dst"), (std::set<int>{0}));
}

TEST_F(UnionNamespaces, ReadOnlyBranchRefusesChangesAndNoCreateTakesNoNewFiles) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(b(0, d + "/on-ro"), "read only"));
  ASSERT_EQ(::chown(b(0, d + "/on-ro").c_str(), 65534, 65534), 0);  // nobody's (below)
  ASSERT_TRUE(write_file(b(1, d + "/on-nc"), "no create"));
  EXPECT_EQ(read_file(m("ro", d + "/on-ro")), "read only");
  EXPECT_EQ(SKEIN_ERRNO_OF(::open(m("ro", d + "/on-ro").c_str(), O_WRONLY)), EROFS);
  EXPECT_EQ(SKEIN_ERRNO_OF(::unlink(m("ro", d + "/on-ro").c_str())), EROFS);
  EXPECT_EQ(SKEIN_ERRNO_OF(::chmod(m("ro", d + "/on-ro").c_str(), 0600)), EROFS);
  // So does another user's change of its own file there, which the gateway makes through a
  // handle it opens for the change (judged by that file: SetAttrRequest.as_user).
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
    const std::string path = m("ro", d + "/on-ro");
    if (int e = SKEIN_ERRNO_OF(::chmod(path.c_str(), 0600)); e != EROFS) ::_exit(10 + e);
    if (int e = SKEIN_ERRNO_OF(::utimes(path.c_str(), nullptr)); e != EROFS) ::_exit(100 + e);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: setuid failed, 10 + errno: chmod, 100 + errno: utimes (not EROFS)";
  struct stat st {};
  ASSERT_EQ(::stat(b(0, d + "/on-ro").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u) << "another user changed the copy on the read-only branch";
  EXPECT_EQ(SKEIN_ERRNO_OF(::rename(m("ro", d + "/on-ro").c_str(), m("ro", d + "/moved").c_str())),
            EXDEV);
  // An existing file on a no-create branch changes in place.
  ASSERT_TRUE(write_file(m("ro", d + "/on-nc"), "changed", O_WRONLY | O_TRUNC));
  EXPECT_EQ(read_file(b(1, d + "/on-nc")), "changed");
  // New files skip both: b2 takes them.
  ASSERT_TRUE(write_file(m("ro", d + "/new"), "new"));
  EXPECT_EQ(holders(d + "/new"), (std::set<int>{2}));
}

TEST_F(UnionNamespaces, BranchBelowMinimumFreeSpaceTakesNoNewFiles) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(m("minfree", d + "/f"), "x"));
  EXPECT_EQ(holders(d + "/f"), (std::set<int>{1})) << "b0 has under 1 GiB free: skipped";
}

TEST_F(UnionNamespaces, FullBranchGivesENOSPCToTheWriter) {
  auto d = test_dir({0});
  // b0 is 48 MiB: writing 64 MiB to a file placed there must fail with ENOSPC, not EIO.
  std::string f = m("ff", d + "/filler");
  int fd = ::open(f.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::string chunk(1 << 20, 'z');
  int err = 0;
  for (int i = 0; i < 64 && !err; ++i)
    if (::write(fd, chunk.data(), chunk.size()) < 0) err = errno;
  if (!err && ::close(fd) < 0)
    err = errno;
  else if (err)
    ::close(fd);
  EXPECT_EQ(err, ENOSPC) << strerror(err);
  ::unlink(f.c_str());
}

TEST_F(UnionNamespaces, DownBackendDropsOutThenComesBack) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(b(0, d + "/zero"), "0"));
  ASSERT_TRUE(write_file(b(1, d + "/one"), "1"));
  ASSERT_TRUE(write_file(b(2, d + "/two"), "2"));
  int held = ::open(m("ff", d + "/one").c_str(), O_RDONLY);
  ASSERT_GE(held, 0);
  ASSERT_TRUE(cluster_->stop_server(1));
  auto start = std::chrono::steady_clock::now();
  std::set<std::string> names;
  // The first request to notice may take a moment; after that the branch fails fast.
  for (int i = 0; i < 50; ++i) {
    names = list(m("ff", d));
    if (!names.count("one")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(names, (std::set<std::string>{"zero", "two"}));
  char c;
  EXPECT_EQ(SKEIN_ERRNO_OF(::pread(held, &c, 1, 0)), EIO);
  // New files still land somewhere.
  ASSERT_TRUE(write_file(m("ff", d + "/while-down"), "ok"));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 10.0);
  ::close(held);
  ASSERT_TRUE(cluster_->start_server(1));
  for (int i = 0; i < 100 && !list(m("ff", d)).count("one"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(list(m("ff", d)).count("one")) << "b1 did not come back";
  EXPECT_EQ(read_file(m("ff", d + "/one")), "1");
}

// Without remote watching (remote_watch = false, and revalidation too rare to matter), a branch
// that comes back up still has every mount drop what it cached of it: the listing served while it
// was down, which left its names out, is not kept.
TEST_F(UnionNamespaces, ABranchThatComesBackIsListedAgainWithoutRemoteWatching) {
  auto d = test_dir();
  ASSERT_TRUE(write_file(b(0, d + "/zero"), "0"));
  ASSERT_TRUE(write_file(b(1, d + "/one"), "1"));
  std::string error;
  const std::string config = cluster_->state() + "/union-unwatched.toml";
  const std::string address = "127.0.0.1:" + std::to_string(free_port());
  std::ofstream(config) << config_text(address,
                                       "remote_watch = false\nrevalidate_interval_ms = 3600000\n");
  auto gateway = GatewayProcess::start(config, address,
                                       cluster_->state() + "/union-unwatched-gateway.log", error);
  ASSERT_TRUE(gateway) << error;
  auto mount = FuseMount::start(address, cluster_->state() + "/u-unwatched", "ff", error,
                                "-o allow_other" + cluster_->mount_credentials());
  ASSERT_TRUE(mount) << error;
  const std::string dir = mount->path() + "/" + d;
  EXPECT_EQ(list(dir), (std::set<std::string>{"zero", "one"}));

  ASSERT_TRUE(cluster_->stop_server(1));
  struct Restart {  // the suite's other tests need b1, whatever happens here
    ~Restart() { cluster_->start_server(1); }
  } restart;
  // A change while b1 is down has the directory listed afresh, without b1's names. (Until then
  // the mount may keep showing the listing it had; reading "one" would be EIO.)
  std::set<std::string> names;
  for (int i = 0; i < 50; ++i) {
    if (write_file(dir + "/while-down", "ok")) {
      names = list(dir);
      if (!names.count("one")) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(names, (std::set<std::string>{"zero", "while-down"})) << "the listing while b1 is down";

  ASSERT_TRUE(cluster_->start_server(1));
  for (int i = 0; i < 150 && !list(dir).count("one"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(list(dir), (std::set<std::string>{"zero", "one", "while-down"}))
      << "the listing served while b1 was down is still cached 15 s after it came back";
  EXPECT_EQ(read_file(dir + "/one"), "1");
}

}  // namespace
}  // namespace skein::test
