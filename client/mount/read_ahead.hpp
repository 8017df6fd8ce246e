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

// How far ahead of the reader to keep reads in flight, from the pattern of reads alone. It follows
// a few streams at once (two readers of one file, or one reader at two places) and tells them from
// random reads by more than distance:
// - a small read (under Limits::large) continues a stream only where the stream's last read ended
//   (or overlapping it, as a re-read does); a read beyond a gap, before the stream (backwards) or
//   at a stride starts a stream of its own, and a re-read adds nothing to the stream;
// - a large read (the kernel's read-ahead, sent as several reads at once that FUSE threads take in
//   any order) continues a stream when it lands within `slack` of where the stream is;
// - a stream is read ahead only once it has proved itself: it started at offset 0 of the file, or
//   it has read `confirm` bytes in order. A random reader almost never lands where another of its
//   reads ended, so it never gets a window, and fetches nothing but what it asks for.
class ReadWindow {
 public:
  struct Limits {
    uint64_t min = 1 << 20;  // the window of a stream that has just proved itself
    uint64_t max = 8 << 20;  // the most one file keeps ahead
    // How far from where the stream is a large read may land and still belong to it: more than
    // the kernel's read-ahead window and ours, since the kernel's reads arrive out of order.
    uint64_t slack = 32 << 20;
    uint64_t large = 64 << 10;     // a read this size or more is taken for read-ahead
    uint64_t confirm = 256 << 10;  // bytes in order before a stream not at 0 is read ahead
    std::size_t streams = 4;       // streams followed at once
  };
  // One stream: where its furthest read ended and what it has read.
  struct Stream {
    uint64_t next = 0;      // where the stream's furthest read ended
    uint64_t streamed = 0;  // bytes it added, in order
    bool trusted = false;   // started at offset 0, or read `confirm` bytes in order
    uint64_t used = 0;      // when it was last read (a tick), to replace the stalest
    // For ReadAhead: where the blocks fetched ahead for it end, and under which generation; a
    // block below it that is gone was served and let go, and is not fetched again.
    uint64_t fetched_to = 0;
    uint64_t fetched_generation = 0;
  };

  ReadWindow() : ReadWindow(Limits{}) {}
  explicit ReadWindow(Limits limits);

  // Records a read; true when it belongs to a stream that is read ahead (ahead() > 0).
  bool record(uint64_t offset, uint64_t size);
  // Bytes to keep in flight beyond the last read: twice what its stream has read so far,
  // between the limits; 0 when the last read was not part of a stream that proved itself.
  uint64_t ahead() const;
  // The stream of the last read.
  Stream& current() { return streams_[current_]; }
  // True when [offset, offset + size) lies where a stream that is read ahead may still read.
  bool wanted(uint64_t offset, uint64_t size) const;
  // How far around the stream's position a large read still belongs to it.
  uint64_t slack() const { return std::max(limits_.slack, limits_.max); }

 private:
  uint64_t ahead_of(const Stream& s) const;

  Limits limits_;
  std::vector<Stream> streams_;
  std::size_t current_ = 0;
  uint64_t tick_ = 0;
};

// The bytes of one read, as views into buffers that `held` keeps alive until the reply is sent.
struct ReadData {
  std::vector<std::string_view> pieces;
  std::vector<std::shared_ptr<const void>> held;
  uint64_t size = 0;
  // Work for the thread that sends the reply, once it is sent (a directory's read-ahead, set off
  // by this read): while the reply is unsent the kernel holds the pages this read fills locked,
  // and an invalidation of the file would wait for that work. Null: none.
  std::function<void()> after_reply;
};

class ReadAhead {
 public:
  using FetchDone = std::function<void(Result<SharedBytes>)>;
  // Starts one gateway read of [offset, offset + size); `done` runs once, on any thread, with the
  // bytes (fewer only at end of file) or the errno.
  using Fetch = std::function<void(uint64_t offset, uint32_t size, FetchDone done)>;

  struct Options {
    // Read-ahead fetches whole blocks at multiples of this size, so that readers of one file,
    // from this mount or others, ask the gateway for the same ranges and it can collapse them.
    uint32_t block = 1 << 20;
    ReadWindow::Limits window;
  };

  // `generation` changes whenever the file's contents may have changed (a write, a truncate, a
  // remote change); blocks fetched under an older one are never served. It must outlive this.
  // `size_hint` is the file size when opened: nothing is read ahead beyond what is known to exist.
  ReadAhead(std::shared_ptr<ByteBudget> budget, const std::atomic<uint64_t>& generation,
            uint64_t size_hint, Options options);
  ~ReadAhead();
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The bytes of [offset, offset + size): from blocks read ahead where it has them, the rest
  // straight from the gateway through `fetch`; fewer only at end of file. Also starts the reads
  // that keep the window full. Safe to call from several threads at once.
  Result<ReadData> read(uint64_t offset, uint32_t size, const Fetch& fetch);
  // The same, with the part no block holds read through `direct` in the calling thread (a
  // synchronous gateway call: one hand-off between threads less than a fetch and a wait).
  using Direct = std::function<Result<SharedBytes>(uint64_t offset, uint32_t size)>;
  Result<ReadData> read(uint64_t offset, uint32_t size, const Fetch& fetch, const Direct& direct);
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
  const std::atomic<uint64_t>& generation_;
  const Options options_;
  std::shared_ptr<Shared> shared_;  // its mutex guards everything below
  ReadWindow window_;
  uint64_t size_hint_;
  std::map<uint64_t, std::shared_ptr<Block>> blocks_;  // by offset
};

}  // namespace skein::client
