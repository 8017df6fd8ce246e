// A branch: one backend's place in a union, with what it may be used for.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.hpp"

namespace skein {

enum class BranchMode {
  read_write,  // RW: anything
  read_only,   // RO: lookups and reads; every change is refused with EROFS
  no_create,   // NC: existing files change, no new ones land here
};

struct Branch {
  std::shared_ptr<Backend> backend;
  BranchMode mode = BranchMode::read_write;

  bool writable() const { return mode != BranchMode::read_only; }
  // May a new file or directory go here now (mode, drain, free space, health)?
  bool takes_new_files() const {
    return mode == BranchMode::read_write && backend->accepts_new_files();
  }
};

// "RW", "RO", "NC" (any case) to a mode.
std::optional<BranchMode> parse_branch_mode(std::string_view text);
std::string_view branch_mode_name(BranchMode mode);

}  // namespace skein
