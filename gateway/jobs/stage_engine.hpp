// Staging: copying a tree into a job namespace before its job runs, and out of it after, on the
// gateway itself (Slurm's burst buffer runs it when the job's nodes are not there yet or gone).
//
// An operation copies between an outside place, "NAMESPACE:/path" (any namespace the gateway
// serves) or "backend:NAME:/path" (a backend's own tree; not one of a job pool), and a plain
// "/path" of the job's namespace. A directory's contents go into the destination directory (made
// with its parents when missing); a file is copied to the destination path, or into it when that
// is a directory. Modes, modification times and symlinks are kept (symlinks as they are, never
// followed); owners are the destination's (a job namespace shows its job's owner).
//
// The source tree is walked once and recorded in SQLite (StageStore) with the operation. Small
// files are copied whole, several at a time; a large file is cut into chunks copied in
// parallel, each recorded once it is written. A gateway that starts resumes the operations it
// was running, copying only what is not recorded: a file whose source changed since the walk is
// copied again from its start. A file counts as done only once all of it is at the destination,
// its mode and times set (and, with `verify`, its SHA-256 compared with the source's).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <string>
#include <thread>
#include <vector>

#include "jobs/stage_store.hpp"
#include "namespace/layout.hpp"

namespace skein {

class Gateway;
class InvalidationBroker;
class JobNamespaces;
class MountTable;

// "NAMESPACE:/path" or "backend:NAME:/path", taken apart; "/path" alone is a job-namespace path.
struct StagePlace {
  enum class Kind { job, ns, backend } kind = Kind::job;
  std::string name;  // the namespace's or the backend's
  std::string path;  // normalised, absolute
};
// Throws AdminError invalid_argument with what is wrong.
StagePlace parse_stage_place(const std::string& text);

// An operation as reported: the record and what the running copy knows now.
struct StageReport {
  StageRecord record;
  double bytes_per_s = 0;
  uint64_t bytes_moved = 0;  // copied by this gateway process (a resumed copy: since its start)
};

class StageEngine {
 public:
  struct Options {
    unsigned threads = 16;                        // files or chunks copied at once per operation
    unsigned max_running = 4;                     // operations copying at once; others wait, queued
    uint64_t chunk_bytes = 8u << 20;              // a larger file is copied in chunks of this size
    std::chrono::milliseconds record_every{500};  // progress is saved this often
  };
  StageEngine(JobNamespaces& jobs, Gateway& gateway, InvalidationBroker* broker, Options options);
  StageEngine(JobNamespaces& jobs, Gateway& gateway, InvalidationBroker* broker)
      : StageEngine(jobs, gateway, broker, Options{}) {}
  // Stops the copies; what they were running stays running in the store, resumed at the next
  // start.
  ~StageEngine();
  // The same without waiting, for a gateway shutting down: each copy ends the items it has begun
  // and starts no other.
  void stop() { stopping_ = true; }

  // Resumes what the store holds as queued or running.
  void start();

  // Checks the request (the job's namespace, both places, the source's existence) and starts
  // the copy. With `destroy_after`, the job's namespace is destroyed once the copy is done (and
  // kept when it fails). The same request again while it has not ended (and is not being
  // cancelled) returns that operation. One whose destination overlaps the source or
  // destination of another that has not ended, or whose source overlaps that one's
  // destination, stays queued until the other has ended. Throws AdminError: invalid_argument,
  // not_found.
  StageReport begin(const StageSpec& spec, bool destroy_after = false);
  std::optional<StageReport> find(const std::string& id) const;
  std::vector<StageReport> list(const std::string& job_id) const;
  // Throws AdminError not_found. An operation that has ended is returned as it is.
  StageReport cancel(const std::string& id);
  // Cancels the job's copies that have not ended and waits until they have stopped (before its
  // namespace is destroyed; the caller holds a JobNamespaces::Destroying of the job, so that none
  // begins after: a begin() under way when it was taken is waited for, and its copy cancelled).
  void cancel_job(const std::string& job_id) { cancel_job(job_id, nullptr); }

 private:
  struct Run;
  struct Tree {
    std::shared_ptr<const MountTable> table;  // keeps `layout` alive
    std::shared_ptr<Layout> layout;
    std::string root;  // the place's path within the layout
    std::string ns;    // the namespace, to tell its mounts of changes ("": a backend's tree)
  };
  Tree resolve(const std::string& place_text, bool job_side, const std::string& job_id) const;
  // An operation of `r`, its places named and looked up on the servers.
  // cancel_job, but for the copy `except` (one that destroys its namespace once done, from its
  // own thread).
  void cancel_job(const std::string& job_id, const Run* except);
  // Whether every entry of operation `id`'s walked tree is recorded copied.
  bool all_copied(const std::string& id) const;
  std::shared_ptr<Run> make_run(StageRecord r) const;

  // An operation that has not ended, and is not being cancelled, with the same request.
  std::optional<StageRecord> under_way(const StageSpec& spec, bool destroy_after) const;
  // An operation launched before `run` that has not ended and whose places overlap its own.
  std::shared_ptr<Run> overlapping_before(const Run& run) const;
  void launch(std::shared_ptr<Run> run);
  void execute(Run& run);
  void copy(Run& run, Tree& source, Tree& destination);
  StageReport report(const StageRecord& stored) const;
  static int64_t now_s();

  JobNamespaces& jobs_;
  Gateway& gateway_;
  InvalidationBroker* broker_;
  Options options_;
  mutable StageStore store_;
  std::counting_semaphore<64> slots_;

  std::mutex begin_mu_;  // one begin() at a time, from its look for the same request to its launch
  mutable std::mutex mu_;                             // guards runs_ and next_order_
  std::map<std::string, std::shared_ptr<Run>> runs_;  // operations with a thread, by id
  uint64_t next_order_ = 0;                           // the next Run::order
  std::atomic<bool> stopping_{false};
};

}  // namespace skein
