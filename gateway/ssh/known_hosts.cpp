// known_hosts lookups; see known_hosts.hpp.
#include "ssh/known_hosts.hpp"

#include <fstream>
#include <sstream>

#include "ssh/crypto.hpp"
#include "ssh/wire.hpp"

namespace skein::ssh {
namespace {

std::string_view next_field(std::string_view& line) {
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  size_t end = 0;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  std::string_view f = line.substr(0, end);
  line.remove_prefix(end);
  return f;
}

// OpenSSH's host patterns: '*' and '?' are the only wildcards ('[' is literal: "[host]:port"),
// and names compare without regard to case.
bool wildcard_match(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; };
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && (pattern[p] == '?' || lower(pattern[p]) == lower(name[n]))) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// |1|base64(salt)|base64(HMAC-SHA1(salt, name))
bool hashed_match(std::string_view pattern, const std::string& name) {
  pattern.remove_prefix(3);
  const size_t bar = pattern.find('|');
  if (bar == std::string_view::npos) return false;
  bool ok1 = false, ok2 = false;
  const std::string salt = base64_decode(pattern.substr(0, bar), ok1);
  const std::string hash = base64_decode(pattern.substr(bar + 1), ok2);
  return ok1 && ok2 && !hash.empty() && equal_secret(hmac_sha1(salt, name), hash);
}

}  // namespace

std::string KnownHosts::host_name(const std::string& host, int port) {
  // ssh compares, and hashes, host names in lower case.
  std::string lower = host;
  for (char& c : lower)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return port == 22 ? lower : "[" + lower + "]:" + std::to_string(port);
}

bool KnownHosts::matches(std::string_view patterns, const std::string& name) {
  if (patterns.starts_with("|1|")) return hashed_match(patterns, name);
  bool matched = false;
  for (std::string_view p : split_name_list(patterns)) {
    const bool negated = p.starts_with('!');
    if (negated) p.remove_prefix(1);
    if (wildcard_match(p, name)) {
      if (negated) return false;  // a negated match excludes the line, whatever else matches
      matched = true;
    }
  }
  return matched;
}

KnownHosts KnownHosts::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return KnownHosts();
  std::stringstream ss;
  ss << in.rdbuf();
  KnownHosts k = parse(ss.str());
  k.readable_ = true;
  return k;
}

KnownHosts KnownHosts::parse(std::string_view text) {
  KnownHosts k;
  k.readable_ = true;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::string_view first = next_field(line);
    if (first.empty() || first.starts_with('#')) continue;
    Entry e;
    if (first.starts_with('@')) {
      if (first == "@revoked") {
        e.revoked = true;
      } else {
        continue;  // @cert-authority: certificates are not used by this transport
      }
      first = next_field(line);
    }
    const std::string_view type = next_field(line), key = next_field(line);
    bool ok = false;
    e.blob = base64_decode(key, ok);
    if (first.empty() || type.empty() || !ok) continue;  // malformed lines are skipped, as ssh does
    // The type is the one inside the key (the text field normally says the same).
    Reader blob(e.blob);
    std::string_view inner_type;
    if (!blob.str(inner_type)) continue;
    e.patterns = std::string(first);
    e.type = std::string(inner_type);
    k.entries_.push_back(std::move(e));
  }
  return k;
}

KnownHosts::Verdict KnownHosts::check(const std::string& host, int port, std::string_view key_type,
                                      std::string_view key_blob) const {
  if (!readable_) return Verdict::not_found;
  const std::string name = host_name(host, port);
  bool same = false, same_type = false, other_type = false;
  for (const Entry& e : entries_) {
    if (e.revoked) {
      if (e.blob == key_blob) return Verdict::revoked;  // wherever the line says it is
      continue;
    }
    if (!matches(e.patterns, name)) continue;
    if (e.blob == key_blob) {
      same = true;
    } else if (e.type == key_type) {
      same_type = true;
    } else {
      other_type = true;
    }
  }
  if (same) return Verdict::ok;
  if (same_type) return Verdict::changed;
  if (other_type) return Verdict::other;
  return Verdict::unknown;
}

std::vector<std::string> KnownHosts::key_types(const std::string& host, int port) const {
  const std::string name = host_name(host, port);
  std::vector<std::string> types;
  for (const Entry& e : entries_) {
    if (e.revoked || !matches(e.patterns, name)) continue;
    bool seen = false;
    for (auto& t : types) seen |= t == e.type;
    if (!seen) types.push_back(e.type);
  }
  return types;
}

}  // namespace skein::ssh
