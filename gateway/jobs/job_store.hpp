// The durable state of job namespaces, in SQLite (gateway/jobs/schema.sql): each namespace's
// settings, the digests of its credentials, its usage, the directories still to remove on
// backends, and orphans awaiting their grace period. Every change is one transaction, committed
// before the method returns: what an RPC reported done survives a crash of the gateway.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jobs/sqlite.hpp"

namespace skein {

struct JobRecord {
  std::string name;  // "job-<job_id>"
  std::string job_id;
  uint32_t uid = 0, gid = 0;
  std::string layout_kind = "striped";  // or "union"
  uint64_t stripe_size = 0;
  std::string pool;
  std::vector<std::string> backends;  // in stripe order
  uint64_t quota_bytes = 0, quota_inodes = 0;
  int64_t created_s = 0, expires_s = 0;
  std::map<std::string, std::string> labels;
  uint64_t bytes_used = 0, inodes_used = 0;  // as last saved
};

struct PendingRemoval {
  std::string backend;
  std::string path;  // relative to the backend's root
  std::string ns;
  int64_t since_s = 0;
  int attempts = 0;
  std::string last_error;
};

class JobStore {
 public:
  // Opens (creating and migrating) the database, and holds it against a second gateway (two
  // would each take the other's job directories for orphans). Throws sqlite::StoreError.
  static std::unique_ptr<JobStore> open(const std::string& path);
  ~JobStore();

  std::vector<JobRecord> jobs();
  std::optional<JobRecord> job(const std::string& job_id);
  // A new namespace with its first credential's digest.
  void insert(const JobRecord& job, const std::string& digest_hex, const std::string& issued_to);
  void add_credential(const std::string& ns, const std::string& digest_hex,
                      const std::string& issued_to);
  void remove_credential(const std::string& ns, const std::string& digest_hex);
  std::vector<std::string> credential_digests(const std::string& ns);
  struct Usage {
    std::string ns;
    uint64_t bytes = 0, inodes = 0;
  };
  // Every namespace's usage in one transaction: one sync to disk for all of them.
  void save_usage(const std::vector<Usage>& usage);
  void set_expiry(const std::string& ns, int64_t expires_s);
  // The namespace goes (its credentials with it) and its directories become pending removals, in
  // one transaction.
  void remove(const std::string& ns, const std::vector<PendingRemoval>& removals);

  std::vector<PendingRemoval> pending_removals();
  void removal_done(const std::string& backend, const std::string& path);
  void removal_failed(const std::string& backend, const std::string& path,
                      const std::string& error);

  // When `path` on `backend` was first seen without a namespace (recorded now if it was not).
  int64_t orphan_seen(const std::string& backend, const std::string& path, int64_t now_s);
  void orphan_gone(const std::string& backend, const std::string& path);

  // The database's identity (32 hex digits, made with it): what the roots of the pools' backends
  // name to say whose job directories they hold (pool_claim.hpp).
  std::string identity();

  // For stores of other state in the same file (staging operations).
  sqlite::Database& database() { return *db_; }

 private:
  JobStore(std::unique_ptr<sqlite::Database> db, int lock_fd)
      : db_(std::move(db)), lock_fd_(lock_fd) {}
  std::unique_ptr<sqlite::Database> db_;
  int lock_fd_ = -1;
};

// The schema text, embedded at build time from gateway/jobs/schema.sql.
extern const char* const kJobSchema;

}  // namespace skein
