// A namespace's mount table: virtual subtrees, each with the layout (single backend, union of
// branches, stripes) that serves it. Resolution is longest-prefix; directories above the mount
// points ("/" when the table holds "/srv0" and "/srv1") exist only in the table and are
// synthesised.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "namespace/layout.hpp"

namespace skein {

struct Mount {
  std::string path;  // normalised virtual path
  std::shared_ptr<Layout> layout;
};

class MountTable {
 public:
  explicit MountTable(std::vector<Mount> mounts);

  struct Placement {
    const Mount* mount;
    std::string rel;  // path below the mount, "/" for the mount point itself
  };
  // The mount whose subtree holds `vpath`, or nullopt when none does.
  std::optional<Placement> place(std::string_view vpath) const;
  // Entry names that exist under `vpath` only because a mount point lies below it.
  std::vector<std::string> synthetic_children(std::string_view vpath) const;
  // True when `vpath` is a mount point or an ancestor of one.
  bool is_synthetic_dir(std::string_view vpath) const;
  const std::vector<Mount>& mounts() const { return mounts_; }

 private:
  std::vector<Mount> mounts_;  // longest path first
};

}  // namespace skein
