// LinkNames: the hard links the gateway made, by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace skein {

// The names of the files the gateway linked (hard links it made), which SFTP does not tell (no
// inode numbers, no link counts): files made names of one another through the gateway, followed
// through renames and removals. Names linked before the gateway started, or on a server behind
// its back, are not known. A job's quota counts each name (JobLayout); the coherence of a file's
// other names follows them (NamespaceFs::links).
class LinkNames {
 public:
  // How many names the file at `rel` has: 1 unless it is known to have more.
  uint64_t names(const std::string& rel);
  // `rel` was made a name of the file at `existing`.
  void linked(const std::string& existing, const std::string& rel);
  // The name `rel` went.
  void removed(const std::string& rel);
  // `from` (and what is below it) is now at `to`, which another name left first.
  void renamed(const std::string& from, const std::string& to);
  // Whether `a` and `b` are names of one file (a rename of one to the other does nothing).
  bool same_file(const std::string& a, const std::string& b);
  // The file's other names known here (none for a file with one).
  std::vector<std::string> others(const std::string& rel);

 private:
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<uint64_t>> groups_;  // a name's file's names; by mu_
};

}  // namespace skein
