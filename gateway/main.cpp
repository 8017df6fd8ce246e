// skein-gateway: serves the namespaces of a TOML configuration over gRPC, backed by SFTP servers.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>
#include <map>
#include <thread>

#include "config/gateway_config.hpp"
#include "namespace/namespace_builder.hpp"
#include "namespace/namespace_fs.hpp"
#include "service/fs_services.hpp"
#include "skein/logging.hpp"

namespace {

std::string read_token(const std::string& path) {
  std::ifstream in(path);
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
    token.pop_back();
  return token;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"skein-gateway: one namespace over many SFTP storage servers"};
  std::string config_path, log_level;
  bool check_only = false;
  app.add_option("--config", config_path, "TOML configuration file")->required();
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error (overrides the config)");
  app.add_flag("--check-config", check_only, "check the configuration and exit");
  CLI11_PARSE(app, argc, argv);

  skein::GatewayConfig cfg;
  try {
    cfg = skein::load_gateway_config(config_path);
  } catch (const skein::ConfigError& e) {
    fprintf(stderr, "skein-gateway: %s\n", e.what());
    return 2;
  }
  if (check_only) {
    printf("%s: OK (%zu backends, %zu namespaces)\n", config_path.c_str(), cfg.backends.size(),
           cfg.namespaces.size());
    return 0;
  }
  if (!skein::setup_logging("gateway", log_level.empty() ? cfg.log_level : log_level)) {
    fprintf(stderr, "skein-gateway: unknown log level '%s'\n",
            (log_level.empty() ? cfg.log_level : log_level).c_str());
    return 2;
  }

  skein::BackendMap backends;
  for (auto& b : cfg.backends) backends[b.name] = std::make_shared<skein::Backend>(b);

  skein::NamespaceRegistry registry;
  try {
    for (auto& n : cfg.namespaces) {
      std::string token = n.token_file.empty() ? "" : read_token(n.token_file);
      registry.add(std::make_shared<skein::NamespaceFs>(n.name, token,
                                                        skein::build_mount_table(n, backends)));
    }
  } catch (const skein::ConfigError& e) {
    fprintf(stderr, "skein-gateway: %s: %s\n", config_path.c_str(), e.what());
    return 2;
  }

  // Connect to every backend once now, so a misconfigured server shows up in the log at start.
  for (auto& [name, b] : backends) {
    if (b->connection(0))
      spdlog::info("backend {}: connected to {}@{}:{}:{}", name, b->config().endpoint.user,
                   b->config().endpoint.host, b->config().endpoint.port, b->config().root);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  skein::NamespaceService ns_service(registry);
  skein::DataService data_service(registry);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(cfg.listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.SetMaxSendMessageSize(8 << 20);
  builder.RegisterService(&ns_service);
  builder.RegisterService(&data_service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    spdlog::critical("cannot listen on {}", cfg.listen);
    return 1;
  }
  spdlog::info("listening on {} ({} backends, {} namespaces)", cfg.listen, cfg.backends.size(),
               cfg.namespaces.size());

  // Shut down cleanly on SIGTERM/SIGINT: a thread waits for the signal, then stops the server.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("signal {}: shutting down", sig);
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  });
  server->Wait();
  waiter.join();
  return 0;
}
