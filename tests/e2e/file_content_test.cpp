// File contents through the mount, compared byte for byte with what was written and with the
// server's copy, at many sizes (up to 256 MiB) and at unaligned offsets.
#include <sys/mman.h>
#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

class FileContent : public ClusterSuite<1, 1> {
 protected:
  std::string m(const std::string& rel) { return cluster_->mount() + "/srv0/" + rel; }
  std::string s(const std::string& rel) { return cluster_->export_dir(0) + "/" + rel; }
};

TEST_F(FileContent, WholeFilesRoundTripAtManySizes) {
  const size_t sizes[] = {0,
                          1,
                          4095,
                          4096,
                          4097,
                          65536,
                          261119,
                          261120,
                          261121,
                          1 << 20,
                          (1 << 20) + 1,
                          3 * (1 << 20) + 12345,
                          17 * (1 << 20) + 7};
  uint64_t seed = 1;
  for (size_t n : sizes) {
    SCOPED_TRACE("size " + std::to_string(n));
    std::string data = random_bytes(n, seed++);
    std::string name = "size-" + std::to_string(n);
    ASSERT_TRUE(write_file(m(name), data));
    EXPECT_TRUE(read_file(m(name)) == data) << "mount read differs";
    EXPECT_TRUE(read_file(s(name)) == data) << "server copy differs";
    // And the other way: written on the server, read through the mount.
    std::string back = random_bytes(n, seed++);
    ASSERT_TRUE(write_file(s(name + "-srv"), back));
    EXPECT_TRUE(read_file(m(name + "-srv")) == back) << "server-written file differs";
  }
}

TEST_F(FileContent, PreadPwriteAtUnalignedOffsets) {
  const size_t size = 5 * (1 << 20) + 333;
  std::string model = random_bytes(size, 42);
  ASSERT_TRUE(write_file(m("offsets"), model));
  int fd = ::open(m("offsets").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    size_t off = rng() % (size + 4096);
    size_t len = 1 + rng() % (3 << 20);
    if (i % 2 == 0) {
      std::string chunk = random_bytes(len, rng());
      ASSERT_EQ(::pwrite(fd, chunk.data(), len, static_cast<off_t>(off)), static_cast<ssize_t>(len))
          << strerror(errno);
      if (model.size() < off + len) model.resize(off + len, '\0');
      model.replace(off, len, chunk);
    } else {
      std::string buf(len, '\0');
      ssize_t got = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
      ASSERT_GE(got, 0) << strerror(errno);
      size_t expect = off >= model.size() ? 0 : std::min(len, model.size() - off);
      ASSERT_EQ(static_cast<size_t>(got), expect) << "at offset " << off;
      ASSERT_TRUE(buf.compare(0, expect, model, off, expect) == 0)
          << "read at " << off << " differs";
    }
  }
  ASSERT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(s("offsets")) == model);
}

// A shared writable mapping: the pages the kernel writes back (through whichever open file of the
// file it picks) are on the server when msync returns, and those changed after it when munmap
// and close return.
TEST_F(FileContent, ASharedMappingsPagesAreOnTheServerAfterMsyncAndMunmap) {
  const size_t size = 3 * (1 << 20) + 100;
  std::string model = random_bytes(size, 9);
  ASSERT_TRUE(write_file(m("mapped"), model));
  const int fd = ::open(m("mapped").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << strerror(errno);
  const int other = ::open(m("mapped").c_str(), O_WRONLY);  // another writer of the file
  ASSERT_GE(other, 0) << strerror(errno);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED) << strerror(errno);
  char* bytes = static_cast<char*>(p);
  std::mt19937_64 rng(3);
  auto change = [&] {
    for (int i = 0; i < 200; ++i) {
      const size_t off = rng() % size;
      const char v = static_cast<char>(rng());
      bytes[off] = v;
      model[off] = v;
    }
  };
  change();
  ASSERT_EQ(::msync(p, size, MS_SYNC), 0) << strerror(errno);
  EXPECT_TRUE(read_file(s("mapped")) == model) << "the server's copy differs after msync";
  change();
  ASSERT_EQ(::munmap(p, size), 0);
  EXPECT_EQ(::close(other), 0);
  EXPECT_EQ(::close(fd), 0);
  EXPECT_TRUE(read_file(s("mapped")) == model) << "the server's copy differs after munmap";
}

// A write, and a second later a store into a shared mapping of the file, written back when the
// file is closed: the file's attributes after the close are the server's, not those the write
// brought back before the mapping's write (an mtime a second older, which make and rsync would
// take for an unchanged file).
TEST_F(FileContent, AMappingsWriteBackAtCloseLeavesNoOlderMtimeCached) {
  const int fd = ::open(m("mapped-mtime").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  const std::string data(4096, 'a');
  ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // SFTP's mtime is in seconds
  void* p = ::mmap(nullptr, data.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(p, MAP_FAILED) << strerror(errno);
  static_cast<char*>(p)[0] = 'b';
  ASSERT_EQ(::munmap(p, data.size()), 0);
  ASSERT_EQ(::close(fd), 0);  // writes the page back, then flushes
  struct stat mounted {
  }, server{};
  ASSERT_EQ(::stat(m("mapped-mtime").c_str(), &mounted), 0);
  ASSERT_EQ(::stat(s("mapped-mtime").c_str(), &server), 0);
  EXPECT_EQ(read_file(s("mapped-mtime"))[0], 'b') << "the mapping's store is not on the server";
  EXPECT_EQ(mounted.st_mtime, server.st_mtime) << "the mount holds an older mtime as current";
  EXPECT_EQ(mounted.st_size, server.st_size);
}

TEST_F(FileContent, QuarterGigabyteFileRoundTrips) {
  // 256 MiB written in 1 MiB pieces of a pattern that differs in every piece, read back whole.
  const size_t piece = 1 << 20, count = 256;
  std::string base = random_bytes(piece, 99);
  auto piece_of = [&](size_t i) {
    std::string p = base;
    memcpy(p.data(), &i, sizeof i);
    memcpy(p.data() + piece - sizeof i, &i, sizeof i);
    return p;
  };
  int fd = ::open(m("big").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t i = 0; i < count; ++i) {
    auto p = piece_of(i);
    ASSERT_EQ(::write(fd, p.data(), p.size()), static_cast<ssize_t>(p.size())) << "piece " << i;
  }
  ASSERT_EQ(::close(fd), 0);
  struct stat st;
  ASSERT_EQ(::stat(s("big").c_str(), &st), 0);
  ASSERT_EQ(static_cast<size_t>(st.st_size), piece * count);

  fd = ::open(m("big").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string buf(piece, '\0');
  for (size_t i = 0; i < count; ++i) {
    size_t got = 0;
    while (got < piece) {
      ssize_t n = ::read(fd, buf.data() + got, piece - got);
      ASSERT_GT(n, 0) << "piece " << i;
      got += static_cast<size_t>(n);
    }
    ASSERT_TRUE(buf == piece_of(i)) << "piece " << i << " differs";
  }
  EXPECT_EQ(::read(fd, buf.data(), 1), 0);
  ::close(fd);
  ::unlink(m("big").c_str());
}

}  // namespace
}  // namespace skein::test
