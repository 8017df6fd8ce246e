// Read-ahead for one open file: while the reader goes forward, a window of concurrent Data reads
// is kept in flight ahead of it, so the gateway always has work queued and the reader finds its
// bytes already here. The window grows as the stream proves sequential and drops to nothing on a
// random read; the bytes it holds count against a budget shared by the whole mount.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "byte_budget.hpp"
#include "skein/result.hpp"
#include "skein/shared_bytes.hpp"

namespace skein::client {

// How far ahead of the reader to keep reads in flight, from the pattern of reads alone.
class ReadWindow {
 public:
  struct Limits {
    std::uint64_t min = 1 << 20;  // the window of a stream that has just started
    std::uint64_t max = 8 << 20;  // the most one file keeps ahead
    // How far from where the stream is a read may land and still belong to it. The kernel sends
    // a read-ahead window of reads at once and FUSE threads take them in any order, so this must
    // exceed the kernel's window as well as ours; a random reader closer than this to its last
    // read is taken for a sequential one.
    std::uint64_t slack = 32 << 20;
  };
  ReadWindow() : ReadWindow(Limits{}) {}
  explicit ReadWindow(Limits limits) : limits_(limits) {}

  // Records a read; true when it continues a sequential stream. A stream starts at offset 0 or
  // where the previous read ended. The kernel sends the reads of one stream from several threads
  // at once, so they arrive a little out of order: a read within the window of where the stream
  // is still counts as sequential.
  bool record(std::uint64_t offset, std::uint64_t size);
  // Bytes to keep in flight beyond the last read: twice what the stream has read so far, between
  // the limits; 0 after a random read.
  std::uint64_t ahead() const;
  // How far around the stream's position a read still belongs to it.
  std::uint64_t slack() const { return std::max(limits_.slack, limits_.max); }

 private:
  Limits limits_;
  bool started_ = false;
  bool sequential_ = false;
  std::uint64_t next_ = 0;      // where the stream's furthest read ended
  std::uint64_t streamed_ = 0;  // bytes read since the stream (re)started
};

// The bytes of one read, as views into buffers that `held` keeps alive until the reply is sent.
struct ReadData {
  std::vector<std::string_view> pieces;
  std::vector<std::shared_ptr<const void>> held;
  std::uint64_t size = 0;
};

class ReadAhead {
 public:
  using FetchDone = std::function<void(Result<SharedBytes>)>;
  // Starts one gateway read of [offset, offset + size); `done` runs once, on any thread, with the
  // bytes (fewer only at end of file) or the errno.
  using Fetch = std::function<void(std::uint64_t offset, std::uint32_t size, FetchDone done)>;

  struct Options {
    // Read-ahead fetches whole blocks at multiples of this size, so that readers of one file,
    // from this mount or others, ask the gateway for the same ranges and it can collapse them.
    std::uint32_t block = 1 << 20;
    ReadWindow::Limits window;
  };

  // `generation` changes whenever the file's contents may have changed (a write, a truncate, a
  // remote change); blocks fetched under an older one are never served. It must outlive this.
  // `size_hint` is the file size when opened: nothing is read ahead beyond what is known to exist.
  ReadAhead(std::shared_ptr<ByteBudget> budget, const std::atomic<std::uint64_t>& generation,
            std::uint64_t size_hint, Options options);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The bytes of [offset, offset + size): from blocks read ahead where it has them, the rest
  // straight from the gateway through `fetch`; fewer only at end of file. Also starts the reads
  // that keep the window full. Safe to call from several threads at once.
  Result<ReadData> read(std::uint64_t offset, std::uint32_t size, const Fetch& fetch);
  // Forgets every block (the file changed); reads in flight finish into nothing.
  void drop();
  // Blocks held or in flight, and their bytes: for tests and stats.
  std::size_t blocks() const;

 private:
  struct Block;
  struct Shared;
  static void start(const std::shared_ptr<Shared>& shared, const std::shared_ptr<Block>& block,
                    const Fetch& fetch);

  std::shared_ptr<ByteBudget> budget_;
  const std::atomic<std::uint64_t>& generation_;
  const Options options_;
  std::shared_ptr<Shared> shared_;  // its mutex guards everything below
  ReadWindow window_;
  std::uint64_t size_hint_;
  std::map<std::uint64_t, std::shared_ptr<Block>> blocks_;  // by offset
  // Where the blocks fetched ahead for this stream end, and under which generation: a block
  // below it that is gone was served and let go, and is not fetched again for a read behind it.
  std::uint64_t fetched_to_ = 0;
  std::uint64_t fetched_generation_ = 0;
};

}  // namespace skein::client
