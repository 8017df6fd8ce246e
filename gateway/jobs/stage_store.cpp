// Staging operations' SQLite store; see stage_store.hpp.
#include "jobs/stage_store.hpp"

#include <sstream>

namespace skein {
namespace {

using sqlite::Statement;
using sqlite::Transaction;

constexpr const char* kOpColumns =
    "id, job_id, direction, source, destination, verify, destroy_after, state, walked, "
    "bytes_total, files_total, bytes_done, files_done, error, failed, started_s, updated_s, "
    "finished_s";

std::string lines_text(const std::vector<std::string>& lines) {
  std::string out;
  for (auto& l : lines) out += l + "\n";
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

StageRecord record_of(const Statement& s) {
  StageRecord r;
  r.id = s.text(0);
  r.spec.job_id = s.text(1);
  r.spec.direction = s.text(2) == "out" ? StageDirection::out : StageDirection::in;
  r.spec.source = s.text(3);
  r.spec.destination = s.text(4);
  r.spec.verify = s.integer(5) != 0;
  r.destroy_after = s.integer(6) != 0;
  r.state = parse_stage_state(s.text(7)).value_or(StageState::failed);
  r.walked = s.integer(8) != 0;
  r.bytes_total = static_cast<uint64_t>(s.integer(9));
  r.files_total = static_cast<uint64_t>(s.integer(10));
  r.bytes_done = static_cast<uint64_t>(s.integer(11));
  r.files_done = static_cast<uint64_t>(s.integer(12));
  r.error = s.text(13);
  r.failed = lines_of(s.text(14));
  r.started_s = s.integer(15);
  r.updated_s = s.integer(16);
  r.finished_s = s.integer(17);
  return r;
}

const char* kind_text(StageEntry::Kind k) {
  switch (k) {
    case StageEntry::Kind::dir:
      return "dir";
    case StageEntry::Kind::symlink:
      return "symlink";
    case StageEntry::Kind::file:
      break;
  }
  return "file";
}

}  // namespace

const char* to_string(StageDirection d) { return d == StageDirection::out ? "out" : "in"; }

const char* to_string(StageState s) {
  switch (s) {
    case StageState::queued:
      return "queued";
    case StageState::running:
      return "running";
    case StageState::done:
      return "done";
    case StageState::failed:
      return "failed";
    case StageState::cancelled:
      return "cancelled";
  }
  return "failed";
}

std::optional<StageState> parse_stage_state(const std::string& text) {
  for (auto s : {StageState::queued, StageState::running, StageState::done, StageState::failed,
                 StageState::cancelled})
    if (text == to_string(s)) return s;
  return std::nullopt;
}

void StageStore::insert(const StageRecord& r) {
  Transaction t(db_);
  Statement s(db_, std::string("INSERT INTO stage_ops (") + kOpColumns +
                       ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.bind_all(r.id, r.spec.job_id, std::string(to_string(r.spec.direction)), r.spec.source,
             r.spec.destination, static_cast<int64_t>(r.spec.verify),
             static_cast<int64_t>(r.destroy_after), std::string(to_string(r.state)),
             static_cast<int64_t>(r.walked), static_cast<int64_t>(r.bytes_total),
             static_cast<int64_t>(r.files_total), static_cast<int64_t>(r.bytes_done),
             static_cast<int64_t>(r.files_done), r.error, lines_text(r.failed), r.started_s,
             r.updated_s, r.finished_s)
      .run();
  t.commit();
}

std::optional<StageRecord> StageStore::op(const std::string& id) {
  std::lock_guard lock(db_.mutex());
  Statement s(db_, std::string("SELECT ") + kOpColumns + " FROM stage_ops WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return record_of(s);
}

std::vector<StageRecord> StageStore::ops(const std::string& job_id) {
  std::lock_guard lock(db_.mutex());
  Statement s(db_, std::string("SELECT ") + kOpColumns +
                       " FROM stage_ops WHERE ? = '' OR job_id = ? ORDER BY started_s, rowid");
  s.bind(1, job_id).bind(2, job_id);
  std::vector<StageRecord> out;
  while (s.step()) out.push_back(record_of(s));
  return out;
}

std::vector<StageRecord> StageStore::unfinished() {
  std::lock_guard lock(db_.mutex());
  Statement s(db_, std::string("SELECT ") + kOpColumns +
                       " FROM stage_ops WHERE state IN ('queued', 'running') "
                       "ORDER BY started_s, rowid");
  std::vector<StageRecord> out;
  while (s.step()) out.push_back(record_of(s));
  return out;
}

void StageStore::set_state(const std::string& id, StageState state, int64_t now_s) {
  Transaction t(db_);
  Statement s(db_, "UPDATE stage_ops SET state = ?, updated_s = ? WHERE id = ?");
  s.bind_all(std::string(to_string(state)), now_s, id).run();
  t.commit();
}

void StageStore::set_walked(const std::string& id, const std::vector<StageEntry>& entries,
                            uint64_t bytes_total, uint64_t files_total, int64_t now_s) {
  Transaction t(db_);
  Statement del(db_, "DELETE FROM stage_entries WHERE op_id = ?");
  del.bind(1, id).run();
  Statement ins(db_,
                "INSERT INTO stage_entries (op_id, path, kind, size, mode, mtime, target, done) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 0)");
  for (auto& e : entries) {
    ins.bind_all(id, e.path, std::string(kind_text(e.kind)), static_cast<int64_t>(e.size),
                 static_cast<int64_t>(e.mode), e.mtime, e.target)
        .run();
  }
  Statement s(db_,
              "UPDATE stage_ops SET walked = 1, bytes_total = ?, files_total = ?, updated_s = ? "
              "WHERE id = ?");
  s.bind_all(static_cast<int64_t>(bytes_total), static_cast<int64_t>(files_total), now_s, id).run();
  t.commit();
}

std::vector<StageEntry> StageStore::entries(const std::string& id) {
  std::lock_guard lock(db_.mutex());
  Statement s(db_,
              "SELECT path, kind, size, mode, mtime, target, done FROM stage_entries "
              "WHERE op_id = ? ORDER BY path");
  s.bind(1, id);
  std::vector<StageEntry> out;
  while (s.step()) {
    StageEntry e;
    e.path = s.text(0);
    auto kind = s.text(1);
    e.kind = kind == "dir"       ? StageEntry::Kind::dir
             : kind == "symlink" ? StageEntry::Kind::symlink
                                 : StageEntry::Kind::file;
    e.size = static_cast<uint64_t>(s.integer(2));
    e.mode = static_cast<uint32_t>(s.integer(3));
    e.mtime = s.integer(4);
    e.target = s.text(5);
    e.done = s.integer(6) != 0;
    out.push_back(std::move(e));
  }
  return out;
}

std::map<std::string, std::set<uint64_t>> StageStore::chunks(const std::string& id) {
  std::lock_guard lock(db_.mutex());
  Statement s(db_, "SELECT path, chunk FROM stage_chunks WHERE op_id = ?");
  s.bind(1, id);
  std::map<std::string, std::set<uint64_t>> out;
  while (s.step()) out[s.text(0)].insert(static_cast<uint64_t>(s.integer(1)));
  return out;
}

void StageStore::clear_chunks(const std::string& id, const std::string& path) {
  Transaction t(db_);
  Statement s(db_, "DELETE FROM stage_chunks WHERE op_id = ? AND path = ?");
  s.bind_all(id, path).run();
  t.commit();
}

void StageStore::record(const std::string& id, const Progress& p, int64_t now_s) {
  Transaction t(db_);
  if (!p.chunks.empty()) {
    Statement c(db_, "INSERT OR IGNORE INTO stage_chunks (op_id, path, chunk) VALUES (?, ?, ?)");
    for (auto& [path, chunk] : p.chunks) c.bind_all(id, path, static_cast<int64_t>(chunk)).run();
  }
  if (!p.done.empty()) {
    Statement d(db_, "UPDATE stage_entries SET done = 1 WHERE op_id = ? AND path = ?");
    Statement c(db_, "DELETE FROM stage_chunks WHERE op_id = ? AND path = ?");
    for (auto& path : p.done) {
      d.bind_all(id, path).run();
      c.bind_all(id, path).run();
    }
  }
  Statement s(db_,
              "UPDATE stage_ops SET bytes_done = ?, files_done = ?, updated_s = ? WHERE id = ?");
  s.bind_all(static_cast<int64_t>(p.bytes_done), static_cast<int64_t>(p.files_done), now_s, id)
      .run();
  t.commit();
}

void StageStore::finish(const std::string& id, StageState state, const std::string& error,
                        const std::vector<std::string>& failed, int64_t now_s) {
  Transaction t(db_);
  Statement s(db_,
              "UPDATE stage_ops SET state = ?, error = ?, failed = ?, updated_s = ?, "
              "finished_s = ? WHERE id = ?");
  s.bind_all(std::string(to_string(state)), error, lines_text(failed), now_s, now_s, id).run();
  Statement del(db_, "DELETE FROM stage_entries WHERE op_id = ?");
  del.bind(1, id).run();
  t.commit();
}

}  // namespace skein
