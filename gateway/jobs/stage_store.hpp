// The durable state of staging operations, in the job store's SQLite file (tables stage_ops,
// stage_entries and stage_chunks of gateway/jobs/schema.sql): each operation's request and
// progress, the source tree as walked, and which chunks of its large files are at the
// destination. What is recorded here is never copied again after a restart.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "jobs/sqlite.hpp"

namespace skein {

enum class StageDirection { in, out };
enum class StageState { queued, running, done, failed, cancelled };

const char* to_string(StageDirection d);
const char* to_string(StageState s);
std::optional<StageState> parse_stage_state(const std::string& text);

struct StageSpec {
  std::string job_id;
  StageDirection direction = StageDirection::in;
  std::string source, destination;  // as asked: "NAMESPACE:/path", "backend:NAME:/path", "/path"
  bool verify = false;
};

// An operation as the store holds it.
struct StageRecord {
  std::string id;
  StageSpec spec;
  bool destroy_after = false;
  StageState state = StageState::queued;
  bool walked = false;
  uint64_t bytes_total = 0, files_total = 0, bytes_done = 0, files_done = 0;
  std::string error;
  std::vector<std::string> failed;  // "path: reason"
  int64_t started_s = 0, updated_s = 0, finished_s = 0;
};

// One thing of the source tree.
struct StageEntry {
  std::string path;  // relative to the source root, without a leading '/'; "" is the root
  enum class Kind { dir, file, symlink } kind = Kind::file;
  uint64_t size = 0;
  uint32_t mode = 0;  // permission bits
  int64_t mtime = 0;
  std::string target;  // a symlink's
  bool done = false;
};

class StageStore {
 public:
  explicit StageStore(sqlite::Database& db) : db_(db) {}

  void insert(const StageRecord& op);
  std::optional<StageRecord> op(const std::string& id);
  // Every operation, or those of one job; oldest first.
  std::vector<StageRecord> ops(const std::string& job_id = "");
  // The operations a starting gateway resumes (queued or running), oldest first.
  std::vector<StageRecord> unfinished();

  void set_state(const std::string& id, StageState state, int64_t now_s);
  // The walked source tree and its totals, in one transaction.
  void set_walked(const std::string& id, const std::vector<StageEntry>& entries,
                  uint64_t bytes_total, uint64_t files_total, int64_t now_s);
  std::vector<StageEntry> entries(const std::string& id);
  // The chunks recorded for each large file, by path.
  std::map<std::string, std::set<uint64_t>> chunks(const std::string& id);
  // Forgets the chunks of one file (it changed, or its copy at the destination is gone).
  void clear_chunks(const std::string& id, const std::string& path);

  // Progress since the last call, in one transaction: files done, chunks written, counters.
  struct Progress {
    std::vector<std::string> done;
    std::vector<std::pair<std::string, uint64_t>> chunks;
    uint64_t bytes_done = 0, files_done = 0;
  };
  void record(const std::string& id, const Progress& progress, int64_t now_s);
  // The end: state, error and failures; the walked tree is dropped (only the record stays).
  void finish(const std::string& id, StageState state, const std::string& error,
              const std::vector<std::string>& failed, int64_t now_s);

 private:
  sqlite::Database& db_;
};

}  // namespace skein
