// A thin RAII layer over SQLite for the gateway's durable state (gateway/jobs/schema.sql): one
// connection, prepared statements bound by position, transactions that commit before the caller
// answers anyone. Errors throw StoreError with SQLite's message and what was being done.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace skein::sqlite {

class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Database;

// One prepared statement; bind() by position from 1, then step() until it returns false.
class Statement {
 public:
  Statement(Database& db, std::string_view sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int i, int64_t v);
  Statement& bind(int i, std::string_view v);
  Statement& bind_null(int i);
  // Binds every argument in order, from 1.
  template <typename... Args>
  Statement& bind_all(const Args&... args) {
    int i = 0;
    (bind_one(++i, args), ...);
    return *this;
  }
  // True while there is a row to read; false when done.
  bool step();
  // Steps to the end (INSERT, UPDATE, DELETE), then resets: the statement may be bound and run
  // again.
  void run();

  int64_t integer(int col) const;
  std::string text(int col) const;
  bool is_null(int col) const;

 private:
  template <typename T>
  void bind_one(int i, const T& v) {
    if constexpr (std::is_integral_v<T>)
      bind(i, static_cast<int64_t>(v));
    else
      bind(i, std::string_view(v));
  }
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
};

class Database {
 public:
  // Opens (creating) the file, in WAL mode with full syncs: a commit is on disk when it returns.
  // Applies the migrations of `schema` newer than the file's user_version, each in a transaction:
  // `schema` is a list of "-- migration N: what" sections, N counting from 1.
  static std::unique_ptr<Database> open(const std::string& path, std::string_view schema);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  const std::string& path() const { return path_; }
  sqlite3* handle() { return db_; }
  // The lock every use of the connection holds (one connection, many threads).
  std::recursive_mutex& mutex() { return mu_; }
  void exec(std::string_view sql);
  int user_version();
  [[noreturn]] void fail(const std::string& what);

 private:
  Database() = default;
  std::string path_;
  sqlite3* db_ = nullptr;
  std::recursive_mutex mu_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back when it goes without commit() (an exception).
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  void commit();

 private:
  Database& db_;
  std::lock_guard<std::recursive_mutex> lock_;
  bool done_ = false;
};

// The migrations of a schema text: (number, SQL) in order. Throws StoreError when the numbers do
// not run 1, 2, 3...
std::vector<std::pair<int, std::string>> migrations(std::string_view schema);

}  // namespace skein::sqlite
