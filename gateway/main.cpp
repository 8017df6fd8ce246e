// skein-gateway: serves the namespaces of a TOML configuration over gRPC, backed by SFTP servers.
// This file parses arguments, sets up logging and runs the gRPC server; the gateway's state and
// its runtime changes live in Gateway (gateway.hpp).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <csignal>
#include <memory>
#include <thread>

#include "auth/server_tls.hpp"
#include "backend/path_guard.hpp"
#include "coherence/coherence.hpp"
#include "config/gateway_config.hpp"
#include "gateway.hpp"
#include "service/admin_service.hpp"
#include "service/fs_services.hpp"
#include "service/node_service.hpp"
#include "skein/fatal_signals.hpp"
#include "skein/heap.hpp"
#include "skein/logging.hpp"
#include "wire/transport.hpp"

int main(int argc, char** argv) {
  // SIGTERM and SIGINT blocked first of all, before gRPC (its credentials, its executors and
  // timers) or the logging start threads of their own: every thread inherits the mask, so only
  // the waiter below receives them. A thread started earlier would take one at its default
  // action and end the process at once, with no shutdown (copies not stopped, nothing saved).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  skein::report_fatal_signals("skein-gateway");
  skein::wire::tune_grpc_process();
  CLI::App app{"skein-gateway: one namespace over many SFTP storage servers"};
  std::string config_path, log_level;
  bool check_only = false;
  app.add_option("--config", config_path, "TOML configuration file")->required();
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error (overrides the config)");
  app.add_flag("--check-config", check_only, "check the configuration and exit");
  app.set_version_flag("--version", skein::Gateway::version());
  CLI11_PARSE(app, argc, argv);

  skein::GatewayConfig cfg;
  try {
    cfg = skein::load_gateway_config(config_path);
  } catch (const skein::ConfigError& e) {
    fprintf(stderr, "skein-gateway: %s\n", e.what());
    return 2;
  }
  // The TLS files are checked before anything starts: a bad one would only show as failed
  // handshakes later.
  std::string tls_error;
  auto credentials = skein::server_credentials(cfg, tls_error);
  if (!credentials) {
    fprintf(stderr, "skein-gateway: %s: [gateway.tls]: %s\n", config_path.c_str(),
            tls_error.c_str());
    return 2;
  }
  if (!skein::setup_logging("gateway", log_level.empty() ? cfg.log_level : log_level)) {
    fprintf(stderr, "skein-gateway: unknown log level '%s'\n",
            (log_level.empty() ? cfg.log_level : log_level).c_str());
    return 2;
  }

  if (!cfg.tls)
    spdlog::warn(
        "{}: insecure = true: gRPC is plaintext, so tokens and file contents cross the network "
        "unencrypted; use [gateway.tls] on any network you do not fully trust",
        config_path);
  skein::keep_large_buffers_on_heap();
  // Directories verified on the servers are looked at again as often as cached paths are.
  skein::PathGuard::set_ttl(cfg.revalidate_interval);

  std::unique_ptr<skein::Gateway> gateway;
  std::vector<std::string> admin_tokens;
  try {
    if (!cfg.admin_token_file.empty())
      admin_tokens = skein::read_token_file(cfg.admin_token_file, "admin_token_file");
    gateway = std::make_unique<skein::Gateway>(cfg);
  } catch (const skein::ConfigError& e) {
    fprintf(stderr, "skein-gateway: %s: %s\n", config_path.c_str(), e.what());
    return 2;
  }
  // What a start would refuse has been checked by now: the config, TLS files, log level, token
  // files and namespaces. Nothing is connected, listened on or opened (the job database) yet.
  if (check_only) {
    printf("%s: OK (%zu backends, %zu namespaces)\n", config_path.c_str(), cfg.backends.size(),
           cfg.namespaces.size());
    return 0;
  }
  if (admin_tokens.empty())
    spdlog::warn("no admin_token_file in [gateway]: the Admin service refuses every call");
  for (auto& w : skein::shared_root_warnings(cfg)) spdlog::warn("{}: {}", config_path, w);
  gateway->connect_backends();
  for (auto& view : gateway->backends()) view.backend->warm_up();
  // Layouts check what they must before serving (a striped one its stripe records), in the
  // background: a server that hangs must not hold up the start.
  std::vector<std::shared_ptr<skein::Layout>> layouts;
  for (auto& ns : gateway->namespaces())
    for (auto& mount : ns.table->mounts()) layouts.push_back(mount.layout);
  std::thread preparer([layouts] {
    for (auto& layout : layouts) layout->prepare();
  });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  skein::Coherence coherence({.lease = cfg.lease_timeout,
                              .revalidate_interval = cfg.revalidate_interval,
                              .revalidate_batch = cfg.revalidate_batch,
                              .interest_limit = cfg.interest_limit,
                              .remote_watch = cfg.remote_watch,
                              .orphan_timeout = cfg.orphan_timeout},
                             gateway->registry());
  {
    skein::BackendMap backends;
    for (auto& view : gateway->backends()) backends[view.backend->name()] = view.backend;
    coherence.watch_backends(backends);
  }
  // An admin change may make a path lead to another branch's file: every mount of the namespace
  // drops its cache, and backends added at runtime are watched too.
  gateway->on_tables_changed(
      [&coherence](const std::string& ns, const skein::BackendMap& backends) {
        coherence.broker().changed_elsewhere(
            ns, {skein::InvalidationBroker::item(skein::v1::Invalidation::ALL, "")});
        coherence.watch_backends(backends);
      });
  const skein::ClientRoles roles = skein::client_roles(cfg);
  if (roles.mutual_tls() && cfg.tls->admin_clients.empty() && !admin_tokens.empty())
    spdlog::warn(
        "{}: mutual TLS without admin_clients in [gateway.tls]: the Admin service "
        "refuses every call",
        config_path);
  gateway->registry().set_client_roles(roles);
  // Job namespaces: their store is opened and what it holds served before the port opens.
  std::unique_ptr<skein::JobNamespaces> jobs;
  std::unique_ptr<skein::StageEngine> stages;
  if (cfg.jobs) {
    try {
      jobs = std::make_unique<skein::JobNamespaces>(*cfg.jobs, *gateway, &coherence.broker());
      jobs->start();
      skein::StageEngine::Options stage_options;
      stage_options.threads = cfg.jobs->stage_threads;
      stage_options.max_running = cfg.jobs->stage_max_running;
      stages =
          std::make_unique<skein::StageEngine>(*jobs, *gateway, &coherence.broker(), stage_options);
      stages->start();  // resumes copies a stopped gateway left running
      jobs->start_housekeeping();
    } catch (const skein::ConfigError& e) {
      spdlog::critical("{}: {}", config_path, e.what());
      preparer.join();
      return 2;
    }
  }
  // gRPC runs its callback handlers on max(2, cores / 2) threads (at most 16), which also poll
  // for every call and serve the Watch streams: half of them may block on one inline call each.
  const std::size_t callback_threads =
      std::clamp<std::size_t>(std::thread::hardware_concurrency() / 2, 2, 16);
  // Blocking calls on the pool at once, at most; more wait for a thread. Generous: a server that
  // hangs holds a thread per request to it until the first deadline marks it down, and requests
  // to healthy servers must not queue behind those meanwhile.
  constexpr std::size_t kMaxBlockingThreads = 256;
  skein::CallPlacement placement(kMaxBlockingThreads, callback_threads / 2);
  skein::NamespaceService ns_service(gateway->registry(), placement, &coherence.broker());
  skein::DataService data_service(gateway->registry(), placement, &coherence.broker());
  skein::AdminService admin_service(*gateway, admin_tokens, roles);
  admin_service.set_jobs(jobs.get(), stages.get());
  skein::NodeService node_service(jobs.get(), roles);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(cfg.listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.SetMaxSendMessageSize(8 << 20);
  // Mounts ping every 10 s to notice a dead gateway; allow it, even between calls.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  skein::wire::tune_bulk_transport(
      [&](const char* name, int value) { builder.AddChannelArgument(name, value); });
  builder.RegisterService(&ns_service);
  builder.RegisterService(&data_service);
  builder.RegisterService(&admin_service);
  builder.RegisterService(&node_service);
  builder.RegisterService(&coherence.service());
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::critical("cannot listen on {}", cfg.listen);
    preparer.join();
    return 1;
  }
  spdlog::info("listening on {} (port {}; {}; {} backends, {} namespaces)", cfg.listen, port,
               !cfg.tls                          ? "plaintext"
               : cfg.tls->client_ca_file.empty() ? "TLS"
                                                 : "mutual TLS",
               cfg.backends.size(), cfg.namespaces.size());

  // Shut down cleanly on SIGTERM/SIGINT: a thread waits for the signal, then stops the server.
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("signal {}: shutting down", sig);
    if (stages) stages->stop();  // at once, not after the calls' grace
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  server->Wait();
  waiter.join();
  preparer.join();
  return 0;
}
