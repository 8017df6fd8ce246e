// Create policies: where a union puts a new file or directory. One small class per policy, looked
// up by name (mergerfs's names and their long forms):
//   ff   / first-found      the first branch, in priority order, that may take new files
//   mfs  / most-free-space  the branch with the most available space (statvfs)
//   rand / random           any branch, at random
//   hash / hash-of-path     a branch chosen by a hash of the path: the same path always lands on
//                           the same branch while the branch set is the same
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "namespace/branch.hpp"

namespace skein {

class CreatePolicy {
 public:
  virtual ~CreatePolicy() = default;
  virtual std::string_view name() const = 0;
  // Picks one of `candidates` (non-empty, in priority order, all able to take new files) for
  // the new entry `rel`; returns its index.
  virtual size_t pick(const std::vector<const Branch*>& candidates, std::string_view rel) = 0;
};

// The policy called `name`, or null when there is none by that name.
std::shared_ptr<CreatePolicy> make_create_policy(std::string_view name);
// Every accepted name, for error messages.
std::string create_policy_names();

}  // namespace skein
