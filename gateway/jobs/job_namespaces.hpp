// Per-job scratch namespaces: made, owned, bounded and removed through the Admin API.
//
// A job namespace "job-<id>" lives in a directory of that name below the root of each of its
// backends (backends of a [[jobs.pool]], which serve no static namespace), striped over them or a
// union of them, behind a JobLayout (the job's owner on every file, the quota). Its settings, the
// digests of its credentials, its usage and what is left to remove after a destroy are in SQLite
// (JobStore): a create is committed before it is answered, and a restart, even after kill -9,
// finds everything again. A housekeeping thread saves usage, recounts it after a start, destroys
// namespaces whose lifetime is over, retries removals on backends that were down, and reaps
// directories no namespace claims once they have been orphans for the grace period.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "config/gateway_config.hpp"
#include "jobs/job_layout.hpp"
#include "jobs/job_store.hpp"

namespace skein {

class Gateway;
class InvalidationBroker;
class NamespaceFs;

struct JobRequest {
  std::string job_id;
  uint32_t uid = 0, gid = 0;
  std::string layout_kind;   // "striped" (""), "union"
  uint64_t stripe_size = 0;  // 0: the pool's
  uint32_t width = 0;        // 0: all
  std::string pool;          // "": the default (or the pool of `backends`)
  std::vector<std::string> backends;
  uint64_t quota_bytes = 0;
  uint64_t quota_inodes = 0;         // 0: the default
  std::chrono::seconds lifetime{0};  // 0: the default
  std::map<std::string, std::string> labels;
};

class JobNamespaces {
 public:
  // Opens the store of `cfg.database`; throws ConfigError when it cannot.
  JobNamespaces(const JobsConfig& cfg, Gateway& gateway, InvalidationBroker* broker);
  ~JobNamespaces();

  // Serves the namespaces the store holds (after the backends are connected).
  void start();
  // Starts housekeeping: expiry, usage saved, removals retried, orphans reaped; and beside it the
  // recount of the usage of the namespaces served at start. After the stage engine has resumed
  // the copies a stopped gateway left running: an expired namespace whose stage-out is to resume
  // must be known to be staging out before expiry looks at it.
  void start_housekeeping();

  // "job-<id>".
  static std::string namespace_name(const std::string& job_id);

  struct Created {
    JobRecord record;
    bool created = false;    // false: the job had it already (same settings)
    std::string credential;  // a token for the caller, shown once
  };
  // Throws AdminError: invalid_argument (bad input: nothing changed), already_exists (the job
  // has a namespace with other settings), failed_precondition (a backend is down or refused).
  Created create(const JobRequest& request);

  struct Destroyed {
    bool existed = false;
    std::vector<std::string> pending;  // "backend:path" left to remove later
  };
  // Out of service at once; files removed within `wait` (what is not is retried later).
  Destroyed destroy(const std::string& job_id, std::chrono::milliseconds wait, const char* why);

  // While one lives, the job's namespace is being destroyed (an admin's destroy, a stage-out's
  // destroy after it, expiry): no copy of the job may begin (stage_began refuses it). Taken before
  // the job's copies are stopped and held until its files are gone, so that none begins between.
  class Destroying {
   public:
    Destroying(JobNamespaces& jobs, std::string job_id);
    ~Destroying();
    Destroying(const Destroying&) = delete;
    Destroying& operator=(const Destroying&) = delete;

   private:
    friend class JobNamespaces;
    struct Marked {};  // destroying_ holds the job already (expire(), under mu_)
    Destroying(JobNamespaces& jobs, std::string job_id, Marked);
    JobNamespaces& jobs_;
    const std::string job_id_;
  };

  // A copy of the job (StageEngine::begin) is about to begin. Throws AdminError
  // (failed_precondition) while its namespace is being destroyed (Destroying). A stage-out is
  // under way (queued or copying) from here until stage_out_ended: the namespace does not expire
  // meanwhile (its results are being copied out); it is destroyed at the first expiry check after
  // the last one ends.
  void stage_began(const std::string& job_id, bool out);
  void stage_out_ended(const std::string& job_id);
  // What stops the job's copies (StageEngine::cancel_job) before an expired namespace's files
  // go, as an admin's destroy stops them; empty: none. Setting it waits for a call of the one
  // before to end.
  void set_copy_stopper(std::function<void(const std::string& job_id)> stop);

  // Moves the namespace's expiry to `lifetime` from now, never earlier than it is and never past
  // max_lifetime from when it was made; the record after it. Throws AdminError: invalid_argument
  // (no lifetime), not_found (no live namespace: none, being destroyed), failed_precondition (one
  // the gateway cannot serve).
  JobRecord renew(const std::string& job_id, std::chrono::seconds lifetime);

  // With live usage.
  std::optional<JobRecord> find(const std::string& job_id) const;
  std::vector<JobRecord> list() const;
  std::string describe(const std::string& ns) const;
  std::vector<std::string> pending_removals(const std::string& ns) const;
  // The live namespace of a job, or null.
  std::shared_ptr<NamespaceFs> namespace_of(const std::string& job_id) const;

  struct NodeCredential {
    std::string ns, token;
    uint32_t uid = 0, gid = 0;
  };
  // A fresh credential of the job's namespace for a node (its certificate's name in `node`).
  // Throws AdminError not_found.
  NodeCredential issue_node_credential(const std::string& job_id, const std::string& node);

  // The pool backend `name` serves ("" for none), and whether its claim is this database's,
  // or why not (as last said in the log), as last looked at: without a look of its own.
  struct PoolBackendState {
    std::string pool;
    bool ours = false;
    bool foreign = false;  // another database's claim (or one naming none): not used
    std::string why_not;
  };
  PoolBackendState pool_backend_state(const std::string& name);

  JobStore& store() { return *store_; }
  const JobsConfig& config() const { return cfg_; }

 private:
  struct Live {
    JobRecord record;
    std::shared_ptr<NamespaceFs> fs;
    std::shared_ptr<JobLayout> layout;
    uint64_t saved_generation = 0;
  };
  // Builds the layout over the backends' job directories and serves it. Caller holds mu_.
  Live& serve(const JobRecord& record, const std::vector<std::string>& digests);
  std::shared_ptr<JobLayout> build_layout(const JobRecord& record, std::string& error) const;
  JobRecord check(const JobRequest& request) const;  // validated, defaults filled in
  // Removes what `removals` name; returns those that are left. A removal of a namespace's
  // directory that a namespace of the same name has taken over since (made anew) is dropped.
  std::vector<PendingRemoval> remove_now(std::vector<PendingRemoval> removals,
                                         std::chrono::steady_clock::time_point until);
  // Around each removal of a directory "/NAME" on a backend (a destroy's, a retried one, an
  // orphan's): begin_removal says no, and the removal must not be made, while a namespace NAME
  // is live or being made; otherwise a create of NAME waits until end_removal.
  bool begin_removal(const std::string& path);
  void end_removal(const std::string& path);

  // destroy(), made only while `still` holds of the live namespace's record (checked under mu_,
  // where it is taken out of service); null: always.
  Destroyed destroy_if(const std::string& job_id, std::chrono::milliseconds wait, const char* why,
                       const std::function<bool(const JobRecord&)>& still);

  void housekeeping();
  void save_usage(bool all);
  // The recounter's thread: recount() at once, then every kRecountEvery until it is done. Apart
  // from housekeeping, whose expiry, saves and removals must not wait for the walk of a large
  // tree (or one on a server that hangs).
  void recounting();
  // Counts the usage of the namespaces served since the start that are not counted yet; whether
  // every one of them is (or was given up: one that changed during kRecountTries walks keeps its
  // saved usage).
  bool recount();
  bool stopping() const;
  void expire();
  void retry_removals();
  void reap_orphans();
  // Whether the pool's backend `name` holds this database's claim (pool_claim.hpp), looked at (and
  // made where there is none) until it does. False, with why in `why`, while the backend cannot
  // be asked or another database's claim is there: no job directory is made there, none reaped.
  bool claimed(const std::string& name, std::string* why);

  JobsConfig cfg_;
  Gateway& gateway_;
  const std::size_t max_open_files_;  // each job namespace's ([gateway] max_open_files)
  InvalidationBroker* broker_;
  std::unique_ptr<JobStore> store_;
  std::string identity_;  // the store's

  std::mutex claims_mu_;           // guards the two below
  std::set<std::string> claimed_;  // pool backends found holding this database's claim
  struct Refusal {
    std::string why;
    bool foreign = false;  // another database's claim, or one naming none
  };
  std::map<std::string, Refusal> refused_;  // by backend: why not, as last logged

  mutable std::mutex mu_;  // guards live_ and the sets below; serialises creates and destroys
  std::map<std::string, Live> live_;  // by namespace name
  // Namespaces of the store that could not be served at start (a backend gone from the
  // configuration...), by name, with why: their files stay (never reaped as orphans), a create of
  // the job is refused, a destroy removes them.
  std::map<std::string, std::pair<JobRecord, std::string>> unserved_;
  std::multiset<std::string> removing_;  // "/NAME" of the removals under way (any backend)
  // Namespaces being made: their directories are made outside mu_ (a slow server must not hold
  // up every other job's calls); another create, a destroy or a credential of one waits for it,
  // and no removal takes its directories.
  std::set<std::string> creating_;
  std::multiset<std::string> staging_out_;     // job ids with a stage-out under way
  std::set<std::string> expiry_deferred_;      // expired, kept for a stage-out (said once)
  std::set<std::string> mounted_past_expiry_;  // expired, kept while mounted (said once; expire())
  std::multiset<std::string> destroying_;      // job ids being destroyed (Destroying)
  std::set<std::string> to_recount_;           // served at start, usage not counted again yet
  std::condition_variable removed_;            // one of them, or a create, ended

  std::mutex stopper_mu_;  // held while copy_stopper_ runs, and to change it
  std::function<void(const std::string&)> copy_stopper_;

  mutable std::mutex wake_mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;                        // housekeeping
  std::thread recounter_;                     // recounting
  std::map<std::string, int> recount_races_;  // walks that raced with changes; the recounter's
};

}  // namespace skein
