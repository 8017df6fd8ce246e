// Files that hold secrets: tokens, TLS private keys, SSH identities. Like OpenSSH with a private
// key, skein refuses one that its group or others may read, and names the file and the fix. The
// secret itself never appears in a message.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace skein {

// Why `path` may not hold a secret (missing, not a regular file, unreadable, or readable by group
// or others), in words for the user with the fix; nullopt when it may. `what` names the file's
// role in the message ("token file of namespace 'scratch'").
std::optional<std::string> private_file_problem(const std::string& path, const std::string& what);

// A secret file's contents with surrounding whitespace removed. Throws CredentialError (with the
// message above, or "... is empty") when the file may not hold a secret or holds none.
std::string read_credential_file(const std::string& path, const std::string& what);

// The tokens of a token file read as above: one per line (a rotation adds the new one as a line
// of its own), surrounding whitespace removed, empty lines skipped. Each must be printable ASCII
// without spaces, all gRPC metadata can carry (a tab or a byte above 0x7e made the client's
// call abort in gRPC); one that is not throws CredentialError naming the file and the line.
std::vector<std::string> read_token_lines(const std::string& path, const std::string& what);

// The token a client presents from its token file: the last line of read_token_lines, the
// newest one while a rotation is under way (docs/security.md, "Rotating credentials").
std::string read_client_token(const std::string& path, const std::string& what);

class CredentialError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace skein
