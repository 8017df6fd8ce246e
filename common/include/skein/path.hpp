// Virtual paths: the normalised, absolute, '/'-separated names that every skein request carries.
// Normalisation is confinement: no result ever climbs above "/".
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace skein {

// The longest path skein takes, in bytes: PATH_MAX less its NUL, what a server's file system
// takes in one call. A longer one could never be served, and would cost the gateway memory and
// SFTP packets past the server's limit.
inline constexpr size_t kMaxPathBytes = 4095;

// Returns the normalised form of `path` ("/a/b"), or nullopt when it is not acceptable:
// relative, containing NUL, a ".." that would climb above the root, a component over 255 bytes,
// or longer than kMaxPathBytes (as given).
std::optional<std::string> normalize_virtual_path(std::string_view path);

// Joins a normalised directory path and one entry name ("/" + "a" = "/a", "/a" + "b" = "/a/b").
std::string join_path(std::string_view dir, std::string_view name);

// Parent of a normalised path ("/a/b" -> "/a", "/a" -> "/", "/" -> "/").
std::string parent_path(std::string_view path);

// Last component of a normalised path ("/a/b" -> "b", "/" -> "").
std::string_view base_name(std::string_view path);

// True when `name` is usable as one directory entry name (not empty, ".", "..", no '/', no NUL).
bool is_valid_entry_name(std::string_view name);

// True when normalised `path` equals `prefix` or lies below it ("/a/b" is under "/a", "/ab" is
// not).
bool path_is_under(std::string_view path, std::string_view prefix);

}  // namespace skein
