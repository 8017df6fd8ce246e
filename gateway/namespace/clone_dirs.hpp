// Copies of a directory path on another backend. A union puts a new entry on the branch its
// create policy picks, and a rename or hard link stays on the branch that holds the file; a
// striped layout keeps every directory on every backend. Either way the directories leading to
// the entry may be missing on that backend, and are made there like the copy another backend
// has: same mode, owner and times.
#pragma once

#include <string_view>

#include "backend/backend.hpp"
#include "skein/result.hpp"

namespace skein {

// Creates every missing directory of `rel_dir` on `onto`, each with the mode, owner and times of
// `model`'s copy (another backend's copy of the same directories). ENOTDIR where something else
// is in the way on `onto`; `model`'s error where it has no such directory.
Status clone_dirs(Backend& onto, std::string_view rel_dir, Backend& model);

}  // namespace skein
