// call_latency: the time of one call through the gateway, without FUSE: a loop of GetAttr or of
// 4 KiB Reads at random offsets (one at a time, as a FUSE thread makes them) from the mount's own
// gateway client. For finding where a small operation's time goes (docs/benchmarks.md, "Small
// and random I/O"); not part of tests/run.
//
//   call_latency --gateway HOST:PORT --token-file F (--ca-file F [--cert-file F --key-file F] |
//                --insecure) [--namespace NS] [--count N] [--read | --create] PATH
//
// --create: PATH is a directory; creates PATH/call-latency-N (each released without waiting,
// as a mount's close does), then removes them, and reports both.
#include <fcntl.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "gateway_client.hpp"
#include "skein/credential_file.hpp"

int main(int argc, char** argv) {
  CLI::App app{"time calls through a skein gateway, one at a time"};
  std::string gateway, token_file, ns = "default", path;
  skein::wire::ClientTls tls;
  int count = 2000;
  bool read = false;
  bool create = false;
  app.add_option("--gateway", gateway, "HOST:PORT")->required();
  app.add_option("--token-file", token_file, "the namespace's token (mode 0600)")->required();
  app.add_option("--ca-file", tls.ca_file);
  app.add_option("--cert-file", tls.cert_file);
  app.add_option("--key-file", tls.key_file);
  app.add_flag("--insecure", tls.insecure, "plaintext gRPC");
  app.add_option("--namespace", ns);
  app.add_option("--count", count, "calls to time")->check(CLI::PositiveNumber);
  app.add_flag("--read", read, "4 KiB Reads at random offsets of PATH instead of GetAttr");
  app.add_flag("--create", create, "create files in directory PATH, then remove them")
      ->excludes("--read");
  app.add_option("path", path, "a path of the namespace")->required();
  CLI11_PARSE(app, argc, argv);

  std::string token, error;
  try {
    token = skein::read_client_token(token_file, "token file");
  } catch (const skein::CredentialError& e) {
    std::fprintf(stderr, "call_latency: %s\n", e.what());
    return 2;
  }
  auto channel = skein::client::GatewayClient::connect(gateway, tls, error);
  if (!channel) {
    std::fprintf(stderr, "call_latency: %s\n", error.c_str());
    return 2;
  }
  skein::client::GatewayClient client(channel, {.ns = ns, .token = token});
  auto attr = client.getattr(path);  // also the first call, which connects
  if (!attr) {
    std::fprintf(stderr, "call_latency: %s: %s\n", path.c_str(), std::strerror(attr.error()));
    return 1;
  }
  if (create) {
    int failed = 0;
    auto start = std::chrono::steady_clock::now();
    auto per_call = [&] {
      const auto now = std::chrono::steady_clock::now();
      const double us = std::chrono::duration<double, std::micro>(now - start).count() / count;
      start = now;
      return us;
    };
    const auto name = [&](int i) { return path + "/call-latency-" + std::to_string(i); };
    for (int i = 0; i < count; ++i) {
      auto made = client.create(name(i), O_WRONLY | O_CREAT | O_EXCL, 0644);
      if (made) {
        client.release_async({name(i), made->handle, O_WRONLY});
      } else {
        ++failed;
      }
    }
    const double create_us = per_call();
    for (int i = 0; i < count; ++i) failed += client.unlink(name(i)) ? 0 : 1;
    const double unlink_us = per_call();
    std::printf("create %s/*: %d calls, %.0f us per call; unlink %.0f us per call (%d failed)\n",
                path.c_str(), count, create_us, unlink_us, failed);
    return failed == 0 ? 0 : 1;
  }
  skein::client::FileRef file{path, 0, 0};
  if (read) {
    auto opened = client.open(path, 0);
    if (!opened) {
      std::fprintf(stderr, "call_latency: open %s: %s\n", path.c_str(),
                   std::strerror(opened.error()));
      return 1;
    }
    file.handle = opened->handle;
  }
  std::mt19937_64 rng(1);
  const uint64_t blocks = read ? std::max<uint64_t>(1, attr->size / 4096) : 1;
  int failed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    const bool ok = read ? static_cast<bool>(client.read(file, rng() % blocks * 4096, 4096))
                         : static_cast<bool>(client.getattr(path));
    failed += ok ? 0 : 1;
  }
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  if (read) (void)client.release(file);
  std::printf("%s %s: %d calls, %.0f us per call (%d failed)\n", read ? "read 4 KiB" : "getattr",
              path.c_str(), count, us / count, failed);
  return failed == 0 ? 0 : 1;  // a failed call's time is no call's: the figure does not stand
}
