// Secret files; see credential_file.hpp.
#include "skein/credential_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace skein {

std::optional<std::string> private_file_problem(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return "cannot read " + what + " " + path + ": " + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return what + " " + path + " is not a regular file";
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return what + " " + path + " is accessible by group or others (mode " + mode +
           "); a file holding a secret must be readable by its owner only: chmod 600 " + path;
  }
  if (::access(path.c_str(), R_OK) != 0)
    return "cannot read " + what + " " + path + ": " + std::strerror(errno);
  return std::nullopt;
}

std::string read_credential_file(const std::string& path, const std::string& what) {
  if (auto problem = private_file_problem(path, what)) throw CredentialError(*problem);
  std::ifstream in(path);
  if (!in) throw CredentialError("cannot read " + what + " " + path + ": " + std::strerror(errno));
  std::string secret((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const char* space = " \t\r\n";
  auto begin = secret.find_first_not_of(space);
  if (begin == std::string::npos) throw CredentialError(what + " " + path + " is empty");
  return secret.substr(begin, secret.find_last_not_of(space) - begin + 1);
}

std::vector<std::string> read_token_lines(const std::string& path, const std::string& what) {
  const std::string text = read_credential_file(path, what);
  std::vector<std::string> tokens;
  const char* space = " \t\r";
  std::size_t start = 0, number = 0;
  while (start <= text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(start, nl - start);
    start = nl + 1;
    ++number;
    auto begin = line.find_first_not_of(space);
    if (begin == std::string::npos) continue;
    line = line.substr(begin, line.find_last_not_of(space) - begin + 1);
    for (unsigned char c : line)
      if (c < 0x21 || c > 0x7e)  // the secret itself is not shown
        throw CredentialError(what + " " + path + ", line " + std::to_string(number) +
                              ": a token may hold only printable ASCII characters, no spaces "
                              "or tabs inside it (gRPC metadata carries no other bytes)");
    tokens.push_back(std::move(line));
  }
  return tokens;  // not empty: read_credential_file refused a file of whitespace
}

std::string read_client_token(const std::string& path, const std::string& what) {
  return read_token_lines(path, what).back();
}

}  // namespace skein
