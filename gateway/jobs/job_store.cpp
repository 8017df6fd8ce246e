// The job namespaces' SQLite store; see job_store.hpp.
#include "jobs/job_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace skein {
namespace {

using sqlite::Statement;
using sqlite::Transaction;

std::string join(const std::vector<std::string>& items, char sep) {
  std::string out;
  for (auto& i : items) out += (out.empty() ? "" : std::string(1, sep)) + i;
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string labels_text(const std::map<std::string, std::string>& labels) {
  std::string out;
  for (auto& [k, v] : labels) out += k + "=" + v + "\n";
  return out;
}

std::map<std::string, std::string> labels_of(const std::string& text) {
  std::map<std::string, std::string> out;
  for (auto& line : split(text, '\n')) {
    auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

constexpr const char* kJobColumns =
    "name, job_id, uid, gid, layout_kind, stripe_size, pool, backends, quota_bytes, quota_inodes, "
    "created_s, expires_s, labels, bytes_used, inodes_used";

JobRecord record_of(const Statement& s) {
  JobRecord j;
  j.name = s.text(0);
  j.job_id = s.text(1);
  j.uid = static_cast<uint32_t>(s.integer(2));
  j.gid = static_cast<uint32_t>(s.integer(3));
  j.layout_kind = s.text(4);
  j.stripe_size = static_cast<uint64_t>(s.integer(5));
  j.pool = s.text(6);
  j.backends = split(s.text(7), ',');
  j.quota_bytes = static_cast<uint64_t>(s.integer(8));
  j.quota_inodes = static_cast<uint64_t>(s.integer(9));
  j.created_s = s.integer(10);
  j.expires_s = s.integer(11);
  j.labels = labels_of(s.text(12));
  j.bytes_used = static_cast<uint64_t>(s.integer(13));
  j.inodes_used = static_cast<uint64_t>(s.integer(14));
  return j;
}

}  // namespace

std::unique_ptr<JobStore> JobStore::open(const std::string& path) {
  const std::string lock_path = path + ".lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw sqlite::StoreError(lock_path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    throw sqlite::StoreError(path +
                             " is in use by another skein-gateway: one database serves "
                             "one gateway");
  }
  try {
    return std::unique_ptr<JobStore>(new JobStore(sqlite::Database::open(path, kJobSchema), fd));
  } catch (...) {
    ::close(fd);
    throw;
  }
}

JobStore::~JobStore() {
  db_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::vector<JobRecord> JobStore::jobs() {
  std::lock_guard lock(db_->mutex());
  Statement s(*db_, std::string("SELECT ") + kJobColumns + " FROM job_namespaces ORDER BY name");
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(record_of(s));
  return out;
}

std::optional<JobRecord> JobStore::job(const std::string& job_id) {
  std::lock_guard lock(db_->mutex());
  Statement s(*db_, std::string("SELECT ") + kJobColumns + " FROM job_namespaces WHERE job_id = ?");
  s.bind(1, job_id);
  if (!s.step()) return std::nullopt;
  return record_of(s);
}

void JobStore::insert(const JobRecord& j, const std::string& digest_hex,
                      const std::string& issued_to) {
  Transaction t(*db_);
  Statement s(*db_, std::string("INSERT INTO job_namespaces (") + kJobColumns +
                        ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind_all(j.name, j.job_id, static_cast<int64_t>(j.uid), static_cast<int64_t>(j.gid),
             j.layout_kind, static_cast<int64_t>(j.stripe_size), j.pool, join(j.backends, ','),
             static_cast<int64_t>(j.quota_bytes), static_cast<int64_t>(j.quota_inodes), j.created_s,
             j.expires_s, labels_text(j.labels), static_cast<int64_t>(j.bytes_used),
             static_cast<int64_t>(j.inodes_used))
      .run();
  Statement c(
      *db_, "INSERT INTO credentials (namespace, digest, issued_to, issued_s) VALUES (?, ?, ?, ?)");
  c.bind_all(j.name, digest_hex, issued_to, j.created_s).run();
  t.commit();
}

void JobStore::add_credential(const std::string& ns, const std::string& digest_hex,
                              const std::string& issued_to) {
  Transaction t(*db_);
  Statement c(*db_,
              "INSERT INTO credentials (namespace, digest, issued_to, issued_s) "
              "VALUES (?, ?, ?, strftime('%s','now'))");
  c.bind_all(ns, digest_hex, issued_to).run();
  t.commit();
}

void JobStore::remove_credential(const std::string& ns, const std::string& digest_hex) {
  Transaction t(*db_);
  Statement c(*db_, "DELETE FROM credentials WHERE namespace = ? AND digest = ?");
  c.bind_all(ns, digest_hex).run();
  t.commit();
}

std::vector<std::string> JobStore::credential_digests(const std::string& ns) {
  std::lock_guard lock(db_->mutex());
  Statement s(*db_, "SELECT digest FROM credentials WHERE namespace = ? ORDER BY issued_s");
  s.bind(1, ns);
  std::vector<std::string> out;
  while (s.step()) out.push_back(s.text(0));
  return out;
}

void JobStore::save_usage(const std::vector<Usage>& usage) {
  if (usage.empty()) return;
  Transaction t(*db_);
  Statement s(*db_, "UPDATE job_namespaces SET bytes_used = ?, inodes_used = ? WHERE name = ?");
  for (const Usage& u : usage)  // run() resets the statement for the next binding
    s.bind_all(static_cast<int64_t>(u.bytes), static_cast<int64_t>(u.inodes), u.ns).run();
  t.commit();
}

void JobStore::set_expiry(const std::string& ns, int64_t expires_s) {
  Transaction t(*db_);
  Statement s(*db_, "UPDATE job_namespaces SET expires_s = ? WHERE name = ?");
  s.bind_all(expires_s, ns).run();
  t.commit();
}

void JobStore::remove(const std::string& ns, const std::vector<PendingRemoval>& removals) {
  Transaction t(*db_);
  for (auto& r : removals) {
    Statement s(*db_,
                "INSERT OR IGNORE INTO pending_removals (backend, path, namespace, since_s) "
                "VALUES (?, ?, ?, ?)");
    s.bind_all(r.backend, r.path, ns, r.since_s).run();
  }
  Statement d(*db_, "DELETE FROM job_namespaces WHERE name = ?");
  d.bind(1, ns).run();
  t.commit();
}

std::string JobStore::identity() {
  std::lock_guard lock(db_->mutex());
  Statement s(*db_, "SELECT id FROM identity");
  if (!s.step()) throw sqlite::StoreError("the job database has no identity");
  return s.text(0);
}

std::vector<PendingRemoval> JobStore::pending_removals() {
  std::lock_guard lock(db_->mutex());
  Statement s(*db_,
              "SELECT backend, path, namespace, since_s, attempts, last_error FROM "
              "pending_removals ORDER BY since_s");
  std::vector<PendingRemoval> out;
  while (s.step())
    out.push_back(
        {s.text(0), s.text(1), s.text(2), s.integer(3), static_cast<int>(s.integer(4)), s.text(5)});
  return out;
}

void JobStore::removal_done(const std::string& backend, const std::string& path) {
  Transaction t(*db_);
  Statement s(*db_, "DELETE FROM pending_removals WHERE backend = ? AND path = ?");
  s.bind_all(backend, path).run();
  t.commit();
}

void JobStore::removal_failed(const std::string& backend, const std::string& path,
                              const std::string& error) {
  Transaction t(*db_);
  Statement s(*db_,
              "UPDATE pending_removals SET attempts = attempts + 1, last_error = ? "
              "WHERE backend = ? AND path = ?");
  s.bind_all(error, backend, path).run();
  t.commit();
}

int64_t JobStore::orphan_seen(const std::string& backend, const std::string& path, int64_t now_s) {
  Transaction t(*db_);
  Statement(*db_, "INSERT OR IGNORE INTO orphans (backend, path, first_seen_s) VALUES (?, ?, ?)")
      .bind_all(backend, path, now_s)
      .run();
  int64_t first = now_s;
  {
    Statement s(*db_, "SELECT first_seen_s FROM orphans WHERE backend = ? AND path = ?");
    s.bind_all(backend, path);
    if (s.step()) first = s.integer(0);
  }
  t.commit();
  return first;
}

void JobStore::orphan_gone(const std::string& backend, const std::string& path) {
  Transaction t(*db_);
  Statement s(*db_, "DELETE FROM orphans WHERE backend = ? AND path = ?");
  s.bind_all(backend, path).run();
  t.commit();
}

}  // namespace skein
