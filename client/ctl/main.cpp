// skeinctl: the admin CLI of a skein gateway. It lists backends and namespaces, adds, drains and
// removes backends at runtime and shows the gateway's health, through the Admin gRPC service.
// Usage, output and exit codes: docs/skeinctl.md.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "admin_session.hpp"
#include "commands.hpp"
#include "job_commands.hpp"
#include "skein/size.hpp"
#include "skein/version.hpp"
#include "stage_commands.hpp"

namespace {

using namespace skein::ctl;

// A path on the gateway's machine, given relative to where skeinctl runs: made absolute, since
// the gateway has a working directory of its own.
std::string absolute(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  return std::filesystem::absolute(path).lexically_normal().string();
}

int run(int argc, char** argv) {
  CLI::App app{
      "skeinctl: administer a skein gateway (backends, namespaces, health) over its Admin "
      "service"};
  app.set_version_flag("--version", skein::version());
  // Commands are checked after parsing, so that an unknown word is named in the error.
  app.require_subcommand(0, 1);
  app.fallthrough();  // global options may also follow the command

  std::string gateway, token_file;
  Output out;
  app.add_option("--gateway", gateway, "gateway address HOST:PORT (default: $SKEIN_GATEWAY)")
      ->envname("SKEIN_GATEWAY");
  app.add_option("--token-file", token_file,
                 "file holding the admin token (default: $SKEIN_ADMIN_TOKEN_FILE)")
      ->envname("SKEIN_ADMIN_TOKEN_FILE");
  app.add_flag("--json", out.json, "print JSON (stable; see docs/skeinctl.md)");
  skein::wire::ClientTls tls;
  app.add_option("--ca-file", tls.ca_file,
                 "CA certificate (PEM) that signed the gateway's (default: $SKEIN_CA_FILE)")
      ->envname("SKEIN_CA_FILE");
  app.add_option("--cert-file", tls.cert_file,
                 "admin client certificate (PEM), for mutual TLS (default: $SKEIN_ADMIN_CERT)")
      ->envname("SKEIN_ADMIN_CERT");
  app.add_option("--key-file", tls.key_file,
                 "its private key (PEM, mode 0600; default: $SKEIN_ADMIN_KEY)")
      ->envname("SKEIN_ADMIN_KEY");
  app.add_option("--tls-server-name", tls.server_name,
                 "name to expect in the gateway's certificate (default: $SKEIN_TLS_SERVER_NAME, "
                 "else the host dialled)")
      ->envname("SKEIN_TLS_SERVER_NAME");
  app.add_flag("--insecure", tls.insecure,
               "plaintext gRPC, for a gateway with insecure = true (default: $SKEIN_INSECURE)")
      ->envname("SKEIN_INSECURE");

  // The command to run once the arguments are parsed and the session is set up.
  std::function<int(AdminSession&)> command;

  auto* backends = app.add_subcommand("backends", "list, add, remove and drain backends");
  backends->require_subcommand(0, 1);
  backends->add_subcommand("list", "list backends: address, state, connections, space, traffic")
      ->callback([&] { command = [&](AdminSession& s) { return backends_list(s, out); }; });

  AddBackendArgs add;
  std::string min_free;
  auto* add_cmd = backends->add_subcommand(
      "add", "add a backend as a new mount, or as the last branch of an existing mount (union)");
  add_cmd->add_option("NAME", add.name, "name of the new backend")->required();
  add_cmd->add_option("--host", add.host, "SSH server")->required();
  add_cmd->add_option("--port", add.port, "SSH port")
      ->check(CLI::Range(1, 65535))
      ->capture_default_str();
  add_cmd->add_option("--user", add.user, "SSH user")->required();
  add_cmd
      ->add_option("--identity", add.identity_file,
                   "SSH private key (a path on the gateway's machine)")
      ->required();
  add_cmd
      ->add_option("--known-hosts", add.known_hosts,
                   "known_hosts file holding the server's key (on the gateway's machine)")
      ->required();
  add_cmd->add_option("--root", add.root, "exported directory on the server (absolute)")
      ->required();
  add_cmd->add_option("--connections", add.connections, "SFTP connections in the pool")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  add_cmd->add_option("--min-free", min_free,
                      "below this much free space no new files go there (4096, 64K, 4M, 2G, 1T)");
  add_cmd
      ->add_option("--ssh-transport", add.ssh_transport,
                   "SSH implementation: libssh (in the gateway) or openssh (the system's ssh "
                   "client; host certificates, ProxyJump)")
      ->check(CLI::IsMember({"libssh", "openssh"}))
      ->capture_default_str();
  add_cmd->add_option("--certificate", add.certificate_file,
                      "user certificate for the identity (on the gateway's machine)");
  add_cmd->add_option("--ssh-config", add.ssh_config,
                      "ssh_config file for this backend (on the gateway's machine)");
  add_cmd->add_option("--proxy-jump", add.proxy_jump,
                      "jump hosts, as ssh -J takes them (--ssh-transport openssh)");
  add_cmd->add_option("--namespace", add.ns, "namespace to add it to")->required();
  add_cmd
      ->add_option("--path", add.mount_path,
                   "mount path in the namespace: an existing mount (becomes a union) or a new one")
      ->required();
  add_cmd->add_option("--mode", add.mode, "branch mode: RW, RO or NC")
      ->transform(CLI::IsMember({"RW", "RO", "NC"}, CLI::ignore_case))
      ->capture_default_str();
  add_cmd->add_flag("--no-check", add.no_check,
                    "add it even if the gateway cannot log in now (a server that is down)");
  add_cmd->callback([&] {
    if (!min_free.empty()) {
      auto v = skein::parse_size(min_free);
      if (!v)
        throw CLI::ValidationError("--min-free",
                                   "'" + min_free + "' is not a size such as 4096, 64K, 4M, 2G");
      add.min_free_bytes = *v;
    }
    if (add.mount_path.empty() || add.mount_path.front() != '/')
      throw CLI::ValidationError("--path", "'" + add.mount_path + "' must be an absolute path");
    add.identity_file = absolute(add.identity_file);
    add.known_hosts = absolute(add.known_hosts);
    if (!add.certificate_file.empty()) add.certificate_file = absolute(add.certificate_file);
    if (!add.ssh_config.empty()) add.ssh_config = absolute(add.ssh_config);
    command = [&](AdminSession& s) { return backends_add(s, out, add); };
  });

  std::string remove_name;
  auto* remove_cmd = backends->add_subcommand(
      "remove", "take a backend out of every mount (a mount left without backends disappears)");
  remove_cmd->add_option("NAME", remove_name, "backend")->required();
  remove_cmd->callback(
      [&] { command = [&](AdminSession& s) { return backends_remove(s, out, remove_name); }; });

  std::string drain_name;
  bool undo = false;
  auto* drain_cmd = backends->add_subcommand(
      "drain", "stop new files going to a backend; it keeps serving the ones it has");
  drain_cmd->add_option("NAME", drain_name, "backend")->required();
  drain_cmd->add_flag("--undo", undo, "let it take new files again");
  drain_cmd->callback(
      [&] { command = [&](AdminSession& s) { return backends_drain(s, out, drain_name, undo); }; });

  auto* namespaces = app.add_subcommand("namespaces", "list namespaces");
  namespaces->require_subcommand(0, 1);
  namespaces->add_subcommand("list", "list namespaces with their mounts and layouts")
      ->callback([&] { command = [&](AdminSession& s) { return namespaces_list(s, out); }; });

  // Job namespaces.
  auto* ns = app.add_subcommand("ns", "job namespaces: create, destroy, list, usage, renew");
  ns->require_subcommand(0, 1);
  CreateJobArgs job;
  auto* ns_create_cmd = ns->add_subcommand("create", "make a job's scratch namespace (idempotent)");
  ns_create_cmd->add_option("JOBID", job.job_id, "the job's id (letters, digits, . _ -)")
      ->required();
  ns_create_cmd->add_option("--uid", job.uid, "the owner every file shows")
      ->required()
      ->each([&](const std::string&) { job.uid_given = true; });
  ns_create_cmd->add_option("--gid", job.gid, "its group")
      ->required()
      ->each([&](const std::string&) { job.gid_given = true; });
  ns_create_cmd->add_option("--quota-bytes", job.quota_bytes, "quota: a size, e.g. 100G")
      ->required();
  ns_create_cmd->add_option("--quota-inodes", job.quota_inodes,
                            "quota of files, directories and symlinks (default: the gateway's)");
  ns_create_cmd->add_option("--pool", job.pool, "a pool of [jobs] (default: the default pool)");
  ns_create_cmd->add_option("--backends", job.backends, "these backends of a pool, in order")
      ->delimiter(',');
  ns_create_cmd->add_option("--layout", job.layout, "striped or union")->capture_default_str();
  ns_create_cmd->add_option("--width", job.width, "backends to stripe over (default: all)");
  ns_create_cmd->add_option("--stripe-size", job.stripe_size, "e.g. 1M (default: the pool's)");
  ns_create_cmd->add_option("--lifetime", job.lifetime,
                            "e.g. 90m, 24h, 7d (default: the gateway's default_lifetime)");
  ns_create_cmd->add_option("--label", job.labels, "KEY=VALUE, any number");
  ns_create_cmd->callback(
      [&] { command = [&](AdminSession& s) { return ns_create(s, out, job); }; });
  std::string destroy_id;
  uint32_t destroy_wait_ms = 30000;
  auto* ns_destroy_cmd =
      ns->add_subcommand("destroy", "take a job's namespace out of service and remove its files");
  ns_destroy_cmd->add_option("JOBID", destroy_id, "the job's id")->required();
  ns_destroy_cmd
      ->add_option("--wait-ms", destroy_wait_ms,
                   "how long to wait for the files' removal (the rest is retried)")
      ->capture_default_str();
  std::vector<std::string> destroy_stage_out;
  bool destroy_wait = false;
  ns_destroy_cmd
      ->add_option("--stage-out", destroy_stage_out,
                   "SOURCE DEST: copy this out first (as `stage out`); destroy once it is done")
      ->expected(2);
  ns_destroy_cmd->add_flag("--wait", destroy_wait, "with --stage-out: follow the copy to its end");
  ns_destroy_cmd->callback([&] {
    if (!destroy_stage_out.empty()) {
      command = [&](AdminSession& s) {
        StageArgs a{destroy_id, destroy_stage_out[0], destroy_stage_out[1], false, destroy_wait};
        return ns_destroy_after_stage_out(s, out, a);
      };
      return;
    }
    command = [&](AdminSession& s) { return ns_destroy(s, out, destroy_id, destroy_wait_ms); };
  });
  ns->add_subcommand("list", "job namespaces: owner, layout, usage, expiry")->callback([&] {
    command = [&](AdminSession& s) { return ns_list(s, out); };
  });
  std::string usage_id;
  auto* ns_usage_cmd = ns->add_subcommand("usage", "a job namespace's usage against its quota");
  ns_usage_cmd->add_option("JOBID", usage_id, "the job's id")->required();
  ns_usage_cmd->callback(
      [&] { command = [&](AdminSession& s) { return ns_usage(s, out, usage_id); }; });
  std::string renew_id, renew_lifetime;
  auto* ns_renew_cmd = ns->add_subcommand(
      "renew", "move a job namespace's expiry later: LIFETIME from now, at most max_lifetime");
  ns_renew_cmd->add_option("JOBID", renew_id, "the job's id")->required();
  ns_renew_cmd->add_option("--lifetime", renew_lifetime, "from now, e.g. 90m, 24h, 7d")->required();
  ns_renew_cmd->callback([&] {
    command = [&](AdminSession& s) { return ns_renew(s, out, renew_id, renew_lifetime); };
  });

  // Staging.
  auto* stage =
      app.add_subcommand("stage", "copies into and out of job namespaces, by the gateway");
  stage->require_subcommand(0, 1);
  StageArgs stage_args;
  for (bool in : {true, false}) {
    auto* cmd = stage->add_subcommand(
        in ? "in" : "out",
        in ? "copy a tree from NAMESPACE:/path or backend:NAME:/path into a job"
           : "copy a tree of a job out to NAMESPACE:/path or backend:NAME:/path");
    cmd->add_option("JOBID", stage_args.job_id, "the job's id")->required();
    cmd->add_option("SOURCE", stage_args.source,
                    in ? "NAMESPACE:/path or backend:NAME:/path" : "/path in the job's namespace")
        ->required();
    cmd->add_option("DEST", stage_args.destination,
                    in ? "/path in the job's namespace" : "NAMESPACE:/path or backend:NAME:/path")
        ->required();
    cmd->add_flag("--verify", stage_args.verify, "compare SHA-256 checksums of every file");
    cmd->add_flag("--wait", stage_args.wait,
                  "follow it to its end: a progress bar on a terminal, JSON lines otherwise");
    cmd->callback([&, in] {
      command = [&, in](AdminSession& s) { return stage_start(s, out, in, stage_args); };
    });
  }
  std::string stage_id;
  bool stage_wait = false;
  auto* stage_status_cmd = stage->add_subcommand("status", "an operation's progress");
  stage_status_cmd->add_option("ID", stage_id, "the operation's id")->required();
  stage_status_cmd->add_flag("--wait", stage_wait, "follow it to its end");
  stage_status_cmd->callback([&] {
    command = [&](AdminSession& s) { return stage_status(s, out, stage_id, stage_wait); };
  });
  auto* stage_cancel_cmd = stage->add_subcommand("cancel", "stop an operation");
  stage_cancel_cmd->add_option("ID", stage_id, "the operation's id")->required();
  stage_cancel_cmd->callback(
      [&] { command = [&](AdminSession& s) { return stage_cancel(s, out, stage_id); }; });
  std::string stage_job;
  auto* stage_list_cmd = stage->add_subcommand("list", "operations, of one job or all");
  stage_list_cmd->add_option("JOBID", stage_job, "only this job's");
  stage_list_cmd->callback(
      [&] { command = [&](AdminSession& s) { return stage_list(s, out, stage_job); }; });

  app.add_subcommand("health", "gateway version, uptime, backends up, namespaces")->callback([&] {
    command = [&](AdminSession& s) { return health(s, out); };
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);  // prints help, the version, or the error and a hint
    return rc == 0 ? kExitOk : kExitUsage;
  }

  if (!command) {
    std::string which = backends->parsed()     ? "backends: give one of list, add, remove, drain"
                        : namespaces->parsed() ? "namespaces: give list"
                        : ns->parsed() ? "ns: give one of create, destroy, list, usage, renew"
                        : stage->parsed()
                            ? "stage: give one of in, out, status, cancel, list"
                            : "give a command: backends, namespaces, ns, stage, health";
    fprintf(stderr, "skeinctl: %s\nRun with --help for more information.\n", which.c_str());
    return kExitUsage;
  }

  try {
    if (gateway.empty())
      throw UsageError("no gateway: give --gateway HOST:PORT or set SKEIN_GATEWAY");
    check_gateway_address(gateway);
    if (token_file.empty())
      throw UsageError(
          "no admin token: give --token-file FILE or set SKEIN_ADMIN_TOKEN_FILE (the file named "
          "by admin_token_file in the gateway's configuration)");
    if (tls.insecure && !tls.ca_file.empty())
      throw UsageError("--insecure and --ca-file contradict each other: choose TLS or plaintext");
    AdminSession session(gateway, read_admin_token(token_file), tls);
    return command(session);
  } catch (const UsageError& e) {
    fprintf(stderr, "skeinctl: %s\n", e.what());
    return kExitUsage;
  }
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
