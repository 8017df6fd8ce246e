// skeinctl's `stage` commands: copies into and out of job namespaces run by the gateway (in,
// out, status, cancel, list), through the Admin service's staging RPCs, and `--wait`, which
// follows an operation to its end with a progress bar on a terminal or JSON lines otherwise.
// JSON shapes as documented in docs/skeinctl.md.
#pragma once

#include <string>

#include "admin_session.hpp"
#include "commands.hpp"

namespace skein::ctl {

// `--wait` ended with the operation failed or cancelled.
constexpr int kExitStageFailed = 5;

struct StageArgs {
  std::string job_id, source, destination;
  bool verify = false;
  bool wait = false;
};

int stage_start(AdminSession& s, const Output& out, bool in, const StageArgs& args);
int stage_status(AdminSession& s, const Output& out, const std::string& id, bool wait);
int stage_cancel(AdminSession& s, const Output& out, const std::string& id);
int stage_list(AdminSession& s, const Output& out, const std::string& job_id);
// `ns destroy JOBID --stage-out SOURCE DEST`: the copy, then the destroy, by the gateway.
int ns_destroy_after_stage_out(AdminSession& s, const Output& out, const StageArgs& args);

Json stage_json(const v1::StageOperation& op);

}  // namespace skein::ctl
