// Virtual path normalisation and helpers; see path.hpp.
#include "skein/path.hpp"

#include <vector>

namespace skein {

std::optional<std::string> normalize_virtual_path(std::string_view path) {
  if (path.empty() || path.front() != '/' || path.size() > kMaxPathBytes) return std::nullopt;
  if (path.find('\0') != std::string_view::npos) return std::nullopt;
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t j = i;
    while (j < path.size() && path[j] != '/') ++j;
    std::string_view part = path.substr(i, j - i);
    i = j;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (parts.empty()) return std::nullopt;
      parts.pop_back();
      continue;
    }
    if (part.size() > 255) return std::nullopt;
    parts.push_back(part);
  }
  if (parts.empty()) return std::string(1, '/');
  size_t size = 0;
  for (auto p : parts) size += 1 + p.size();
  std::string out;
  out.reserve(size);
  for (auto p : parts) {
    out.push_back('/');
    out.append(p.data(), p.size());
  }
  return out;
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

std::string parent_path(std::string_view path) {
  auto pos = path.rfind('/');
  if (pos == std::string_view::npos || pos == 0) return "/";
  return std::string(path.substr(0, pos));
}

std::string_view base_name(std::string_view path) {
  auto pos = path.rfind('/');
  if (pos == std::string_view::npos) return path;
  return path.substr(pos + 1);
}

bool is_valid_entry_name(std::string_view name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  return name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

bool path_is_under(std::string_view path, std::string_view prefix) {
  if (prefix == "/") return true;
  if (path.size() < prefix.size() || path.substr(0, prefix.size()) != prefix) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

}  // namespace skein
