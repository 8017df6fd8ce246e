// Invalidation rules; see invalidation_rules.hpp.
#include "coherence/invalidation_rules.hpp"

namespace skein {
namespace {

using Inval = v1::Invalidation;

Inval item(Inval::Kind kind, const std::string& path) {
  Inval i;
  i.set_kind(kind);
  i.set_path(path);
  return i;
}

}  // namespace

std::vector<v1::Invalidation> invalidations_for(Change change, const std::string& path,
                                                const std::string& other) {
  switch (change) {
    case Change::create:
      // A new name (over a negative entry another mount may hold), or an existing file opened,
      // perhaps truncated: both the name and the file.
      return {item(Inval::ENTRY, path), item(Inval::INODE, path)};
    case Change::mkdir:
    case Change::symlink:
      // Only a name appears: its directory's listing and any negative entry for it.
      return {item(Inval::ENTRY, path)};
    case Change::rmdir:
    case Change::unlink:
      // The name goes, and what it named changed (its link count, or it is gone).
      return {item(Inval::ENTRY, path), item(Inval::INODE, path)};
    case Change::rename:
    case Change::rename_noreplace: {
      // Both names change; what `other` named is gone (replaced; and without replacing, a mount
      // may still hold a file the server removed there behind the gateway's back); everything
      // cached below the old name now lives under the new one.
      Inval replaced = item(Inval::ENTRY, other);
      replaced.set_replaced(change == Change::rename);
      return {item(Inval::ENTRY, path), std::move(replaced), item(Inval::INODE, other),
              item(Inval::TREE, path)};
    }
    case Change::link:
      // A new name appears, and the file it names has one link more.
      return {item(Inval::ENTRY, other), item(Inval::INODE, path)};
    case Change::setattr:
    case Change::truncate_on_open:
    case Change::write:
      // The file's attributes or contents; its name stays.
      return {item(Inval::INODE, path)};
    case Change::found_changed:
      // The gateway does not know what changed: the name may now be something else, too.
      return {item(Inval::INODE, path), item(Inval::ENTRY, path)};
  }
  return {item(Inval::TREE, path)};  // not reached: every change is named above
}

std::vector<v1::Invalidation> invalidations_for_other_names(
    Change change, const std::vector<std::string>& others) {
  switch (change) {
    case Change::create:  // an existing file opened, perhaps truncated
    case Change::setattr:
    case Change::truncate_on_open:
    case Change::write:
    case Change::found_changed: {
      std::vector<v1::Invalidation> items;
      for (const std::string& name : others) items.push_back(item(Inval::INODE, name));
      return items;
    }
    default:
      return {};
  }
}

}  // namespace skein
