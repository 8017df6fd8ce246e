// Write-behind for one file: a write is acknowledged to the kernel once it is queued here; queued
// writes are gathered into requests of up to the Data service's 1 MiB and several go to the
// gateway at once, so a writer never waits for a round trip. What it must still get, it gets:
// an error of a write already acknowledged comes back at that writer's next write, or at the
// latest when it flushes, syncs or closes, with the real errno; and writes whose ranges overlap
// reach the gateway in the order they were made.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "byte_budget.hpp"
#include "gateway_client.hpp"
#include "skein/result.hpp"
#include "wire/limits.hpp"

namespace skein::client {

class WriteBehind {
  struct State;  // shared with the completions of requests in flight

 public:
  using SendDone = std::function<void(Result<uint32_t>)>;
  // Starts one gateway write; `done` runs once, on any thread, with the bytes written or the
  // errno. It may send the next request from there, so it must not block.
  using Send =
      std::function<void(const FileRef& file, uint64_t offset, std::string data, SendDone done)>;

  // Starts one gateway call of several requests at scattered offsets (see batch_with).
  using SendMany =
      std::function<void(const FileRef& file, std::vector<GatewayClient::Extent>, SendDone done)>;

  // Starts one gateway write that also brings the file's attributes right after it, where the
  // gateway gives them (see report_attrs_with).
  using ReportedDone = std::function<void(Result<uint32_t>, std::optional<FileAttr>)>;
  using SendReporting = std::function<void(const FileRef& file, uint64_t offset, std::string data,
                                           ReportedDone done)>;

  struct Limits {
    std::size_t request = wire::kMaxIoSize;  // the largest request gathered: a Write's most
    uint64_t file_bytes = 8 << 20;           // held for this file before its writers wait
    std::size_t file_requests = 16;          // calls in flight at once for this file
    std::size_t batch = 64;                  // requests per call, with batch_with
    // With batch_with, a call whose first request is smaller than `small` (a random write's, as a
    // rule) goes only while fewer than `small_calls` calls are in flight: the writes queued
    // behind them then go several to a call, which costs the mount and the gateway less CPU per
    // write than a call each, and a writer does not wait for the gateway either way.
    std::size_t small = 64 << 10;
    std::size_t small_calls = 2;
  };

  // One open file writing through this WriteBehind: its requests, and the first error of one of
  // them, kept for each place that reports it. A writer opened with O_APPEND has its requests
  // sent one at a time, in order: where each lands depends on the ones before.
  class Writer {
   public:
    explicit Writer(bool append) : append_(append) {}

   private:
    friend class WriteBehind;
    friend struct WriteBehind::State;
    const bool append_;
    // Guarded by the WriteBehind's mutex. The error is reported at the writer's next write, and
    // again at its next flush, since the kernel may drop the write's report (a write(2) it splits
    // into several writes returns the short count of those before, not the error); and at its
    // next fsync, whatever flushes came between: a flush of the open file shared by another
    // process (a close at its exec or exit) must not take it from the fsync of the one that
    // wrote, as NFS keeps it for fsync.
    int write_error_ = 0, flush_error_ = 0, fsync_error_ = 0;
  };
  // Which report settle() makes: a flush's (close(2)) or an fsync's.
  enum class Report { flush, fsync };

  // `budget` bounds the bytes held across the mount (writers wait for room); `changed` runs when
  // a write is queued and again when it is acknowledged (read-ahead must forget the old bytes).
  WriteBehind(Send send, std::shared_ptr<ByteBudget> budget, Limits limits,
              std::function<void()> changed);
  // Waits for every write to be acknowledged.
  ~WriteBehind();
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // Queues `data` for `offset` of `file` on behalf of `writer`, waiting while this file or the
  // mount holds too much. Fails instead, queueing nothing, with an error of this writer's earlier
  // writes that it has not heard of yet. `taken`, if given, runs once the data is queued and
  // before any request is sent, so the caller can let its writer go on as early as possible.
  // `writer`, and this object itself (its file released meanwhile), may be gone once `taken`
  // has run: nothing of them is used after.
  Status write(const std::shared_ptr<Writer>& writer, const FileRef& file, uint64_t offset,
               std::string_view data, const std::function<void()>& taken = nullptr);
  // From now on, requests queued behind the calls in flight (random writes: none continues
  // another) go several to a call, up to Limits::batch and Limits::request bytes, through
  // `send_many`. Set before the first write.
  void batch_with(SendMany send_many);
  // From now on, a request sent while nothing else of the file is held (the last before a close,
  // as a rule) goes through `send_reporting`, and the attributes it brings are kept for
  // attrs_when_idle(). Set before the first write.
  void report_attrs_with(SendReporting send_reporting);
  // The file's attributes right after its last write, when that write brought them, succeeded,
  // and nothing has been written since: nothing gathered, queued or in flight. Else nullopt.
  std::optional<FileAttr> attrs_when_idle() const;
  // A write of the file went around this object (DataPath::write_through: a shared mapping's
  // pages): the attributes kept for attrs_when_idle() are older than the file's.
  void forget_attrs();
  // Sends what is gathered and waits until every write queued before the call is acknowledged.
  void settle();
  // settle(), then the error of `writer` that `report` has not made yet, if any (see Writer).
  Status settle(Writer& writer, Report report);
  // Errors of the file's writes, whoever wrote, as Linux keeps them for fsync (errseq): a mark
  // taken when a file is opened, and the error of the last write that failed after the mark,
  // which moves the mark (the error is reported once to each open file that asks). The caller
  // settles first.
  uint64_t error_mark() const;
  Status error_since(uint64_t& mark) const;
  // Nothing gathered, queued or in flight.
  bool idle() const;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace skein::client
