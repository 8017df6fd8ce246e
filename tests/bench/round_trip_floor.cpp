// round_trip_floor: what one round trip between two processes on this machine costs, with nothing
// of skein in it, to set the gateway's own call against (docs/benchmarks.md, "Small and random
// I/O"): a TCP ping-pong of 64 bytes on loopback, and a unary gRPC call of 64 bytes (plaintext,
// generic service, a reply of the request's bytes) to a server in a child process, served by
// gRPC's callback API (as the gateway's services are) and by an asynchronous service whose one
// thread drives its completion queue. One call at a time, as a FUSE thread makes them. Not part
// of tests/run.
//
//   round_trip_floor [--count N] [--rounds R]
#include <arpa/inet.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// The server end, in a child process; it never returns.
[[noreturn]] void serve_tcp(int listener) {
  const int c = ::accept(listener, nullptr, nullptr);
  const int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  char buf[64];
  for (;;) {
    ssize_t got = 0;
    while (got < (ssize_t)sizeof buf) {
      const ssize_t n = ::read(c, buf + got, sizeof buf - got);
      if (n <= 0) ::_exit(0);
      got += n;
    }
    if (::write(c, buf, sizeof buf) != (ssize_t)sizeof buf) ::_exit(0);
  }
}

class EchoCallbackService : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Echo : public grpc::ServerGenericBidiReactor {
     public:
      Echo() { StartRead(&buf_); }
      void OnReadDone(bool ok) override {
        if (!ok) return Finish(grpc::Status::OK);
        StartWriteAndFinish(&buf_, grpc::WriteOptions(), grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      grpc::ByteBuffer buf_;
    };
    return new Echo;
  }
};

[[noreturn]] void serve_grpc(const std::string& address, bool callback) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials());
  if (callback) {
    EchoCallbackService service;
    builder.RegisterCallbackGenericService(&service);
    builder.BuildAndStart()->Wait();
    ::_exit(0);
  }
  grpc::AsyncGenericService service;
  builder.RegisterAsyncGenericService(&service);
  auto cq = builder.AddCompletionQueue();
  auto server = builder.BuildAndStart();
  struct Call {
    grpc::GenericServerContext ctx;
    grpc::GenericServerAsyncReaderWriter stream{&ctx};
    grpc::ByteBuffer buf;
    int step = 0;
  };
  auto accept = [&] {
    auto* c = new Call;
    service.RequestCall(&c->ctx, &c->stream, cq.get(), cq.get(), c);
  };
  accept();
  void* tag;
  bool ok;
  while (cq->Next(&tag, &ok)) {
    auto* c = static_cast<Call*>(tag);
    if (c->step == 0) {
      accept();
      if (!ok) {
        delete c;
        continue;
      }
      c->step = 1;
      c->stream.Read(&c->buf, c);
    } else if (c->step == 1) {
      c->step = 2;
      c->stream.WriteAndFinish(c->buf, grpc::WriteOptions(), grpc::Status::OK, c);
    } else {
      delete c;
    }
  }
  ::_exit(0);
}

// Microseconds per round trip of `once`, per round.
std::vector<double> time_rounds(int rounds, int count, const std::function<bool()>& once) {
  std::vector<double> us;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < count; ++i)
      if (!once()) return {};
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / count);
  }
  return us;
}

void report(const char* what, const std::vector<double>& us) {
  if (us.empty()) {
    std::printf("%-44s failed\n", what);
    return;
  }
  std::printf("%-44s", what);
  for (double u : us) std::printf(" %6.0f", u);
  std::printf("  us per round trip\n");
}

int free_port(int& listener) {
  listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    return -1;
  return ntohs(a.sin_port);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"round trips between two processes on loopback: TCP and gRPC, nothing of skein"};
  int count = 3000, rounds = 3;
  app.add_option("--count", count, "round trips per round")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "rounds of each")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // TCP: the server is forked before anything of gRPC exists in this process.
  int listener = -1;
  const int port = free_port(listener);
  if (port < 0) {
    std::perror("listen");
    return 1;
  }
  const pid_t tcp_server = ::fork();
  if (tcp_server == 0) serve_tcp(listener);
  ::close(listener);
  {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      std::perror("connect");
      ::kill(tcp_server, SIGKILL);  // it waits in accept for this connection
      ::waitpid(tcp_server, nullptr, 0);
      return 1;
    }
    char buf[64] = {};
    report("TCP ping-pong, 64 bytes", time_rounds(rounds, count, [&] {
             if (::write(s, buf, sizeof buf) != (ssize_t)sizeof buf) return false;
             ssize_t got = 0;
             while (got < (ssize_t)sizeof buf) {
               const ssize_t n = ::read(s, buf + got, sizeof buf - got);
               if (n <= 0) return false;
               got += n;
             }
             return true;
           }));
    ::close(s);
  }
  ::waitpid(tcp_server, nullptr, 0);

  // gRPC: both servers forked first, then this process's first use of gRPC.
  struct Server {
    const char* what;
    bool callback;
    int port;
    pid_t pid;
  };
  std::vector<Server> servers = {{"gRPC unary call, callback server", true, 0, 0},
                                 {"gRPC unary call, async server, one thread", false, 0, 0}};
  for (auto& s : servers) {
    s.port = free_port(listener);  // a port free now; the child listens on it once this closes
    ::close(listener);
    s.pid = ::fork();
    if (s.pid == 0) serve_grpc("127.0.0.1:" + std::to_string(s.port), s.callback);
  }
  for (auto& s : servers) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(s.port),
                                       grpc::InsecureChannelCredentials());
    if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      report(s.what, {});
      continue;
    }
    grpc::GenericStub stub(channel);
    grpc::CompletionQueue cq;
    const std::string payload(64, 'x');
    grpc::Slice slice(payload);
    const grpc::ByteBuffer request(&slice, 1);
    report(s.what, time_rounds(rounds, count, [&] {
             grpc::ClientContext ctx;
             auto call = stub.PrepareUnaryCall(&ctx, "/floor.Echo/Call", request, &cq);
             call->StartCall();
             grpc::ByteBuffer reply;
             grpc::Status status;
             call->Finish(&reply, &status, &ctx);
             void* tag;
             bool ok;
             return cq.Next(&tag, &ok) && ok && status.ok();
           }));
  }
  for (auto& s : servers) {
    ::kill(s.pid, SIGKILL);
    ::waitpid(s.pid, nullptr, 0);
  }
  return 0;
}
