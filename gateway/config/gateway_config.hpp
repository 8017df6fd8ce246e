// The gateway's configuration: a TOML file naming the listen address, the storage backends and the
// namespaces built from them. Loading checks everything it can before the gateway starts, and a
// mistake is reported as "FILE:LINE: problem".
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace skein {

// A virtual subtree of a namespace and the branches (backend names, in priority order) behind it.
struct MountConfig {
  std::string path;
  std::vector<std::string> backends;
};

struct NamespaceConfig {
  std::string name;
  std::string token_file;  // empty: no token needed
  std::vector<MountConfig> mounts;
};

struct GatewayConfig {
  std::string source;  // the file it came from
  std::string listen = "127.0.0.1:7070";
  std::string log_level = "info";
  std::chrono::milliseconds timeout{15000};
  std::vector<BackendConfig> backends;
  std::vector<NamespaceConfig> namespaces;
};

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses and checks a configuration file. Throws ConfigError with "FILE:LINE: problem".
GatewayConfig load_gateway_config(const std::string& path);
// Same, from text (for tests); `source` names it in messages.
GatewayConfig parse_gateway_config(std::string_view text, const std::string& source);

}  // namespace skein
