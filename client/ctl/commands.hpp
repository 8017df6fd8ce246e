// skeinctl's commands: each calls one Admin RPC and prints the answer as an aligned table or, with
// --json, as the JSON documented in docs/skeinctl.md. Each returns skeinctl's exit code; a failed
// call is reported on stderr (and, with --json, as {"error": ...} on stdout).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "admin_session.hpp"

namespace skein::ctl {

struct Output {
  bool json = false;
};

using Json = nlohmann::ordered_json;
// `j` as JSON text (indented by `indent`, -1: one line), bytes that are not UTF-8 replaced.
std::string json_text(const Json& j, int indent = -1);
void print_json(const Json& j);
// Reports a failed call on stderr (and with --json as {"error": ...} on stdout); returns the exit
// code it means.
int failed(const AdminSession& s, const Output& out, const grpc::Status& st);

struct AddBackendArgs {
  std::string name, host, user, identity_file, known_hosts, root;
  int port = 22;
  int connections = 4;
  uint64_t min_free_bytes = 0;
  std::string ns, mount_path;
  std::string mode = "RW";
  std::string ssh_transport = "libssh";
  std::string certificate_file, ssh_config, proxy_jump;  // optional
  bool no_check = false;
};

int backends_list(AdminSession& s, const Output& out);
int backends_add(AdminSession& s, const Output& out, const AddBackendArgs& args);
int backends_remove(AdminSession& s, const Output& out, const std::string& name);
int backends_drain(AdminSession& s, const Output& out, const std::string& name, bool undo);
int namespaces_list(AdminSession& s, const Output& out);
int health(AdminSession& s, const Output& out);

}  // namespace skein::ctl
