// SQLite layer; see sqlite.hpp.
#include "jobs/sqlite.hpp"

#include <spdlog/spdlog.h>

#include <memory>

namespace skein::sqlite {

Statement::Statement(Database& db, std::string_view sql) : db_(db) {
  if (sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) !=
      SQLITE_OK)
    db.fail("preparing '" + std::string(sql.substr(0, 60)) + "'");
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) db_.fail("binding");
  return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
  if (sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) !=
      SQLITE_OK)
    db_.fail("binding");
  return *this;
}

Statement& Statement::bind_null(int i) {
  if (sqlite3_bind_null(stmt_, i) != SQLITE_OK) db_.fail("binding");
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.fail("running '" + std::string(sqlite3_sql(stmt_)).substr(0, 60) + "'");
}

void Statement::run() {
  while (step()) {
  }
  sqlite3_reset(stmt_);  // ready to be bound and run again
}

int64_t Statement::integer(int col) const { return sqlite3_column_int64(stmt_, col); }

std::string Statement::text(int col) const {
  auto* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         static_cast<size_t>(sqlite3_column_bytes(stmt_, col)))
           : std::string();
}

bool Statement::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }

std::vector<std::pair<int, std::string>> migrations(std::string_view schema) {
  // A migration starts at a line "-- migration N: what" and runs to the next one.
  std::vector<std::pair<int, std::string>> out;
  constexpr std::string_view marker = "-- migration ";
  size_t pos = 0;
  while (pos < schema.size()) {
    size_t eol = schema.find('\n', pos);
    std::string_view line = schema.substr(pos, eol == std::string_view::npos ? eol : eol - pos);
    if (line.substr(0, marker.size()) == marker) {
      size_t i = marker.size();
      int n = 0;
      while (i < line.size() && line[i] >= '0' && line[i] <= '9') n = n * 10 + (line[i++] - '0');
      if (i == marker.size()) throw StoreError("schema: '-- migration' without a number");
      if (n != static_cast<int>(out.size()) + 1)
        throw StoreError("schema: migration " + std::to_string(n) + " where " +
                         std::to_string(out.size() + 1) + " was due");
      out.emplace_back(n, std::string());
    } else if (!out.empty()) {
      out.back().second.append(line).append("\n");
    }
    if (eol == std::string_view::npos) break;
    pos = eol + 1;
  }
  return out;
}

std::unique_ptr<Database> Database::open(const std::string& path, std::string_view schema) {
  std::unique_ptr<Database> db(new Database());
  db->path_ = path;
  if (sqlite3_open_v2(path.c_str(), &db->db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK)
    db->fail("opening");
  sqlite3_busy_timeout(db->db_, 5000);
  db->exec("PRAGMA journal_mode=WAL");
  db->exec("PRAGMA synchronous=FULL");
  db->exec("PRAGMA foreign_keys=ON");
  int have = db->user_version();
  auto steps = migrations(schema);
  if (have > static_cast<int>(steps.size()))
    throw StoreError(path + ": its schema version is " + std::to_string(have) +
                     ", newer than this gateway's (" + std::to_string(steps.size()) +
                     "): it was written by a newer skein-gateway");
  for (auto& [n, sql] : steps) {
    if (n <= have) continue;
    Transaction t(*db);
    db->exec(sql);
    db->exec("PRAGMA user_version=" + std::to_string(n));
    t.commit();
    spdlog::info("{}: schema migration {} applied", path, n);
  }
  return db;
}

Database::~Database() {
  if (db_) sqlite3_close_v2(db_);
}

void Database::exec(std::string_view sql) {
  std::lock_guard lock(mu_);
  char* err = nullptr;
  std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw StoreError(path_ + ": " + msg + " (in '" + text.substr(0, 60) + "')");
  }
}

int Database::user_version() {
  Statement s(*this, "PRAGMA user_version");
  return s.step() ? static_cast<int>(s.integer(0)) : 0;
}

void Database::fail(const std::string& what) {
  throw StoreError(path_ + ": " + what + ": " + (db_ ? sqlite3_errmsg(db_) : "cannot open"));
}

Transaction::Transaction(Database& db) : db_(db), lock_(db.mutex()) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (!done_) {
    try {
      db_.exec("ROLLBACK");
    } catch (const StoreError& e) {
      spdlog::error("{}", e.what());
    }
  }
}

void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace skein::sqlite
