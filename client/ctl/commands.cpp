// skeinctl's commands; see commands.hpp. The JSON shapes here are a stable interface: fields are
// only ever added (docs/skeinctl.md).
#include "commands.hpp"

#include <iostream>
#include <nlohmann/json.hpp>

#include "table.hpp"

namespace skein::ctl {

std::string json_text(const Json& j, int indent) {
  // Names from the servers, and messages that hold them, may be any bytes: what is not UTF-8 is
  // shown as U+FFFD rather than end skeinctl (nlohmann's default throws).
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

void print_json(const Json& j) { std::cout << json_text(j, 2) << "\n"; }

int failed(const AdminSession& s, const Output& out, const grpc::Status& st) {
  int code = exit_code_of(st);
  const char* name = status_code_name(st.error_code());
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    fprintf(stderr,
            "skeinctl: no answer from the gateway at %s in time: %s (%s); what was asked may "
            "still be done by the gateway: look before asking again (ns list, backends list, "
            "stage list)\n",
            s.address().c_str(), st.error_message().c_str(), name);
  else if (st.error_code() == grpc::StatusCode::CANCELLED)
    fprintf(stderr,
            "skeinctl: the gateway at %s ended the call (%s): it is stopping or restarting; what "
            "was asked may still be done: look before asking again\n",
            s.address().c_str(), st.error_message().c_str());
  else if (code == kExitConnection)
    fprintf(stderr,
            "skeinctl: cannot reach the gateway at %s: %s (%s); if it is up, the TLS set-up may "
            "not fit: --ca-file, and --cert-file/--key-file for mutual TLS\n",
            s.address().c_str(), st.error_message().c_str(), name);
  else
    fprintf(stderr, "skeinctl: the gateway refused: %s (%s)\n", st.error_message().c_str(), name);
  if (out.json)
    print_json({{"error", {{"code", name}, {"message", st.error_message()}, {"exit_code", code}}}});
  return code;
}

namespace {

std::string state_name(const v1::BackendInfo& b) {
  switch (b.state()) {
    case v1::BackendInfo::UP:
      return "up";
    case v1::BackendInfo::DOWN:
      return "down";
    case v1::BackendInfo::DRAINING:
      return "draining";
    default:
      return "unknown";
  }
}

std::string mode_name(v1::BranchMode m) {
  switch (m) {
    case v1::BRANCH_MODE_RO:
      return "RO";
    case v1::BRANCH_MODE_NC:
      return "NC";
    default:
      return "RW";
  }
}

std::string address(const v1::BackendSpec& s) {
  return s.user() + "@" + s.host() + ":" + std::to_string(s.port()) + ":" + s.root();
}

std::string joined(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string out;
  for (auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

Json backend_json(const v1::BackendInfo& b) {
  auto& s = b.spec();
  Json j;
  j["name"] = s.name();
  j["address"] = address(s);
  j["host"] = s.host();
  j["port"] = s.port();
  j["user"] = s.user();
  j["root"] = s.root();
  j["identity_file"] = s.identity_file();
  j["known_hosts"] = s.known_hosts();
  j["state"] = state_name(b);
  j["up"] = b.up();
  j["draining"] = b.draining();
  j["live_connections"] = b.live_connections();
  j["ssh_transport"] = s.ssh_transport().empty() ? "libssh" : s.ssh_transport();
  j["certificate_file"] = s.certificate_file();
  j["ssh_config"] = s.ssh_config();
  j["proxy_jump"] = s.proxy_jump();
  j["ssh_stack"] = b.ssh_stack();
  j["connections"] = s.connections();
  j["free_bytes"] = b.free_space_known() ? Json(b.free_bytes()) : Json(nullptr);
  j["total_bytes"] = b.free_space_known() ? Json(b.total_bytes()) : Json(nullptr);
  j["min_free_bytes"] = s.min_free_bytes();
  j["bytes_read"] = b.bytes_read();
  j["bytes_written"] = b.bytes_written();
  j["ops"] = b.ops();
  j["mounts"] = Json::array();
  for (auto& m : b.mounts()) j["mounts"].push_back(m);
  j["job_pool"] = b.job_pool();
  if (!b.job_pool().empty()) {
    j["pool_claim_ours"] = b.pool_claim_ours();
    j["pool_claim_foreign"] = b.pool_claim_foreign();
    j["pool_claim"] = b.pool_claim();
  }
  return j;
}

// The MOUNTS column: its mounts, or for a backend of a [[jobs.pool]] that pool, and whether the
// backend is another job database's (docs/jobs.md).
std::string where_used(const v1::BackendInfo& b) {
  if (b.job_pool().empty()) return joined(b.mounts());
  std::string s = "jobs pool " + b.job_pool();
  if (!b.pool_claim_ours())
    s += b.pool_claim_foreign() ? " (another job database's: not used)" : " (not claimed yet)";
  return s;
}

void print_backends(const google::protobuf::RepeatedPtrField<v1::BackendInfo>& backends) {
  Table t({{"NAME"},
           {"ADDRESS"},
           {"STATE"},
           {"CONNS", true},
           {"FREE", true},
           {"READ", true},
           {"WRITTEN", true},
           {"OPS", true},
           {"MOUNTS"}});
  for (auto& b : backends) {
    t.add_row({b.spec().name(), address(b.spec()), state_name(b),
               std::to_string(b.live_connections()) + "/" + std::to_string(b.spec().connections()),
               b.free_space_known() ? human_size(b.free_bytes()) : "-", human_size(b.bytes_read()),
               human_size(b.bytes_written()), std::to_string(b.ops()), where_used(b)});
  }
  t.print(std::cout);
}

}  // namespace

int backends_list(AdminSession& s, const Output& out) {
  v1::ListBackendsReply reply;
  auto st = s.call(&v1::Admin::Stub::ListBackends, v1::ListBackendsRequest(), &reply);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    Json list = Json::array();
    for (auto& b : reply.backends()) list.push_back(backend_json(b));
    print_json({{"backends", list}});
  } else if (reply.backends().empty()) {
    std::cout << "(no backends)\n";
  } else {
    print_backends(reply.backends());
  }
  return kExitOk;
}

int backends_add(AdminSession& s, const Output& out, const AddBackendArgs& a) {
  v1::AddBackendRequest req;
  auto* spec = req.mutable_backend();
  spec->set_name(a.name);
  spec->set_host(a.host);
  spec->set_port(static_cast<uint32_t>(a.port));
  spec->set_user(a.user);
  spec->set_identity_file(a.identity_file);
  spec->set_known_hosts(a.known_hosts);
  spec->set_root(a.root);
  spec->set_connections(static_cast<uint32_t>(a.connections));
  spec->set_min_free_bytes(a.min_free_bytes);
  spec->set_ssh_transport(a.ssh_transport);
  spec->set_certificate_file(a.certificate_file);
  spec->set_ssh_config(a.ssh_config);
  spec->set_proxy_jump(a.proxy_jump);
  req.set_ns(a.ns);
  req.set_mount_path(a.mount_path);
  req.set_mode(a.mode == "RO"   ? v1::BRANCH_MODE_RO
               : a.mode == "NC" ? v1::BRANCH_MODE_NC
                                : v1::BRANCH_MODE_RW);
  req.set_skip_connect_check(a.no_check);
  v1::AddBackendReply reply;
  auto st = s.call(&v1::Admin::Stub::AddBackend, req, &reply, AdminSession::kChangeDeadline);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    print_json({{"backend", backend_json(reply.backend())},
                {"namespace", a.ns},
                {"mount_path", reply.mount_path()},
                {"new_mount", reply.new_mount()},
                {"layout", reply.layout()}});
  } else {
    std::cout << "added backend " << a.name << " (" << address(reply.backend().spec()) << ") to "
              << a.ns << ":" << reply.mount_path()
              << (reply.new_mount() ? " as a new mount" : " as its last branch") << "\n"
              << "layout of " << a.ns << ":" << reply.mount_path() << ": " << reply.layout()
              << "\n";
  }
  return kExitOk;
}

int backends_remove(AdminSession& s, const Output& out, const std::string& name) {
  v1::RemoveBackendRequest req;
  req.set_name(name);
  v1::RemoveBackendReply reply;
  auto st = s.call(&v1::Admin::Stub::RemoveBackend, req, &reply);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    Json left = Json::array(), dropped = Json::array();
    for (auto& m : reply.left_mounts()) left.push_back(m);
    for (auto& m : reply.dropped_mounts()) dropped.push_back(m);
    print_json({{"removed", name}, {"left_mounts", left}, {"dropped_mounts", dropped}});
  } else {
    std::cout << "removed backend " << name << "\n";
    if (!reply.dropped_mounts().empty())
      std::cout << "mounts gone (no other backend): " << joined(reply.dropped_mounts()) << "\n";
    if (!reply.left_mounts().empty())
      std::cout << "mounts still served by their other branches: " << joined(reply.left_mounts())
                << "\n";
  }
  return kExitOk;
}

int backends_drain(AdminSession& s, const Output& out, const std::string& name, bool undo) {
  v1::DrainBackendRequest req;
  req.set_name(name);
  req.set_undrain(undo);
  v1::DrainBackendReply reply;
  auto st = s.call(&v1::Admin::Stub::DrainBackend, req, &reply);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    print_json({{"backend", backend_json(reply.backend())}});
  } else if (undo) {
    std::cout << "backend " << name << " takes new files again (state "
              << state_name(reply.backend()) << ")\n";
  } else {
    std::cout << "backend " << name
              << " is draining: it takes no new files and keeps serving the ones it has (state "
              << state_name(reply.backend()) << ")\n";
  }
  return kExitOk;
}

int namespaces_list(AdminSession& s, const Output& out) {
  v1::ListNamespacesReply reply;
  auto st = s.call(&v1::Admin::Stub::ListNamespaces, v1::ListNamespacesRequest(), &reply);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    Json list = Json::array();
    for (auto& n : reply.namespaces()) {
      Json mounts = Json::array();
      for (auto& m : n.mounts()) {
        Json branches = Json::array();
        for (auto& b : m.branches())
          branches.push_back({{"backend", b.backend()}, {"mode", mode_name(b.mode())}});
        mounts.push_back({{"path", m.path()},
                          {"layout_kind", m.layout_kind()},
                          {"layout", m.layout()},
                          {"branches", branches}});
      }
      list.push_back({{"name", n.name()},
                      {"create_policy", n.create_policy()},
                      {"token_required", n.token_required()},
                      {"open_files", n.open_files()},
                      {"bytes_read", n.bytes_read()},
                      {"bytes_written", n.bytes_written()},
                      {"mounts", mounts}});
    }
    print_json({{"namespaces", list}});
    return kExitOk;
  }
  if (reply.namespaces().empty()) {
    std::cout << "(no namespaces)\n";
    return kExitOk;
  }
  Table t({{"NAMESPACE"}, {"POLICY"}, {"TOKEN"}, {"OPEN", true}, {"MOUNT"}, {"LAYOUT"}});
  for (auto& n : reply.namespaces()) {
    bool first = true;
    for (auto& m : n.mounts()) {
      if (first)
        t.add_row({n.name(), n.create_policy(), n.token_required() ? "yes" : "no",
                   std::to_string(n.open_files()), m.path(), m.layout()});
      else
        t.add_row({"", "", "", "", m.path(), m.layout()});
      first = false;
    }
    if (first)
      t.add_row({n.name(), n.create_policy(), n.token_required() ? "yes" : "no",
                 std::to_string(n.open_files()), "-", "(no mounts)"});
  }
  t.print(std::cout);
  return kExitOk;
}

int health(AdminSession& s, const Output& out) {
  v1::HealthReply reply;
  auto st = s.call(&v1::Admin::Stub::Health, v1::HealthRequest(), &reply);
  if (!st.ok()) return failed(s, out, st);
  std::string status =
      reply.backends_up() == reply.backends_total() && reply.problems().empty() ? "ok" : "degraded";
  if (out.json) {
    Json names = Json::array(), problems = Json::array();
    for (auto& n : reply.namespaces()) names.push_back(n);
    for (auto& p : reply.problems()) problems.push_back(p);
    print_json({{"status", status},
                {"version", reply.version()},
                {"listen", reply.listen()},
                {"uptime_s", reply.uptime_s()},
                {"backends_up", reply.backends_up()},
                {"backends_total", reply.backends_total()},
                {"namespaces", names},
                {"problems", problems}});
    return kExitOk;
  }
  Table t({{""}, {""}});
  t.add_row({"status", status});
  t.add_row({"gateway", reply.listen()});
  t.add_row({"version", reply.version()});
  t.add_row({"uptime", human_duration(reply.uptime_s())});
  t.add_row({"backends", std::to_string(reply.backends_up()) + "/" +
                             std::to_string(reply.backends_total()) + " up"});
  t.add_row({"namespaces",
             std::to_string(reply.namespaces_size()) +
                 (reply.namespaces().empty() ? "" : " (" + joined(reply.namespaces()) + ")")});
  for (auto& p : reply.problems()) t.add_row({"problem", p});
  t.print(std::cout);
  return kExitOk;
}

}  // namespace skein::ctl
