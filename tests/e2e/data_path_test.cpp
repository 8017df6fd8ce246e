// The data path end to end: read-ahead, write-behind and the gateway's read collapsing, through
// real mounts. Reads return exactly the server's bytes whatever the pattern while read-ahead is
// on; a write acknowledged early still reports its error (ENOSPC from a full export, at close or
// fsync); reads, stat and truncate see the writes made before them; two mounts reading one file
// at once both get it right.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

constexpr size_t kMiB = 1 << 20;

class DataPath : public ::testing::Test {
 protected:
  // One sshd server, two mounts of the default namespace, and a third mount of a namespace whose
  // only backend is a small tmpfs, to run out of space; its gateway does not watch the server.
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = LocalCluster::start("data-path", {.servers = 1, .mounts = 2}, error);
    if (!cluster_) return fail("cluster: " + error);
    const std::string dir = small_dir();
    ::mkdir(dir.c_str(), 0755);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=8m") != 0)
      return fail("cannot mount tmpfs on " + dir + ": " + strerror(errno));
    ::chmod(dir.c_str(), 0755);
    const std::string config = cluster_->state() + "/small.toml";
    const std::string address = "127.0.0.1:" + std::to_string(free_port());
    std::ofstream(config) << config_text(address);
    gateway_ =
        GatewayProcess::start(config, address, cluster_->state() + "/small-gateway.log", error);
    if (!gateway_) return fail("gateway: " + error);
    small_mount_ = FuseMount::start(address, cluster_->state() + "/small-mnt", "small", error,
                                    cluster_->mount_credentials());
    if (!small_mount_) return fail("mount: " + error);
  }
  static void TearDownTestSuite() {
    small_mount_.reset();
    gateway_.reset();
    if (cluster_) ::umount2(small_dir().c_str(), MNT_DETACH);
    cluster_.reset();
  }
  static void fail(const std::string& why) { setup_error_ = why; }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static std::string small_dir() { return cluster_->export_dir(0) + "/small"; }
  static std::string config_text(const std::string& address) {
    // No watching and (within a test) no revalidation: changes made on the server reach this
    // namespace's mount only through what an open asks (ServerSideChangeBetweenOpensIsSeen).
    return "[gateway]\nlisten = \"" + address +
           "\"\ntimeout_ms = 5000\nremote_watch = false\nrevalidate_interval_ms = 3600000\n" +
           cluster_->gateway_tls_toml() +
           "[[backend]]\nname = \"small\"\nhost = \"127.0.0.1\"\nport = " +
           cluster_->list("SKEIN_SSH_PORTS").at(0) + "\nuser = \"" +
           cluster_->env("SKEIN_SSH_USER") + "\"\nidentity_file = \"" +
           cluster_->env("SKEIN_SSH_KEY") + "\"\nknown_hosts = \"" +
           cluster_->env("SKEIN_KNOWN_HOSTS") + "\"\nroot = \"" + small_dir() +
           "\"\nconnections = 2\n[[namespace]]\nname = \"small\"\ntoken_file = \"" +
           cluster_->token_file() +
           "\"\n[[namespace.mount]]\npath = \"/\"\nbackends = [\"small\"]\n";
  }

  // Through mount i, on the server, and through the small namespace.
  std::string m(const std::string& rel, int i = 0) { return cluster_->mount(i) + "/srv0/" + rel; }
  std::string s(const std::string& rel) { return cluster_->export_dir(0) + "/" + rel; }
  void read_while_replaced(const std::string& path, const std::string& opened,
                           const std::function<void()>& replace);
  // `count` writes of `data` to this test's file through a descriptor opened with `flags`, then
  // an open with O_TRUNC through another, and both closed: the file is empty on the server.
  void truncate_after_writes(int flags, const std::string& data, int count) {
    int fd = ::open(m(name()).c_str(), flags, 0644);
    ASSERT_GE(fd, 0);
    for (int i = 0; i < count; ++i)
      ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
    const int emptied = ::open(m(name()).c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(emptied, 0);
    EXPECT_EQ(::close(emptied), 0);
    EXPECT_EQ(::close(fd), 0);
    struct stat st {};
    ASSERT_EQ(::stat(s(name()).c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 0) << "writes from before the truncation landed after it";
  }
  std::string small(const std::string& rel) { return small_mount_->path() + "/" + rel; }
  std::string name() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

  // Empties the kernel's caches of this suite's two mounts (their control socket's drop-caches),
  // so that the next reads go through the mount to the gateway. Not /proc/sys/vm/drop_caches:
  // that empties every mount's caches on the machine, and other suites running at the same time
  // check what their mounts keep.
  static void drop_page_cache() {
    for (int i : {0, 1}) {
      std::string out;
      ASSERT_TRUE(drop_mount_caches(cluster_->mount(i), &out)) << out;
    }
  }

  static bool set_mtime(const std::string& path, time_t mtime) {
    const timespec times[2] = {{mtime, 0}, {mtime, 0}};
    return ::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0;
  }

  static std::string pread_all(int fd, size_t size, off_t off) {
    std::string out(size, '\0');
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::pread(fd, out.data() + done, size - done, off + static_cast<off_t>(done));
      if (n < 0) return "<pread failed: " + std::string(strerror(errno)) + ">";
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    out.resize(done);
    return out;
  }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::unique_ptr<GatewayProcess> gateway_;
  static inline std::unique_ptr<FuseMount> small_mount_;
  static inline std::string setup_error_;
};

// ---- write-behind: errors reach the writer ----

TEST_F(DataPath, WriteErrorFoundAfterTheWriteReturnedComesBackAtCloseAsENOSPC) {
  // Leave less than a MiB free on the 8 MiB export, then write a MiB through the mount: the write
  // is taken at once, and the gateway's ENOSPC comes back at close.
  const std::string filler = small_dir() + "/filler-" + name();
  ASSERT_TRUE(write_file(filler, std::string(7 * kMiB + 512 * 1024, 'f')));
  int fd = ::open(small(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::string data(kMiB, 'x');
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()))
      << "the write should be taken before the gateway answers: " << strerror(errno);
  EXPECT_EQ(SKEIN_ERRNO_OF(::close(fd)), ENOSPC);
  ::unlink(small(name()).c_str());
  ::unlink(filler.c_str());
}

TEST_F(DataPath, WriteErrorComesBackAtFsyncAsENOSPC) {
  const std::string filler = small_dir() + "/filler-" + name();
  ASSERT_TRUE(write_file(filler, std::string(7 * kMiB + 512 * 1024, 'f')));
  int fd = ::open(small(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::string data(kMiB, 'x');
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  EXPECT_EQ(SKEIN_ERRNO_OF(::fsync(fd)), ENOSPC);
  ::close(fd);
  ::unlink(small(name()).c_str());
  ::unlink(filler.c_str());
}

TEST_F(DataPath, StreamingPastAFullExportFailsWithENOSPCNotEIO) {
  int fd = ::open(small(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::string chunk(kMiB, 'z');
  int err = 0;
  for (int i = 0; i < 32 && !err; ++i)
    if (::write(fd, chunk.data(), chunk.size()) < 0) err = errno;
  int close_err = SKEIN_ERRNO_OF(::close(fd));
  if (!err) err = close_err;
  EXPECT_EQ(err, ENOSPC) << strerror(err);
  ::unlink(small(name()).c_str());
}

// ---- write-behind: what comes after a write sees it ----

TEST_F(DataPath, ReadAfterWriteOnTheSameFileSeesTheWrite) {
  std::string model = random_bytes(6 * kMiB, 11);
  int fd = ::open(m(name()).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, model.data(), model.size(), 0), static_cast<ssize_t>(model.size()));
  std::mt19937_64 rng(5);
  for (int op = 0; op < 300; ++op) {
    size_t off = rng() % model.size();
    size_t len = 1 + rng() % std::min<size_t>(300000, model.size() - off);
    if (rng() % 2) {
      std::string data = random_bytes(len, rng());
      ASSERT_EQ(::pwrite(fd, data.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len));
      model.replace(off, len, data);
    } else {
      ASSERT_TRUE(pread_all(fd, len, static_cast<off_t>(off)) == model.substr(off, len))
          << "op " << op;
    }
  }
  // Another descriptor of the mount sees it all, and so does the server once it is closed.
  int other = ::open(m(name()).c_str(), O_RDONLY);
  ASSERT_GE(other, 0);
  EXPECT_TRUE(pread_all(other, model.size(), 0) == model);
  ::close(other);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(s(name())) == model);
}

TEST_F(DataPath, SequentialWritesThenReadBackWhileStillOpen) {
  // A writer that streams, with a reader of the same file on another descriptor following it.
  std::string model = random_bytes(24 * kMiB + 777, 12);
  int w = ::open(m(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int r = ::open(m(name()).c_str(), O_RDONLY);
  ASSERT_GE(w, 0);
  ASSERT_GE(r, 0);
  const size_t step = 3 * kMiB + 5;
  for (size_t off = 0; off < model.size(); off += step) {
    size_t len = std::min(step, model.size() - off);
    ASSERT_EQ(::write(w, model.data() + off, len), static_cast<ssize_t>(len));
    ASSERT_TRUE(pread_all(r, len, static_cast<off_t>(off)) == model.substr(off, len))
        << "at " << off;
  }
  struct stat st {};
  ASSERT_EQ(::fstat(r, &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), model.size());
  ::close(r);
  ASSERT_EQ(::close(w), 0);
}

TEST_F(DataPath, StatAfterWritesGivesTheirSizeOnEveryMount) {
  int fd = ::open(m(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::string data(kMiB, 's');
  for (int i = 0; i < 5; ++i)
    ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(kMiB));
  struct stat st {};
  ASSERT_EQ(::stat(m(name()).c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), 5 * kMiB);
  ASSERT_EQ(::close(fd), 0);
  ASSERT_EQ(::stat(m(name(), 1).c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), 5 * kMiB) << "the other mount";
  ASSERT_EQ(::stat(s(name()).c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), 5 * kMiB) << "the server";
}

TEST_F(DataPath, TruncateAfterPendingWritesKeepsItsSize) {
  int fd = ::open(m(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::string data = random_bytes(4 * kMiB, 13);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kMiB + 3)), 0);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(s(name())) == data.substr(0, kMiB + 3));
}

// Writes acknowledged to one descriptor, then an open with O_TRUNC through another (the kernel
// hands O_TRUNC to the open, ATOMIC_O_TRUNC): the writes land before the truncation, never after
// it, so the file stays empty.
TEST_F(DataPath, AnOpenThatTruncatesComesAfterTheWritesBeforeIt) {
  // Small writes: many queued at once.
  truncate_after_writes(O_WRONLY | O_CREAT | O_TRUNC, random_bytes(4096, 15), 4096);
}

// Log rotation: a writer's file is renamed while its writes are on their way, and a new file
// takes the old name. Every byte the writer wrote is in the renamed file; none in the new one.
TEST_F(DataPath, WritesBeforeARenameLandInTheRenamedFile) {
  const std::string log = name() + ".log", rotated = name() + ".log.1";
  int fd = ::open(m(log).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = random_bytes(16 * kMiB, 16);
  for (size_t at = 0; at < data.size(); at += 4096)  // small writes: many queued at once
    ASSERT_EQ(::write(fd, data.data() + at, 4096), 4096);
  ASSERT_EQ(::rename(m(log).c_str(), m(rotated).c_str()), 0);
  ASSERT_TRUE(write_file(m(log), "the new log\n"));
  const std::string tail = "written after the rename\n";
  ASSERT_EQ(::write(fd, tail.data(), tail.size()), static_cast<ssize_t>(tail.size()));
  EXPECT_EQ(::close(fd), 0);
  EXPECT_EQ(read_file(s(log)), "the new log\n");
  EXPECT_TRUE(read_file(s(rotated)) == data + tail) << "the renamed file lacks bytes";
}

// The same through an appending descriptor of an existing file (a log, reset by `: > log`
// while its writer runs): its writes land before the truncation too.
TEST_F(DataPath, AnOpenThatTruncatesComesAfterAnAppendingWritersWrites) {
  ASSERT_TRUE(write_file(s(name()), "old\n"));
  truncate_after_writes(O_WRONLY | O_APPEND, random_bytes(kMiB, 17), 16);
}

// A file renamed while its large writes are on their way, a new file made at the old name, and
// more large writes (which may open the file on connections of their own at the gateway): every
// byte lands in the renamed file, none in the new one.
TEST_F(DataPath, LargeWritesAroundARenameLandInTheRenamedFile) {
  const std::string out = name() + ".tmp", done = name();
  int fd = ::open(m(out).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  const std::string data = random_bytes(32 * kMiB, 18);
  const size_t half = data.size() / 2;
  for (size_t at = 0; at < half; at += kMiB)
    ASSERT_EQ(::write(fd, data.data() + at, kMiB), static_cast<ssize_t>(kMiB));
  ASSERT_EQ(::rename(m(out).c_str(), m(done).c_str()), 0);
  ASSERT_TRUE(write_file(m(out), "a new file\n"));
  for (size_t at = half; at < data.size(); at += kMiB)
    ASSERT_EQ(::write(fd, data.data() + at, kMiB), static_cast<ssize_t>(kMiB));
  EXPECT_EQ(::close(fd), 0);
  EXPECT_EQ(read_file(s(out)), "a new file\n");
  EXPECT_TRUE(read_file(s(done)) == data) << "the renamed file lacks bytes";
}

// A large file replaced as rsync and editors replace one (a new file renamed over it, here by
// another mount) while a descriptor of it is read: the descriptor reads the file it opened to
// its end, never the new one, though its later reads go over other connections of the gateway.
TEST_F(DataPath, AFileReplacedWhileItIsReadIsReadToItsEndAsItWasOpened) {
  const std::string opened = random_bytes(48 * kMiB, 21), replacing = random_bytes(48 * kMiB, 22);
  ASSERT_TRUE(write_file(s(name()), opened));
  ASSERT_TRUE(write_file(s(name() + ".new"), replacing));
  read_while_replaced(m(name()), opened, [&] {
    ASSERT_EQ(::rename(m(name() + ".new", 1).c_str(), m(name(), 1).c_str()), 0);
  });
  EXPECT_TRUE(read_file(m(name())) == replacing);
}

// The same on the striped layout, whose file is a part on every server.
TEST_F(DataPath, AStripedFileReplacedWhileItIsReadIsReadToItsEndAsItWasOpened) {
  const std::string opened = random_bytes(24 * kMiB, 23), replacing = random_bytes(24 * kMiB, 24);
  const std::string dir = cluster_->mount(1) + "/striped/";
  ASSERT_TRUE(write_file(dir + name(), opened));
  ASSERT_TRUE(write_file(dir + name() + ".new", replacing));
  const std::string path = cluster_->mount(0) + "/striped/" + name();
  read_while_replaced(path, opened, [&] {
    ASSERT_EQ(::rename((dir + name() + ".new").c_str(), (dir + name()).c_str()), 0);
  });
  EXPECT_TRUE(read_file(path) == replacing);
}

// A file the gateway has just renamed into place (as a stage-out or `mv tmp ckpt` through a
// mount puts one), replaced on the server a moment later while it is read: the server's
// watcher reports both renames, and only the first is the gateway's own (its echo). The second
// is a replacement the descriptor must not follow.
TEST_F(DataPath, AFileReplacedOnTheServerJustAfterTheGatewayPutItThereIsReadAsOpened) {
  const std::string opened = random_bytes(48 * kMiB, 25), replacing = random_bytes(48 * kMiB, 26);
  ASSERT_TRUE(write_file(s(name() + ".v1"), opened));
  ASSERT_TRUE(write_file(s(name() + ".v2"), replacing));
  ASSERT_EQ(::rename(m(name() + ".v1").c_str(), m(name()).c_str()), 0);  // through the gateway
  read_while_replaced(m(name()), opened, [&] {
    // The other mount reads the file too, and sees the replacement once the watcher reported
    // it: the gateway has taken the report by then (it moves the path's epoch before it tells
    // mounts).
    ASSERT_TRUE(read_file(m(name(), 1)) == opened);
    ASSERT_EQ(::rename(s(name() + ".v2").c_str(), s(name()).c_str()), 0);  // on the server
    bool seen = false;
    for (int i = 0;
         i < 100 && !(seen = read_file(m(name(), 1)).substr(0, 64) == replacing.substr(0, 64)); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(seen) << "the other mount never saw the replacement";
  });
}

// A file removed through another mount while it is written: its writer's descriptor keeps the
// file as written (as on a local disk), its size too, so that the kernel neither drops the
// pages written nor cuts reads short.
TEST_F(DataPath, AFileRemovedElsewhereWhileItIsWrittenKeepsItsSizeForItsWriter) {
  const std::string data = random_bytes(3 * kMiB + 17, 27);
  int fd = ::open(m(name()).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
  ASSERT_EQ(::unlink(m(name(), 1).c_str()), 0) << strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0) << strerror(errno);
  EXPECT_EQ(st.st_size, static_cast<off_t>(data.size()));
  std::string back(data.size(), '\0');
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  EXPECT_EQ(::pread(fd, back.data(), back.size(), 0), static_cast<ssize_t>(data.size()));
  EXPECT_TRUE(back == data) << "the writer read back other bytes";
  EXPECT_EQ(::close(fd), 0);
  EXPECT_NE(::access(s(name()).c_str(), F_OK), 0) << "the file is back on the server";
}

// Reads `path` (holding `opened`) a MiB at a time through one descriptor, calling `replace` (which
// puts another file at the path) after the first MiB: the descriptor reads `opened` to its end.
void DataPath::read_while_replaced(const std::string& path, const std::string& opened,
                                   const std::function<void()>& replace) {
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(opened.size(), '\0');
  ASSERT_EQ(::pread(fd, got.data(), kMiB, 0), static_cast<ssize_t>(kMiB));
  replace();
  for (size_t at = kMiB; at < got.size(); at += kMiB)
    ASSERT_EQ(::pread(fd, got.data() + at, kMiB, static_cast<off_t>(at)),
              static_cast<ssize_t>(kMiB))
        << at;
  EXPECT_EQ(::close(fd), 0);
  size_t first_wrong = 0;
  while (first_wrong < got.size() && got[first_wrong] == opened[first_wrong]) ++first_wrong;
  EXPECT_EQ(first_wrong, got.size()) << "the descriptor read another file from this offset on";
}

TEST_F(DataPath, AppendsFromOneDescriptorLandInOrder) {
  int fd = ::open(m(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  std::string model;
  for (int i = 0; i < 2000; ++i) {
    std::string line =
        "record " + std::to_string(i) + std::string(static_cast<size_t>(i % 97), '.') + "\n";
    ASSERT_EQ(::write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    model += line;
  }
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(s(name())) == model);
}

TEST_F(DataPath, SmallWritesAreAllThere) {
  std::string model = random_bytes(3 * kMiB + 99, 14);
  int fd = ::open(m(name()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t off = 0; off < model.size(); off += 4096) {
    size_t len = std::min<size_t>(4096, model.size() - off);
    ASSERT_EQ(::write(fd, model.data() + off, len), static_cast<ssize_t>(len));
  }
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(s(name())) == model);
}

// ---- read-ahead ----

TEST_F(DataPath, SequentialReadsReturnTheServersBytes) {
  std::string data = random_bytes(48 * kMiB + 12345, 21);
  ASSERT_TRUE(write_file(s(name()), data));
  drop_page_cache();
  for (size_t buf : {static_cast<size_t>(4096), static_cast<size_t>(100000), kMiB, 3 * kMiB + 1}) {
    SCOPED_TRACE("buffer " + std::to_string(buf));
    drop_page_cache();
    int fd = ::open(m(name()).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    std::string got, chunk(buf, '\0');
    ssize_t n;
    while ((n = ::read(fd, chunk.data(), buf)) > 0)
      got.append(chunk.data(), static_cast<size_t>(n));
    ASSERT_EQ(n, 0) << strerror(errno);
    ::close(fd);
    EXPECT_TRUE(got == data) << "got " << got.size() << " bytes of " << data.size();
  }
}

TEST_F(DataPath, RandomAndMixedReadsReturnTheServersBytes) {
  std::string data = random_bytes(40 * kMiB + 3, 22);
  ASSERT_TRUE(write_file(s(name()), data));
  drop_page_cache();
  int fd = ::open(m(name()).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(9);
  size_t pos = 0;
  for (int op = 0; op < 400; ++op) {
    size_t off, len;
    if (rng() % 3 == 0) {  // a random jump
      off = rng() % (data.size() + kMiB);
      len = 1 + rng() % (2 * kMiB);
    } else {  // carry on from where we were, in varied sizes
      off = pos;
      len = 1 + rng() % (512 * 1024);
    }
    std::string want = off < data.size() ? data.substr(off, len) : "";
    ASSERT_TRUE(pread_all(fd, len, static_cast<off_t>(off)) == want)
        << "op " << op << " at " << off;
    pos = std::min(off + len, data.size());
    if (op % 50 == 0) drop_page_cache();
  }
  ::close(fd);
}

// Close-to-open, and nothing else: the small namespace's gateway neither watches its server
// (remote_watch = false) nor revalidates within the test, the file keeps its size, nothing drops
// the page cache and the open follows the change at once. What is left to tell the mount is the
// file's attributes at open: pages kept from the last open are dropped because the mtime moved
// (SFTP carries whole seconds, so the change moves it by a minute), and read-ahead of the old
// contents is never served.
TEST_F(DataPath, ServerSideChangeBetweenOpensIsSeen) {
  ASSERT_TRUE(watch_healthy(small_mount_->path()))
      << "in safe mode every open drops the pages: the test would show nothing";
  const std::string server = small_dir() + "/" + name();
  const time_t then = ::time(nullptr) - 3600;
  std::string first = random_bytes(2 * kMiB, 23);
  ASSERT_TRUE(write_file(server, first));
  ASSERT_TRUE(set_mtime(server, then));
  EXPECT_TRUE(read_file(small(name())) == first);
  std::string second = random_bytes(2 * kMiB, 24);
  ASSERT_TRUE(write_file(server, second));
  ASSERT_TRUE(set_mtime(server, then + 60));
  EXPECT_TRUE(read_file(small(name())) == second) << "the next open must see the server's change";
  ::unlink(server.c_str());
}

TEST_F(DataPath, TwoMountsReadingOneFileAtOnceBothGetIt) {
  std::string data = random_bytes(64 * kMiB + 5, 25);
  ASSERT_TRUE(write_file(s(name()), data));
  for (int round = 0; round < 2; ++round) {
    drop_page_cache();
    std::string a, b;
    std::thread first([&] { a = read_file(m(name(), 0)); });
    std::thread second([&] { b = read_file(m(name(), 1)); });
    first.join();
    second.join();
    EXPECT_TRUE(a == data) << "mount 0 read " << a.size() << " bytes";
    EXPECT_TRUE(b == data) << "mount 1 read " << b.size() << " bytes";
  }
}

TEST_F(DataPath, ReadersOnOneMountAtOnceAllGetIt) {
  std::string data = random_bytes(32 * kMiB + 1, 26);
  ASSERT_TRUE(write_file(s(name()), data));
  drop_page_cache();
  std::vector<std::string> got(4);
  std::vector<std::thread> readers;
  for (size_t i = 0; i < got.size(); ++i) {
    readers.emplace_back([&, i] {
      int fd = ::open(m(name()).c_str(), O_RDONLY | O_DIRECT);  // each its own stream of reads
      if (fd < 0) return;
      got[i] = pread_all(fd, data.size() + 100, 0);
      ::close(fd);
    });
  }
  for (auto& t : readers) t.join();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == data) << "reader " << i;
}

}  // namespace
}  // namespace skein::test
