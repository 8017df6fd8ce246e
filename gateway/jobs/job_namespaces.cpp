// Job namespaces; see job_namespaces.hpp.
#include "jobs/job_namespaces.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <set>

#include "auth/token_digest.hpp"
#include "coherence/invalidation_broker.hpp"
#include "gateway.hpp"
#include "jobs/pool_claim.hpp"
#include "jobs/tree_remover.hpp"
#include "namespace/create_policy.hpp"
#include "namespace/namespace_fs.hpp"
#include "namespace/striped_layout.hpp"
#include "namespace/union_layout.hpp"

namespace skein {
namespace {

using Kind = AdminError::Kind;

[[noreturn]] void bad(const std::string& what) { throw AdminError(Kind::invalid_argument, what); }

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

std::string seconds_text(std::chrono::seconds s) { return std::to_string(s.count()) + " s"; }

bool same_settings(const JobRecord& a, const JobRecord& b) {
  return a.uid == b.uid && a.gid == b.gid && a.layout_kind == b.layout_kind &&
         a.stripe_size == b.stripe_size && a.backends == b.backends &&
         a.quota_bytes == b.quota_bytes && a.quota_inodes == b.quota_inodes;
}

constexpr auto kSaveEvery = std::chrono::seconds(2);
constexpr auto kRetryEvery = std::chrono::seconds(5);
constexpr auto kRecountEvery = std::chrono::seconds(10);  // namespaces not counted at the first try
constexpr int kRecountTries = 6;  // walks of a namespace that changes during each, before it stands
constexpr auto kReapEvery = std::chrono::seconds(60);

}  // namespace

std::string JobNamespaces::namespace_name(const std::string& job_id) { return "job-" + job_id; }

JobNamespaces::JobNamespaces(const JobsConfig& cfg, Gateway& gateway, InvalidationBroker* broker)
    : cfg_(cfg),
      gateway_(gateway),
      max_open_files_(gateway.config().max_open_files),
      broker_(broker) {
  try {
    store_ = JobStore::open(cfg_.database);
    identity_ = store_->identity();
  } catch (const sqlite::StoreError& e) {
    throw ConfigError(std::string("[jobs] database: ") + e.what());
  }
}

JobNamespaces::~JobNamespaces() {
  {
    std::lock_guard lock(wake_mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (recounter_.joinable()) recounter_.join();
  try {
    save_usage(true);
  } catch (const sqlite::StoreError& e) {
    spdlog::error("jobs: saving usage at shutdown: {}", e.what());
  }
}

std::shared_ptr<JobLayout> JobNamespaces::build_layout(const JobRecord& r,
                                                       std::string& error) const {
  std::vector<std::shared_ptr<Backend>> dirs;
  for (auto& name : r.backends) {
    auto base = gateway_.backend(name);
    if (!base) {
      error = "backend '" + name + "' is not configured any more";
      return nullptr;
    }
    auto view = base->subtree("/" + r.name);
    if (!view) {
      error = "backend '" + name + "': " + std::strerror(view.error());
      return nullptr;
    }
    dirs.push_back(*view);
  }
  std::shared_ptr<Layout> inner;
  if (r.layout_kind == "union") {
    std::vector<Branch> branches;
    for (auto& d : dirs) branches.push_back({d, BranchMode::read_write});
    inner = std::make_shared<UnionLayout>(std::move(branches), make_create_policy("mfs"));
  } else {
    inner = std::make_shared<StripedLayout>(std::move(dirs), r.stripe_size);
  }
  auto quota = std::make_shared<Quota>(r.quota_bytes, r.quota_inodes, r.bytes_used, r.inodes_used);
  return std::make_shared<JobLayout>(std::move(inner), r.uid, r.gid, std::move(quota));
}

JobNamespaces::Live& JobNamespaces::serve(const JobRecord& r,
                                          const std::vector<std::string>& digests) {
  std::string error;
  auto layout = build_layout(r, error);
  if (!layout) throw AdminError(Kind::failed_precondition, r.name + ": " + error);
  TokenSet tokens;
  for (auto& hex : digests) {
    TokenDigest d;
    if (TokenDigest::from_hex(hex, d)) tokens.add(d);
  }
  auto table = std::make_shared<const MountTable>(std::vector<Mount>{{"/", layout}});
  auto fs = std::make_shared<NamespaceFs>(r.name, std::move(tokens), table, max_open_files_);
  gateway_.registry().add(fs);
  Live& live = live_[r.name];
  live = Live{r, fs, layout, layout->quota()->generation()};
  return live;
}

void JobNamespaces::start() {
  // Said at the start where an admin looks: a backend of another gateway's pool.
  for (auto& pool : cfg_.pools)
    for (auto& name : pool.backends) (void)claimed(name, nullptr);
  std::lock_guard lock(mu_);
  for (auto& r : store_->jobs()) {
    if (gateway_.registry().find(r.name)) {
      // A namespace of the configuration took the name since (as create refuses): it stays
      // served, and the job's is kept unserved until it is destroyed or the other renamed.
      const std::string why = "a namespace named '" + r.name +
                              "' is in the gateway's configuration; rename that namespace";
      spdlog::error(
          "jobs: cannot serve {}: {} (its files are kept; `skeinctl ns destroy {}` "
          "removes it)",
          r.name, why, r.job_id);
      unserved_[r.name] = {r, why};
      continue;
    }
    try {
      serve(r, store_->credential_digests(r.name));
      to_recount_.insert(r.name);
      spdlog::info(
          "jobs: serving {} (owner {}:{}, {}, quota {} bytes / {} inodes, expires in {} s)", r.name,
          r.uid, r.gid, live_.at(r.name).layout->describe(), r.quota_bytes, r.quota_inodes,
          r.expires_s - now_s());
    } catch (const AdminError& e) {
      spdlog::error(
          "jobs: cannot serve {}: {} (its files are kept; `skeinctl ns destroy {}` removes it)",
          r.name, e.what(), r.job_id);
      unserved_[r.name] = {r, e.what()};
    }
  }
}

void JobNamespaces::start_housekeeping() {
  if (!thread_.joinable()) thread_ = std::thread([this] { housekeeping(); });
  if (!recounter_.joinable()) recounter_ = std::thread([this] { recounting(); });
}

bool JobNamespaces::stopping() const {
  std::lock_guard lock(wake_mu_);
  return stopping_;
}

void JobNamespaces::recounting() {
  for (;;) {
    try {
      if (recount()) return;
    } catch (const std::exception& e) {
      spdlog::error("jobs: recount: {}", e.what());
    }
    std::unique_lock lock(wake_mu_);
    if (wake_.wait_for(lock, kRecountEvery, [this] { return stopping_; })) return;
  }
}

JobRecord JobNamespaces::check(const JobRequest& q) const {
  JobRecord r;
  const std::string& id = q.job_id;
  if (id.empty()) bad("a job namespace needs a job id");
  if (id.size() > 64) bad("job id '" + id.substr(0, 64) + "...' is longer than 64 characters");
  if (id.front() == '.' || id.front() == '-' ||
      id.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos)
    bad("job id '" + id +
        "' may hold only letters, digits, '.', '_' and '-' (no '/'), and not start with '.' or "
        "'-'");
  r.job_id = id;
  r.name = namespace_name(id);
  if (q.uid == 0 && !cfg_.allow_root_owner)
    bad("uid 0 (root) may not own a job namespace (allow_root_owner = true in [jobs] allows it)");
  r.uid = q.uid;
  r.gid = q.gid;
  if (q.quota_bytes == 0) bad("quota_bytes must be more than 0");
  r.quota_bytes = q.quota_bytes;
  r.quota_inodes = q.quota_inodes ? q.quota_inodes : cfg_.default_quota_inodes;
  if (q.layout_kind.empty() || q.layout_kind == "striped")
    r.layout_kind = "striped";
  else if (q.layout_kind == "union")
    r.layout_kind = "union";
  else
    bad("layout must be 'striped' or 'union', not '" + q.layout_kind + "'");

  // The backends: a pool's, or named ones (each in a pool).
  const PoolConfig* pool = nullptr;
  std::vector<std::string> candidates;
  if (!q.backends.empty()) {
    std::set<std::string> seen;
    for (auto& name : q.backends) {
      const PoolConfig* in = nullptr;
      for (auto& p : cfg_.pools)
        if (std::find(p.backends.begin(), p.backends.end(), name) != p.backends.end()) in = &p;
      if (!gateway_.backend(name)) bad("unknown backend '" + name + "'");
      if (!in) bad("backend '" + name + "' is in no [[jobs.pool]]: job namespaces use pools only");
      if (!q.pool.empty() && in->name != q.pool)
        bad("backend '" + name + "' is not in pool '" + q.pool + "'");
      if (!seen.insert(name).second) bad("backend '" + name + "' is named twice");
      pool = pool ? pool : in;
      candidates.push_back(name);
    }
  } else {
    const std::string name = q.pool.empty() ? cfg_.default_pool : q.pool;
    pool = cfg_.pool(name);
    if (!pool) {
      std::vector<std::string> names;
      for (auto& p : cfg_.pools) names.push_back(p.name);
      bad("no pool '" + name + "' (pools: " + join(names) + ")");
    }
    candidates = pool->backends;
  }
  r.pool = pool->name;
  if (q.width > candidates.size())
    bad("width " + std::to_string(q.width) + " is more than the " +
        std::to_string(candidates.size()) + " backends " +
        (q.backends.empty() ? "of pool '" + pool->name + "'" : std::string("named")));
  if (r.layout_kind == "striped" && q.width && q.width < candidates.size() && q.backends.empty()) {
    // Spread the jobs over the pool: each starts at a place of its own.
    size_t start = std::hash<std::string>{}(id) % candidates.size();
    std::rotate(candidates.begin(), candidates.begin() + static_cast<long>(start),
                candidates.end());
    candidates.resize(q.width);
  } else if (q.width) {
    candidates.resize(q.width);
  }
  r.backends = candidates;
  r.stripe_size = q.stripe_size ? q.stripe_size : pool->stripe_size;
  if (r.stripe_size < 4096 || r.stripe_size % 4096 != 0)
    bad("stripe size must be a multiple of 4K, not " + std::to_string(r.stripe_size));

  auto lifetime = q.lifetime.count() ? q.lifetime : cfg_.default_lifetime;
  if (lifetime > cfg_.max_lifetime)
    bad("lifetime " + seconds_text(lifetime) + " is more than max_lifetime (" +
        seconds_text(cfg_.max_lifetime) + ")");
  for (auto& [k, v] : q.labels) {
    if (k.empty() || k.find_first_of("=\n") != std::string::npos)
      bad("label key '" + k + "' must be non-empty, without '=' or newlines");
    if (v.find('\n') != std::string::npos) bad("label '" + k + "' has a newline in its value");
  }
  r.labels = q.labels;
  r.created_s = now_s();
  r.expires_s = r.created_s + lifetime.count();
  return r;
}

JobNamespaces::Created JobNamespaces::create(const JobRequest& request) {
  JobRecord r = check(request);
  std::unique_lock lock(mu_);
  // A removal of an earlier namespace's directory under this name, or another create of it,
  // under way: it ends first.
  removed_.wait(lock,
                [&] { return removing_.count("/" + r.name) == 0 && creating_.count(r.name) == 0; });
  if (!live_.count(r.name) && gateway_.registry().find(r.name))
    throw AdminError(Kind::failed_precondition,
                     "a namespace named '" + r.name + "' is in the gateway's configuration: job " +
                         r.job_id + "'s namespace would take its place; rename that namespace");
  if (auto it = unserved_.find(r.name); it != unserved_.end())
    throw AdminError(Kind::failed_precondition,
                     "job " + r.job_id + " has a namespace (" + r.name +
                         ") that the gateway cannot serve: " + it->second.second +
                         "; destroy it first to make it anew");
  if (auto it = live_.find(r.name); it != live_.end()) {
    if (!same_settings(it->second.record, r))
      throw AdminError(Kind::already_exists,
                       "job " + r.job_id + " has a namespace already (" + r.name +
                           ") with other settings; destroy it first to make it anew");
    // Idempotent: the same namespace, and a fresh credential for whoever asks again.
    const std::string token = new_random_token();
    auto digest = TokenDigest::of(token);
    store_->add_credential(r.name, digest.hex(), "create again");
    it->second.fs->add_credential(digest);
    JobRecord current = it->second.record;
    auto u = it->second.layout->quota()->usage();
    current.bytes_used = u.bytes;
    current.inodes_used = u.inodes;
    return {current, false, token};
  }
  for (auto& name : r.backends) {
    auto b = gateway_.backend(name);
    if (!b->up())
      throw AdminError(Kind::failed_precondition,
                       "backend '" + name + "' is down: job " + r.job_id + "'s namespace not made");
  }
  // Its directory on every backend, made without mu_ held (a slow server holds up this create
  // only). One left from a create that did not finish belongs to no namespace: it goes first.
  creating_.insert(r.name);
  struct Creating {  // ends the create, under mu_, however it ends
    JobNamespaces& jobs;
    std::unique_lock<std::mutex>& lock;
    const std::string& name;
    bool ended = false;
    void end() {  // caller holds mu_
      jobs.creating_.erase(name);
      jobs.removed_.notify_all();
      ended = true;
    }
    ~Creating() {
      if (ended) return;
      if (!lock.owns_lock()) lock.lock();
      end();
    }
  } creating{*this, lock, r.name};
  lock.unlock();
  for (auto& name : r.backends) {
    std::string why;
    if (!claimed(name, &why))
      throw AdminError(Kind::failed_precondition, "backend '" + name + "': " + why + ": job " +
                                                      r.job_id + "'s namespace not made");
  }
  std::vector<std::string> made;
  auto undo = [&] {
    for (auto& name : made) (void)remove_tree(*gateway_.backend(name), "/" + r.name);
  };
  for (auto& name : r.backends) {
    auto b = gateway_.backend(name);
    auto st = b->mkdir("/" + r.name, 0700);
    if (!st && st.error() == EEXIST) {
      spdlog::warn("jobs: {} on backend {} is left from before: removing it first", r.name, name);
      st = remove_tree(*b, "/" + r.name);
      if (st) st = b->mkdir("/" + r.name, 0700);
    }
    if (!st) {
      undo();
      throw AdminError(Kind::failed_precondition, "backend '" + name + "': cannot make /" + r.name +
                                                      ": " + std::strerror(st.error()));
    }
    made.push_back(name);
  }
  lock.lock();
  // The directories are this namespace's now: a removal left pending for an earlier namespace of
  // the name (destroyed while a backend was down) would take them with it, and an orphan's count
  // of its time starts again should one be left.
  for (auto& name : r.backends) {
    store_->removal_done(name, "/" + r.name);
    store_->orphan_gone(name, "/" + r.name);
  }
  const std::string token = new_random_token();
  auto digest = TokenDigest::of(token);
  try {
    store_->insert(r, digest.hex(), "create");
  } catch (const sqlite::StoreError& e) {
    undo();
    throw AdminError(Kind::failed_precondition, std::string("job store: ") + e.what());
  }
  std::shared_ptr<JobLayout> layout;
  try {
    layout = serve(r, {digest.hex()}).layout;
  } catch (const AdminError&) {
    store_->remove(r.name, {});
    undo();
    throw;
  }
  spdlog::info("jobs: made {} for job {} (owner {}:{}, {}, quota {} bytes / {} inodes, {} s)",
               r.name, r.job_id, r.uid, r.gid, layout->describe(), r.quota_bytes, r.quota_inodes,
               r.expires_s - r.created_s);
  creating.end();
  lock.unlock();
  layout->prepare();  // a striped layout writes its stripe records now
  return {r, true, token};
}

std::vector<PendingRemoval> JobNamespaces::remove_now(std::vector<PendingRemoval> removals,
                                                      std::chrono::steady_clock::time_point until) {
  std::vector<PendingRemoval> left;
  for (auto& rm : removals) {
    auto b = gateway_.backend(rm.backend);
    if (!b || !b->up() || std::chrono::steady_clock::now() > until) {
      left.push_back(rm);
      continue;
    }
    if (!begin_removal(rm.path)) {
      store_->removal_done(rm.backend, rm.path);
      spdlog::info("jobs: {} on backend {} belongs to a namespace made anew: not removed", rm.path,
                   rm.backend);
      continue;
    }
    // Within the caller's wait (an admin's destroy answers in time): the rest stays pending.
    auto st = remove_tree(*b, rm.path, until);
    end_removal(rm.path);
    if (st) {
      store_->removal_done(rm.backend, rm.path);
      spdlog::info("jobs: removed {} on backend {}", rm.path, rm.backend);
    } else if (st.error() == ETIMEDOUT) {
      spdlog::info("jobs: removing {} on backend {}: the rest is removed later", rm.path,
                   rm.backend);
      left.push_back(rm);
    } else {
      store_->removal_failed(rm.backend, rm.path, std::strerror(st.error()));
      spdlog::warn("jobs: removing {} on backend {}: {} (retried later)", rm.path, rm.backend,
                   std::strerror(st.error()));
      left.push_back(rm);
    }
  }
  return left;
}

bool JobNamespaces::begin_removal(const std::string& path) {
  std::lock_guard lock(mu_);
  if (live_.count(path.substr(1)) || creating_.count(path.substr(1))) return false;
  removing_.insert(path);
  return true;
}

void JobNamespaces::end_removal(const std::string& path) {
  {
    std::lock_guard lock(mu_);
    removing_.erase(removing_.find(path));
  }
  removed_.notify_all();
}

JobNamespaces::Destroyed JobNamespaces::destroy(const std::string& job_id,
                                                std::chrono::milliseconds wait, const char* why) {
  return destroy_if(job_id, wait, why, nullptr);
}

JobNamespaces::Destroyed JobNamespaces::destroy_if(
    const std::string& job_id, std::chrono::milliseconds wait, const char* why,
    const std::function<bool(const JobRecord&)>& still) {
  const auto until = std::chrono::steady_clock::now() + wait;
  const std::string name = namespace_name(job_id);
  std::vector<PendingRemoval> removals;
  {
    std::unique_lock lock(mu_);
    removed_.wait(lock, [&] { return creating_.count(name) == 0; });  // a create ends first
    auto it = live_.find(name);
    if (it != live_.end() && still && !still(it->second.record)) return {};
    auto un = unserved_.find(name);
    if (it == live_.end() && un != unserved_.end() && !still) {
      // Never served since the start: its row goes, and its directories on the backends the
      // gateway still has.
      for (auto& b : un->second.first.backends)
        if (gateway_.backend(b)) removals.push_back({b, "/" + name, name, now_s(), 0, ""});
      store_->remove(name, removals);
      spdlog::info("jobs: destroyed {}, which could not be served ({})", name, why);
      unserved_.erase(un);
    } else if (it == live_.end()) {
      // Already gone; what may be left of it on a backend is removed as usual.
      Destroyed d;
      for (auto& p : store_->pending_removals())
        if (p.ns == name) d.pending.push_back(p.backend + ":" + p.path);
      return d;
    } else {
      // The database first: should its write fail (a full disk), the namespace stays whole and
      // served, and the error goes to the caller. Then out of service: new calls are refused,
      // the mounts lose their streams and caches.
      for (auto& b : it->second.record.backends)
        removals.push_back({b, "/" + name, name, now_s(), 0, ""});
      store_->remove(name, removals);
      gateway_.registry().remove(name);
      if (broker_) broker_->end_namespace(name, "namespace " + name + " was destroyed");
      spdlog::info("jobs: destroyed {} ({})", name, why);
      live_.erase(it);
      mounted_past_expiry_.erase(name);
    }
  }
  Destroyed d;
  d.existed = true;
  for (auto& rm : remove_now(std::move(removals), until))
    d.pending.push_back(rm.backend + ":" + rm.path);
  return d;
}

JobRecord JobNamespaces::renew(const std::string& job_id, std::chrono::seconds lifetime) {
  if (lifetime.count() <= 0) bad("a renewal needs a lifetime of more than 0 s");
  lifetime = std::min(lifetime, cfg_.max_lifetime);  // none goes further; and no overflow
  const std::string name = namespace_name(job_id);
  {
    std::lock_guard lock(mu_);
    if (auto u = unserved_.find(name); u != unserved_.end())
      throw AdminError(Kind::failed_precondition, "job " + job_id + "'s namespace (" + name +
                                                      ") cannot be served: " + u->second.second);
    auto it = live_.find(name);
    if (it == live_.end() || destroying_.count(job_id))
      throw AdminError(Kind::not_found, "no job namespace for job '" + job_id + "'");
    JobRecord& r = it->second.record;
    const int64_t now = now_s();
    const int64_t until = std::min(now + lifetime.count(), r.created_s + cfg_.max_lifetime.count());
    if (until > r.expires_s) {
      store_->set_expiry(name, until);
      spdlog::info("jobs: {} renewed: expires in {} s (was {} s)", name, until - now,
                   r.expires_s - now);
      r.expires_s = until;
      mounted_past_expiry_.erase(name);  // not expired now; said again should it expire mounted
    }
  }
  auto current = find(job_id);
  if (!current) throw AdminError(Kind::not_found, "no job namespace for job '" + job_id + "'");
  return *current;
}

std::optional<JobRecord> JobNamespaces::find(const std::string& job_id) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(namespace_name(job_id));
  if (it == live_.end()) return std::nullopt;
  JobRecord r = it->second.record;
  auto u = it->second.layout->quota()->usage();
  r.bytes_used = u.bytes;
  r.inodes_used = u.inodes;
  return r;
}

std::vector<JobRecord> JobNamespaces::list() const {
  std::vector<JobRecord> out;
  std::lock_guard lock(mu_);
  for (auto& [name, live] : live_) {
    JobRecord r = live.record;
    auto u = live.layout->quota()->usage();
    r.bytes_used = u.bytes;
    r.inodes_used = u.inodes;
    out.push_back(std::move(r));
  }
  return out;
}

std::string JobNamespaces::describe(const std::string& ns) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(ns);
  return it == live_.end() ? "" : it->second.layout->describe();
}

std::vector<std::string> JobNamespaces::pending_removals(const std::string& ns) const {
  std::vector<std::string> out;
  for (auto& p : store_->pending_removals())
    if (p.ns == ns) out.push_back(p.backend + ":" + p.path);
  return out;
}

std::shared_ptr<NamespaceFs> JobNamespaces::namespace_of(const std::string& job_id) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(namespace_name(job_id));
  return it == live_.end() ? nullptr : it->second.fs;
}

JobNamespaces::NodeCredential JobNamespaces::issue_node_credential(const std::string& job_id,
                                                                   const std::string& node) {
  const std::string name = namespace_name(job_id);
  auto gone = [&] { return AdminError(Kind::not_found, "no job namespace for job " + job_id); };
  std::shared_ptr<NamespaceFs> fs;
  {
    std::unique_lock lock(mu_);
    removed_.wait(lock, [&] { return creating_.count(name) == 0; });
    auto it = live_.find(name);
    if (it == live_.end()) throw gone();
    fs = it->second.fs;
  }
  const std::string token = new_random_token();
  auto digest = TokenDigest::of(token);
  // Written without mu_: each is a sync to disk, a job's start asks one per node at once, and
  // every other job's calls take mu_.
  try {
    store_->add_credential(name, digest.hex(), node.empty() ? "node" : node);
  } catch (const sqlite::StoreError&) {
    std::lock_guard lock(mu_);
    auto it = live_.find(name);
    if (it == live_.end() || it->second.fs != fs) throw gone();  // destroyed meanwhile
    throw;
  }
  std::lock_guard lock(mu_);
  auto it = live_.find(name);
  if (it == live_.end() || it->second.fs != fs) {
    // Destroyed meanwhile (the row went with it), or destroyed and made anew: the new
    // namespace must not take the old one's credential at the next start.
    if (it != live_.end()) store_->remove_credential(name, digest.hex());
    throw gone();
  }
  fs->add_credential(digest);
  spdlog::info("jobs: mount credential of {} issued to node {}", name,
               node.empty() ? "(no name)" : node);
  return {name, token, it->second.record.uid, it->second.record.gid};
}

// --- housekeeping ----------------------------------------------------------------------------

void JobNamespaces::save_usage(bool all) {
  // Under mu_: a namespace destroyed and made anew meanwhile must not get the old one's usage.
  // All in one transaction: a sync to disk per namespace, under the lock every job's calls take,
  // was a sync per job every 2 s while many jobs ran.
  std::lock_guard lock(mu_);
  std::vector<JobStore::Usage> usage;
  std::vector<std::pair<Live*, uint64_t>> saved;
  for (auto& [name, live] : live_) {
    auto gen = live.layout->quota()->generation();
    if (!all && gen == live.saved_generation) continue;
    auto u = live.layout->quota()->usage();
    usage.push_back({name, u.bytes, u.inodes});
    saved.emplace_back(&live, gen);
  }
  store_->save_usage(usage);
  for (auto& [live, gen] : saved) live->saved_generation = gen;
}

bool JobNamespaces::recount() {
  // After a start the saved usage may be behind (the gateway died between saves): count again.
  // A namespace that changed while it was walked, or could not be walked, is counted again at a
  // later call, until every one of them has been; one that changed during kRecountTries walks
  // keeps the saved usage.
  std::vector<std::pair<std::string, std::shared_ptr<JobLayout>>> todo;
  {
    std::lock_guard lock(mu_);
    for (auto it = to_recount_.begin(); it != to_recount_.end();) {
      auto live = live_.find(*it);
      if (live == live_.end()) {
        it = to_recount_.erase(it);  // destroyed
        continue;
      }
      todo.emplace_back(*it, live->second.layout);
      ++it;
    }
  }
  bool all = true;
  for (auto& [name, layout] : todo) {
    auto before = layout->quota()->generation();
    // Only with every backend up, before the walk and after it: a union's listing leaves a
    // branch that is down out, and its files would not count.
    const auto backends = layout->inner()->backends();
    auto all_up = [&] {
      return std::all_of(backends.begin(), backends.end(), [](auto& b) { return b->up(); });
    };
    auto counted = all_up() ? count_tree(*layout->inner(), "/", [this] { return stopping(); })
                            : Result<TreeCount>::failure(EHOSTDOWN);
    if (counted && !all_up()) counted = Result<TreeCount>::failure(EHOSTDOWN);
    if (!counted && counted.error() == ECANCELED) return false;  // the gateway stops
    if (!counted) {
      spdlog::warn("jobs: cannot recount {}: {} (the saved usage stands; tried again later)", name,
                   std::strerror(counted.error()));
      all = false;
      continue;
    }
    // Set only if nothing changed since the walk began, checked in the same hold as the setting
    // (a change counted between a check and a setting would be lost); else counted again later.
    const auto u = layout->quota()->usage();
    const bool set = layout->quota()->set_used_if(before, counted->bytes, counted->inodes);
    if (!set && ++recount_races_[name] < kRecountTries) {
      all = false;
      continue;
    }
    recount_races_.erase(name);
    {
      std::lock_guard lock(mu_);
      to_recount_.erase(name);
    }
    if (!set) {
      // Busy (a job writing as it runs): every walk raced. The saved usage stands, short at
      // most of what the last moments before the stop changed.
      spdlog::warn(
          "jobs: {} changed during each of {} walks to recount it: its usage stays as saved, "
          "with the changes since the start ({} bytes in {} inodes)",
          name, kRecountTries, u.bytes, u.inodes);
    } else if (u.bytes != counted->bytes || u.inodes != counted->inodes)
      spdlog::info("jobs: {} holds {} bytes in {} inodes (saved: {} in {})", name, counted->bytes,
                   counted->inodes, u.bytes, u.inodes);
  }
  return all;
}

JobNamespaces::Destroying::Destroying(JobNamespaces& jobs, std::string job_id)
    : jobs_(jobs), job_id_(std::move(job_id)) {
  std::lock_guard lock(jobs_.mu_);
  jobs_.destroying_.insert(job_id_);
}

JobNamespaces::Destroying::Destroying(JobNamespaces& jobs, std::string job_id, Marked)
    : jobs_(jobs), job_id_(std::move(job_id)) {}

JobNamespaces::Destroying::~Destroying() {
  std::lock_guard lock(jobs_.mu_);
  jobs_.destroying_.erase(jobs_.destroying_.find(job_id_));
}

void JobNamespaces::stage_began(const std::string& job_id, bool out) {
  std::lock_guard lock(mu_);
  if (destroying_.count(job_id))
    throw AdminError(Kind::failed_precondition,
                     "the namespace of job " + job_id + " is being destroyed: no copy begins");
  if (out) staging_out_.insert(job_id);
}

void JobNamespaces::set_copy_stopper(std::function<void(const std::string&)> stop) {
  std::lock_guard lock(stopper_mu_);
  copy_stopper_ = std::move(stop);
}

void JobNamespaces::stage_out_ended(const std::string& job_id) {
  std::lock_guard lock(mu_);
  staging_out_.erase(staging_out_.find(job_id));
}

void JobNamespaces::expire() {
  std::vector<JobRecord> expired;
  {
    std::lock_guard lock(mu_);
    auto now = now_s();
    for (auto& [name, live] : live_) {
      if (live.record.expires_s > now) continue;
      const std::string& id = live.record.job_id;
      if (staging_out_.count(id)) {
        if (expiry_deferred_.insert(id).second)
          spdlog::info(
              "jobs: {} expired while its results are staged out: destroyed once that ends", name);
        continue;
      }
      expiry_deferred_.erase(id);
      expired.push_back(live.record);
    }
  }
  // Each destroy may take a while (a large tree), and the list is of a moment ago: a namespace
  // is destroyed only if it is still the one found expired (not destroyed and made anew since)
  // and no stage-out of its results began meanwhile. From then on none may begin, and its copies
  // stop before its files go, as at an admin's destroy.
  for (auto& seen : expired) {
    const std::string& id = seen.job_id;
    auto same = [&](const JobRecord& r) {
      return r.created_s == seen.created_s && r.expires_s == seen.expires_s;
    };
    // A mount of it means its job runs on (a Slurm job whose time limit was raised after the
    // namespace was made, past the day of slack its lifetime has): kept until no mount has it,
    // but never past max_lifetime from when it was made.
    const int64_t hard_end = seen.created_s + cfg_.max_lifetime.count();
    if (broker_ && now_s() < hard_end && broker_->mounts(seen.name) > 0) {
      std::lock_guard lock(mu_);
      if (mounted_past_expiry_.insert(seen.name).second)
        spdlog::info(
            "jobs: {} expired while mounted: destroyed once no mount has it, in {} s at the "
            "latest (max_lifetime)",
            seen.name, hard_end - now_s());
      continue;
    }
    {
      std::lock_guard lock(mu_);
      auto it = live_.find(seen.name);
      if (it == live_.end() || !same(it->second.record) || staging_out_.count(id)) continue;
      destroying_.insert(id);  // under the same hold as the checks
    }
    const Destroying destroying(*this, id, Destroying::Marked{});
    spdlog::info("jobs: {} expired: destroying it", seen.name);
    {
      std::lock_guard lock(stopper_mu_);
      if (copy_stopper_) copy_stopper_(id);
    }
    destroy_if(id, std::chrono::milliseconds(30000), "its lifetime is over", same);
  }
}

void JobNamespaces::retry_removals() {
  auto pending = store_->pending_removals();
  if (pending.empty()) return;
  remove_now(std::move(pending), std::chrono::steady_clock::now() + std::chrono::seconds(30));
}

void JobNamespaces::reap_orphans() {
  std::set<std::string> known;  // the namespaces' directories
  {
    std::lock_guard lock(mu_);
    for (auto& [name, live] : live_) known.insert(name);
    for (auto& [name, unserved] : unserved_) known.insert(name);  // its files stay
  }
  for (auto& p : store_->pending_removals()) known.insert(p.path.substr(1));
  const int64_t now = now_s();
  for (auto& pool : cfg_.pools) {
    for (auto& bname : pool.backends) {
      auto b = gateway_.backend(bname);
      if (!b || !b->up() || !claimed(bname, nullptr)) continue;
      auto entries = b->list_dir("/");
      if (!entries) continue;
      for (auto& e : *entries) {
        const std::string& n = e.filename;
        if (n.rfind("job-", 0) != 0 || known.count(n)) continue;
        const std::string path = "/" + n;
        int64_t first = store_->orphan_seen(bname, path, now);
        if (first == now) {
          spdlog::warn(
              "jobs: {} on backend {} belongs to no job namespace: an orphan, removed "
              "after {} s",
              path, bname, cfg_.orphan_grace.count());
          continue;
        }
        if (now - first < cfg_.orphan_grace.count()) continue;
        if (!begin_removal(path)) continue;  // a namespace of the name was made meanwhile
        auto st = remove_tree(*b, path);
        end_removal(path);
        if (st) {
          store_->orphan_gone(bname, path);
          spdlog::info("jobs: reaped the orphan {} on backend {}", path, bname);
        }
      }
    }
  }
}

bool JobNamespaces::claimed(const std::string& name, std::string* why) {
  std::lock_guard lock(claims_mu_);
  if (claimed_.count(name)) return true;
  auto b = gateway_.backend(name);
  std::string refusal;
  bool foreign = false;
  if (!b) {
    refusal = "no such backend";
  } else if (!b->up()) {
    refusal = "down";
  } else {
    char host[256] = "";
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    const auto claim =
        claim_pool_backend(*b, identity_, pool_claim_text(identity_, cfg_.database, host, now_s()));
    switch (claim.kind) {
      case PoolClaim::Kind::made:
        spdlog::info("jobs: backend {}'s root now names this gateway's job database ({}) in {}",
                     name, identity_, kPoolClaimPath);
        [[fallthrough]];
      case PoolClaim::Kind::ours:
        claimed_.insert(name);
        if (refused_.erase(name)) spdlog::info("jobs: backend {} is this gateway's again", name);
        return true;
      case PoolClaim::Kind::foreign:
        foreign = true;
        refusal = std::string("its root's ") + std::string(kPoolClaimPath) +
                  (claim.detail.empty() ? " names no job database"
                                        : " names another gateway's job database (" + claim.detail +
                                              "; this one's is " + identity_ + ")") +
                  ": two gateways must not share a pool's backends. This gateway makes no job "
                  "directory there and removes none; if that database is gone for good, remove "
                  "the file on the server to hand the backend to this one";
        break;
      case PoolClaim::Kind::failed:
        refusal = "cannot tell whose job directories it holds: " + claim.detail;
        break;
    }
  }
  if (foreign || (b && b->up())) {  // a backend that is down says so elsewhere
    auto& said = refused_[name];
    if (said.why != refusal) {
      said = {refusal, foreign};
      if (foreign)
        spdlog::error("jobs: backend {}: {}", name, refusal);
      else
        spdlog::warn("jobs: backend {}: {}", name, refusal);
    }
  }
  if (why) *why = refusal;
  return false;
}

JobNamespaces::PoolBackendState JobNamespaces::pool_backend_state(const std::string& name) {
  PoolBackendState state;
  for (auto& pool : cfg_.pools)
    if (std::find(pool.backends.begin(), pool.backends.end(), name) != pool.backends.end())
      state.pool = pool.name;
  if (state.pool.empty()) return state;
  std::lock_guard lock(claims_mu_);
  state.ours = claimed_.count(name) != 0;
  if (!state.ours) {
    auto it = refused_.find(name);
    state.foreign = it != refused_.end() && it->second.foreign;
    state.why_not =
        it != refused_.end() ? it->second.why : "not looked at yet (down since the start?)";
  }
  return state;
}

void JobNamespaces::housekeeping() {
  using Clock = std::chrono::steady_clock;
  auto next_save = Clock::now(), next_retry = Clock::now(), next_reap = Clock::now();
  for (;;) {
    {
      std::unique_lock lock(wake_mu_);
      if (wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) return;
    }
    try {
      expire();
      const auto now = Clock::now();
      if (now >= next_save) {
        save_usage(false);
        next_save = now + kSaveEvery;
      }
      if (now >= next_retry) {
        retry_removals();
        next_retry = now + kRetryEvery;
      }
      if (now >= next_reap) {
        reap_orphans();
        // Often enough that an orphan goes within twice its grace, even a short one.
        next_reap = now + std::min<Clock::duration>(
                              kReapEvery, std::max<Clock::duration>(std::chrono::seconds(1),
                                                                    cfg_.orphan_grace / 2));
      }
    } catch (const std::exception& e) {
      spdlog::error("jobs: housekeeping: {}", e.what());
    }
  }
}

}  // namespace skein
