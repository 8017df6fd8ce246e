// Turns namespace configuration into mount tables over live Backend objects. The gateway calls
// it at start and again whenever an admin changes the backend set; backends are shared by name,
// so their connection pools survive a rebuild.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backend/sftp_backend.hpp"
#include "config/gateway_config.hpp"
#include "namespace/mount_table.hpp"

namespace skein {

using BackendMap = std::map<std::string, std::shared_ptr<SftpBackend>>;

// Throws ConfigError when the configuration names a backend that `backends` lacks.
std::shared_ptr<const MountTable> build_mount_table(const NamespaceConfig& ns,
                                                    const BackendMap& backends);

}  // namespace skein
