// The system's OpenSSH client as a session channel; see openssh_channel.hpp.
#include "sftp/openssh_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

extern char** environ;

namespace skein::sftp {
namespace {

// A socket buffer of this size each way: ssh and skein hand each other large runs of data with
// few wake-ups.
constexpr int kSocketBuffer = 2 << 20;
// ssh's stderr kept for messages: its last lines.
constexpr size_t kStderrKept = 4096;

std::string status_text(int status) {
  if (WIFEXITED(status)) return "ssh exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "ssh was killed by signal " + std::to_string(WTERMSIG(status));
  return "ssh stopped";
}

// ssh's stderr as one line: its messages joined with "; ", without the "@@@" frame of its host
// key warnings.
std::string one_line(const std::string& text) {
  std::string out, line;
  auto flush = [&] {
    const size_t b = line.find_first_not_of("@ ");
    const size_t e = line.find_last_not_of("@ \r");
    if (b != std::string::npos && e != std::string::npos && e >= b)
      out += (out.empty() ? "" : "; ") + line.substr(b, e - b + 1);
    line.clear();
  };
  for (char c : text) {
    if (c == '\n')
      flush();
    else
      line += c;
  }
  flush();
  return out;
}

// Single-quotes a word for /bin/sh, with ssh's %-tokens escaped (ProxyCommand expands them).
std::string proxy_word(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else if (c == '%')
      out += "%%";
    else
      out += c;
  }
  return out + "'";
}

// What every ssh of an endpoint is given, the jump host's included: where to log in and how.
std::vector<std::string> login_options(const Endpoint& ep) {
  const long timeout_s = std::max<long>(1, static_cast<long>(ep.timeout.count() / 1000));
  std::vector<std::string> a = {
      // Never prompt; an unknown or changed host key is refused, never learnt.
      "-oBatchMode=yes", "-oStrictHostKeyChecking=yes", "-oUpdateHostKeys=no",
      // One TCP connection per session (the pool's connections run in parallel).
      "-oControlMaster=no", "-oControlPath=none", "-oConnectTimeout=" + std::to_string(timeout_s)};
  if (!ep.ssh_config.empty()) a.insert(a.end(), {"-F", ep.ssh_config});
  if (!ep.identity_file.empty())
    a.insert(a.end(), {"-i", ep.identity_file, "-oIdentitiesOnly=yes"});
  if (!ep.certificate_file.empty()) a.push_back("-oCertificateFile=" + ep.certificate_file);
  if (!ep.known_hosts.empty()) {
    a.push_back("-oUserKnownHostsFile=" + ep.known_hosts);
    a.push_back("-oGlobalKnownHostsFile=/dev/null");
  }
  if (!ep.agent_socket.empty()) a.push_back("-oIdentityAgent=" + ep.agent_socket);
  return a;
}

// ssh's ProxyCommand that reaches the server through the jump host `[user@]host[:port]`, with the
// endpoint's own login options (ssh's -J would give the jump host only -F).
std::string proxy_command(const Endpoint& ep) {
  std::string spec = ep.proxy_jump, user, port;
  if (auto at = spec.find('@'); at != std::string::npos) {
    user = spec.substr(0, at);
    spec.erase(0, at + 1);
  }
  std::string host = spec;
  if (!spec.empty() && spec.front() == '[') {  // [v6 address]:port
    const size_t close = spec.find(']');
    host = spec.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    if (close != std::string::npos && spec.compare(close + 1, 1, ":") == 0)
      port = spec.substr(close + 2);
  } else if (auto colon = spec.find(':'); colon != std::string::npos) {
    host = spec.substr(0, colon);
    port = spec.substr(colon + 1);
  }
  std::string cmd = "ssh";
  for (auto& o : login_options(ep)) cmd += " " + proxy_word(o);
  if (!port.empty()) cmd += " -p " + proxy_word(port);
  if (!user.empty()) cmd += " -l " + proxy_word(user);
  return cmd + " -W '[%h]:%p' -- " + proxy_word(host);
}

}  // namespace

std::vector<std::string> openssh_command(const Endpoint& ep, const ChannelService& service) {
  std::vector<std::string> a = {"ssh"};
  for (auto& o : login_options(ep)) a.push_back(std::move(o));
  a.insert(a.end(), {// Nothing forwarded, no terminal.
                     "-oForwardAgent=no", "-oForwardX11=no", "-oClearAllForwardings=yes",
                     "-oPermitLocalCommand=no", "-T",
                     // AES-GCM first (the CPU's AES instructions), then what the site allows.
                     "-oCiphers=^aes128-gcm@openssh.com,aes256-gcm@openssh.com", "-oCompression=no",
                     "-p", std::to_string(ep.port), "-l", ep.user});
  if (!ep.proxy_jump.empty()) a.push_back("-oProxyCommand=" + proxy_command(ep));
  if (service.kind == ChannelService::subsystem) a.push_back("-s");
  a.insert(a.end(), {"--", ep.host, service.what});
  return a;
}

std::unique_ptr<OpensshChannel> OpensshChannel::open(const Endpoint& ep,
                                                     const ChannelService& service,
                                                     std::string& error) {
  int sv[2], errp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error = ep.who() + ": socketpair failed: " + std::strerror(errno);
    return nullptr;
  }
  if (pipe2(errp, O_CLOEXEC) != 0) {
    error = ep.who() + ": pipe failed: " + std::strerror(errno);
    close(sv[0]);
    close(sv[1]);
    return nullptr;
  }
  for (int fd : sv) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &kSocketBuffer, sizeof kSocketBuffer);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kSocketBuffer, sizeof kSocketBuffer);
  }
  const std::vector<std::string> args = openssh_command(ep, service);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawn_file_actions_adddup2(&fa, errp[1], 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  // ssh starts with every signal unblocked and at its default action, whatever the gateway's
  // threads block or ignore.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, "ssh", &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(sv[1]);
  close(errp[1]);
  if (rc != 0) {
    error = ep.who() + ": cannot run ssh (ssh_transport = \"openssh\" needs OpenSSH's client): " +
            std::strerror(rc);
    close(sv[0]);
    close(errp[0]);
    return nullptr;
  }
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  fcntl(errp[0], F_SETFL, fcntl(errp[0], F_GETFL) | O_NONBLOCK);
  std::unique_ptr<OpensshChannel> c(new OpensshChannel());
  c->sock_ = sv[0];
  c->err_fd_ = errp[0];
  c->pid_ = pid;
  return c;
}

OpensshChannel::~OpensshChannel() {
  if (sock_ >= 0) close(sock_);
  if (err_fd_ >= 0) close(err_fd_);
  if (pid_ <= 0) return;
  // ssh ends once its input closes; a server that hangs could keep it waiting, so it is told to
  // go, and killed if it has not gone within a moment.
  kill(pid_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

void OpensshChannel::collect_stderr(bool until_eof) const {
  if (err_fd_ < 0) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(err_fd_, buf, sizeof buf);
    if (n > 0) {
      stderr_.append(buf, static_cast<size_t>(n));
      if (stderr_.size() > 2 * kStderrKept) stderr_.erase(0, stderr_.size() - kStderrKept);
      continue;
    }
    if (n == 0) {  // ssh has gone
      close(err_fd_);
      err_fd_ = -1;
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN || !until_eof) return;
    pollfd p{err_fd_, POLLIN, 0};
    const int ms = ms_left(deadline);
    if (ms == 0 || poll(&p, 1, ms) <= 0) return;
  }
}

bool OpensshChannel::write(std::string_view head, std::span<const std::string_view> pieces,
                           Deadline deadline) {
  // One gathered send for the request's header and its data. While the socket is full, what ssh
  // hands back is read into the inbox: the server is never left blocked on a reply while skein
  // waits for it to take the next request.
  std::vector<iovec> iov;
  iov.reserve(pieces.size() + 1);
  if (!head.empty()) iov.push_back({const_cast<char*>(head.data()), head.size()});
  for (auto p : pieces)
    if (!p.empty()) iov.push_back({const_cast<char*>(p.data()), p.size()});
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t n = sendmsg(sock_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      size_t left = static_cast<size_t>(n);
      while (left > 0 && first < iov.size()) {
        const size_t take = std::min(left, iov[first].iov_len);
        iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + take;
        iov[first].iov_len -= take;
        left -= take;
        if (iov[first].iov_len == 0) ++first;
      }
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      if (errno != EPIPE && errno != ECONNRESET)  // ssh has gone: its own message says why
        failure_ = std::string("write to ssh failed: ") + std::strerror(errno);
      closed_ = true;
      return false;
    }
    pollfd p{sock_, POLLIN | POLLOUT, 0};
    const int ms = ms_left(deadline);
    if (ms == 0) {
      failure_ = "ssh took no data before the deadline";
      return false;
    }
    if (poll(&p, 1, ms) < 0 && errno != EINTR) return false;
    if (p.revents & POLLIN) {
      if (inbox_at_ > 0 && inbox_at_ == inbox_.size()) {
        inbox_.clear();
        inbox_at_ = 0;
      }
      char buf[65536];
      const ssize_t r = recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
      if (r > 0) inbox_.append(buf, static_cast<size_t>(r));
      if (r == 0) {
        closed_ = true;
        return false;
      }
    } else if (p.revents & (POLLHUP | POLLERR)) {
      closed_ = true;
      return false;
    }
  }
  return true;
}

long OpensshChannel::read(char* dst, size_t n) {
  if (inbox_at_ < inbox_.size()) {
    const size_t take = std::min(n, inbox_.size() - inbox_at_);
    memcpy(dst, inbox_.data() + inbox_at_, take);
    inbox_at_ += take;
    if (inbox_at_ == inbox_.size()) {
      inbox_.clear();
      inbox_at_ = 0;
    }
    return static_cast<long>(take);
  }
  if (closed_) return -1;
  for (;;) {
    const ssize_t r = recv(sock_, dst, n, MSG_DONTWAIT);
    if (r > 0) return static_cast<long>(r);
    if (r == 0) {
      closed_ = true;
      return -1;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) {  // ssh went with bytes of ours unread: its end, as EOF
      closed_ = true;
      return -1;
    }
    if (errno == EAGAIN) {
      // Now and then, take what ssh said meanwhile, so that a chatty ssh (LogLevel DEBUG in
      // ssh_config) never blocks on a full stderr pipe.
      if (++idle_reads_ % 64 == 0) collect_stderr(false);
      return 0;
    }
    failure_ = std::string("read from ssh failed: ") + std::strerror(errno);
    closed_ = true;
    return -1;
  }
}

std::string OpensshChannel::error() const {
  if (!closed_ && failure_.empty()) return "";
  collect_stderr(closed_);
  std::string out = one_line(stderr_);
  int status = 0;
  for (int i = 0; closed_ && pid_ > 0 && i < 20; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;  // reaped: the destructor must not signal a pid that may be reused
      out += (out.empty() ? "" : " (") + status_text(status) + (out.empty() ? "" : ")");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!failure_.empty()) out = failure_ + (out.empty() ? "" : ": " + out);
  return out.empty() ? "ssh closed the channel" : out;
}

}  // namespace skein::sftp
