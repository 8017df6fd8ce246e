// What the configuration says of one SFTP backend: its name, where its server is and how to log
// in, the exported directory, the size of its connection pool, and its placement limit.
#pragma once

#include <cstdint>
#include <string>

#include "sftp/endpoint.hpp"

namespace skein {

struct BackendConfig {
  std::string name;
  sftp::Endpoint endpoint;
  std::string root;  // absolute directory on the server
  int connections = 4;
  uint64_t min_free_bytes = 0;  // below this much free space the backend takes no new files
};

}  // namespace skein
