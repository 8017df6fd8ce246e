// The mount's gRPC client of one gateway namespace; see gateway_client.hpp.
// Two kinds of failure come back: a gRPC status (the call did not complete: mapped to an errno
// here, EIO when the gateway cannot be reached in time) and a reply's `error` (the filesystem
// said no: passed through as it is).
#include "gateway_client.hpp"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stop_token>
#include <thread>

#include "skein/v1/fs.grpc.pb.h"
#include "skein/v1/node.grpc.pb.h"
#include "wire/bulk_message.hpp"
#include "wire/transport.hpp"

namespace skein::client {
namespace {

namespace pb = ::skein::v1;

constexpr int kMaxMessageBytes = 8 << 20;
constexpr int kKeepaliveTimeMs = 10'000;
constexpr int kKeepaliveTimeoutMs = 5'000;
// A restarted gateway should be found again within seconds, not gRPC's default two minutes.
constexpr int kInitialReconnectBackoffMs = 100;
constexpr int kMaxReconnectBackoffMs = 1'000;
// Despite its name, gRPC's "min reconnect backoff" is how long one connection attempt may take.
constexpr int kConnectTimeoutMs = 5'000;
constexpr char kTokenMetadata[] = "x-skein-token";
constexpr char kMountMetadata[] = "x-skein-mount";

// SetAttrArgs's bits are sent as they are.
constexpr bool same_bit(SetAttrArgs::Field ours, pb::SetAttrRequest::Field wire) {
  return static_cast<uint32_t>(ours) == static_cast<uint32_t>(wire);
}
static_assert(same_bit(SetAttrArgs::kMode, pb::SetAttrRequest::MODE));
static_assert(same_bit(SetAttrArgs::kUid, pb::SetAttrRequest::UID));
static_assert(same_bit(SetAttrArgs::kGid, pb::SetAttrRequest::GID));
static_assert(same_bit(SetAttrArgs::kSize, pb::SetAttrRequest::SIZE));
static_assert(same_bit(SetAttrArgs::kAtime, pb::SetAttrRequest::ATIME));
static_assert(same_bit(SetAttrArgs::kMtime, pb::SetAttrRequest::MTIME));
static_assert(same_bit(SetAttrArgs::kAtimeNow, pb::SetAttrRequest::ATIME_NOW));
static_assert(same_bit(SetAttrArgs::kMtimeNow, pb::SetAttrRequest::MTIME_NOW));

// A call that did not complete. Transport trouble is EIO: the caller must see the failure now,
// and nothing better describes "the gateway did not answer". So is UNIMPLEMENTED (a proxy's 404
// while the gateway restarts, an older gateway): as ENOSYS, FUSE's kernel side would take it for
// "this mount has no such operation" and stop asking for good (an open then goes on without one,
// a create falls back to mknod, renameat2's flags fail).
int errno_from_status(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      return ENOENT;
    case grpc::StatusCode::ALREADY_EXISTS:
      return EEXIST;
    case grpc::StatusCode::UNAUTHENTICATED:
      // The namespace took this mount's credential when it mounted: now that it refuses it, the
      // namespace is gone (a job namespace destroyed or expired) or the token was withdrawn.
      return ESTALE;
    case grpc::StatusCode::PERMISSION_DENIED:
      return EACCES;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return EINVAL;
    default:  // UNAVAILABLE, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, CANCELLED, ...
      return EIO;
  }
}

// A reply's `error` should be a positive errno; anything else is the gateway's bug, seen as EIO.
int errno_from_reply(int32_t error) { return error > 0 && error < 4096 ? error : EIO; }

FileAttr from_proto(const pb::Attr& a) {
  return FileAttr{a.mode(),   a.nlink(),    a.uid(),      a.gid(),     a.size(),
                  a.blocks(), a.atime_ns(), a.mtime_ns(), a.ctime_ns()};
}

void to_proto(const Credentials& who, pb::Credentials* out) {
  out->set_uid(who.uid);
  out->set_gid(who.gid);
  for (gid_t g : who.groups) out->add_groups(g);
}

void to_proto(const std::string& ns, const FileRef& file, pb::FileRef* out) {
  out->set_ns(ns);
  out->set_path(file.path);
  out->set_handle(file.handle);
  out->set_flags(file.flags);
  if (file.create) {
    out->set_create(true);
    out->set_create_mode(file.create_mode);
  }
  if (file.as_user) to_proto(*file.as_user, out->mutable_as_user());
}

pb::PathRequest path_request(const std::string& ns, const std::string& path) {
  pb::PathRequest req;
  req.set_ns(ns);
  req.set_path(path);
  return req;
}

const char* state_name(grpc_connectivity_state state) {
  switch (state) {
    case GRPC_CHANNEL_IDLE:
      return "idle";
    case GRPC_CHANNEL_CONNECTING:
      return "connecting";
    case GRPC_CHANNEL_READY:
      return "ready";
    case GRPC_CHANNEL_TRANSIENT_FAILURE:
      return "unreachable";
    case GRPC_CHANNEL_SHUTDOWN:
      return "shut down";
  }
  return "unknown";
}

// Follows the channel's connectivity from a thread of its own, keeping it connecting while the
// gateway is away and logging when it is lost and found. This is also what notices promptly that
// a restarted gateway is back: calls fail fast while the channel is down, so without a watcher
// nothing polls a connection attempt but gRPC's backup poller, once every 5 s.
void watch_connection(std::stop_token stop, std::shared_ptr<grpc::Channel> channel) {
  constexpr auto kPollInterval = std::chrono::milliseconds(500);  // also the shutdown latency
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  bool lost = false;
  while (!stop.stop_requested()) {
    if (!channel->WaitForStateChange(state, std::chrono::system_clock::now() + kPollInterval)) {
      state = channel->GetState(/*try_to_connect=*/true);  // an idle channel connects again
      continue;
    }
    state = channel->GetState(/*try_to_connect=*/true);
    spdlog::debug("gateway connection {}", state_name(state));
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE && !lost) {
      spdlog::warn("gateway unreachable: calls fail with EIO until it is back");
      lost = true;
    } else if (state == GRPC_CHANNEL_READY && lost) {
      spdlog::info("gateway reachable again");
      lost = false;
    }
  }
}

// A message as the generic stub sends it.
template <typename Message>
grpc::ByteBuffer framed(const Message& message) {
  grpc::ByteBuffer buffer;
  bool own;
  grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own);
  return buffer;
}

}  // namespace

struct GatewayClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Namespace::Stub> names;
  std::unique_ptr<pb::Data::Stub> data;
  // The asynchronous calls (Read, Write, Release), whose requests and replies are framed here:
  // Read's and Write's contents by hand (wire/bulk_message.hpp).
  std::unique_ptr<grpc::GenericStub> bulk;
  // Asynchronous calls not yet finished; the client is not destroyed while there are any.
  std::mutex async_mu;
  std::condition_variable async_cv;
  int async_calls = 0;  // guarded by async_mu
  // Calls started, of every kind (GatewayClient::calls_started).
  mutable std::atomic<uint64_t> started{0};
  // Releases that failed (the gateway unreachable, the call timed out; or, harmlessly, its
  // close of the file failed): each may hold an open file there, with its servers' handles, so
  // they are sent again once a Release is answered (again: a released handle is fine). At most
  // kReleasesKept; past that the gateway reclaims them when the mount goes (orphan_timeout_ms).
  static constexpr std::size_t kReleasesKept = 4096;
  std::mutex retry_mu;
  std::vector<FileRef> releases_to_retry;  // guarded by retry_mu
  std::jthread connection_watch;           // declared last: stopped and joined first

  void async_started() {
    std::lock_guard lock(async_mu);
    ++async_calls;
  }
  void async_finished() {
    std::lock_guard lock(async_mu);
    if (--async_calls == 0) async_cv.notify_all();
  }
  void wait_for_async_calls() {
    std::unique_lock lock(async_mu);
    async_cv.wait(lock, [&] { return async_calls == 0; });
  }

  // Starts one asynchronous unary call `rpc` through the generic stub, with `request` as it was
  // framed (wire/bulk_message.hpp for Write, `framed()` otherwise). `finish` gets, exactly once
  // and on a gRPC thread (so it must not block), the reply or the errno: of the call (its gRPC
  // status, logged here) or of the reply's `error`; and the contents of the reply's
  // `bytes_field` (0: none) apart, as views of the received message. The destructor waits for
  // calls still in flight.
  template <typename Reply, typename Finish>
  void start_async(const GatewayOptions& options, const char* method, const char* rpc,
                   std::string path, grpc::ByteBuffer request, int bytes_field, Finish finish) {
    struct Call {
      grpc::ClientContext context;
      grpc::ByteBuffer request;
      grpc::ByteBuffer reply;
    };
    auto* call = new Call;
    call->request = std::move(request);
    prepare(options, options.timeout, &call->context);
    async_started();
    bulk->UnaryCall(
        &call->context, rpc, grpc::StubOptions(), &call->request, &call->reply,
        [this, call, method, bytes_field, path = std::move(path),
         finish = std::move(finish)](grpc::Status status) mutable {
          std::unique_ptr<Call> owned(call);
          Reply reply;
          SharedBytes bytes;
          if (!status.ok()) {
            log_failure(method, path, status);
            finish(Result<Reply*>::failure(errno_from_status(status)), std::move(bytes));
          } else if (!wire::parse_with_bytes(owned->reply, bytes_field, reply, bytes)) {
            spdlog::warn("gateway {} {}: malformed reply", method, path);
            finish(Result<Reply*>::failure(EIO), SharedBytes());
          } else if (reply.error() != 0) {
            spdlog::debug("gateway {} {}: errno {}", method, path, reply.error());
            finish(Result<Reply*>::failure(errno_from_reply(reply.error())), SharedBytes());
          } else {
            finish(&reply, std::move(bytes));
          }
          owned.reset();
          async_finished();
        });
  }

  // One unary call: a fresh context with deadline and token, the gRPC status and the reply's
  // `error` both turned into the Result.
  template <typename Reply, typename Invoke>
  Result<Reply> call(const GatewayOptions& options, const char* method, const std::string& path,
                     Invoke&& invoke) const {
    grpc::ClientContext context;
    prepare(options, options.timeout, &context);
    Reply reply;
    grpc::Status status = invoke(&context, &reply);
    if (!status.ok()) {
      log_failure(method, path, status);
      return Result<Reply>::failure(errno_from_status(status));
    }
    // A reply with an errno of its own for the whole call (ReadFiles' are per file).
    if constexpr (requires { reply.error(); }) {
      if (reply.error() != 0) {
        spdlog::debug("gateway {} {}: errno {}", method, path, reply.error());
        return Result<Reply>::failure(errno_from_reply(reply.error()));
      }
    }
    return reply;
  }

  // Every call's context: its deadline, token and mount id; the call is counted (started).
  void prepare(const GatewayOptions& options, std::chrono::milliseconds timeout,
               grpc::ClientContext* context) const {
    started.fetch_add(1, std::memory_order_relaxed);
    context->set_deadline(std::chrono::system_clock::now() + timeout);
    if (!options.token.empty()) context->AddMetadata(kTokenMetadata, options.token);
    if (!options.mount_id.empty()) context->AddMetadata(kMountMetadata, options.mount_id);
  }

  static void log_failure(const char* method, const std::string& path, const grpc::Status& status) {
    spdlog::warn("gateway {} {}: gRPC status {}: {}", method, path,
                 static_cast<int>(status.error_code()), status.error_message());
  }
};

std::shared_ptr<grpc::Channel> GatewayClient::connect(const std::string& target,
                                                      const wire::ClientTls& tls,
                                                      std::string& error) {
  auto credentials = wire::channel_credentials(tls, error);
  if (!credentials) return nullptr;
  grpc::ChannelArguments args;
  wire::add_channel_arguments(tls, args);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // keep pinging an idle connection
  wire::tune_bulk_transport([&](const char* name, int value) { args.SetInt(name, value); });
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kInitialReconnectBackoffMs);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, kConnectTimeoutMs);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  return grpc::CreateCustomChannel(target, credentials, args);
}

std::optional<JobCredential> GatewayClient::job_mount_credential(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& job_id,
    std::chrono::milliseconds deadline, std::string& error) {
  auto stub = pb::Node::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  pb::JobMountCredentialRequest req;
  req.set_job_id(job_id);
  pb::JobMountCredentialReply reply;
  auto status = stub->JobMountCredential(&context, req, &reply);
  if (!status.ok()) {
    error = status.error_message();
    return std::nullopt;
  }
  return JobCredential{reply.ns(), reply.credential(), reply.uid(), reply.gid()};
}

GatewayClient::GatewayClient(std::shared_ptr<grpc::Channel> channel, GatewayOptions options)
    : options_(std::move(options)), stubs_(std::make_unique<Stubs>()) {
  stubs_->channel = channel;
  stubs_->names = pb::Namespace::NewStub(channel);
  stubs_->data = pb::Data::NewStub(channel);
  stubs_->bulk = std::make_unique<grpc::GenericStub>(channel);
  if (options_.watch_connection) stubs_->connection_watch = std::jthread(watch_connection, channel);
}

// Every asynchronous call ends within its deadline, so this wait is bounded.
GatewayClient::~GatewayClient() { stubs_->wait_for_async_calls(); }

uint64_t GatewayClient::calls_started() const {
  return stubs_->started.load(std::memory_order_relaxed);
}

NamespaceCheck GatewayClient::check_namespace(std::chrono::milliseconds deadline) const {
  using Outcome = NamespaceCheck::Outcome;
  grpc::ClientContext context;
  stubs_->prepare(options_, deadline, &context);
  pb::AttrReply reply;
  grpc::Status status = stubs_->names->GetAttr(&context, path_request(options_.ns, "/"), &reply);
  if (!status.ok()) {
    switch (status.error_code()) {
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        // Connected, but no answer in time: the gateway waits for a storage server (hung, slow
        // to log in), which is not a gateway out of reach.
        if (stubs_->channel->GetState(false) == GRPC_CHANNEL_READY)
          return {Outcome::kFailed,
                  "no answer within " + std::to_string(deadline.count()) +
                      " ms: the gateway is connected but slow, perhaps waiting for a storage "
                      "server of the namespace (" +
                      status.error_message() + ")"};
        return {Outcome::kUnreachable, status.error_message()};
      case grpc::StatusCode::UNAVAILABLE:
        return {Outcome::kUnreachable, status.error_message()};
      case grpc::StatusCode::NOT_FOUND:
        return {Outcome::kNoNamespace, status.error_message()};
      case grpc::StatusCode::UNAUTHENTICATED:
      case grpc::StatusCode::PERMISSION_DENIED:
        return {Outcome::kDenied, status.error_message()};
      default:
        return {Outcome::kFailed, "gRPC status " + std::to_string(status.error_code()) + ": " +
                                      status.error_message()};
    }
  }
  switch (reply.error()) {
    case 0:
      break;
    case ENOENT:
      return {Outcome::kNoNamespace, "GetAttr(\"/\") answered ENOENT"};
    case EACCES:
    case EPERM:
      return {Outcome::kDenied, std::strerror(reply.error())};
    default:
      return {Outcome::kFailed, std::string("GetAttr(\"/\"): ") + std::strerror(reply.error())};
  }
  if ((reply.attr().mode() & S_IFMT) != S_IFDIR) {
    return {Outcome::kFailed, "the namespace root is not a directory"};
  }
  return {Outcome::kOk, {}};
}

Result<FileAttr> GatewayClient::getattr(const std::string& path) const {
  auto reply = stubs_->call<pb::AttrReply>(options_, "GetAttr", path, [&](auto* ctx, auto* out) {
    return stubs_->names->GetAttr(ctx, path_request(options_.ns, path), out);
  });
  if (!reply) return Result<FileAttr>::failure(reply.error());
  return from_proto(reply->attr());
}

Result<FileAttr> GatewayClient::setattr(const std::string& path, const SetAttrArgs& change) const {
  pb::SetAttrRequest req;
  req.set_ns(options_.ns);
  req.set_path(path);
  req.set_fields(change.fields);
  req.set_mode(change.mode);
  req.set_uid(change.uid);
  req.set_gid(change.gid);
  req.set_size(change.size);
  req.set_atime_ns(change.atime_ns);
  req.set_mtime_ns(change.mtime_ns);
  req.set_handle(change.handle);
  if (change.as_user) to_proto(*change.as_user, req.mutable_as_user());
  auto reply = stubs_->call<pb::AttrReply>(options_, "SetAttr", path, [&](auto* ctx, auto* out) {
    return stubs_->names->SetAttr(ctx, req, out);
  });
  if (!reply) return Result<FileAttr>::failure(reply.error());
  return from_proto(reply->attr());
}

Result<std::vector<DirEntry>> GatewayClient::readdir(const std::string& path) const {
  using R = Result<std::vector<DirEntry>>;
  grpc::ClientContext context;
  stubs_->prepare(options_, options_.timeout, &context);
  auto reader = stubs_->names->ReadDir(&context, path_request(options_.ns, path));
  std::vector<DirEntry> entries;
  pb::ReadDirReply batch;
  int error = 0;
  while (reader->Read(&batch)) {
    if (batch.error() != 0) {
      error = errno_from_reply(batch.error());
      context.TryCancel();  // the rest of the stream is of no use
      break;
    }
    for (auto& e : *batch.mutable_entries()) {
      entries.push_back(DirEntry{std::move(*e.mutable_name()), from_proto(e.attr())});
    }
  }
  grpc::Status status = reader->Finish();
  if (error != 0) {
    spdlog::debug("gateway ReadDir {}: errno {}", path, error);
    return R::failure(error);
  }
  if (!status.ok()) {
    Stubs::log_failure("ReadDir", path, status);
    return R::failure(errno_from_status(status));
  }
  return entries;
}

Result<FileAttr> GatewayClient::mkdir(const std::string& path, uint32_t mode) const {
  pb::MkdirRequest req;
  req.set_ns(options_.ns);
  req.set_path(path);
  req.set_mode(mode);
  auto reply = stubs_->call<pb::AttrReply>(options_, "Mkdir", path, [&](auto* ctx, auto* out) {
    return stubs_->names->Mkdir(ctx, req, out);
  });
  if (!reply) return Result<FileAttr>::failure(reply.error());
  return from_proto(reply->attr());
}

Status GatewayClient::rmdir(const std::string& path) const {
  auto reply = stubs_->call<pb::ErrorReply>(options_, "Rmdir", path, [&](auto* ctx, auto* out) {
    return stubs_->names->Rmdir(ctx, path_request(options_.ns, path), out);
  });
  return reply ? ok_status() : Status::failure(reply.error());
}

Result<std::optional<FileAttr>> GatewayClient::unlink(const std::string& path) const {
  auto reply = stubs_->call<pb::ErrorReply>(options_, "Unlink", path, [&](auto* ctx, auto* out) {
    return stubs_->names->Unlink(ctx, path_request(options_.ns, path), out);
  });
  if (!reply) return Result<std::optional<FileAttr>>::failure(reply.error());
  if (reply->has_parent_attr()) return std::optional<FileAttr>(from_proto(reply->parent_attr()));
  return std::optional<FileAttr>();
}

Result<GatewayClient::RenamedDirs> GatewayClient::rename(const std::string& from,
                                                         const std::string& to,
                                                         uint32_t flags) const {
  pb::RenameRequest req;
  req.set_ns(options_.ns);
  req.set_from(from);
  req.set_to(to);
  req.set_flags(flags);
  auto reply = stubs_->call<pb::ErrorReply>(options_, "Rename", from, [&](auto* ctx, auto* out) {
    return stubs_->names->Rename(ctx, req, out);
  });
  if (!reply) return Result<RenamedDirs>::failure(reply.error());
  RenamedDirs dirs;
  if (reply->has_parent_attr()) dirs.from_dir = from_proto(reply->parent_attr());
  if (reply->has_new_parent_attr()) dirs.to_dir = from_proto(reply->new_parent_attr());
  return dirs;
}

Result<FileAttr> GatewayClient::symlink(const std::string& path, const std::string& target) const {
  pb::SymlinkRequest req;
  req.set_ns(options_.ns);
  req.set_path(path);
  req.set_target(target);
  auto reply = stubs_->call<pb::AttrReply>(options_, "Symlink", path, [&](auto* ctx, auto* out) {
    return stubs_->names->Symlink(ctx, req, out);
  });
  if (!reply) return Result<FileAttr>::failure(reply.error());
  return from_proto(reply->attr());
}

Result<std::string> GatewayClient::readlink(const std::string& path) const {
  auto reply =
      stubs_->call<pb::ReadlinkReply>(options_, "Readlink", path, [&](auto* ctx, auto* out) {
        return stubs_->names->Readlink(ctx, path_request(options_.ns, path), out);
      });
  if (!reply) return Result<std::string>::failure(reply.error());
  return std::move(*reply->mutable_target());
}

Result<FileAttr> GatewayClient::link(const std::string& existing, const std::string& path) const {
  pb::LinkRequest req;
  req.set_ns(options_.ns);
  req.set_existing(existing);
  req.set_path(path);
  auto reply = stubs_->call<pb::AttrReply>(options_, "Link", path, [&](auto* ctx, auto* out) {
    return stubs_->names->Link(ctx, req, out);
  });
  if (!reply) return Result<FileAttr>::failure(reply.error());
  return from_proto(reply->attr());
}

Result<FsStats> GatewayClient::statfs(const std::string& path) const {
  auto reply = stubs_->call<pb::StatFsReply>(options_, "StatFs", path, [&](auto* ctx, auto* out) {
    return stubs_->names->StatFs(ctx, path_request(options_.ns, path), out);
  });
  if (!reply) return Result<FsStats>::failure(reply.error());
  return FsStats{reply->block_size(),  reply->fragment_size(),    reply->blocks(),
                 reply->blocks_free(), reply->blocks_available(), reply->files(),
                 reply->files_free(),  reply->files_available(),  reply->name_max()};
}

Result<OpenedFile> GatewayClient::open(const std::string& path, uint32_t flags, bool attrs_of_file,
                                       const Credentials* as_user) const {
  pb::OpenRequest req;
  req.set_ns(options_.ns);
  req.set_path(path);
  req.set_flags(flags);
  req.set_attrs_of_file(attrs_of_file);
  if (as_user) to_proto(*as_user, req.mutable_as_user());
  auto reply = stubs_->call<pb::OpenReply>(options_, "Open", path, [&](auto* ctx, auto* out) {
    return stubs_->data->Open(ctx, req, out);
  });
  if (!reply) return Result<OpenedFile>::failure(reply.error());
  return OpenedFile{reply->handle(), from_proto(reply->attr()), std::nullopt, reply->attr_of_file(),
                    reply->judged()};
}

Result<OpenedFile> GatewayClient::create(const std::string& path, uint32_t flags, uint32_t mode,
                                         const Credentials* as_user) const {
  pb::OpenRequest req;
  req.set_ns(options_.ns);
  req.set_path(path);
  req.set_flags(flags);
  req.set_mode(mode);
  if (as_user) to_proto(*as_user, req.mutable_as_user());
  auto reply = stubs_->call<pb::OpenReply>(options_, "Create", path, [&](auto* ctx, auto* out) {
    return stubs_->data->Create(ctx, req, out);
  });
  if (!reply) return Result<OpenedFile>::failure(reply.error());
  OpenedFile opened{reply->handle(), from_proto(reply->attr()), std::nullopt, reply->attr_of_file(),
                    reply->judged()};
  if (reply->has_parent_attr()) opened.parent_attr = from_proto(reply->parent_attr());
  return opened;
}

Result<std::string> GatewayClient::read(const FileRef& file, uint64_t offset, uint32_t size,
                                        bool whole_file) const {
  pb::ReadRequest req;
  to_proto(options_.ns, file, req.mutable_file());
  req.set_offset(offset);
  req.set_size(size);
  req.set_whole_file(whole_file);
  auto reply = stubs_->call<pb::ReadReply>(options_, "Read", file.path, [&](auto* ctx, auto* out) {
    return stubs_->data->Read(ctx, req, out);
  });
  if (!reply) return Result<std::string>::failure(reply.error());
  return std::move(*reply->mutable_data());
}

Result<uint32_t> GatewayClient::write(const FileRef& file, uint64_t offset, std::string_view data,
                                      std::optional<FileAttr>* parent_attr,
                                      std::optional<FileAttr>* file_attr, bool report_attrs) const {
  pb::WriteRequest req;
  to_proto(options_.ns, file, req.mutable_file());
  req.set_offset(offset);
  req.set_report_attrs(report_attrs);
  req.set_data(data.data(), data.size());
  auto reply = stubs_->call<pb::WriteReply>(
      options_, "Write", file.path,
      [&](auto* ctx, auto* out) { return stubs_->data->Write(ctx, req, out); });
  if (!reply) return Result<uint32_t>::failure(reply.error());
  if (parent_attr && reply->has_parent_attr()) *parent_attr = from_proto(reply->parent_attr());
  if (file_attr && reply->has_file_attr()) *file_attr = from_proto(reply->file_attr());
  return reply->written();
}

Status GatewayClient::fsync(const FileRef& file, bool datasync) const {
  pb::FsyncRequest req;
  to_proto(options_.ns, file, req.mutable_file());
  req.set_datasync(datasync);
  auto reply = stubs_->call<pb::ErrorReply>(
      options_, "Fsync", file.path,
      [&](auto* ctx, auto* out) { return stubs_->data->Fsync(ctx, req, out); });
  return reply ? ok_status() : Status::failure(reply.error());
}

Status GatewayClient::release(const FileRef& file) const {
  pb::FileRef req;
  to_proto(options_.ns, file, &req);
  auto reply = stubs_->call<pb::ErrorReply>(
      options_, "Release", file.path,
      [&](auto* ctx, auto* out) { return stubs_->data->Release(ctx, req, out); });
  return reply ? ok_status() : Status::failure(reply.error());
}

Result<std::vector<GatewayClient::WholeFile>> GatewayClient::read_files(
    const std::vector<std::string>& paths, uint32_t max_bytes, bool attrs_of_files) const {
  using R = Result<std::vector<WholeFile>>;
  pb::ReadFilesRequest req;
  req.set_ns(options_.ns);
  for (const std::string& p : paths) req.add_paths(p);
  req.set_max_bytes(max_bytes);
  req.set_attrs_of_files(attrs_of_files);
  const std::string first = paths.empty() ? std::string("/") : paths.front();
  auto got = stubs_->call<pb::ReadFilesReply>(
      options_, "ReadFiles", first,
      [&](auto* ctx, auto* out) { return stubs_->data->ReadFiles(ctx, req, out); });
  if (!got) return R::failure(got.error());
  pb::ReadFilesReply& reply = *got;
  if (reply.files_size() != static_cast<int>(paths.size())) {
    spdlog::warn("gateway ReadFiles {}: {} answers for {} paths", first, reply.files_size(),
                 paths.size());
    return R::failure(EIO);
  }
  std::vector<WholeFile> files(paths.size());
  for (int i = 0; i < reply.files_size(); ++i) {
    pb::FileContent* f = reply.mutable_files(i);
    WholeFile& w = files[static_cast<size_t>(i)];
    if (f->error() != 0) {
      w.error = errno_from_reply(f->error());
      continue;
    }
    w.attr = from_proto(f->attr());
    w.attr_of_file = f->attr_of_file();
    w.data = std::move(*f->mutable_data());
  }
  return files;
}

Result<std::vector<GatewayClient::FileWritten>> GatewayClient::write_files(
    const std::vector<NewFile>& files) const {
  using R = Result<std::vector<FileWritten>>;
  pb::WriteFilesRequest req;
  req.set_ns(options_.ns);
  for (const NewFile& f : files) {
    pb::NewFile* out = req.add_files();
    out->set_path(f.path);
    out->set_partial(f.partial);
    out->set_data(f.data.data(), f.data.size());
    out->set_mode(f.mode);
    out->set_atime_ns(f.atime_ns);
    out->set_mtime_ns(f.mtime_ns);
  }
  const std::string first = files.empty() ? std::string("/") : files.front().path;
  auto got = stubs_->call<pb::WriteFilesReply>(
      options_, "WriteFiles", first,
      [&](auto* ctx, auto* out) { return stubs_->data->WriteFiles(ctx, req, out); });
  if (!got) return R::failure(got.error());
  const pb::WriteFilesReply& reply = *got;
  if (reply.files_size() != static_cast<int>(files.size())) {
    spdlog::warn("gateway WriteFiles {}: {} answers for {} files", first, reply.files_size(),
                 files.size());
    return R::failure(EIO);
  }
  std::vector<FileWritten> out(files.size());
  for (int i = 0; i < reply.files_size(); ++i) {
    const pb::FileWritten& f = reply.files(i);
    FileWritten& w = out[static_cast<size_t>(i)];
    if (f.error() != 0) {
      w.error = errno_from_reply(f.error());
      continue;
    }
    w.attr = from_proto(f.attr());
    if (f.has_parent_attr()) w.parent_attr = from_proto(f.parent_attr());
  }
  return out;
}

void GatewayClient::release_async(const FileRef& file) const {
  pb::FileRef req;
  to_proto(options_.ns, file, &req);
  stubs_->start_async<pb::ErrorReply>(
      options_, "Release", "/skein.v1.Data/Release", file.path, framed(req), 0,
      [this, file](Result<pb::ErrorReply*> reply, SharedBytes) {
        // (The client outlives its asynchronous calls.)
        std::vector<FileRef> again;
        {
          std::lock_guard lock(stubs_->retry_mu);
          if (!reply) {
            if (stubs_->releases_to_retry.size() < Stubs::kReleasesKept) {
              spdlog::debug("release {}: errno {}: sent again once the gateway answers", file.path,
                            reply.error());
              stubs_->releases_to_retry.push_back(file);
            } else {
              spdlog::warn(
                  "release {}: errno {}: given up (the gateway releases it when this "
                  "mount is gone)",
                  file.path, reply.error());
            }
            return;
          }
          again.swap(stubs_->releases_to_retry);
        }
        for (const FileRef& f : again) release_async(f);
      });
}

void GatewayClient::read_async(const FileRef& file, uint64_t offset, uint32_t size,
                               ReadDone done) const {
  pb::ReadRequest req;
  to_proto(options_.ns, file, req.mutable_file());
  req.set_offset(offset);
  req.set_size(size);
  stubs_->start_async<pb::ReadReply>(
      options_, "Read", "/skein.v1.Data/Read", file.path, framed(req),
      pb::ReadReply::kDataFieldNumber,
      [done = std::move(done)](Result<pb::ReadReply*> reply, SharedBytes data) {
        if (!reply) return done(Result<SharedBytes>::failure(reply.error()));
        done(std::move(data));
      });
}

void GatewayClient::write_async(const FileRef& file, uint64_t offset, std::string data,
                                WriteDone done) const {
  start_write(file, offset, std::move(data), false,
              [done = std::move(done)](Result<uint32_t> got, std::optional<FileAttr>) {
                done(std::move(got));
              });
}

void GatewayClient::write_async_reporting(const FileRef& file, uint64_t offset, std::string data,
                                          WriteReportedDone done) const {
  start_write(file, offset, std::move(data), true, std::move(done));
}

void GatewayClient::start_write(const FileRef& file, uint64_t offset, std::string data,
                                bool report_attrs, WriteReportedDone done) const {
  pb::WriteRequest head;
  to_proto(options_.ns, file, head.mutable_file());
  head.set_offset(offset);
  head.set_report_attrs(report_attrs);
  stubs_->start_async<pb::WriteReply>(
      options_, "Write", "/skein.v1.Data/Write", file.path,
      wire::serialize_with_bytes(head, pb::WriteRequest::kDataFieldNumber, std::move(data)), 0,
      [done = std::move(done)](Result<pb::WriteReply*> reply, SharedBytes) {
        if (!reply) return done(Result<uint32_t>::failure(reply.error()), std::nullopt);
        std::optional<FileAttr> attrs;
        if ((*reply)->has_file_attr()) attrs = from_proto((*reply)->file_attr());
        done((*reply)->written(), std::move(attrs));
      });
}

void GatewayClient::write_many_async(const FileRef& file, std::vector<Extent> extents,
                                     WriteDone done) const {
  if (extents.empty()) return done(uint32_t{0});
  pb::WriteRequest head;
  to_proto(options_.ns, file, head.mutable_file());
  head.set_offset(extents.front().offset);
  for (std::size_t i = 1; i < extents.size(); ++i) {
    auto* more = head.add_more();
    more->set_offset(extents[i].offset);
    more->set_data(std::move(extents[i].data));
  }
  stubs_->start_async<pb::WriteReply>(
      options_, "Write", "/skein.v1.Data/Write", file.path,
      wire::serialize_with_bytes(head, pb::WriteRequest::kDataFieldNumber,
                                 std::move(extents.front().data)),
      0, [done = std::move(done)](Result<pb::WriteReply*> reply, SharedBytes) {
        if (!reply) return done(Result<uint32_t>::failure(reply.error()));
        done((*reply)->written());
      });
}

}  // namespace skein::client
