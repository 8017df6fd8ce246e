// Staging operations: checked, walked, copied in parallel, recorded, resumed; see stage_engine.hpp.
#include "jobs/stage_engine.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <unordered_set>

#include "coherence/invalidation_broker.hpp"
#include "gateway.hpp"
#include "jobs/job_namespaces.hpp"
#include "namespace/create_policy.hpp"
#include "namespace/namespace_fs.hpp"
#include "namespace/union_layout.hpp"
#include "skein/partial_name.hpp"
#include "skein/path.hpp"

namespace skein {

using Kind = StageEntry::Kind;
using Err = AdminError::Kind;

namespace {

constexpr size_t kMaxFailed = 100;
constexpr uint32_t kReadPiece = 4u << 20;  // the most one read asks for
// Files up to kBatchFileBytes are read kBatchFiles at a time (Layout::read_whole_files: on one
// server, three round trips for all of them instead of three each).
constexpr uint64_t kBatchFileBytes = 64u << 10;
constexpr size_t kBatchFiles = 32;

std::string errno_text(int err) { return std::strerror(err); }

std::string random_id() {
  unsigned char b[8];
  if (RAND_bytes(b, sizeof b) != 1) throw std::runtime_error("no random bytes from OpenSSL");
  static const char* hex = "0123456789abcdef";
  std::string out = "stage-";
  for (auto c : b) {
    out += hex[c >> 4];
    out += hex[c & 15];
  }
  return out;
}

std::string below(const std::string& root, const std::string& rel) {
  return rel.empty() ? root : join_path(root, rel);
}

// SHA-256 of a whole file, read through its layout; ECANCELED as soon as `stop` says so (a large
// file takes minutes).
Result<std::string> file_digest(Layout& layout, const std::string& rel,
                                const std::function<bool()>& stop) {
  auto file = layout.open(rel, O_RDONLY);
  if (!file) return Result<std::string>::failure(file.error());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  uint64_t offset = 0;
  for (;;) {
    if (stop()) {
      (void)(*file)->close();
      return Result<std::string>::failure(ECANCELED);
    }
    auto data = (*file)->read(offset, kReadPiece);
    if (!data) {
      (void)(*file)->close();
      return Result<std::string>::failure(data.error());
    }
    if (data->empty()) break;
    for (auto piece : data->pieces()) EVP_DigestUpdate(ctx.get(), piece.data(), piece.size());
    offset += data->size();
  }
  (void)(*file)->close();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return std::string(reinterpret_cast<char*>(md), len);
}

// Whether attributes `a` have the size and mtime the walk found for `e`: the same version.
bool as_walked(const sftp::Attrs& a, const StageEntry& e) {
  return a.size == e.size && static_cast<int64_t>(a.mtime) == e.mtime;
}

Kind kind_of(uint32_t mode) {
  if (S_ISDIR(mode)) return Kind::dir;
  if (S_ISLNK(mode)) return Kind::symlink;
  return Kind::file;
}

// Where an operation's place is, to tell whether two overlap: a name for where (a namespace,
// a backend, a storage server) and the normalised path there.
struct PlaceKey {
  std::string where, path;
};
bool overlap(const PlaceKey& a, const PlaceKey& b) {
  return !a.where.empty() && a.where == b.where &&
         (path_is_under(a.path, b.path) || path_is_under(b.path, a.path));
}
bool operator==(const PlaceKey& a, const PlaceKey& b) {
  return !a.where.empty() && a.where == b.where && a.path == b.path;
}

// A place as the request names it: the namespace (the job's own for a plain /path) or the
// backend, and the path normalised by parse_stage_place. The same request names its places
// alike.
PlaceKey named_place(const StagePlace& p, const std::string& job_id) {
  switch (p.kind) {
    case StagePlace::Kind::job:
      return {"namespace " + JobNamespaces::namespace_name(job_id), p.path};
    case StagePlace::Kind::ns:
      return {"namespace " + p.name, p.path};
    case StagePlace::Kind::backend:
      return {"backend " + p.name, p.path};
  }
  return {};
}

// Where namespace place `vpath` of `fs` is on the storage servers: on each backend of the mount
// that holds it, and all of every mount below it (a place above mount points).
std::vector<PlaceKey> on_servers(const NamespaceFs& fs, const std::string& vpath) {
  std::vector<PlaceKey> out;
  auto add = [&](const Layout& layout, std::string_view rel) {
    for (auto& b : layout.backends()) {
      auto at = b->server_place(rel);
      out.push_back({std::move(at.server), std::move(at.path)});
    }
  };
  auto table = fs.table();
  const auto holder = table->place(vpath);
  if (holder) add(*holder->mount->layout, holder->rel);
  for (auto& m : table->mounts())
    if (m.path != vpath && path_is_under(m.path, vpath)) add(*m.layout, "/");
  return out;
}

// Where a place is on the storage servers; nothing for a place that no longer resolves.
std::vector<PlaceKey> on_servers(Gateway& gateway, const JobNamespaces& jobs, const StagePlace& p,
                                 const std::string& job_id) {
  if (p.kind == StagePlace::Kind::backend) {
    auto backend = gateway.backend(p.name);
    if (!backend) return {};
    auto at = backend->server_place(p.path);
    return {PlaceKey{std::move(at.server), std::move(at.path)}};
  }
  auto fs =
      p.kind == StagePlace::Kind::job ? jobs.namespace_of(job_id) : gateway.registry().find(p.name);
  if (!fs) return {};
  return on_servers(*fs, p.path);
}

// An operation's source or destination, named and on the servers: one tree named through two
// namespaces, or through a namespace and as a backend's, overlaps itself on its server.
struct Places {
  PlaceKey named;
  std::vector<PlaceKey> on_servers;
};
bool overlap(const Places& a, const Places& b) {
  if (overlap(a.named, b.named)) return true;
  for (auto& x : a.on_servers)
    for (auto& y : b.on_servers)
      if (overlap(x, y)) return true;
  return false;
}

// The place `text` names, named and, with a gateway to look on, on the servers; empty keys
// (never equal to or overlapping any) for a place that does not parse.
Places places_of(const std::string& text, const std::string& job_id, Gateway* gateway = nullptr,
                 const JobNamespaces* jobs = nullptr) {
  StagePlace p;
  try {
    p = parse_stage_place(text);
  } catch (const AdminError&) {
    return {};
  }
  Places out{named_place(p, job_id), {}};
  if (gateway && jobs) out.on_servers = on_servers(*gateway, *jobs, p, job_id);
  return out;
}

}  // namespace

StagePlace parse_stage_place(const std::string& text) {
  StagePlace p;
  std::string path;
  if (text.rfind("backend:", 0) == 0) {
    auto rest = text.substr(8);
    auto colon = rest.find(':');
    if (colon == std::string::npos || colon == 0)
      throw AdminError(Err::invalid_argument,
                       "'" + text + "': a backend's place is backend:NAME:/path");
    p.kind = StagePlace::Kind::backend;
    p.name = rest.substr(0, colon);
    path = rest.substr(colon + 1);
  } else if (!text.empty() && text.front() == '/') {
    p.kind = StagePlace::Kind::job;
    path = text;
  } else {
    auto colon = text.find(':');
    if (colon == std::string::npos || colon == 0)
      throw AdminError(Err::invalid_argument,
                       "'" + text +
                           "' is not a place: give NAMESPACE:/path, backend:NAME:/path or, in "
                           "the job's namespace, /path");
    p.kind = StagePlace::Kind::ns;
    p.name = text.substr(0, colon);
    path = text.substr(colon + 1);
  }
  auto norm = normalize_virtual_path(path);
  if (!norm)
    throw AdminError(Err::invalid_argument,
                     "'" + text + "': the path must be absolute and may not climb above its root");
  p.path = *norm;
  return p;
}

// One operation with a thread: its record, the live counters and what is still to be saved.
struct StageEngine::Run {
  Run(StageRecord r, Places from, Places to)
      : source(std::move(from)), destination(std::move(to)), record(std::move(r)) {}

  // Where it copies from and to, as compared with other operations' places.
  const Places source, destination;
  uint64_t order = 0;  // when it was launched, among this engine's operations (under mu_)

  mutable std::mutex mu;  // guards record, rate, pending, failed, error, ended
  StageRecord record;
  double rate = 0;
  StageStore::Progress pending;
  std::vector<std::string> failed;
  uint64_t failures = 0;
  std::string error;
  bool ended = false;
  std::condition_variable ended_cv;

  std::atomic<bool> cancel{false};
  std::atomic<uint64_t> bytes_done{0}, files_done{0}, bytes_moved{0};
  std::thread thread;
  // Its thread has returned (an operation that has ended may still destroy its namespace).
  std::atomic<bool> exited{false};

  void fail(const std::string& path, const std::string& why) {
    std::lock_guard lock(mu);
    ++failures;
    if (failed.size() < kMaxFailed) failed.push_back((path.empty() ? "." : path) + ": " + why);
  }
  void done(const std::string& path, bool counted) {
    std::lock_guard lock(mu);
    pending.done.push_back(path);
    if (counted) ++files_done;
  }
  void chunk(const std::string& path, uint64_t index, uint64_t bytes) {
    std::lock_guard lock(mu);
    pending.chunks.emplace_back(path, index);
    bytes_done += bytes;
  }
};

StageEngine::StageEngine(JobNamespaces& jobs, Gateway& gateway, InvalidationBroker* broker,
                         Options options)
    : jobs_(jobs),
      gateway_(gateway),
      broker_(broker),
      options_(options),
      store_(jobs.store().database()),
      slots_(std::max<std::ptrdiff_t>(1, std::min<std::ptrdiff_t>(64, options.max_running))) {
  if (options_.threads == 0) options_.threads = 1;
  if (options_.chunk_bytes < (1u << 20)) options_.chunk_bytes = 1u << 20;
  // An expired namespace's copies stop before its files go.
  jobs_.set_copy_stopper([this](const std::string& job_id) { cancel_job(job_id); });
}

StageEngine::~StageEngine() {
  jobs_.set_copy_stopper(nullptr);  // waits for a stop under way
  stopping_ = true;
  std::map<std::string, std::shared_ptr<Run>> runs;
  {
    std::lock_guard lock(mu_);
    runs.swap(runs_);
  }
  for (auto& [id, run] : runs)
    if (run->thread.joinable()) run->thread.join();
}

int64_t StageEngine::now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool StageEngine::all_copied(const std::string& id) const {
  for (const StageEntry& e : store_.entries(id))
    if (!e.done) return false;
  return true;
}

void StageEngine::start() {
  for (auto& r : store_.unfinished()) {
    spdlog::info("stage {} of job {}: resumed ({} of {} bytes were copied)", r.id, r.spec.job_id,
                 r.bytes_done, r.bytes_total);
    if (r.spec.direction == StageDirection::out && r.destroy_after && r.walked &&
        !jobs_.find(r.spec.job_id) && all_copied(r.id)) {
      // Its copy was done and its namespace destroyed; the gateway stopped before it said done.
      spdlog::info("stage {} of job {}: done (its namespace was destroyed after the copy)", r.id,
                   r.spec.job_id);
      try {
        store_.finish(r.id, StageState::done, "", {}, now_s());
      } catch (const std::exception& x) {
        spdlog::error("stage {}: cannot record its end: {}", r.id, x.what());
      }
      continue;
    }
    if (r.spec.direction == StageDirection::out) {
      try {
        jobs_.stage_began(r.spec.job_id, /*out=*/true);  // until its run ends (execute)
      } catch (const AdminError& e) {
        // Ended, so that a wait for it (a Slurm stage-out hook's) ends too, with the reason.
        spdlog::warn("stage {} of job {}: not resumed: {}", r.id, r.spec.job_id, e.what());
        try {
          store_.finish(r.id, StageState::failed, std::string("not resumed: ") + e.what(), {},
                        now_s());
        } catch (const std::exception& x) {
          spdlog::error("stage {}: cannot record its end: {}", r.id, x.what());
        }
        continue;
      }
    }
    launch(make_run(std::move(r)));
  }
}

StageEngine::Tree StageEngine::resolve(const std::string& text, bool job_side,
                                       const std::string& job_id) const {
  StagePlace p = parse_stage_place(text);
  std::shared_ptr<NamespaceFs> fs;
  if (job_side) {
    if (p.kind != StagePlace::Kind::job)
      throw AdminError(Err::invalid_argument,
                       "'" + text + "': the job's side is a plain /path in its namespace");
    fs = jobs_.namespace_of(job_id);
    if (!fs) throw AdminError(Err::not_found, "no job namespace for job '" + job_id + "'");
  } else {
    switch (p.kind) {
      case StagePlace::Kind::job:
        throw AdminError(Err::invalid_argument,
                         "'" + text +
                             "': the other side is outside the job's namespace: "
                             "NAMESPACE:/path or backend:NAME:/path");
      case StagePlace::Kind::backend: {
        auto backend = gateway_.backend(p.name);
        if (!backend) throw AdminError(Err::not_found, "no backend '" + p.name + "'");
        for (auto& pool : jobs_.config().pools)
          for (auto& b : pool.backends)
            if (b == p.name)
              throw AdminError(Err::invalid_argument,
                               "backend '" + p.name + "' belongs to job pool '" + pool.name +
                                   "': stage from or to a job's namespace instead");
        std::vector<Branch> branches{Branch{backend, BranchMode::read_write}};
        auto layout = std::make_shared<UnionLayout>(std::move(branches), make_create_policy("ff"));
        return Tree{nullptr, layout, p.path, ""};
      }
      case StagePlace::Kind::ns:
        if (p.name == JobNamespaces::namespace_name(job_id))
          throw AdminError(Err::invalid_argument,
                           "'" + text + "' is in the job's own namespace: name a place outside it");
        fs = gateway_.registry().find(p.name);
        if (!fs) throw AdminError(Err::not_found, "no namespace '" + p.name + "'");
        break;
    }
  }
  auto r = fs->resolve(p.path);
  if (!r.layout)
    throw AdminError(Err::invalid_argument, "'" + text + "' is not inside one mount of namespace " +
                                                fs->name() +
                                                ": name a path at or below a mount point");
  return Tree{r.table, r.layout, r.rel, fs->name()};
}

StageReport StageEngine::begin(const StageSpec& spec, bool destroy_after) {
  if (spec.job_id.empty()) throw AdminError(Err::invalid_argument, "no job id");
  bool in = spec.direction == StageDirection::in;
  Tree source = resolve(spec.source, !in, spec.job_id);
  (void)resolve(spec.destination, in, spec.job_id);
  auto attrs = source.layout->getattr(source.root);
  if (!attrs)
    throw AdminError(attrs.error() == ENOENT ? Err::not_found : Err::failed_precondition,
                     "source " + spec.source + ": " + errno_text(attrs.error()));
  StageRecord r;
  r.id = random_id();
  r.spec = spec;
  r.destroy_after = destroy_after;
  r.state = StageState::queued;
  r.started_s = r.updated_s = now_s();
  std::lock_guard lock(begin_mu_);
  if (auto same = under_way(spec, destroy_after)) {
    // The same request again (a hook that was killed and runs again): the copy under way.
    spdlog::info("stage {} of job {}: asked for again while under way", same->id, spec.job_id);
    return report(*same);
  }
  // Refused while the job's namespace is being destroyed (the same request again, above, follows
  // the copy under way): under begin_mu_, so that a destroy that began meanwhile finds this copy
  // among the job's when it stops them (cancel_job). A stage-out keeps its namespace from
  // expiring from now until its run ends (execute).
  const bool out = spec.direction == StageDirection::out;
  jobs_.stage_began(spec.job_id, out);
  try {
    store_.insert(r);
    spdlog::info("stage {} of job {}: {} {} -> {}{}{}", r.id, spec.job_id,
                 to_string(spec.direction), spec.source, spec.destination,
                 spec.verify ? " (verified)" : "", destroy_after ? ", then destroy" : "");
    launch(make_run(r));
  } catch (...) {  // no run was launched to end it
    if (out) jobs_.stage_out_ended(spec.job_id);
    throw;
  }
  return StageReport{r, 0, 0};
}

std::shared_ptr<StageEngine::Run> StageEngine::make_run(StageRecord r) const {
  Places source = places_of(r.spec.source, r.spec.job_id, &gateway_, &jobs_);
  Places destination = places_of(r.spec.destination, r.spec.job_id, &gateway_, &jobs_);
  return std::make_shared<Run>(std::move(r), std::move(source), std::move(destination));
}

std::optional<StageRecord> StageEngine::under_way(const StageSpec& spec, bool destroy_after) const {
  const PlaceKey source = places_of(spec.source, spec.job_id).named;
  const PlaceKey destination = places_of(spec.destination, spec.job_id).named;
  std::lock_guard lock(mu_);
  for (auto& [id, run] : runs_) {
    const StageSpec& o = run->record.spec;
    if (run->cancel || o.job_id != spec.job_id || o.direction != spec.direction ||
        o.verify != spec.verify || run->record.destroy_after != destroy_after ||
        !(run->source.named == source) || !(run->destination.named == destination))
      continue;
    std::lock_guard run_lock(run->mu);
    if (!run->ended) return run->record;
  }
  return std::nullopt;
}

std::shared_ptr<StageEngine::Run> StageEngine::overlapping_before(const Run& run) const {
  std::lock_guard lock(mu_);
  for (auto& [id, other] : runs_) {
    if (other.get() == &run || other->order > run.order) continue;
    if (!overlap(run.destination, other->destination) && !overlap(run.destination, other->source) &&
        !overlap(run.source, other->destination))
      continue;
    std::lock_guard other_lock(other->mu);
    if (!other->ended) return other;
  }
  return nullptr;
}

void StageEngine::launch(std::shared_ptr<Run> run) {
  std::lock_guard lock(mu_);
  // Threads that have returned are joined here, so that they do not pile up; one still at work
  // (a destroy after its stage-out removes the namespace's tree) is left for later, never waited
  // for under mu_.
  for (auto it = runs_.begin(); it != runs_.end();) {
    if (it->second->exited) {
      if (it->second->thread.joinable()) it->second->thread.join();
      it = runs_.erase(it);
    } else {
      ++it;
    }
  }
  run->order = next_order_++;
  runs_[run->record.id] = run;
  run->thread = std::thread([this, run] {
    execute(*run);
    run->exited = true;
  });
}

StageReport StageEngine::report(const StageRecord& stored) const {
  std::shared_ptr<Run> run;
  {
    std::lock_guard lock(mu_);
    auto it = runs_.find(stored.id);
    if (it != runs_.end()) run = it->second;
  }
  StageReport out{stored, 0, 0};
  if (run) {
    std::lock_guard lock(run->mu);
    if (!run->ended) {
      out.record = run->record;
      out.record.bytes_done = run->bytes_done;
      out.record.files_done = run->files_done;
      out.record.failed = run->failed;
      out.bytes_per_s = run->rate;
    }
    out.bytes_moved = run->bytes_moved;
  }
  return out;
}

std::optional<StageReport> StageEngine::find(const std::string& id) const {
  auto r = store_.op(id);
  if (!r) return std::nullopt;
  return report(*r);
}

std::vector<StageReport> StageEngine::list(const std::string& job_id) const {
  std::vector<StageReport> out;
  for (auto& r : store_.ops(job_id)) out.push_back(report(r));
  return out;
}

StageReport StageEngine::cancel(const std::string& id) {
  auto r = store_.op(id);
  if (!r) throw AdminError(Err::not_found, "no staging operation '" + id + "'");
  std::shared_ptr<Run> run;
  {
    std::lock_guard lock(mu_);
    auto it = runs_.find(id);
    if (it != runs_.end()) run = it->second;
  }
  if (!run) return report(*r);  // ended
  run->cancel = true;
  std::unique_lock lock(run->mu);
  run->ended_cv.wait_for(lock, std::chrono::seconds(30), [&] { return run->ended; });
  lock.unlock();
  return report(*store_.op(id));
}

void StageEngine::cancel_job(const std::string& job_id, const Run* except) {
  // A begin() of the job that passed its check before the caller's Destroying was taken has
  // launched its copy once this is through; any later one is refused.
  { std::lock_guard barrier(begin_mu_); }
  std::vector<std::shared_ptr<Run>> runs;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, run] : runs_)
      if (run->record.spec.job_id == job_id && run.get() != except) runs.push_back(run);
  }
  for (auto& run : runs) run->cancel = true;
  for (auto& run : runs) {
    std::unique_lock lock(run->mu);
    run->ended_cv.wait_for(lock, std::chrono::seconds(30), [&] { return run->ended; });
  }
}

void StageEngine::execute(Run& run) {
  const std::string id = run.record.id;
  // A stage-out keeps its namespace from expiring under it until it ends (begun in begin() or
  // start(), before the run was launched).
  struct StagingOut {
    JobNamespaces* jobs;
    std::string job_id;
    ~StagingOut() {
      if (jobs) jobs->stage_out_ended(job_id);
    }
  } staging_out{run.record.spec.direction == StageDirection::out ? &jobs_ : nullptr,
                run.record.spec.job_id};
  auto end = [&](StageState state, const std::string& error) {
    std::vector<std::string> failed;
    {
      std::lock_guard lock(run.mu);
      failed = run.failed;
    }
    try {
      store_.finish(id, state, error, failed, now_s());
    } catch (const std::exception& e) {
      spdlog::error("stage {}: cannot record its end: {}", id, e.what());
    }
    std::lock_guard lock(run.mu);
    run.record.state = state;
    run.record.error = error;
    run.record.finished_s = now_s();
    run.ended = true;
    run.ended_cv.notify_all();
  };
  // Operations whose places overlap copy one after the other, in the order they began, each
  // queued until those before it have ended: two copies into one file would mix their bytes,
  // and a copy out of a tree being written would read files half written.
  while (auto before = overlapping_before(run)) {
    {
      std::unique_lock lock(before->mu);
      before->ended_cv.wait_for(lock, std::chrono::milliseconds(200),
                                [&] { return before->ended; });
    }
    if (stopping_) return;
    if (run.cancel) return end(StageState::cancelled, "cancelled while queued");
  }
  if (stopping_) return;
  // Wait for a slot among the operations that copy at once.
  while (!slots_.try_acquire_for(std::chrono::milliseconds(200))) {
    if (stopping_) return;
    if (run.cancel) return end(StageState::cancelled, "cancelled while queued");
  }
  struct Slot {
    std::counting_semaphore<64>& s;
    ~Slot() { s.release(); }
  } slot{slots_};

  {
    std::lock_guard lock(run.mu);
    run.record.state = StageState::running;
    run.bytes_done = run.record.bytes_done;
    run.files_done = run.record.files_done;
  }
  std::string error;
  std::string changed_ns;
  try {
    store_.set_state(id, StageState::running, now_s());
    bool in = run.record.spec.direction == StageDirection::in;
    Tree source = resolve(run.record.spec.source, !in, run.record.spec.job_id);
    Tree destination = resolve(run.record.spec.destination, in, run.record.spec.job_id);
    changed_ns = destination.ns;
    copy(run, source, destination);
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (broker_ && !changed_ns.empty())
    broker_->changed_elsewhere(changed_ns, {InvalidationBroker::item(v1::Invalidation::ALL, "")});
  if (stopping_ && !run.cancel) {
    spdlog::info("stage {}: stopped with the gateway; resumed at its next start", id);
    std::lock_guard lock(run.mu);
    run.ended = true;
    run.ended_cv.notify_all();
    return;
  }
  uint64_t failures;
  {
    std::lock_guard lock(run.mu);
    failures = run.failures;
  }
  StageState state = run.cancel       ? StageState::cancelled
                     : !error.empty() ? StageState::failed
                     : failures > 0   ? StageState::failed
                                      : StageState::done;
  if (state == StageState::failed && error.empty())
    error = std::to_string(failures) + " of " + std::to_string(run.record.files_total) +
            " entries could not be copied (see failed)";
  if (state == StageState::cancelled && error.empty()) error = "cancelled";
  spdlog::log(state == StageState::done ? spdlog::level::info : spdlog::level::warn,
              "stage {} of job {}: {} ({} bytes copied here){}{}", id, run.record.spec.job_id,
              to_string(state), run.bytes_moved.load(), error.empty() ? "" : ": ", error);
  // With destroy_after, the namespace goes before the copy is reported done: whoever waits for
  // "done" (Slurm's teardown, then perhaps a requeue that makes the job's namespace again, which
  // an idempotent create answers with this same one) must find it gone by then. A gateway that
  // stops in between resumes the copy at its start and finds it done with its namespace gone
  // (start()).
  if (state == StageState::done && run.record.destroy_after) {
    JobNamespaces::Destroying destroying(jobs_, run.record.spec.job_id);
    cancel_job(run.record.spec.job_id, &run);  // its other copies first, as a destroy does
    try {
      auto d =
          jobs_.destroy(run.record.spec.job_id, std::chrono::seconds(30), "its stage-out is done");
      if (!d.pending.empty())
        spdlog::warn("stage {}: job {}'s namespace destroyed; {} removals left for later", id,
                     run.record.spec.job_id, d.pending.size());
    } catch (const std::exception& e) {
      // This thread's own: an exception out of it would end the gateway.
      spdlog::error("stage {}: job {}'s namespace was not destroyed after its stage-out: {}", id,
                    run.record.spec.job_id, e.what());
    }
  }
  end(state, error);
}

namespace {

// Where a copy's root goes (the destination place `place` in `layout`): a file or symlink into an
// existing directory, else to the path itself.
std::string destination_root(Layout& layout, const std::string& place,
                             const std::string& source_root, Kind root_kind) {
  if (root_kind != Kind::dir) {
    auto d = layout.getattr(place);
    if (d && S_ISDIR(d->permissions)) return join_path(place, std::string(base_name(source_root)));
  }
  return place;
}

// What a copy of `entries` into `root` (a rerun over an earlier copy) takes nothing more for: the
// bytes and the number of the small files there already, which are made whole over them in one
// call (Layout::write_whole_files, up to what each source file adds), and of the directories
// there. A larger file is copied beside the one it replaces and renamed over it: both take room
// until then, so it counts whole.
std::pair<uint64_t, uint64_t> held_at_destination(Layout& layout, const std::string& root,
                                                  const std::vector<StageEntry>& entries) {
  constexpr std::size_t kBatch = 256;
  uint64_t bytes = 0, count = 0;
  for (std::size_t at = 0; at < entries.size(); at += kBatch) {
    const std::size_t end = std::min(entries.size(), at + kBatch);
    std::vector<std::string> paths;
    for (std::size_t i = at; i < end; ++i) paths.push_back(below(root, entries[i].path));
    auto attrs = layout.getattr_each(paths);
    for (std::size_t i = at; i < end && i - at < attrs.size(); ++i) {
      const auto& a = attrs[i - at];
      const StageEntry& e = entries[i];
      if (!a || kind_of(a->permissions) != e.kind) continue;
      if (e.kind == Kind::symlink || (e.kind == Kind::file && e.size > kBatchFileBytes)) continue;
      if (!e.path.empty() || e.kind != Kind::dir) ++count;  // counted as the walk counts
      if (e.kind == Kind::file) bytes += std::min<uint64_t>(a->size, e.size);
    }
  }
  return {bytes, count};
}

}  // namespace

void StageEngine::copy(Run& run, Tree& source, Tree& destination) {
  const std::string id = run.record.id;
  // A failure to record progress (the job store's disk full, an I/O error) stops the copy too.
  std::atomic<bool> store_failed{false};
  auto stop = [&] { return run.cancel.load() || stopping_.load() || store_failed.load(); };
  auto root_attrs = source.layout->getattr(source.root);
  if (!root_attrs)
    throw std::runtime_error("source " + run.record.spec.source + ": " +
                             errno_text(root_attrs.error()));
  const Kind root_kind = kind_of(root_attrs->permissions);

  // The walk, once: the source tree into the store.
  if (!run.record.walked) {
    std::vector<StageEntry> entries;
    uint64_t bytes = 0, files = 0;
    std::function<void(const std::string&, const sftp::Attrs&)> add = [&](const std::string& rel,
                                                                          const sftp::Attrs& a) {
      StageEntry e;
      e.path = rel;
      e.kind = kind_of(a.permissions);
      e.mode = a.permissions & 07777;
      e.mtime = a.mtime;
      if (e.kind == Kind::file) {
        if (!S_ISREG(a.permissions)) {
          spdlog::warn("stage {}: {} is not a file, directory or symlink: skipped", id,
                       below(source.root, rel));
          return;
        }
        e.size = a.size;
        bytes += a.size;
      }
      if (e.kind == Kind::symlink) {
        auto target = source.layout->readlink(below(source.root, rel));
        if (!target)
          throw std::runtime_error("reading symlink " + below(source.root, rel) + ": " +
                                   errno_text(target.error()));
        e.target = *target;
      }
      if (!rel.empty() || e.kind != Kind::dir) ++files;  // a source that is one file counts
      entries.push_back(e);
      if (e.kind != Kind::dir) return;
      if (stop()) throw std::runtime_error("stopped while walking the source");
      auto list = source.layout->readdir(below(source.root, rel));
      if (!list)
        throw std::runtime_error("listing " + below(source.root, rel) + ": " +
                                 errno_text(list.error()));
      for (auto& child : *list) {
        if (!is_valid_entry_name(child.name)) continue;
        add(rel.empty() ? child.name : rel + "/" + child.name, child.attrs);
      }
    };
    add("", *root_attrs);
    if (run.record.spec.direction == StageDirection::in) {
      if (auto job = jobs_.find(run.record.spec.job_id)) {
        uint64_t free_bytes =
            job->quota_bytes > job->bytes_used ? job->quota_bytes - job->bytes_used : 0;
        uint64_t free_inodes =
            job->quota_inodes > job->inodes_used ? job->quota_inodes - job->inodes_used : 0;
        uint64_t need_bytes = bytes, need_inodes = files;
        if (need_bytes > free_bytes || need_inodes > free_inodes) {
          // A copy made again over an earlier one (the rerun a failure asks for) replaces what
          // is there in place, which takes nothing more: only what the destination lacks counts.
          const auto held = held_at_destination(
              *destination.layout,
              destination_root(*destination.layout, destination.root, source.root, root_kind),
              entries);
          need_bytes -= std::min(need_bytes, held.first);
          need_inodes -= std::min(need_inodes, held.second);
        }
        if (need_bytes > free_bytes || need_inodes > free_inodes)
          throw std::runtime_error("the source holds " + std::to_string(bytes) + " bytes in " +
                                   std::to_string(files) + " entries, of which " +
                                   std::to_string(need_bytes) + " bytes and " +
                                   std::to_string(need_inodes) +
                                   " entries are not in the "
                                   "destination yet; job " +
                                   job->job_id + "'s quota has " + std::to_string(free_bytes) +
                                   " bytes and " + std::to_string(free_inodes) + " entries free");
      }
    }
    store_.set_walked(id, entries, bytes, files, now_s());
    std::lock_guard lock(run.mu);
    run.record.walked = true;
    run.record.bytes_total = bytes;
    run.record.files_total = files;
  }

  std::vector<StageEntry> entries = store_.entries(id);
  auto chunks = store_.chunks(id);
  const uint64_t chunk_bytes = options_.chunk_bytes;

  const std::string dest_root =
      destination_root(*destination.layout, destination.root, source.root, root_kind);
  // The destination's missing parents.
  {
    std::vector<std::string> missing;
    for (std::string p = parent_path(dest_root); p != "/"; p = parent_path(p)) {
      auto a = destination.layout->getattr(p);
      if (a) break;
      if (a.error() != ENOENT)
        throw std::runtime_error("destination " + p + ": " + errno_text(a.error()));
      missing.push_back(p);
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      auto made = destination.layout->mkdir(*it, 0755);
      if (!made && made.error() != EEXIST)
        throw std::runtime_error("making destination directory " + *it + ": " +
                                 errno_text(made.error()));
    }
  }

  // Counters as recorded, then the directories (parents first: the store sorts by path).
  uint64_t bytes_done = 0, files_done = 0;
  for (auto& e : entries) {
    if (e.done) {
      bytes_done += e.size;
      files_done += e.path.empty() && e.kind == Kind::dir ? 0 : 1;
    } else if (auto c = chunks.find(e.path); c != chunks.end()) {
      for (auto i : c->second) bytes_done += std::min(chunk_bytes, e.size - i * chunk_bytes);
    }
  }
  run.bytes_done = bytes_done;
  run.files_done = files_done;
  for (auto& e : entries) {
    if (e.kind != Kind::dir || e.done) continue;
    if (stop()) return;  // the resumed run makes the rest
    auto path = below(dest_root, e.path);
    auto made = destination.layout->mkdir(path, 0700);
    if (!made && made.error() == EEXIST) {
      auto a = destination.layout->getattr(path);
      if (a && S_ISDIR(a->permissions)) {
        // There already (an earlier copy's, given its source's mode at the end: a read-only
        // one's 0555): opened up for its owner, the storage account, which may then make files
        // in it without being root. The directories' pass at the end sets the source's mode.
        if ((a->permissions & S_IRWXU) != S_IRWXU && path != "/") {
          AttrChange open_up;
          open_up.mode = (a->permissions & 07777) | S_IRWXU;
          if (auto r = destination.layout->setattr(path, open_up, nullptr); !r)
            run.fail(e.path,
                     "opening up the directory there for writing: " + errno_text(r.error()));
        }
        continue;
      }
    }
    if (!made) run.fail(e.path, "making the directory: " + errno_text(made.error()));
  }

  // Files and symlinks: small ones whole, large ones chunk by chunk.
  struct BigFile {
    const StageEntry* entry;
    std::string path;  // where its bytes are written: its partial, renamed into place at the end
    bool resumed = false;
    std::once_flag opened;
    int open_error = 0;
    std::shared_ptr<OpenFile> src, dst;
    std::atomic<size_t> left{0};
    std::atomic<bool> failed{false};
  };
  struct Item {
    const StageEntry* entry;
    BigFile* big = nullptr;
    uint64_t chunk = UINT64_MAX;           // UINT64_MAX with `big`: only the finishing
    std::vector<const StageEntry*> small;  // several small files, read together (entry: null)
  };
  // A file's copy is made under .NAME.skein-partial beside it and renamed over NAME once whole,
  // so that an earlier version there (a rerun's results) stays whole until then, and no file is
  // half-copied under its name. Where the tree itself holds a file of that name, which the
  // partial would overwrite, the copy is made in place.
  std::unordered_set<std::string> copied_here;
  for (const StageEntry& e : entries) copied_here.insert(below(dest_root, e.path));
  auto partial_of = [](const std::string& dpath) {
    return join_path(parent_path(dpath), partial_name_of(base_name(dpath)));
  };
  auto copy_path_of = [&](const std::string& dpath) {
    std::string partial = partial_of(dpath);
    return copied_here.count(partial) ? dpath : partial;
  };
  std::deque<BigFile> bigs;
  std::vector<Item> items;
  std::vector<const StageEntry*> small;
  for (auto& e : entries) {
    if (e.done || e.kind == Kind::dir) continue;
    if (e.kind == Kind::file && e.size <= kBatchFileBytes) {
      small.push_back(&e);
      if (small.size() == kBatchFiles) {
        items.push_back({nullptr, nullptr, UINT64_MAX, std::move(small)});
        small.clear();
      }
      continue;
    }
    if (e.kind == Kind::symlink || e.size <= chunk_bytes) {
      items.push_back({&e, nullptr, UINT64_MAX, {}});
      continue;
    }
    auto& big = bigs.emplace_back();
    big.entry = &e;
    const std::string dpath = below(dest_root, e.path);
    big.path = copy_path_of(dpath);
    const uint64_t n = (e.size + chunk_bytes - 1) / chunk_bytes;
    std::set<uint64_t> recorded;
    if (auto c = chunks.find(e.path); c != chunks.end()) {
      // A resumed copy goes on only where the source is as walked and the copy is there (in
      // place, for chunks a gateway that copied so recorded).
      auto s = source.layout->getattr(below(source.root, e.path));
      auto d = destination.layout->getattr(big.path);
      bool placed = false;
      if (!d && d.error() == ENOENT && big.path != dpath) {
        // No partial: renamed into place before the run stopped, if the file there has the
        // source's size and time (given once it was in place), its last chunks perhaps not
        // recorded yet (progress is saved every record_every; a kill in between lost the record
        // of them, and the whole file was copied again). Anything else at the name (an older
        // file, its partial removed meanwhile) is no copy of this run's: the file starts afresh.
        auto there = destination.layout->getattr(dpath);
        if (there && S_ISREG(there->permissions) && as_walked(*there, e)) {
          big.path = dpath;
          d = there;
          placed = true;
        }
      }
      // In place with every chunk recorded (placed just now, or copied in place from the start):
      // only at the source's size.
      if (s && as_walked(*s, e) && d && S_ISREG(d->permissions) &&
          (big.path != dpath || c->second.size() < n || d->size == e.size)) {
        recorded = c->second;
        if (placed)  // every chunk is in it: only finishing is left
          for (uint64_t i = 0; i < n; ++i)
            if (recorded.insert(i).second)
              run.bytes_done += std::min(chunk_bytes, e.size - i * chunk_bytes);
        big.resumed = true;
      } else {
        store_.clear_chunks(id, e.path);
        for (auto i : c->second) run.bytes_done -= std::min(chunk_bytes, e.size - i * chunk_bytes);
      }
    }
    size_t before = items.size();
    for (uint64_t i = 0; i < n; ++i)
      if (!recorded.count(i)) items.push_back({&e, &big, i, {}});
    if (items.size() == before) items.push_back({&e, &big, UINT64_MAX, {}});
    big.left = items.size() - before;
  }
  if (!small.empty()) items.push_back({nullptr, nullptr, UINT64_MAX, std::move(small)});

  auto set_times = [&](const StageEntry& e, const std::string& path) -> int {
    AttrChange change;
    if (e.kind != Kind::symlink) change.mode = e.mode;
    change.atime_s = e.mtime;
    change.mtime_s = e.mtime;
    auto r = destination.layout->setattr(path, change, nullptr);
    return r ? 0 : r.error();
  };
  // What a file needs once all of it is there, with its mode and times: the checksum, the record.
  auto verify_and_record = [&](const StageEntry& e, const std::string& dpath) {
    if (run.record.spec.verify) {
      auto a = file_digest(*source.layout, below(source.root, e.path), stop);
      auto b = a ? file_digest(*destination.layout, dpath, stop) : a;
      if (stop()) return;  // verified by the resumed run
      if (!a) return run.fail(e.path, "verifying: reading the source: " + errno_text(a.error()));
      if (!b) return run.fail(e.path, "verifying: reading the copy: " + errno_text(b.error()));
      if (*a != *b)
        return run.fail(e.path, "verifying: the copy's SHA-256 differs from the source's");
    }
    run.done(e.path, true);
  };
  // What a file needs once all of it is there: mode and times, the checksum, the record.
  auto finish_file = [&](const StageEntry& e, const std::string& dpath) {
    if (int err = set_times(e, dpath))
      return run.fail(e.path, "setting mode and times: " + errno_text(err));
    verify_and_record(e, dpath);
  };
  auto copy_symlink = [&](const StageEntry& e) {
    auto dpath = below(dest_root, e.path);
    auto made = destination.layout->symlink(dpath, e.target);
    if (!made && made.error() == EEXIST) {
      auto now = destination.layout->readlink(dpath);
      if (!now || *now != e.target) {
        auto gone = destination.layout->unlink(dpath);
        if (!gone) return run.fail(e.path, "replacing what is there: " + errno_text(gone.error()));
        made = destination.layout->symlink(dpath, e.target);
      } else {
        made = Result<sftp::Attrs>(sftp::Attrs{});
      }
    }
    if (!made) return run.fail(e.path, "making the symlink: " + errno_text(made.error()));
    (void)set_times(e, dpath);  // a symlink's times are kept where the server lets them be set
    run.done(e.path, true);
  };
  // Makes the copy of `e` and writes into it what `next(offset)` gives, until it gives nothing
  // (or fails); then the file is finished, or failed with the cause. The bytes must be as many as
  // the walk found, and `source_now` (when given) finds the source still as walked after its
  // read: one rewritten meanwhile would leave a copy of two versions under the walk's mtime. A
  // run that stops meanwhile leaves the file for the resumed run.
  auto write_copy = [&](const StageEntry& e, auto&& next,
                        const std::function<std::string()>& source_now = {}) {
    auto dpath = below(dest_root, e.path);
    const std::string copy = copy_path_of(dpath);
    auto dst = destination.layout->create(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!dst) return run.fail(e.path, "creating the copy: " + errno_text(dst.error()));
    auto discard = [&] {  // a copy under its partial name that is not to be put in place
      if (copy != dpath) (void)destination.layout->unlink(copy);
    };
    auto& out = dst->file;
    int err = 0;
    if (dst->attrs.size != 0) {
      auto t = out->truncate(0);
      if (!t) err = t.error();
    }
    uint64_t offset = 0;
    bool stopped = false;
    while (!err) {
      if ((stopped = stop())) break;
      Result<SharedBytes> data = next(offset);
      if (!data) {
        err = data.error();
        break;
      }
      if (data->empty()) break;
      auto w = out->write(offset, *data);
      if (!w || *w != data->size()) {
        err = w ? EIO : w.error();
        break;
      }
      offset += data->size();
      run.bytes_moved += data->size();
    }
    std::string changed;
    if (!err && !stopped) {
      if (offset != e.size)
        changed =
            offset > e.size ? "it grew" : "it is shorter (" + std::to_string(offset) + " bytes)";
      else if (source_now)
        changed = source_now();
    }
    auto closed = out->close();
    if (!err && !closed) err = closed.error();
    if (stopped || !changed.empty()) {
      discard();
      if (stopped) return;
      return run.fail(e.path, "changed while it was copied (" + changed + ", the walk found " +
                                  std::to_string(e.size) + " bytes): run again");
    }
    if (!err && copy != dpath) {
      auto placed = destination.layout->rename(copy, dpath, 0);
      if (!placed) {
        discard();
        return run.fail(e.path, "putting the copy in place: " + errno_text(placed.error()));
      }
    }
    if (err) {
      discard();
      return run.fail(e.path, "copying: " + errno_text(err));
    }
    {
      std::lock_guard lock(run.mu);
      run.bytes_done += offset;
    }
    finish_file(e, dpath);
  };
  auto copy_whole = [&](const StageEntry& e) {
    auto src = source.layout->open(below(source.root, e.path), O_RDONLY);
    if (!src) return run.fail(e.path, "opening the source: " + errno_text(src.error()));
    write_copy(
        e,
        [&](uint64_t offset) {
          // As much as the walk found and one byte more: a file's end is seen in the same reply
          // (a read far past it would wait for replies that do not come), and one that grew is
          // seen by that byte (and read no further).
          if (offset > e.size) return Result<SharedBytes>(SharedBytes());
          uint64_t want = e.size - offset + 1;
          return (*src)->read(offset, static_cast<uint32_t>(std::min<uint64_t>(kReadPiece, want)));
        },
        [&]() -> std::string {
          auto now = (*src)->fstat();
          if (!now) return "cannot look at it again: " + errno_text(now.error());
          if (!as_walked(*now, e)) return "its size or mtime is not as walked";
          return "";
        });
    (void)(*src)->close();
  };
  // A small file whose contents were read already: written in one go.
  auto copy_data = [&](const StageEntry& e, const SharedBytes& data) {
    write_copy(e, [&](uint64_t offset) {
      return Result<SharedBytes>(offset == 0 ? data : SharedBytes());
    });
  };
  // Small files read together and made together (Layout::write_whole_files: each under
  // .NAME.skein-partial beside it, renamed into place with its mode and times). One that is not
  // as walked (grown, rewritten, gone, unreadable) is copied the plain way, and so is one the
  // destination did not make: that way says what is wrong with it. So is one whose partial name is
  // itself copied here (a tree holding both x and .x.skein-partial), which the partial would
  // overwrite.
  auto copy_small = [&](const std::vector<const StageEntry*>& files) {
    std::vector<std::string> paths;
    uint64_t largest = 0;
    for (const StageEntry* e : files) {
      paths.push_back(below(source.root, e->path));
      largest = std::max(largest, e->size);
    }
    auto got = source.layout->read_whole_files(paths, static_cast<uint32_t>(largest), false);
    std::vector<NewWholeFile> whole;
    std::vector<size_t> whole_at;
    for (size_t k = 0; k < files.size(); ++k) {
      const StageEntry& e = *files[k];
      if (k < got.size() && got[k] && S_ISREG(got[k]->attrs.permissions) &&
          got[k]->data.size() == e.size && as_walked(got[k]->attrs, e)) {
        const std::string dpath = below(dest_root, e.path);
        std::string partial = partial_of(dpath);
        if (copied_here.count(partial)) {
          try {
            copy_data(e, got[k]->data);
          } catch (const std::exception& ex) {
            run.fail(e.path, ex.what());
          }
          continue;
        }
        whole.push_back(
            {dpath, std::move(partial), got[k]->data, e.mode & 07777, e.mtime, e.mtime});
        whole_at.push_back(k);
        continue;
      }
      try {
        copy_whole(e);
      } catch (const std::exception& ex) {
        run.fail(e.path, ex.what());
      }
    }
    if (whole.empty()) return;
    auto made = destination.layout->write_whole_files(whole);
    for (size_t j = 0; j < whole.size(); ++j) {
      const StageEntry& e = *files[whole_at[j]];
      try {
        if (j < made.size() && made[j]) {
          run.bytes_moved += e.size;
          {
            std::lock_guard lock(run.mu);
            run.bytes_done += e.size;
          }
          verify_and_record(e, whole[j].path);
        } else {
          copy_data(e, whole[j].data);
        }
      } catch (const std::exception& ex) {
        run.fail(e.path, ex.what());
      }
    }
  };
  auto copy_chunk = [&](const Item& item) {
    BigFile& big = *item.big;
    const StageEntry& e = *item.entry;
    auto spath = below(source.root, e.path), dpath = below(dest_root, e.path);
    std::call_once(big.opened, [&] {
      auto src = source.layout->open(spath, O_RDONLY);
      if (!src) {
        big.open_error = src.error();
        run.fail(e.path, "opening the source: " + errno_text(src.error()));
        return;
      }
      big.src = *src;
      if (big.resumed) {
        // Only finishing it (every chunk recorded): looked at, not written, so a copy that has
        // its read-only mode already (set before a stop during its verify) is no failure.
        auto dst =
            destination.layout->open(big.path, item.chunk == UINT64_MAX ? O_RDONLY : O_WRONLY);
        if (dst)
          big.dst = *dst;
        else
          big.open_error = dst.error();
      } else {
        auto dst = destination.layout->create(big.path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (dst) {
          big.dst = dst->file;
          if (dst->attrs.size != 0) {
            auto t = big.dst->truncate(0);
            if (!t) big.open_error = t.error();
          }
        } else {
          big.open_error = dst.error();
        }
      }
      if (big.open_error) run.fail(e.path, "opening the copy: " + errno_text(big.open_error));
    });
    bool ok = !big.open_error && !big.failed;
    if (ok && item.chunk != UINT64_MAX) {
      uint64_t offset = item.chunk * chunk_bytes;
      uint64_t len = std::min(chunk_bytes, e.size - offset);
      uint64_t done = 0;
      while (ok && done < len) {
        if (stop()) {  // the chunk is left for the resumed run
          ok = false;
          break;
        }
        auto data = big.src->read(
            offset + done, static_cast<uint32_t>(std::min<uint64_t>(kReadPiece, len - done)));
        if (!data || data->empty()) {
          run.fail(e.path, data ? "the source is shorter than when it was walked"
                                : "reading: " + errno_text(data.error()));
          ok = false;
          break;
        }
        auto w = big.dst->write(offset + done, *data);
        if (!w) {
          run.fail(e.path, "writing: " + errno_text(w.error()));
          ok = false;
          break;
        }
        done += data->size();
        run.bytes_moved += data->size();
      }
      if (ok)
        run.chunk(e.path, item.chunk, len);
      else
        big.failed = true;
    }
    if (--big.left != 0) return;
    // The last of its chunks: the file is finished here, if its source is still as walked (one
    // rewritten while its chunks were copied would leave a copy of two versions).
    if (!big.open_error && !big.failed && item.chunk != UINT64_MAX) {
      auto now = big.src->fstat();
      if (!now || !as_walked(*now, e)) {
        big.failed = true;
        run.fail(e.path, now ? "changed while it was copied (its size or mtime is not as "
                               "walked): run again"
                             : "looking at the source again: " + errno_text(now.error()));
      }
    }
    if (!big.open_error && !big.failed) {
      auto a = big.dst->fstat();
      if (!a) {
        big.failed = true;
        run.fail(e.path, "looking at the copy: " + errno_text(a.error()));
      } else if (a->size < e.size) {
        big.failed = true;  // a chunk recorded that is not there: never done in silence
        run.fail(e.path, "the copy is " + std::to_string(a->size) + " bytes, the source " +
                             std::to_string(e.size));
      } else if (a->size > e.size) {
        auto t = big.dst->truncate(e.size);
        if (!t) {
          big.failed = true;
          run.fail(e.path, "truncating the copy: " + errno_text(t.error()));
        }
      }
    }
    Status closed = big.dst ? big.dst->close() : Status();
    if (big.src) (void)big.src->close();
    big.src.reset();
    big.dst.reset();
    if (big.open_error || big.failed) return;
    if (!closed) return run.fail(e.path, "closing the copy: " + errno_text(closed.error()));
    if (big.path != dpath) {
      auto placed = destination.layout->rename(big.path, dpath, 0);
      if (!placed)
        return run.fail(e.path, "putting the copy in place: " + errno_text(placed.error()));
    }
    finish_file(e, dpath);
  };

  std::atomic<size_t> next{0};
  std::atomic<unsigned> working{0};
  std::vector<std::thread> workers;
  unsigned n_workers =
      static_cast<unsigned>(std::min<size_t>(options_.threads, std::max<size_t>(1, items.size())));
  for (unsigned w = 0; w < n_workers; ++w) {
    ++working;
    workers.emplace_back([&] {
      for (;;) {
        size_t i = next++;
        if (i >= items.size()) break;
        const Item& item = items[i];
        // Stopping: what has started finishes, nothing new starts. A large file's handles are
        // closed by whoever takes its last item.
        if (!item.entry) {  // several small files
          try {
            if (!stop()) copy_small(item.small);
          } catch (const std::exception& e) {
            for (auto* f : item.small) run.fail(f->path, e.what());
          }
          continue;
        }
        if (stop()) {
          if (item.big) {
            // A chunk left out: the file is not whole, and whoever takes its last item must not
            // finish it (its chunks copied so far are recorded; a resume copies the rest).
            item.big->failed = true;
            if (--item.big->left == 0) {
              if (item.big->dst) (void)item.big->dst->close();
              if (item.big->src) (void)item.big->src->close();
            }
          }
          continue;
        }
        try {
          if (item.big)
            copy_chunk(item);
          else if (item.entry->kind == Kind::symlink)
            copy_symlink(*item.entry);
          else
            copy_whole(*item.entry);
        } catch (const std::exception& e) {
          run.fail(item.entry->path, e.what());
        }
      }
      --working;
    });
  }

  // Meanwhile: progress saved and the rate measured.
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> samples;
  auto save = [&] {
    StageStore::Progress p;
    {
      std::lock_guard lock(run.mu);
      p.done.swap(run.pending.done);
      p.chunks.swap(run.pending.chunks);
      p.bytes_done = run.bytes_done;
      p.files_done = run.files_done;
    }
    store_.record(id, p, now_s());
    auto now = std::chrono::steady_clock::now();
    samples.emplace_back(now, run.bytes_moved.load());
    while (samples.size() > 2 && now - samples.front().first > std::chrono::seconds(5))
      samples.pop_front();
    double secs = std::chrono::duration<double>(now - samples.front().first).count();
    std::lock_guard lock(run.mu);
    run.rate =
        secs > 0 ? static_cast<double>(samples.back().second - samples.front().second) / secs : 0;
  };
  // The workers are joined whatever happens here: a save that throws ends the copy (its error
  // is the stage's) once they have.
  std::exception_ptr store_error;
  auto save_or_stop = [&] {
    try {
      save();
    } catch (...) {
      if (!store_error) store_error = std::current_exception();
      store_failed = true;
    }
  };
  while (working > 0) {
    std::this_thread::sleep_for(options_.record_every);
    save_or_stop();
  }
  for (auto& t : workers) t.join();
  save_or_stop();
  if (store_error) std::rethrow_exception(store_error);
  if (stop()) return;

  // Directories last, deepest first: their modes (a read-only one took files before) and times
  // (copying into them changed those).
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->kind != Kind::dir || it->done) continue;
    auto path = below(dest_root, it->path);
    // The root of a namespace keeps its own mode (a job's is 0700: only its owner gets in).
    if (path == "/") {
      run.done(it->path, false);
      continue;
    }
    if (int err = set_times(*it, path)) {
      run.fail(it->path, "setting mode and times: " + errno_text(err));
      continue;
    }
    run.done(it->path, !it->path.empty());
  }
  save();
}

}  // namespace skein
