// skein's SSH client transport; see transport.hpp.
#include "ssh/transport.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ssh/wire.hpp"

#ifndef SKEIN_VERSION
#define SKEIN_VERSION "0"
#endif

namespace skein::ssh {
namespace {

constexpr std::string_view kKexAlgorithms = "curve25519-sha256,curve25519-sha256@libssh.org";
constexpr std::string_view kStrictKexClient = "kex-strict-c-v00@openssh.com";
constexpr std::string_view kStrictKexServer = "kex-strict-s-v00@openssh.com";
constexpr std::string_view kHostKeyAlgorithms =
    "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,rsa-sha2-512,"
    "rsa-sha2-256";
constexpr std::string_view kCiphers = "aes128-gcm@openssh.com,aes256-gcm@openssh.com";
// Never used (AES-GCM authenticates itself), but the lists must name something.
constexpr std::string_view kMacs = "hmac-sha2-256-etm@openssh.com,hmac-sha2-256";
constexpr size_t kRxCapacity = 2 * kMaxPacket + 64 * 1024;
constexpr size_t kMinRead = 64 * 1024;
constexpr uint32_t kDisconnectByApplication = 11;

// The ten name-lists of a KEXINIT payload (RFC 4253 section 7.1) and its
// first_kex_packet_follows; false if it is malformed.
bool parse_kexinit(std::string_view payload, std::string_view (&lists)[10], bool& follows) {
  constexpr size_t kHead = 1 + 16;  // message number, cookie
  if (payload.size() < kHead) return false;
  Reader r(payload.substr(kHead));
  uint32_t reserved = 0;
  for (auto& l : lists)
    if (!r.str(l)) return false;
  return r.boolean(follows) && r.u32(reserved);
}

size_t key_length(std::string_view cipher) { return cipher.starts_with("aes256") ? 32 : 16; }

std::string hostkey_preference(const std::vector<std::string>& known_types) {
  // Types known for this host first, so the server shows the key we can check.
  std::vector<std::string> names;
  auto add = [&](std::string_view list) {
    for (auto n : split_name_list(list))
      if (std::find(names.begin(), names.end(), n) == names.end()) names.emplace_back(n);
  };
  for (const auto& t : known_types) {
    if (t == "ssh-rsa") {
      add("rsa-sha2-512,rsa-sha2-256");
    } else if (first_common(t, kHostKeyAlgorithms) == t) {
      add(t);
    }
  }
  add(kHostKeyAlgorithms);
  std::string out;
  for (auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

// One key exchange in progress (RFC 4253 section 7, curve25519-sha256 of RFC 8731).
struct Transport::Kex {
  bool sent_kexinit = false, got_kexinit = false, sent_newkeys = false, got_newkeys = false;
  std::string ours, theirs;  // the KEXINIT payloads, for the exchange hash
  std::string kex, hostkey, cipher_out, cipher_in;
  X25519 ecdh;
  std::string key_in, iv_in;      // taken into use at the server's NEWKEYS
  std::vector<std::string> held;  // messages sent while the exchange holds them back
};

std::unique_ptr<Transport> Transport::connect(const TransportOptions& options, std::string& error,
                                              ConnectFailure& why) {
  std::unique_ptr<Transport> t(new Transport());
  t->options_ = options;
  t->who_ = options.who();
  t->known_hosts_ = KnownHosts::load(options.known_hosts);
  t->rx_cap_ = kRxCapacity;
  t->rx_ = std::make_unique_for_overwrite<char[]>(t->rx_cap_);
  const Deadline deadline = std::chrono::steady_clock::now() + options.timeout;
  why = ConnectFailure::failed;

  std::string load_error;
  t->identity_ = PrivateKey::load(options.identity_file, load_error);
  if (!t->identity_) {
    error = t->who_ + ": " + load_error;
    why = load_error.find("unsupported") != std::string::npos ? ConnectFailure::unsupported
                                                              : ConnectFailure::refused;
    return nullptr;
  }
  if (!t->open_socket(deadline, error)) return nullptr;
  if (!t->exchange_versions(deadline) || !t->start_kex() ||
      !t->wait(
          deadline, [&] { return t->initial_kex_done_; }, "the key exchange") ||
      !t->authenticate(deadline)) {
    error = t->who_ + ": " + t->error_;
    why = t->failure_kind_;
    return nullptr;
  }
  why = ConnectFailure::none;
  return t;
}

Transport::~Transport() {
  if (fd_ < 0) return;
  if (!failed_ && sendable()) {
    send_packet(Writer(MSG_DISCONNECT).u32(kDisconnectByApplication).str("closed").str("").data());
    flush();
  }
  close(fd_);
}

bool Transport::fail(std::string why) {
  if (!failed_) {
    failed_ = true;
    error_ = std::move(why);
  }
  return false;
}

bool Transport::open_socket(Deadline deadline, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(options_.port);
  if (int rc = getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    error = who_ + ": cannot connect: cannot resolve " + options_.host + ": " + gai_strerror(rc);
    return false;
  }
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ms = ms_left(deadline);
      int err = ETIMEDOUT;
      if (ms > 0 && poll(&p, 1, ms) == 1) {
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      fd_ = fd;
      break;
    }
    last = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (fd_ < 0) {
    error = who_ + ": cannot connect: " + last;
    return false;
  }
  return true;
}

bool Transport::exchange_versions(Deadline deadline) {
  version_ours_ = "SSH-2.0-skein_" SKEIN_VERSION;
  tx_.append(version_ours_ + "\r\n");
  // Lines before the version are allowed (RFC 4253 section 4.2); at most 64 KiB of them.
  size_t before_version = 0;
  for (;;) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return fail("no SSH version line within " + std::to_string(options_.timeout.count()) + " ms");
    }
    const std::string_view have(rx_.get() + rx_begin_, rx_end_ - rx_begin_);
    const size_t nl = have.find('\n');
    if (nl != std::string_view::npos) {
      std::string_view line = have.substr(0, nl);
      rx_begin_ += nl + 1;
      before_version += nl + 1;
      if (before_version > 64 * 1024) return fail("no SSH version line from the server");
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.starts_with("SSH-")) {
        if (!line.starts_with("SSH-2.0-") && !line.starts_with("SSH-1.99-")) {
          return fail("server speaks an SSH protocol other than 2.0: " + std::string(line));
        }
        version_theirs_ = std::string(line);
        return true;
      }
      continue;
    }
    if (before_version + have.size() > 64 * 1024) {
      return fail("no SSH version line from the server");
    }
    bool would_block = false;
    if (!flush() || !receive_more(would_block)) return false;
    if (!would_block) continue;
    pollfd p{fd_, short(POLLIN | (unsent() ? POLLOUT : 0)), 0};
    poll(&p, 1, ms_left(deadline));  // the deadline is checked above
  }
}

bool Transport::receive_more(bool& would_block) {
  would_block = false;
  if (rx_begin_ == rx_end_) {
    rx_begin_ = rx_end_ = 0;
  } else {
    const size_t have = rx_end_ - rx_begin_;
    const size_t want = std::max(kMinRead, rx_need_ > have ? rx_need_ - have : 0);
    if (rx_cap_ - rx_end_ < want) {  // move the packet begun to the front (at most one packet)
      std::memmove(rx_.get(), rx_.get() + rx_begin_, have);
      rx_begin_ = 0;
      rx_end_ = have;
    }
  }
  for (;;) {
    const ssize_t n = recv(fd_, rx_.get() + rx_end_, rx_cap_ - rx_end_, MSG_DONTWAIT);
    if (n > 0) {
      rx_end_ += size_t(n);
      return true;
    }
    if (n == 0) return fail("connection closed by the server");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      would_block = true;
      return true;
    }
    return fail(std::string("connection lost: ") + std::strerror(errno));
  }
}

bool Transport::pump(const std::function<bool()>& more) {
  if (failed_) return false;
  // A bounded number of packets per call, so that a stream of them (IGNOREs, say) cannot keep a
  // caller past its deadline.
  for (int budget = 4096; more() && budget > 0; --budget) {
    std::string_view payload;
    size_t consumed = 0;
    auto st = opener_.open(rx_.get() + rx_begin_, rx_end_ - rx_begin_, payload, consumed, target_);
    if (st == PacketOpener::Status::bad) {
      return fail("corrupt packet from the server (bad length, padding or authentication tag)");
    }
    if (st == PacketOpener::Status::need_more) {
      rx_need_ = consumed;
      bool would_block = false;
      if (!receive_more(would_block)) return false;
      if (would_block) return true;
      continue;
    }
    rx_begin_ += consumed;
    rx_need_ = 0;
    bytes_in_ += consumed;
    if (!dispatch(payload) || (rekey_due() && !start_kex())) return false;
  }
  return !failed_;
}

bool Transport::flush() {
  if (failed_) return false;
  while (tx_sent_ < tx_.size()) {
    const ssize_t n =
        ::send(fd_, tx_.data() + tx_sent_, tx_.size() - tx_sent_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      tx_sent_ += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return fail(std::string("write failed: ") + std::strerror(errno));
  }
  tx_.clear();
  tx_sent_ = 0;
  return true;
}

bool Transport::wait(Deadline deadline, const std::function<bool()>& done, const char* what) {
  auto more = [&] { return !done(); };
  for (;;) {
    if (!pump(more) || !flush()) return false;
    if (done()) return true;
    const int ms = ms_left(deadline);
    if (ms == 0) {
      return fail(std::string("no reply within ") + std::to_string(options_.timeout.count()) +
                  " ms (waiting for " + what + ")");
    }
    pollfd p{fd_, short(POLLIN | (unsent() ? POLLOUT : 0)), 0};
    if (poll(&p, 1, ms) < 0 && errno != EINTR) {
      return fail(std::string("poll failed: ") + std::strerror(errno));
    }
  }
}

bool Transport::rekey_due() const {
  return !kex_ && initial_kex_done_ &&
         (bytes_in_ > options_.rekey_bytes || bytes_out_ > options_.rekey_bytes);
}

bool Transport::sendable() const { return !kex_ || !kex_->sent_kexinit || kex_->sent_newkeys; }

bool Transport::send_packet(std::string_view head, std::span<const std::string_view> pieces) {
  if (failed_) return false;
  const size_t before = tx_.size();
  if (!sealer_.seal(tx_, head, pieces)) return fail("libcrypto failed to encrypt a packet");
  bytes_out_ += tx_.size() - before;
  return true;
}

bool Transport::send(std::string_view head, std::span<const std::string_view> pieces) {
  if (failed_) return false;
  if (!sendable()) {  // held until the new keys are in use
    std::string copy(head);
    for (auto p : pieces) copy.append(p);
    kex_->held.push_back(std::move(copy));
    return true;
  }
  return send_packet(head, pieces) && (!rekey_due() || start_kex());
}

bool Transport::start_kex() {
  if (!kex_) kex_ = std::make_unique<Kex>();
  if (kex_->sent_kexinit) return true;
  if (!kex_->ecdh.ok()) return fail("libcrypto cannot make an X25519 key");
  char cookie[16];
  random_bytes(cookie, sizeof cookie);
  std::string kex_list(kKexAlgorithms);
  if (!initial_kex_done_) kex_list += "," + std::string(kStrictKexClient);
  const std::string hostkeys =
      hostkey_preference(known_hosts_.key_types(options_.host, options_.port));
  Writer w(MSG_KEXINIT);
  w.raw(std::string_view(cookie, sizeof cookie))
      .str(kex_list)
      .str(hostkeys)
      .str(kCiphers)
      .str(kCiphers)
      .str(kMacs)
      .str(kMacs)
      .str("none")
      .str("none")
      .str("")
      .str("")
      .boolean(false)
      .u32(0);
  kex_->ours = w.take();
  kex_->sent_kexinit = true;
  return send_packet(kex_->ours);
}

bool Transport::on_kexinit(std::string_view payload) {
  if (!kex_ || !kex_->sent_kexinit) {
    if (!start_kex()) return false;
  }
  if (kex_->got_kexinit) return fail("a second KEXINIT during one key exchange");
  kex_->got_kexinit = true;
  kex_->theirs = std::string(payload);
  std::string_view lists[10], our_lists[10];
  bool follows = false, ours_follow = false;
  if (!parse_kexinit(payload, lists, follows)) return fail("malformed KEXINIT");
  parse_kexinit(kex_->ours, our_lists, ours_follow);

  if (!initial_kex_done_) {
    for (auto n : split_name_list(lists[0])) strict_kex_ |= n == kStrictKexServer;
    // Strict kex: the server's KEXINIT is its first packet (sequence number 0).
    if (strict_kex_ && opener_.sequence() != 1) {
      return fail("strict key exchange violated: KEXINIT was not the server's first packet");
    }
  }
  kex_->kex = std::string(first_common(our_lists[0], lists[0]));
  kex_->hostkey = std::string(first_common(our_lists[1], lists[1]));
  kex_->cipher_out = std::string(first_common(our_lists[2], lists[2]));
  kex_->cipher_in = std::string(first_common(our_lists[3], lists[3]));
  const bool compression_ok =
      first_common("none", lists[6]) == "none" && first_common("none", lists[7]) == "none";
  if (kex_->kex.empty() || kex_->kex == kStrictKexClient || kex_->hostkey.empty() ||
      kex_->cipher_out.empty() || kex_->cipher_in.empty() || !compression_ok) {
    failure_kind_ = ConnectFailure::unsupported;
    return fail(
        "the server offers none of the algorithms skein's SSH transport speaks (it has kex " +
        std::string(lists[0]) + "; host keys " + std::string(lists[1]) + "; ciphers " +
        std::string(lists[3]) + ")");
  }
  // In curve25519-sha256 the client speaks first: a server has no key exchange packet to guess.
  if (follows) return fail("the server sent first_kex_packet_follows, which curve25519 has not");
  return send_packet(Writer(MSG_KEX_ECDH_INIT).str(kex_->ecdh.public_key()).data());
}

bool Transport::on_ecdh_reply(std::string_view payload) {
  if (!kex_ || !kex_->got_kexinit || kex_->sent_newkeys) return fail("unexpected KEX_ECDH_REPLY");
  Reader r(payload.substr(1));
  std::string_view host_blob, server_public, signature;
  if (!r.str(host_blob) || !r.str(server_public) || !r.str(signature)) {
    return fail("malformed KEX_ECDH_REPLY");
  }
  std::string parse_error;
  auto key = PublicKey::parse(host_blob, parse_error);
  if (!key) return fail("server host key: " + parse_error);
  if (!host_key_) {
    const std::string& kh = options_.known_hosts;
    const std::string its = key->type() + " key is " + key->fingerprint();
    std::string refused;
    switch (known_hosts_.check(options_.host, options_.port, key->type(), key->blob())) {
      case KnownHosts::Verdict::ok:
        break;
      case KnownHosts::Verdict::changed:
        refused = "host key CHANGED from the one in " + kh +
                  " (possible man-in-the-middle); refusing to connect (the server's " + its + ")";
        break;
      case KnownHosts::Verdict::other:
        refused = "host key type differs from the one in " + kh + "; refusing to connect";
        break;
      case KnownHosts::Verdict::revoked:
        refused = "host key is marked @revoked in " + kh + "; refusing to connect";
        break;
      case KnownHosts::Verdict::unknown:
        refused =
            "host key is not in " + kh + " (unknown server); refusing to connect (its " + its + ")";
        break;
      case KnownHosts::Verdict::not_found:
        refused = "host key is not in " + kh + " (the file cannot be read); refusing to connect";
        break;
    }
    if (!refused.empty()) {
      failure_kind_ = ConnectFailure::refused;
      return fail(refused);
    }
  } else if (host_key_->blob() != key->blob()) {
    return fail("the server changed its host key during a key exchange; refusing to go on");
  }
  auto secret = kex_->ecdh.shared_secret(server_public);
  if (!secret) return fail("invalid curve25519 public key from the server");
  const std::string hash = digest(Hash::sha256, Writer()
                                                    .str(version_ours_)
                                                    .str(version_theirs_)
                                                    .str(kex_->ours)
                                                    .str(kex_->theirs)
                                                    .str(host_blob)
                                                    .str(kex_->ecdh.public_key())
                                                    .str(server_public)
                                                    .mpint(*secret)
                                                    .data());
  if (!key->verify(kex_->hostkey, signature, hash)) {
    failure_kind_ = ConnectFailure::refused;
    return fail("the server's signature of the key exchange does not verify with its host key");
  }
  if (!host_key_) host_key_ = std::move(key);
  if (session_id_.empty()) session_id_ = hash;

  const std::string k = Writer().mpint(*secret).take();
  auto derive_key = [&](char letter, size_t n) {
    std::string out = digest(Hash::sha256, k + hash + letter + session_id_);
    while (out.size() < n) out += digest(Hash::sha256, k + hash + out);
    out.resize(n);
    return out;
  };
  const std::string iv_out = derive_key('A', GcmCipher::kIvSize);
  const std::string key_out = derive_key('C', key_length(kex_->cipher_out));
  kex_->iv_in = derive_key('B', GcmCipher::kIvSize);
  kex_->key_in = derive_key('D', key_length(kex_->cipher_in));

  if (!send_packet(Writer(MSG_NEWKEYS).data())) return false;
  if (!sealer_.set_gcm(key_out, iv_out)) return fail("libcrypto rejected the new keys");
  if (strict_kex_) sealer_.reset_sequence();
  kex_->sent_newkeys = true;
  bytes_out_ = 0;
  for (const std::string& m : kex_->held)
    if (!send_packet(m)) return false;
  kex_->held.clear();
  if (kex_->got_newkeys) return on_newkeys();
  return true;
}

bool Transport::on_newkeys() {
  if (!kex_ || !kex_->got_kexinit || kex_->key_in.empty()) {
    return fail("NEWKEYS before the key exchange was done");
  }
  if (!kex_->got_newkeys) {
    kex_->got_newkeys = true;
    if (!opener_.set_gcm(kex_->key_in, kex_->iv_in)) return fail("libcrypto rejected the new keys");
    if (strict_kex_) opener_.reset_sequence();
    bytes_in_ = 0;
    cipher_in_ = kex_->cipher_in;
  }
  if (!kex_->sent_newkeys) return true;  // ours goes once the server's reply is in
  kex_.reset();
  initial_kex_done_ = true;
  ++key_exchanges_;
  return true;
}

bool Transport::dispatch(std::string_view payload) {
  if (payload.empty()) return fail("empty packet from the server");
  const uint8_t type = uint8_t(payload[0]);
  // During the first key exchange under strict kex, nothing else may come (Terrapin); during
  // any other, from the server's KEXINIT to its NEWKEYS, only transport messages (RFC 4253
  // section 7.1).
  const bool kex_message = type == MSG_KEXINIT || type == MSG_KEX_ECDH_REPLY || type == MSG_NEWKEYS;
  if (!initial_kex_done_ && strict_kex_ && !kex_message) {
    return fail("unexpected message " + std::to_string(type) + " during the key exchange");
  }
  const bool in_exchange = !initial_kex_done_ || (kex_ && kex_->got_kexinit && !kex_->got_newkeys);
  if (in_exchange && type >= 50) {
    return fail("message " + std::to_string(type) + " in the middle of a key exchange");
  }
  switch (type) {
    case MSG_DISCONNECT: {
      Reader r(payload.substr(1));
      uint32_t reason = 0;
      std::string_view text;
      r.u32(reason);
      r.str(text);
      return fail("the server disconnected: " + std::string(text));
    }
    case MSG_IGNORE:
    case MSG_DEBUG:
    case MSG_EXT_INFO:
    case MSG_REQUEST_SUCCESS:
    case MSG_REQUEST_FAILURE:
    case MSG_USERAUTH_BANNER:
      return true;
    case MSG_UNIMPLEMENTED:
      return fail("the server did not understand a message of ours");
    case MSG_KEXINIT:
      return on_kexinit(payload);
    case MSG_KEX_ECDH_REPLY:
      return on_ecdh_reply(payload);
    case MSG_NEWKEYS:
      return on_newkeys();
    case MSG_SERVICE_ACCEPT:
      if (!service_requested_ || service_accepted_) return fail("unexpected SERVICE_ACCEPT");
      service_accepted_ = true;
      return true;
    case MSG_USERAUTH_SUCCESS:
      if (!auth_requested_ || auth_result_ != 0) return fail("unexpected USERAUTH_SUCCESS");
      auth_result_ = 1;
      return true;
    case MSG_USERAUTH_FAILURE: {
      if (!auth_requested_ || auth_result_ != 0) return fail("unexpected USERAUTH_FAILURE");
      Reader r(payload.substr(1));
      std::string_view methods;
      r.str(methods);
      auth_methods_ = std::string(methods);
      auth_result_ = -1;
      return true;
    }
    case MSG_GLOBAL_REQUEST: {
      Reader r(payload.substr(1));
      std::string_view name;
      bool want_reply = false;
      if (!r.str(name) || !r.boolean(want_reply)) return fail("malformed GLOBAL_REQUEST");
      return !want_reply || send(Writer(MSG_REQUEST_FAILURE).data());
    }
    default:
      break;
  }
  if (type >= MSG_CHANNEL_OPEN && type <= 127) {
    const size_t direct = target_ && type == MSG_CHANNEL_DATA ? target_->delivered : 0;
    if (!handler_ || !handler_(payload, direct)) {
      return failed_ ? false : fail("protocol error in channel message " + std::to_string(type));
    }
    return true;
  }
  // Anything else: say so, as RFC 4253 section 11.4 asks.
  return send(Writer(MSG_UNIMPLEMENTED).u32(opener_.sequence() - 1).data());
}

bool Transport::authenticate(Deadline deadline) {
  service_requested_ = true;
  if (!send(Writer(MSG_SERVICE_REQUEST).str("ssh-userauth").data()) ||
      !wait(
          deadline, [&] { return service_accepted_; }, "the ssh-userauth service")) {
    return false;
  }
  // RFC 4252 section 7: the request is signed together with the session id.
  const std::string& alg = identity_->algorithm();
  const std::string request = Writer(MSG_USERAUTH_REQUEST)
                                  .str(options_.user)
                                  .str("ssh-connection")
                                  .str("publickey")
                                  .boolean(true)
                                  .str(alg)
                                  .str(identity_->public_blob())
                                  .take();
  const std::string signature = identity_->sign(Writer().str(session_id_).raw(request).data());
  if (signature.empty()) return fail("libcrypto could not sign with the identity key");
  auth_requested_ = true;
  if (!send(request + Writer().str(signature).data()) ||
      !wait(
          deadline, [&] { return auth_result_ != 0; }, "user authentication")) {
    return false;
  }
  if (auth_result_ < 0) {
    failure_kind_ = ConnectFailure::refused;
    return fail("public key authentication failed: the server refused " + alg + " key of " +
                options_.identity_file + " for user " + options_.user +
                " (it would take: " + auth_methods_ + ")");
  }
  return true;
}

}  // namespace skein::ssh
