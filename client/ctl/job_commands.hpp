// skeinctl's `ns` commands: job namespaces (create, destroy, list, usage), through the Admin
// service's job RPCs. JSON shapes as documented in docs/skeinctl.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "admin_session.hpp"
#include "commands.hpp"

namespace skein::ctl {

struct CreateJobArgs {
  std::string job_id;
  uint32_t uid = 0, gid = 0;
  bool uid_given = false, gid_given = false;
  std::string quota_bytes;  // a size: "100G"
  uint64_t quota_inodes = 0;
  std::string pool;
  std::vector<std::string> backends;
  std::string layout = "striped";
  uint32_t width = 0;
  std::string stripe_size;          // "" or a size
  std::string lifetime;             // "" or a duration: "24h"
  std::vector<std::string> labels;  // KEY=VALUE
};

int ns_create(AdminSession& s, const Output& out, const CreateJobArgs& args);
int ns_destroy(AdminSession& s, const Output& out, const std::string& job_id, uint32_t wait_ms);
int ns_list(AdminSession& s, const Output& out);
int ns_usage(AdminSession& s, const Output& out, const std::string& job_id);
// Moves the expiry to `lifetime` (a duration) from now; throws UsageError for a bad one.
int ns_renew(AdminSession& s, const Output& out, const std::string& job_id,
             const std::string& lifetime);

// Checks what can be checked before anything is sent; throws UsageError.
v1::CreateJobNamespaceRequest create_request(const CreateJobArgs& args);

}  // namespace skein::ctl
