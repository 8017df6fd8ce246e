// Randomised file I/O through a real mount, compared byte for byte with the same operations on a
// local model file: writes and reads at random offsets and sizes (across stripe boundaries and
// past the end, making holes), truncation up and down, appends, concurrent writers to disjoint
// ranges. Every test runs twice: on a single-backend mount (/srv0) and on the striped mount
// (/striped: 1 MiB stripes over all three servers), whose parts are checked on the servers
// against the on-disk format of docs/striping.md.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <vector>

#include "fs_test_support.hpp"
#include "gateway_client.hpp"
#include "grpc_test_support.hpp"

namespace skein::test {
namespace {

constexpr int kServers = 3;
constexpr uint64_t kStripe = 1 << 20;  // skein-local's stripe_size

struct Place {
  std::string name;   // for test names
  std::string mount;  // directory below the mount root
  bool striped;
};
void PrintTo(const Place& p, std::ostream* os) { *os << p.name; }

class RandomIo : public ::testing::TestWithParam<Place> {
 protected:
  // One cluster for every test and both places; the suite name of a parameterised test holds a
  // '/', so it cannot name the cluster's directory.
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = LocalCluster::start("random-io", {.servers = kServers, .mounts = 1}, error);
    if (!cluster_) start_error_ = error;
  }
  static void TearDownTestSuite() { cluster_.reset(); }

  void SetUp() override {
    ASSERT_TRUE(cluster_) << "cluster did not start:\n" << start_error_;
    rel_dir_ =
        GetParam().name + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(rel_dir_.begin(), rel_dir_.end(), '/', '-');
    dir_ = cluster_->mount() + "/" + GetParam().mount + "/" + rel_dir_;
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0) << dir_ << ": " << strerror(errno);
    model_dir_ = make_test_dir("random-io-model");
    ASSERT_FALSE(model_dir_.empty());
  }
  void TearDown() override {
    if (!model_dir_.empty()) run_command("rm -rf '" + model_dir_ + "'");
  }

  std::string m(const std::string& name) const { return dir_ + "/" + name; }
  // The mount's gateway client of the default namespace, for talking to the gateway directly.
  std::unique_ptr<client::GatewayClient> gateway_client() const {
    client::GatewayOptions opts;
    opts.ns = "default";
    opts.token = read_token(cluster_->token_file());
    std::string tls_error;
    auto channel = client::GatewayClient::connect(cluster_->env("SKEIN_GATEWAY"),
                                                  cluster_tls(*cluster_), tls_error);
    EXPECT_TRUE(channel) << tls_error;
    return channel ? std::make_unique<client::GatewayClient>(channel, opts) : nullptr;
  }

  // What the gateway's health says: as many backends up as it has.
  static bool all_backends_up() {
    std::string out;
    if (run_command(cluster_->admin_env() + build_dir() + "/client/skeinctl --gateway " +
                        cluster_->env("SKEIN_GATEWAY") + " --json health 2>/dev/null",
                    &out) != 0)
      return false;
    auto health = nlohmann::json::parse(out, nullptr, false);
    return !health.is_discarded() && health.contains("backends_up") &&
           health["backends_up"] == health["backends_total"];
  }
  std::string model(const std::string& name) const { return model_dir_ + "/" + name; }
  // The servers' exports that hold (a part of) every file of this place.
  std::vector<std::string> exports() const {
    std::vector<std::string> out;
    for (int i = 0; i < (GetParam().striped ? kServers : 1); ++i)
      out.push_back((GetParam().striped ? cluster_->stripe_dir(i) : cluster_->export_dir(i)) + "/" +
                    rel_dir_);
    return out;
  }
  // The file's contents as the servers hold them: the file itself, or the striped file put back
  // together from its parts by the format of docs/striping.md, written out here independently of
  // the gateway's code: backend b holds stripes b, b+W, b+2W... back to back.
  std::string server_view(const std::string& name) const {
    auto ex = exports();
    if (!GetParam().striped) return read_file(ex[0] + "/" + name);
    const uint64_t w = ex.size();
    std::vector<std::string> parts;
    uint64_t size = 0;
    for (uint64_t b = 0; b < w; ++b) {
      struct stat st;
      std::string p = ex[b] + "/" + name;
      parts.push_back(::stat(p.c_str(), &st) == 0 ? read_file(p) : std::string());
      uint64_t n = parts.back().size();
      if (n == 0) continue;
      uint64_t k = ((n - 1) / kStripe) * w + b;  // the logical stripe of its last byte
      size = std::max(size, k * kStripe + (n - 1) % kStripe + 1);
    }
    std::string out(size, '\0');
    for (uint64_t k = 0; k * kStripe < size; ++k) {
      const std::string& part = parts[k % w];
      uint64_t local = (k / w) * kStripe;
      if (local >= part.size()) continue;
      uint64_t n = std::min({kStripe, part.size() - local, size - k * kStripe});
      std::memcpy(out.data() + k * kStripe, part.data() + local, n);
    }
    return out;
  }
  // Drops the kernel's cached pages of `fd`, so that the next reads reach the gateway.
  static void drop_cache(int fd) {
    ::fsync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  std::set<std::string> list(const std::string& path) const {
    std::multiset<std::string> seen;
    DIR* d = opendir(path.c_str());
    if (!d) return {"<opendir failed>"};
    while (auto* e = readdir(d)) seen.insert(e->d_name);
    closedir(d);
    std::set<std::string> names(seen.begin(), seen.end());
    for (auto& n : names)
      if (seen.count(n) != 1) names.insert("<" + n + " listed more than once>");
    return names;
  }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::string start_error_;
  std::string rel_dir_, dir_, model_dir_;
};

// A random offset that often sits on or next to a stripe boundary.
uint64_t random_offset(std::mt19937_64& rng, uint64_t limit) {
  if (rng() % 3 == 0) {
    uint64_t k = rng() % (limit / kStripe + 1);
    int64_t off = static_cast<int64_t>(k * kStripe) + static_cast<int64_t>(rng() % 33) - 16;
    return static_cast<uint64_t>(std::max<int64_t>(0, off));
  }
  return rng() % limit;
}

uint64_t random_length(std::mt19937_64& rng) {
  switch (rng() % 5) {
    case 0:
    case 1:
      return 1 + rng() % 8192;
    case 2:
    case 3:
      return 1 + rng() % (300 << 10);
    default:
      return 1 + rng() % (5 * kStripe / 2);  // up to 2.5 stripes: touches every backend
  }
}

TEST_P(RandomIo, RandomReadsWritesAndTruncatesMatchALocalFile) {
  int fd = ::open(m("random").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  int mfd = ::open(model("random").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(mfd, 0);
  std::mt19937_64 rng(20240501);
  const uint64_t limit = 9 * kStripe;  // three full rounds of three backends
  for (int op = 0; op < 160; ++op) {
    struct stat mst;
    ASSERT_EQ(::fstat(mfd, &mst), 0);
    uint64_t size = static_cast<uint64_t>(mst.st_size);
    int kind = static_cast<int>(rng() % 10);
    SCOPED_TRACE("op " + std::to_string(op) + " kind " + std::to_string(kind) + ", size " +
                 std::to_string(size));
    if (kind < 5) {  // write, anywhere up to a little past the end (a hole before it)
      uint64_t off = random_offset(rng, std::max(size, static_cast<uint64_t>(1)) + 2 * kStripe);
      std::string data = random_bytes(random_length(rng), rng());
      ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off)),
                static_cast<ssize_t>(data.size()))
          << "pwrite at " << off << ": " << strerror(errno);
      ASSERT_EQ(::pwrite(mfd, data.data(), data.size(), static_cast<off_t>(off)),
                static_cast<ssize_t>(data.size()));
    } else if (kind < 8) {  // read, also across and past the end
      if (rng() % 3 == 0) drop_cache(fd);
      uint64_t off = random_offset(rng, size + kStripe);
      uint64_t len = random_length(rng);
      std::string got(len, '\1'), want(len, '\2');
      ssize_t n = ::pread(fd, got.data(), len, static_cast<off_t>(off));
      ssize_t mn = ::pread(mfd, want.data(), len, static_cast<off_t>(off));
      ASSERT_EQ(n, mn) << "pread of " << len << " at " << off << ": " << strerror(errno);
      got.resize(static_cast<size_t>(std::max<ssize_t>(n, 0)));
      want.resize(static_cast<size_t>(std::max<ssize_t>(mn, 0)));
      ASSERT_TRUE(got == want) << "pread of " << len << " at " << off << " differs";
    } else if (kind == 8) {  // truncate, up or down, through the handle or by path
      uint64_t to = rng() % 2 ? random_offset(rng, size + 1) : random_offset(rng, limit);
      if (rng() % 2)
        ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(to)), 0)
            << "ftruncate to " << to << ": " << strerror(errno);
      else
        ASSERT_EQ(::truncate(m("random").c_str(), static_cast<off_t>(to)), 0)
            << "truncate to " << to << ": " << strerror(errno);
      ASSERT_EQ(::ftruncate(mfd, static_cast<off_t>(to)), 0);
    } else {  // the size, through the handle and by path
      struct stat st;
      ASSERT_EQ(::fstat(fd, &st), 0);
      ASSERT_EQ(static_cast<uint64_t>(st.st_size), size);
      ASSERT_EQ(::stat(m("random").c_str(), &st), 0);
      ASSERT_EQ(static_cast<uint64_t>(st.st_size), size);
    }
  }
  ASSERT_EQ(::close(fd), 0);
  std::string want = read_file(model("random"));
  ::close(mfd);
  EXPECT_TRUE(read_file(m("random")) == want) << "the mount's whole file differs";
  EXPECT_TRUE(server_view("random") == want) << "the servers' copy differs";
}

// Small I/O as applications do it: 4 KiB reads and writes at random offsets (most aligned, some
// not), then reads that are strided, backwards, two interleaved streams and re-reads, each
// compared with the model; after fsync, before close, the servers' copy is the model's.
TEST_P(RandomIo, SmallReadsAndWritesInEveryPatternMatchALocalFile) {
  const uint64_t size = 8 * kStripe;
  const std::string initial = random_bytes(size, 77);
  ASSERT_TRUE(write_file(m("small"), initial));
  ASSERT_TRUE(write_file(model("small"), initial));
  int fd = ::open(m("small").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << strerror(errno);
  int mfd = ::open(model("small").c_str(), O_RDWR);
  ASSERT_GE(mfd, 0);
  auto same_read = [&](uint64_t off, uint64_t len) {
    std::string got(len, '\1'), want(len, '\2');
    ssize_t n = ::pread(fd, got.data(), len, static_cast<off_t>(off));
    ssize_t mn = ::pread(mfd, want.data(), len, static_cast<off_t>(off));
    if (n != mn) return ::testing::AssertionFailure() << "pread of " << len << " at " << off;
    if (got != want) return ::testing::AssertionFailure() << "bytes at " << off << " differ";
    return ::testing::AssertionSuccess();
  };
  std::mt19937_64 rng(19);
  for (int op = 0; op < 900; ++op) {
    const uint64_t off = rng() % 3 ? rng() % (size / 4096) * 4096 : rng() % (size - 4096);
    if (op % 3 == 0) {
      std::string data = random_bytes(4096, rng());
      ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off)), 4096)
          << strerror(errno);
      ASSERT_EQ(::pwrite(mfd, data.data(), data.size(), static_cast<off_t>(off)), 4096);
    } else {
      ASSERT_TRUE(same_read(off, 4096)) << "op " << op;
    }
    if (op % 150 == 149) drop_cache(fd);
  }
  ASSERT_EQ(::fsync(fd), 0) << strerror(errno);
  const std::string want = read_file(model("small"));
  EXPECT_TRUE(server_view("small") == want) << "the servers' copy differs after fsync";

  drop_cache(fd);
  for (uint64_t off = 0; off + 4096 <= size; off += 64 << 10)  // strided
    ASSERT_TRUE(same_read(off, 4096));
  drop_cache(fd);
  for (uint64_t off = size - 4096; off >= 4096 * 7; off -= 4096 * 7)  // backwards
    ASSERT_TRUE(same_read(off, 4096));
  drop_cache(fd);
  for (uint64_t i = 0; i < 300; ++i) {  // two interleaved streams
    ASSERT_TRUE(same_read(i * 4096, 4096)) << i;
    ASSERT_TRUE(same_read(size / 2 + i * 4096 + 100, 4096)) << i;
  }
  for (int i = 0; i < 50; ++i) {  // re-reads, some from the gateway again
    if (i % 10 == 0) drop_cache(fd);
    ASSERT_TRUE(same_read(3 * kStripe + 5000, 4096)) << i;
  }
  ASSERT_EQ(::close(fd), 0);
  ::close(mfd);
  EXPECT_TRUE(read_file(m("small")) == want) << "the mount's whole file differs";
}

TEST_P(RandomIo, WritesPastTheEndLeaveHolesThatReadAsZeros) {
  // Only the last stripe is written: the backends before it hold nothing of the file.
  const uint64_t off = 4 * kStripe + 12345;
  std::string data = random_bytes(1000, 5);
  int fd = ::open(m("holes").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off)),
            static_cast<ssize_t>(data.size()));
  drop_cache(fd);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), off + data.size());
  // Read from the very start, across the holes: zeros, then the data, then end of file.
  std::string got(off + data.size() + 4096, '\1');
  size_t done = 0;
  while (done < got.size()) {
    ssize_t n = ::pread(fd, got.data() + done, got.size() - done, static_cast<off_t>(done));
    ASSERT_GE(n, 0) << strerror(errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ASSERT_EQ(done, off + data.size());
  got.resize(done);
  EXPECT_TRUE(got == std::string(off, '\0') + data);
  // A read wholly inside a hole, on a backend that holds nothing of the file.
  std::string hole(100, '\1');
  ASSERT_EQ(::pread(fd, hole.data(), hole.size(), static_cast<off_t>(kStripe + 10)), 100);
  EXPECT_EQ(hole, std::string(100, '\0'));
  ::close(fd);
  EXPECT_EQ(::stat(m("holes").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), off + data.size());
  EXPECT_TRUE(server_view("holes") == std::string(off, '\0') + data);
}

TEST_P(RandomIo, ConcurrentWritersToDisjointRangesAllLand) {
  // Four threads, each with its own descriptor, write their own range in random pieces at once.
  // The ranges are not stripe-aligned, so neighbouring writers share stripes and backends.
  constexpr int kWriters = 4;
  const uint64_t range = 2 * kStripe + 77777;
  std::string want = random_bytes(kWriters * range, 77);
  ASSERT_TRUE(write_file(m("concurrent"), ""));
  std::vector<std::thread> writers;
  std::vector<std::string> errors(kWriters);
  for (int t = 0; t < kWriters; ++t) {
    writers.emplace_back([&, t] {
      int fd = ::open(m("concurrent").c_str(), O_WRONLY);
      if (fd < 0) {
        errors[t] = "open: " + std::string(strerror(errno));
        return;
      }
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      // Random piece order within the range, so writers also extend the file out of order.
      std::vector<std::pair<uint64_t, uint64_t>> pieces;
      for (uint64_t pos = 0; pos < range;) {
        uint64_t len = std::min<uint64_t>(1 + rng() % (700 << 10), range - pos);
        pieces.push_back({t * range + pos, len});
        pos += len;
      }
      std::shuffle(pieces.begin(), pieces.end(), rng);
      for (auto [off, len] : pieces) {
        if (::pwrite(fd, want.data() + off, len, static_cast<off_t>(off)) !=
            static_cast<ssize_t>(len)) {
          errors[t] = "pwrite at " + std::to_string(off) + ": " + strerror(errno);
          break;
        }
      }
      if (::close(fd) != 0 && errors[t].empty())
        errors[t] = "close: " + std::string(strerror(errno));
    });
  }
  for (auto& w : writers) w.join();
  for (int t = 0; t < kWriters; ++t) EXPECT_EQ(errors[t], "") << "writer " << t;
  struct stat st;
  ASSERT_EQ(::stat(m("concurrent").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), want.size());
  EXPECT_TRUE(read_file(m("concurrent")) == want) << "the mount's file differs";
  EXPECT_TRUE(server_view("concurrent") == want) << "the servers' copy differs";
}

TEST_P(RandomIo, ConcurrentRequestsOnOneGatewayHandleAllLand) {
  // The kernel serialises writes to one file, so talk to the gateway directly: many writes and
  // then many reads of one open file at once, unaligned, each touching one to three backends.
  auto client = gateway_client();
  ASSERT_TRUE(client);
  client::GatewayClient& gw = *client;
  const std::string path = "/" + GetParam().mount + "/" + rel_dir_ + "/shared";
  auto opened = gw.create(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(opened) << strerror(opened.error());
  const client::FileRef ref{path, opened->handle, O_RDWR};
  constexpr int kThreads = 6;
  const uint64_t range = kStripe + 333333;
  std::string want = random_bytes(kThreads * range, 78);
  std::vector<std::string> errors(kThreads);
  auto run = [&](auto body) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(body, t);
    for (auto& t : threads) t.join();
  };
  run([&](int t) {
    std::mt19937_64 rng(static_cast<uint64_t>(t) + 100);
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
    for (uint64_t pos = 0; pos < range;) {
      uint64_t len = std::min<uint64_t>(1 + rng() % kStripe, range - pos);  // at most 1 MiB
      pieces.push_back({t * range + pos, len});
      pos += len;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    for (auto [off, len] : pieces) {
      auto w = gw.write(ref, off, std::string_view(want).substr(off, len));
      if (!w || *w != len) {
        errors[t] = "write at " + std::to_string(off) + ": " + strerror(w ? EIO : w.error());
        return;
      }
    }
  });
  for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[t], "") << "writer " << t;
  run([&](int t) {
    std::mt19937_64 rng(static_cast<uint64_t>(t) + 200);
    for (int i = 0; i < 20; ++i) {
      uint64_t off = random_offset(rng, want.size() + 1000);
      uint32_t len = static_cast<uint32_t>(1 + rng() % kStripe);
      auto r = gw.read(ref, off, len);
      uint64_t expect = off >= want.size() ? 0 : std::min<uint64_t>(len, want.size() - off);
      if (!r) {
        errors[t] = "read at " + std::to_string(off) + ": " + strerror(r.error());
      } else if (r->size() != expect || r->compare(0, expect, want, off, expect) != 0) {
        errors[t] = "read of " + std::to_string(len) + " at " + std::to_string(off) + " differs";
      }
      if (!errors[t].empty()) return;
    }
  });
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "reader " << t;
  EXPECT_TRUE(gw.release(ref));
  auto attr = gw.getattr(path);
  ASSERT_TRUE(attr);
  EXPECT_EQ(attr->size, want.size());
  EXPECT_TRUE(server_view("shared") == want) << "the servers' copy differs";
}

TEST_P(RandomIo, AnUnlinkOnOneServerAnswersWithItsDirectoryAsItLeftIt) {
  // The kernel drops its copy of a directory's attributes after an unlink; the gateway's answer
  // carries them (an LSTAT behind the REMOVE), so the mount does not ask again. A striped file's
  // directory is on every server: no one server's attributes are its, and none come back.
  auto client = gateway_client();
  ASSERT_TRUE(client);
  client::GatewayClient& gw = *client;
  ASSERT_TRUE(write_file(m("doomed"), "x"));
  const std::string path = "/" + GetParam().mount + "/" + rel_dir_ + "/doomed";
  auto removed = gw.unlink(path);
  ASSERT_TRUE(removed) << strerror(removed.error());
  EXPECT_NE(::access(m("doomed").c_str(), F_OK), 0);
  if (GetParam().striped) {
    EXPECT_FALSE(*removed);
    return;
  }
  ASSERT_TRUE(*removed);
  struct stat dir;
  ASSERT_EQ(::stat(exports()[0].c_str(), &dir), 0);
  EXPECT_TRUE(S_ISDIR((*removed)->mode));
  EXPECT_EQ((*removed)->mtime_ns / 1000000000, static_cast<int64_t>(dir.st_mtime));
  EXPECT_EQ((*removed)->mode & 07777, dir.st_mode & 07777);
  EXPECT_EQ(gw.unlink(path).error(), ENOENT) << "and a second unlink fails as before";
}

TEST_P(RandomIo, AppendsLandAtTheEndAcrossStripes) {
  std::string want;
  int fd = ::open(m("append").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  std::mt19937_64 rng(9);
  while (want.size() < 3 * kStripe + 5000) {
    std::string piece = random_bytes(1 + rng() % (400 << 10), rng());
    ASSERT_EQ(::write(fd, piece.data(), piece.size()), static_cast<ssize_t>(piece.size()))
        << strerror(errno);
    want += piece;
  }
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(m("append")) == want);
  EXPECT_TRUE(server_view("append") == want);
}

TEST_P(RandomIo, StatListRenameAndUnlinkKeepWorking) {
  const uint64_t size = 3 * kStripe + 4242;  // a part on every backend, the last one partial
  std::string data = random_bytes(size, 31);
  ASSERT_TRUE(write_file(m("a"), data));
  struct stat st;
  ASSERT_EQ(::stat(m("a").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, size);
  // Listed once, with its logical size (readdirplus attributes come from the listing).
  EXPECT_EQ(list(dir_), (std::set<std::string>{".", "..", "a"}));
  // Every server that holds a part has the file at the same path.
  for (auto& ex : exports())
    EXPECT_EQ(::stat((ex + "/a").c_str(), &st), 0) << ex << " has no part of a";

  ASSERT_EQ(::rename(m("a").c_str(), m("b").c_str()), 0) << strerror(errno);
  EXPECT_EQ(list(dir_), (std::set<std::string>{".", "..", "b"}));
  EXPECT_TRUE(read_file(m("b")) == data);
  ASSERT_EQ(::stat(m("b").c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), size);
  for (auto& ex : exports()) {
    EXPECT_EQ(::stat((ex + "/b").c_str(), &st), 0) << ex << " has no part of b";
    EXPECT_NE(::stat((ex + "/a").c_str(), &st), 0) << ex << " still has a";
  }
  EXPECT_TRUE(server_view("b") == data);

  // Rename over an existing file replaces it, parts and all.
  std::string other = random_bytes(kStripe / 2, 32);
  ASSERT_TRUE(write_file(m("c"), other));
  ASSERT_EQ(::rename(m("c").c_str(), m("b").c_str()), 0) << strerror(errno);
  EXPECT_TRUE(read_file(m("b")) == other);
  EXPECT_TRUE(server_view("b") == other);

  // And into a new directory.
  ASSERT_EQ(::mkdir(m("sub").c_str(), 0755), 0);
  ASSERT_EQ(::rename(m("b").c_str(), m("sub/b").c_str()), 0) << strerror(errno);
  EXPECT_TRUE(read_file(m("sub/b")) == other);
  for (auto& ex : exports()) {
    EXPECT_EQ(::stat((ex + "/sub").c_str(), &st), 0) << ex << " has no directory sub";
    EXPECT_TRUE(S_ISDIR(st.st_mode));
  }

  ASSERT_EQ(::unlink(m("sub/b").c_str()), 0) << strerror(errno);
  EXPECT_EQ(SKEIN_ERRNO_OF(::stat(m("sub/b").c_str(), &st)), ENOENT);
  for (auto& ex : exports())
    EXPECT_NE(::stat((ex + "/sub/b").c_str(), &st), 0) << ex << " still has sub/b";
  ASSERT_EQ(::rmdir(m("sub").c_str()), 0) << strerror(errno);
  for (auto& ex : exports())
    EXPECT_NE(::stat((ex + "/sub").c_str(), &st), 0) << ex << " still has sub";
  EXPECT_EQ(list(dir_), (std::set<std::string>{".", ".."}));
}

TEST_P(RandomIo, ExclusiveCreateRefusesAnExistingName) {
  ASSERT_TRUE(write_file(m("x"), "first"));
  EXPECT_EQ(SKEIN_ERRNO_OF(::open(m("x").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644)), EEXIST);
  EXPECT_EQ(read_file(m("x")), "first");
}

// Last, as it takes a server away: a file that needs a stopped server fails with EIO at once (no
// hang), and works again, whole, once the server is back.
TEST_P(RandomIo, AStoppedServerGivesEioAtOnceAndTheFileComesBack) {
  std::string data = random_bytes(3 * kStripe + 99, 41);
  ASSERT_TRUE(write_file(m("down"), data));
  const int server = GetParam().striped ? 1 : 0;  // holds the second stripe / the whole file
  ASSERT_TRUE(cluster_->stop_server(server));
  auto t0 = std::chrono::steady_clock::now();
  int read_err = 0, write_err = 0;
  {
    int fd = ::open(m("down").c_str(), O_RDONLY);
    std::string buf(2 * kStripe, '\0');
    read_err = fd < 0 ? errno : (::pread(fd, buf.data(), buf.size(), 0) < 0 ? errno : 0);
    if (fd >= 0) ::close(fd);
    fd = ::open(m("down").c_str(), O_WRONLY);
    write_err =
        fd < 0 ? errno : (::pwrite(fd, "x", 1, static_cast<off_t>(kStripe + 5)) < 0 ? errno : 0);
    if (fd >= 0) ::close(fd);
  }
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(cluster_->start_server(server));
  EXPECT_EQ(read_err, EIO);
  EXPECT_EQ(write_err, EIO);
  EXPECT_LT(took, std::chrono::seconds(5));
  // The backend reconnects in the background, with backoff.
  std::string back;
  for (int i = 0; i < 100 && back != data; ++i) {
    back = read_file(m("down"));
    if (back != data) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  EXPECT_TRUE(back == data) << "the file did not come back whole";
  // Every backend on that server reconnects on its own, with backoff (srv0 and stripe0 both live
  // on server 0): the next test, in the other place, needs all of them back.
  bool all_up = false;
  for (int i = 0; i < 100 && !(all_up = all_backends_up()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(all_up) << "not every backend came back";
}

INSTANTIATE_TEST_SUITE_P(Places, RandomIo,
                         ::testing::Values(Place{"single", "srv0", false},
                                           Place{"striped", "striped", true}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace skein::test
