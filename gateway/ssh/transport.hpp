// skein's own SSH client transport (RFC 4253, 4252): version exchange, key exchange with
// curve25519-sha256 (again whenever either side asks, and after rekey_bytes each way), host key
// check against known_hosts, public key user authentication, and the binary packet protocol
// with aes128-gcm@openssh.com or aes256-gcm@openssh.com. Connection-protocol messages go to a
// handler (ssh::SessionChannel).
//
// Why not libssh for the bulk path: it reads its socket 4 KiB at a time, each read behind a
// poll(), and copies every byte three times on its way to the caller; on a small machine that was
// half of the gateway's CPU while reading. This transport reads up to 512 KiB per recv(),
// decrypts packets in place, and encrypts writes straight from the caller's buffers. It speaks
// the algorithms every OpenSSH since 6.5 offers; for a server that offers none of them the
// backend falls back to libssh (transport = "auto").
//
// Not thread-safe: one thread at a time drives it (the SFTP connection's session lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ssh/byte_channel.hpp"
#include "ssh/crypto.hpp"
#include "ssh/keys.hpp"
#include "ssh/known_hosts.hpp"
#include "ssh/packet_codec.hpp"
#include "ssh/transport_options.hpp"

namespace skein::ssh {

// Why connect() failed.
enum class ConnectFailure {
  none,
  unsupported,  // the server offers no algorithm this transport speaks; another SSH stack may
  refused,      // host key not accepted, or authentication refused: never retried elsewhere
  failed,       // network or protocol failure
};

// SSH message numbers used here (RFC 4250 section 4.1).
enum Message : uint8_t {
  MSG_DISCONNECT = 1,
  MSG_IGNORE = 2,
  MSG_UNIMPLEMENTED = 3,
  MSG_DEBUG = 4,
  MSG_SERVICE_REQUEST = 5,
  MSG_SERVICE_ACCEPT = 6,
  MSG_EXT_INFO = 7,
  MSG_KEXINIT = 20,
  MSG_NEWKEYS = 21,
  MSG_KEX_ECDH_INIT = 30,
  MSG_KEX_ECDH_REPLY = 31,
  MSG_USERAUTH_REQUEST = 50,
  MSG_USERAUTH_FAILURE = 51,
  MSG_USERAUTH_SUCCESS = 52,
  MSG_USERAUTH_BANNER = 53,
  MSG_GLOBAL_REQUEST = 80,
  MSG_REQUEST_SUCCESS = 81,
  MSG_REQUEST_FAILURE = 82,
  MSG_CHANNEL_OPEN = 90,
  MSG_CHANNEL_OPEN_CONFIRMATION = 91,
  MSG_CHANNEL_OPEN_FAILURE = 92,
  MSG_CHANNEL_WINDOW_ADJUST = 93,
  MSG_CHANNEL_DATA = 94,
  MSG_CHANNEL_EXTENDED_DATA = 95,
  MSG_CHANNEL_EOF = 96,
  MSG_CHANNEL_CLOSE = 97,
  MSG_CHANNEL_REQUEST = 98,
  MSG_CHANNEL_SUCCESS = 99,
  MSG_CHANNEL_FAILURE = 100,
};

class Transport {
 public:
  // Gets each connection-protocol message (channel messages); the payload, message number first,
  // is valid during the call only. `direct`: for CHANNEL_DATA, how many leading bytes of its
  // data were decrypted straight to the data target (their place in the payload holds garbage).
  // Returns false for a protocol violation (the transport fails).
  using Handler = std::function<bool(std::string_view payload, size_t direct)>;

  // Connects, exchanges keys, checks the host key and authenticates. On failure returns null,
  // `error` names the server and the cause, and `why` says what kind of failure it was.
  static std::unique_ptr<Transport> connect(const TransportOptions& options, std::string& error,
                                            ConnectFailure& why);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int fd() const { return fd_; }
  void set_handler(Handler h) { handler_ = std::move(h); }
  // Where channel data may be decrypted to while pump() runs (null: in place); the handler keeps
  // it up to date as it fills.
  void set_data_target(DataTarget* target) { target_ = target; }

  // Queues one message (`head`, then `pieces`), encrypted into the output buffer straight from
  // where the bytes are. During a key exchange it is copied and sent once the new keys are in use.
  bool send(std::string_view head, std::span<const std::string_view> pieces = {});
  // Whether send() would encrypt now (no key exchange holds messages back): bulk data waits for
  // this rather than be copied.
  bool sendable() const;
  // Non-blocking: hands the kernel what it takes of the output. False once the transport failed.
  bool flush();
  size_t unsent() const { return tx_.size() - tx_sent_; }
  // Non-blocking: reads the socket and handles whole packets while `more()` holds, until the
  // socket has nothing more. False once the transport failed.
  bool pump(const std::function<bool()>& more);
  // Pumps, flushes and polls until `done()` holds; false on failure, or at `deadline` (the
  // transport then fails, naming `what` it waited for).
  bool wait(Deadline deadline, const std::function<bool()>& done, const char* what);

  bool failed() const { return failed_; }
  // Why it failed (the cause; who() names the server).
  const std::string& error() const { return error_; }
  // user@host:port, for messages.
  const std::string& who() const { return who_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }
  // Key exchanges completed (1 after connect), for tests and logs.
  int key_exchanges() const { return key_exchanges_; }
  const std::string& cipher() const { return cipher_in_; }
  // Marks the transport failed with `why` (first reason wins).
  bool fail(std::string why);

 private:
  struct Kex;
  Transport() = default;
  bool open_socket(Deadline deadline, std::string& error);
  bool exchange_versions(Deadline deadline);
  bool authenticate(Deadline deadline);
  bool dispatch(std::string_view payload);
  bool send_packet(std::string_view head, std::span<const std::string_view> pieces = {});
  bool start_kex();
  bool on_kexinit(std::string_view payload);
  bool on_ecdh_reply(std::string_view payload);
  bool on_newkeys();
  bool receive_more(bool& would_block);
  // Enough bytes either way under the current keys: time for new ones.
  bool rekey_due() const;

  TransportOptions options_;
  std::string who_;
  int fd_ = -1;
  bool failed_ = false;
  std::string error_;
  ConnectFailure failure_kind_ = ConnectFailure::failed;
  Handler handler_;
  DataTarget* target_ = nullptr;

  std::string version_ours_, version_theirs_;
  PacketSealer sealer_;
  PacketOpener opener_;
  std::unique_ptr<Kex> kex_;
  std::string session_id_;
  std::optional<PublicKey> host_key_;
  std::optional<PrivateKey> identity_;
  KnownHosts known_hosts_;  // read once, at connect
  bool strict_kex_ = false;
  bool initial_kex_done_ = false;
  int key_exchanges_ = 0;
  uint64_t bytes_in_ = 0, bytes_out_ = 0;  // under the current keys
  std::string cipher_in_;

  // Set during connect(): the answers the handshake waits for.
  bool service_requested_ = false, service_accepted_ = false;
  bool auth_requested_ = false;
  int auth_result_ = 0;  // 0 pending, 1 success, -1 failure
  std::string auth_methods_;

  // Received bytes: [rx_begin_, rx_end_) not yet handled; rx_need_ is the size of the packet
  // begun there once known.
  std::unique_ptr<char[]> rx_;
  size_t rx_cap_ = 0, rx_begin_ = 0, rx_end_ = 0, rx_need_ = 0;
  // Encrypted bytes for the socket: [tx_sent_, size) not yet written.
  OutputBuffer tx_;
  size_t tx_sent_ = 0;
};

}  // namespace skein::ssh
