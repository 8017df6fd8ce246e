// Mount table resolution; see mount_table.hpp.
#include "namespace/mount_table.hpp"

#include <algorithm>
#include <set>

#include "skein/path.hpp"

namespace skein {

MountTable::MountTable(std::vector<Mount> mounts) : mounts_(std::move(mounts)) {
  std::stable_sort(mounts_.begin(), mounts_.end(),
                   [](const Mount& a, const Mount& b) { return a.path.size() > b.path.size(); });
}

std::optional<MountTable::Placement> MountTable::place(std::string_view vpath) const {
  for (auto& m : mounts_) {
    if (!path_is_under(vpath, m.path)) continue;
    std::string_view rest = m.path == "/" ? vpath : vpath.substr(m.path.size());
    std::string rel = rest.empty() ? std::string("/") : std::string(rest);
    return Placement{&m, std::move(rel)};
  }
  return std::nullopt;
}

std::vector<std::string> MountTable::synthetic_children(std::string_view vpath) const {
  std::set<std::string> names;
  for (auto& m : mounts_) {
    if (m.path == vpath || !path_is_under(m.path, vpath)) continue;
    std::string_view rest = std::string_view(m.path).substr(vpath == "/" ? 1 : vpath.size() + 1);
    names.insert(std::string(rest.substr(0, rest.find('/'))));
  }
  return {names.begin(), names.end()};
}

bool MountTable::is_synthetic_dir(std::string_view vpath) const {
  for (auto& m : mounts_)
    if (path_is_under(m.path, vpath)) return true;
  return false;
}

}  // namespace skein
