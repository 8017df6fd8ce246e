// A fake gateway for unit tests of the mount: one namespace held in memory and served in-process
// over gRPC, with the Namespace and Data services answering as the real gateway does (a POSIX
// errno in the reply, never a gRPC error). Tests change its tree directly too, as another mount
// or the storage server would behind the mount's back, count its calls, and make calls fail.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace skein::test {

class FakeGateway {
 public:
  FakeGateway();
  ~FakeGateway();
  FakeGateway(const FakeGateway&) = delete;
  FakeGateway& operator=(const FakeGateway&) = delete;

  // An in-process channel to it.
  std::shared_ptr<grpc::Channel> channel();

  // ---- the tree, directly ----
  void put_dir(const std::string& path, uint32_t mode = 0755);
  void put_file(const std::string& path, const std::string& content, uint32_t mode = 0644);
  bool exists(const std::string& path) const;
  std::string content(const std::string& path) const;  // "" when missing
  void remove(const std::string& path);                // a file, or a directory and below it
  std::vector<std::string> names(const std::string& dir) const;  // sorted

  // ---- what the mount did ----
  // Calls of `method` ("GetAttr", "ReadDir", "Open", ...) since the start or reset_calls().
  int calls(const std::string& method) const;
  // Calls of every method (a call counted under a detail too, "Write.create", counts twice).
  int total_calls() const;
  void reset_calls();
  // Handles opened and not yet released.
  std::size_t open_handles() const;

  // `method` on `path` answers `error` (a positive errno) from now on; 0 clears it.
  void fail(const std::string& method, const std::string& path, int error);
  // While held, Write calls wait (unanswered) until hold_writes(false).
  void hold_writes(bool hold);
  // While held, ReadDir calls wait (unanswered, counted) until hold_listings(false).
  void hold_listings(bool hold);

  // One file, directory or symlink; a hard link is a second path to the same node.
  struct Node {
    uint32_t mode = 0;   // with type bits
    std::string data;    // a file's contents
    std::string target;  // a symlink's
    int64_t mtime_ns = 0;
    uint32_t nlink = 1;
  };

 private:
  class Names;
  class Data;

  // Everything below is guarded by mu_.
  int failure_locked(const std::string& method, const std::string& path);
  void count_locked(const std::string& method) { ++calls_[method]; }
  std::shared_ptr<Node> find_locked(const std::string& path) const;
  bool has_children_locked(const std::string& path) const;
  int64_t tick_locked() { return ++clock_ns_; }
  void touch_parent_locked(const std::string& path);

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Node>> tree_;  // path -> node; "/" always there
  std::map<uint64_t, std::pair<std::string, std::shared_ptr<Node>>> handles_;
  uint64_t next_handle_ = 1;
  int64_t clock_ns_ = 1'000'000'000;
  std::map<std::string, int> calls_;
  std::map<std::pair<std::string, std::string>, int> failures_;
  bool hold_writes_ = false;
  std::condition_variable writes_released_;
  bool hold_listings_ = false;
  std::condition_variable listings_released_;

  std::unique_ptr<Names> names_;
  std::unique_ptr<Data> data_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace skein::test
