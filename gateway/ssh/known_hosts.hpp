// A known_hosts file as OpenSSH reads it (sshd(8) "SSH_KNOWN_HOSTS FILE FORMAT"): host patterns
// with wildcards and negation, "[host]:port" for other ports than 22, hashed names
// (|1|salt|hash), and @revoked keys. The transport asks it whether a server's host key is the one
// on record; it never adds to the file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace skein::ssh {

class KnownHosts {
 public:
  enum class Verdict {
    ok,         // a matching entry has this key
    changed,    // entries for the host have keys of this type, none this one
    other,      // entries for the host have only keys of other types
    unknown,    // no entry for the host
    revoked,    // the key is marked @revoked
    not_found,  // the file cannot be read
  };
  // Reads `path`; a missing or unreadable file gives not_found for every check.
  static KnownHosts load(const std::string& path);
  static KnownHosts parse(std::string_view text);

  Verdict check(const std::string& host, int port, std::string_view key_type,
                std::string_view key_blob) const;
  // The key types on record for the host, in file order without repeats: the transport offers
  // their host key algorithms first, so a server with several keys shows the one known here.
  std::vector<std::string> key_types(const std::string& host, int port) const;

  // "host" for port 22, "[host]:port" otherwise: the name known_hosts files use.
  static std::string host_name(const std::string& host, int port);
  // Whether a host-patterns field (comma-separated, possibly hashed) matches `name`.
  static bool matches(std::string_view patterns, const std::string& name);

 private:
  struct Entry {
    std::string patterns;
    std::string type;
    std::string blob;
    bool revoked = false;
  };
  std::vector<Entry> entries_;
  bool readable_ = false;
};

}  // namespace skein::ssh
