// A temporary directory holding a dummy identity file and a namespace token file (both mode 0600,
// as private keys and secrets must be) and an empty known_hosts, for tests whose configuration must
// name files that exist. Removed, with all in it, when it goes.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace skein::test {

struct TempKeyDir {
  // `name`: the directory's name in /tmp, before a random suffix.
  explicit TempKeyDir(const std::string& name) {
    std::string tmpl = "/tmp/" + name + "-XXXXXX";
    dir = mkdtemp(tmpl.data());
    key = dir + "/id";
    known_hosts = dir + "/known_hosts";
    token = dir + "/ns.token";
    std::ofstream(key) << "key";
    std::ofstream(known_hosts) << "";
    std::ofstream(token) << "s3cret\n";
    for (auto* secret : {&key, &token})
      std::filesystem::permissions(
          *secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  ~TempKeyDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  TempKeyDir(const TempKeyDir&) = delete;
  TempKeyDir& operator=(const TempKeyDir&) = delete;

  std::string dir, key, known_hosts, token;
};

}  // namespace skein::test
