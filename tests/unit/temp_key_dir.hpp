// A temporary directory holding a dummy identity file and an empty known_hosts, for tests whose
// backend configuration must name files that exist. Removed, with all in it, when it goes.
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
    std::ofstream(key) << "key";
    std::ofstream(known_hosts) << "";
  }
  ~TempKeyDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  TempKeyDir(const TempKeyDir&) = delete;
  TempKeyDir& operator=(const TempKeyDir&) = delete;

  std::string dir, key, known_hosts;
};

}  // namespace skein::test
