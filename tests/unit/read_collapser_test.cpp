// ReadCollapser: concurrent reads of the same range of the same file share one fetch; anything
// else (another range, another file, a read after the fetch ended or after a write began) fetches
// on its own.
#include "backend/read_collapser.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace skein {
namespace {

using namespace std::chrono_literals;

// A fetch that blocks until the test opens the gate, counting how often it runs.
struct GatedFetch {
  std::atomic<int> runs{0};
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::string answer = "bytes";
  int error = 0;

  ReadCollapser::Fetch fetch() {
    return [this]() -> Result<SharedBytes> {
      ++runs;
      opened.wait();
      if (error) return Result<SharedBytes>::failure(error);
      auto bytes = std::make_shared<const std::string>(answer);
      return SharedBytes({*bytes}, bytes);
    };
  }
};

int backend_a = 1;  // two backends: only their addresses matter
int backend_b = 2;

TEST(ReadCollapser, ConcurrentReadsOfTheSameRangeShareOneFetch) {
  ReadCollapser collapser;
  GatedFetch f;
  std::vector<std::future<Result<SharedBytes>>> readers;
  for (int i = 0; i < 5; ++i) {
    readers.push_back(std::async(std::launch::async, [&] {
      return collapser.read(&backend_a, "/a", 0, 4096, 1 << 20, f.fetch());
    }));
  }
  while (collapser.collapsed() < 4) std::this_thread::sleep_for(1ms);
  f.gate.set_value();
  for (auto& r : readers) {
    auto got = r.get();
    ASSERT_TRUE(got);
    EXPECT_EQ(got->flatten(), "bytes");
  }
  EXPECT_EQ(f.runs.load(), 1);
}

// The five reads overlap in time: each differs from the first in one part of its key (length,
// path, backend, offset and the epoch its file was opened at), and every fetch is held at the
// gate until all have started. A collapser that let any of them join another's fetch would leave
// fewer than six running.
TEST(ReadCollapser, DifferentRangesFilesOrBackendsAreFetchedSeparately) {
  ReadCollapser collapser;
  GatedFetch f;
  auto a = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_a, "/a", 0, 0, 10, f.fetch()); });
  while (f.runs.load() == 0) std::this_thread::sleep_for(1ms);  // a's fetch is in flight
  auto b = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_a, "/a", 0, 0, 11, f.fetch()); });
  auto c = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_a, "/b", 0, 0, 10, f.fetch()); });
  auto d = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_b, "/a", 0, 0, 10, f.fetch()); });
  auto e = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_a, "/a", 0, 5, 10, f.fetch()); });
  auto g = std::async(std::launch::async,  // a file opened at /a after it was replaced
                      [&] { return collapser.read(&backend_a, "/a", 1, 0, 10, f.fetch()); });
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (f.runs.load() < 6 && collapser.collapsed() == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(f.runs.load(), 6) << "each read fetches on its own, while the others are in flight";
  EXPECT_EQ(collapser.collapsed(), 0u);
  f.gate.set_value();
  EXPECT_TRUE(a.get() && b.get() && c.get() && d.get() && e.get() && g.get());
  EXPECT_EQ(f.runs.load(), 6);
}

TEST(ReadCollapser, ReadAfterAFetchEndedFetchesAgain) {
  ReadCollapser collapser;
  GatedFetch f;
  f.gate.set_value();
  ASSERT_TRUE(collapser.read(&backend_a, "/a", 0, 0, 10, f.fetch()));
  ASSERT_TRUE(collapser.read(&backend_a, "/a", 0, 0, 10, f.fetch()));
  EXPECT_EQ(f.runs.load(), 2) << "a finished fetch must not be reused";
}

TEST(ReadCollapser, ReadStartingAfterAWriteBeganDoesNotJoinAnOlderFetch) {
  ReadCollapser collapser;
  GatedFetch old_fetch, new_fetch;
  new_fetch.answer = "new";
  new_fetch.gate.set_value();
  auto first = std::async(std::launch::async, [&] {
    return collapser.read(&backend_a, "/a", 0, 0, 10, old_fetch.fetch());
  });
  while (old_fetch.runs.load() == 0) std::this_thread::sleep_for(1ms);
  collapser.detach(&backend_a, "/a");  // a write to /a begins
  auto second = collapser.read(&backend_a, "/a", 0, 0, 10, new_fetch.fetch());
  ASSERT_TRUE(second);
  EXPECT_EQ(second->flatten(), "new");
  old_fetch.gate.set_value();
  ASSERT_TRUE(first.get());
  EXPECT_EQ(new_fetch.runs.load(), 1);
}

TEST(ReadCollapser, ErrorIsSharedByEveryoneWhoWaited) {
  ReadCollapser collapser;
  GatedFetch f;
  f.error = EIO;
  auto a = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_a, "/a", 0, 0, 10, f.fetch()); });
  while (f.runs.load() == 0) std::this_thread::sleep_for(1ms);
  auto b = std::async(std::launch::async,
                      [&] { return collapser.read(&backend_a, "/a", 0, 0, 10, f.fetch()); });
  while (collapser.collapsed() < 1) std::this_thread::sleep_for(1ms);
  f.gate.set_value();
  EXPECT_EQ(a.get().error(), EIO);
  EXPECT_EQ(b.get().error(), EIO);
  EXPECT_EQ(f.runs.load(), 1);
}

}  // namespace
}  // namespace skein
