// CallerBuffers: the mount's mappings of its control-socket callers' buffers, kept between
// commands. Real memfds; what is kept, found again, refused and dropped.
#include "caller_buffer.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace skein::client {
namespace {

// A memfd of `size` bytes, sealed against shrinking unless told otherwise.
struct Memfd {
  explicit Memfd(std::size_t size, unsigned seals = F_SEAL_SHRINK) {
    fd = ::memfd_create("caller-buffer-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    if (seals) {
      EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, seals), 0);
    }
  }
  ~Memfd() { ::close(fd); }
  // Another descriptor of the same buffer, as each command's SCM_RIGHTS brings one.
  int passed() const { return ::fcntl(fd, F_DUPFD_CLOEXEC, 0); }
  int fd = -1;
};

TEST(CallerBuffers, EveryCommandWithTheSameBufferUsesOneMapping) {
  CallerBuffers buffers;
  Memfd buf(1 << 20);
  const int first = buf.passed(), second = buf.passed();
  CallerBuffer a, b;
  ASSERT_EQ(buffers.map("fill", first, 4096, 8192, true, 0, a), "");
  ::close(first);  // the command's descriptor is closed after it; the mapping stays
  ASSERT_EQ(buffers.map("fill", second, 65536, 100, false, 0, b), "");
  ::close(second);
  EXPECT_EQ(a.mapping, b.mapping);
  EXPECT_EQ(buffers.kept(), 1u);
  // The same memory as the caller's: written through the mapping, read with pread.
  std::memcpy(a.data, "written", 7);
  char got[8] = {};
  ASSERT_EQ(::pread(buf.fd, got, 7, 4096), 7);
  EXPECT_STREQ(got, "written");
  EXPECT_EQ(b.data, a.data + (65536 - 4096));
}

TEST(CallerBuffers, DifferentBuffersHaveDifferentMappings) {
  CallerBuffers buffers;
  Memfd one(8192), two(8192);
  ASSERT_EQ(::pwrite(one.fd, "one", 3, 0), 3);
  ASSERT_EQ(::pwrite(two.fd, "two", 3, 0), 3);
  CallerBuffer a, b;
  ASSERT_EQ(buffers.map("fill", one.fd, 0, 3, false, 0, a), "");
  ASSERT_EQ(buffers.map("fill", two.fd, 0, 3, false, 0, b), "");
  EXPECT_NE(a.mapping, b.mapping);
  EXPECT_EQ(std::string(a.data, 3), "one");
  EXPECT_EQ(std::string(b.data, 3), "two");
  EXPECT_EQ(buffers.kept(), 2u);
}

TEST(CallerBuffers, RefusesWhatCouldFaultOrWasNotPassed) {
  CallerBuffers buffers;
  CallerBuffer m;
  EXPECT_NE(buffers.map("fill", -1, 0, 1, false, 0, m).find("no buffer"), std::string::npos);
  Memfd unsealed(8192, 0);
  EXPECT_NE(buffers.map("fill", unsealed.fd, 0, 1, false, 0, m).find("F_SEAL_SHRINK"),
            std::string::npos);
  Memfd buf(8192);
  EXPECT_NE(buffers.map("fill", buf.fd, 8000, 193, false, 0, m).find("beyond the buffer's size"),
            std::string::npos);
  EXPECT_NE(buffers.map("fill", buf.fd, 9000, 0, false, 0, m).find("beyond the buffer's size"),
            std::string::npos);
  Memfd empty(0);
  EXPECT_NE(buffers.map("fill", empty.fd, 0, 0, false, 0, m).find("empty"), std::string::npos);
  EXPECT_EQ(buffers.kept(), 0u);
}

TEST(CallerBuffers, AReadOnlyDescriptorIsMappedForReadingOnly) {
  CallerBuffers buffers;
  Memfd buf(8192);
  const int ro = ::open(("/proc/self/fd/" + std::to_string(buf.fd)).c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(ro, 0);
  CallerBuffer m;
  EXPECT_NE(buffers.map("fetch-files", ro, 0, 10, true, 0, m).find("map the buffer"),
            std::string::npos);
  ASSERT_EQ(buffers.map("store-files", ro, 0, 10, false, 0, m), "");
  EXPECT_FALSE(m.mapping->writable);
  // A writable command with a read-write descriptor of the same buffer maps it anew, writable.
  CallerBuffer w;
  ASSERT_EQ(buffers.map("fetch-files", buf.fd, 0, 10, true, 0, w), "");
  EXPECT_TRUE(w.mapping->writable);
  EXPECT_NE(w.mapping, m.mapping);
  EXPECT_EQ(buffers.kept(), 2u);
  // The read-only open still cannot write through the writable mapping kept for the other.
  CallerBuffer again;
  EXPECT_NE(buffers.map("fetch-files", ro, 0, 10, true, 0, again).find("map the buffer"),
            std::string::npos);
  ASSERT_EQ(buffers.map("store-files", ro, 0, 10, false, 0, again), "");
  EXPECT_EQ(again.mapping, m.mapping);
  ::close(ro);
}

TEST(CallerBuffers, OnlyTheOpenFileThatWasMappedFindsItsMappingAgain) {
  CallerBuffers buffers;
  Memfd buf(8192);
  CallerBuffer mine;
  ASSERT_EQ(buffers.map("fill", buf.fd, 0, 10, true, 0, mine), "");
  // Another open of the same memfd (as another process could make through /proc), read-write
  // too: a mapping of its own, not the one kept for the first.
  const int other = ::open(("/proc/self/fd/" + std::to_string(buf.fd)).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(other, 0);
  CallerBuffer theirs;
  ASSERT_EQ(buffers.map("fill", other, 0, 10, true, 0, theirs), "");
  EXPECT_NE(theirs.mapping, mine.mapping);
  // A descriptor passed on from the first (SCM_RIGHTS gives the same open file) finds it.
  const int passed = buf.passed();
  CallerBuffer again;
  ASSERT_EQ(buffers.map("fill", passed, 0, 10, true, 0, again), "");
  EXPECT_EQ(again.mapping, mine.mapping);
  ::close(passed);
  ::close(other);
}

TEST(CallerBuffers, AMappingIsWritableOnlyOnceACommandWrites) {
  CallerBuffers buffers;
  Memfd buf(8192);
  CallerBuffer read, written;
  ASSERT_EQ(buffers.map("store-files", buf.fd, 0, 10, false, 0, read), "");
  EXPECT_FALSE(read.mapping->writable);
  ASSERT_EQ(buffers.map("fill", buf.fd, 0, 10, true, 0, written), "");
  EXPECT_TRUE(written.mapping->writable);
  EXPECT_NE(written.mapping, read.mapping);
  EXPECT_EQ(buffers.kept(), 1u);  // the read-only one replaced
  // Reads go through the writable one from now on.
  CallerBuffer again;
  ASSERT_EQ(buffers.map("store-files", buf.fd, 0, 10, false, 0, again), "");
  EXPECT_EQ(again.mapping, written.mapping);
}

TEST(CallerBuffers, ABufferSealedAgainstFutureWritesAfterItWasKeptIsNotWrittenAgain) {
  CallerBuffers buffers;
  Memfd buf(8192);
  CallerBuffer m;
  ASSERT_EQ(buffers.map("fill", buf.fd, 0, 10, true, 0, m), "");
  ASSERT_EQ(::fcntl(buf.fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0) << std::strerror(errno);
  CallerBuffer again;
  EXPECT_NE(buffers.map("fill", buf.fd, 0, 10, true, 0, again).find("map the buffer"),
            std::string::npos);
  ASSERT_EQ(buffers.map("store-files", buf.fd, 0, 10, false, 0, again), "");
}

TEST(CallerBuffers, ABufferLargerThanIsKeptIsMappedForEachCommandAsFarAsItNeeds) {
  CallerBuffers buffers;
  Memfd buf(CallerBuffers::kMaxKeptSize + 8192);  // sparse: no memory behind it
  CallerBuffer m;
  const uint64_t at = CallerBuffers::kMaxKeptSize + 100;
  ASSERT_EQ(buffers.map("fill", buf.fd, at, 10, true, 0, m), "");
  EXPECT_EQ(buffers.kept(), 0u);
  EXPECT_LE(m.mapping->size, 8192u);
  std::memcpy(m.data, "far", 3);
  char got[4] = {};
  ASSERT_EQ(::pread(buf.fd, got, 3, static_cast<off_t>(at)), 3);
  EXPECT_STREQ(got, "far");
}

TEST(CallerBuffers, ABufferSealedAgainstWritingIsMappedForReadingOnly) {
  CallerBuffers buffers;
  Memfd buf(8192, F_SEAL_SHRINK | F_SEAL_WRITE);
  CallerBuffer m;
  EXPECT_NE(buffers.map("fill", buf.fd, 0, 10, true, 0, m).find("map the buffer"),
            std::string::npos);
  ASSERT_EQ(buffers.map("store-files", buf.fd, 0, 10, false, 0, m), "");
  EXPECT_FALSE(m.mapping->writable);
  EXPECT_EQ(m.data[0], 0);
}

TEST(CallerBuffers, ABufferThatGrewIsMappedAnewToItsNewSize) {
  CallerBuffers buffers;
  Memfd buf(8192, F_SEAL_SHRINK);
  CallerBuffer small, large;
  ASSERT_EQ(buffers.map("fill", buf.fd, 0, 8192, true, 0, small), "");
  ASSERT_EQ(::ftruncate(buf.fd, 1 << 20), 0);
  ASSERT_EQ(buffers.map("fill", buf.fd, 500000, 4096, true, 0, large), "");
  EXPECT_NE(small.mapping, large.mapping);
  EXPECT_GE(large.mapping->size, 1u << 20);
  EXPECT_EQ(buffers.kept(), 1u);
  // The replaced mapping stays usable by the command that holds it.
  std::memcpy(small.data, "still", 5);
  EXPECT_EQ(std::string(large.data - 500000, 5), "still");
}

TEST(CallerBuffers, IdleMappingsAreDroppedAndHeldOnesStayUsable) {
  CallerBuffers buffers(std::chrono::milliseconds(100));
  Memfd buf(8192);
  CallerBuffer held;
  ASSERT_EQ(buffers.map("fill", buf.fd, 0, 8192, true, 0, held), "");
  EXPECT_EQ(buffers.kept(), 1u);
  for (int i = 0; i < 100 && buffers.kept() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(buffers.kept(), 0u);
  std::memcpy(held.data + 8000, "held", 4);  // still mapped while held
  char got[5] = {};
  ASSERT_EQ(::pread(buf.fd, got, 4, 8000), 4);
  EXPECT_STREQ(got, "held");
  // Used again, it is mapped again and kept again.
  CallerBuffer again;
  ASSERT_EQ(buffers.map("fill", buf.fd, 0, 8192, false, 0, again), "");
  EXPECT_EQ(buffers.kept(), 1u);
}

TEST(CallerBuffers, ABufferIsLetGoOfOnceTheProcessThatPassedItHasExited) {
  CallerBuffers buffers(std::chrono::minutes(1));
  Memfd gone_buf(8192), living_buf(8192);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // exited and reaped: its pid is free
  CallerBuffer gone, living;
  ASSERT_EQ(buffers.map("fill", gone_buf.fd, 0, 10, true, child, gone), "");
  ASSERT_EQ(buffers.map("fill", living_buf.fd, 0, 10, true, ::getpid(), living), "");
  EXPECT_EQ(buffers.kept(), 2u);
  for (int i = 0; i < 300 && buffers.kept() > 1; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(buffers.kept(), 1u);  // long before the minute unused
  CallerBuffer again;
  ASSERT_EQ(buffers.map("fill", living_buf.fd, 0, 10, true, ::getpid(), again), "");
  EXPECT_EQ(again.mapping, living.mapping);  // the living caller's is still kept
}

TEST(CallerBuffers, ACallerDoneWithItsBufferHasItForgotten) {
  CallerBuffers buffers;
  Memfd done(8192), other(8192);
  CallerBuffer a, b;
  ASSERT_EQ(buffers.map("fill", done.fd, 0, 10, true, 0, a), "");
  ASSERT_EQ(buffers.map("fill", other.fd, 0, 10, true, 0, b), "");
  // Only the open file that was mapped: another open of the same memfd forgets nothing.
  const int reopened =
      ::open(("/proc/self/fd/" + std::to_string(done.fd)).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(reopened, 0);
  EXPECT_EQ(buffers.forget(reopened), 0u);
  ::close(reopened);
  const int passed = done.passed();
  EXPECT_EQ(buffers.forget(passed), 1u);
  ::close(passed);
  EXPECT_EQ(buffers.kept(), 1u);
  EXPECT_EQ(buffers.forget(-1), 0u);
  std::memcpy(a.data, "held", 4);  // still mapped for the command that holds it
}

TEST(CallerBuffers, AtMostSoManyAreKeptTheLeastRecentlyUsedDropped) {
  CallerBuffers buffers;
  std::vector<std::unique_ptr<Memfd>> bufs;
  std::vector<std::shared_ptr<const CallerMapping>> mapped;
  for (std::size_t i = 0; i <= CallerBuffers::kMaxKept; ++i) {
    bufs.push_back(std::make_unique<Memfd>(4096));
    CallerBuffer m;
    ASSERT_EQ(buffers.map("fill", bufs.back()->fd, 0, 1, false, 0, m), "");
    mapped.push_back(m.mapping);
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    // The first is used again after the second: the second is then the least recently used.
    if (i == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      CallerBuffer again;
      ASSERT_EQ(buffers.map("fill", bufs[0]->fd, 0, 1, false, 0, again), "");
    }
  }
  EXPECT_EQ(buffers.kept(), CallerBuffers::kMaxKept);
  CallerBuffer first, second;
  ASSERT_EQ(buffers.map("fill", bufs[0]->fd, 0, 1, false, 0, first), "");
  EXPECT_EQ(first.mapping, mapped[0]);  // still kept: found again
  ASSERT_EQ(buffers.map("fill", bufs[1]->fd, 0, 1, false, 0, second), "");
  EXPECT_NE(second.mapping, mapped[1]);  // it was dropped: mapped anew, another dropped for it
  EXPECT_EQ(buffers.kept(), CallerBuffers::kMaxKept);
}

TEST(CallerBuffers, CommandsAtOnceWhileMappingsComeAndGoEachWriteWhereTheyAsked) {
  // Short idle time and small limits' worth of buffers: the reaper and the replacements run
  // while the commands use what they were given.
  CallerBuffers buffers(std::chrono::milliseconds(20));
  constexpr int kBuffers = 3, kThreads = 6, kRounds = 300;
  std::vector<std::unique_ptr<Memfd>> bufs;
  for (int i = 0; i < kBuffers; ++i) bufs.push_back(std::make_unique<Memfd>(kThreads * 4096));
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds && failures[t].empty(); ++r) {
        Memfd& buf = *bufs[static_cast<std::size_t>(r % kBuffers)];
        const int passed = buf.passed();
        CallerBuffer m;
        const bool write = r % 3 != 0;
        failures[t] =
            buffers.map("fill", passed, static_cast<uint64_t>(t) * 4096, 4096, write, 0, m);
        ::close(passed);
        if (!failures[t].empty()) break;
        const std::string mark = std::to_string(t) + ":" + std::to_string(r);
        if (write) {
          std::memcpy(m.data, mark.c_str(), mark.size() + 1);
          char got[32] = {};
          if (::pread(buf.fd, got, mark.size() + 1, static_cast<off_t>(t) * 4096) !=
                  static_cast<ssize_t>(mark.size() + 1) ||
              mark != got)
            failures[t] = "round " + mark + " read back " + got;
        }
        if (r % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[static_cast<std::size_t>(t)], "") << t;
}

}  // namespace
}  // namespace skein::client
