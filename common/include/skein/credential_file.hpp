// Files that hold secrets: tokens, TLS private keys, SSH identities. Like OpenSSH with a private
// key, skein refuses one that its group or others may read, and names the file and the fix. The
// secret itself never appears in a message.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace skein {

// Why `path` may not hold a secret (missing, not a regular file, unreadable, or readable by group
// or others), in words for the user with the fix; nullopt when it may. `what` names the file's
// role in the message ("token file of namespace 'scratch'").
std::optional<std::string> private_file_problem(const std::string& path, const std::string& what);

// A secret file's contents with surrounding whitespace removed. Throws CredentialError (with the
// message above, or "... is empty") when the file may not hold a secret or holds none.
std::string read_credential_file(const std::string& path, const std::string& what);

class CredentialError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace skein
