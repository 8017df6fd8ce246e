// Admin service adapter; see admin_service.hpp.
#include "service/admin_service.hpp"

#include <spdlog/spdlog.h>

#include <future>
#include <optional>
#include <thread>

#include "jobs/sqlite.hpp"

namespace skein {
namespace {

using grpc::StatusCode;

grpc::Status refused(const AdminError& e) {
  switch (e.kind()) {
    case AdminError::Kind::invalid_argument:
      return {StatusCode::INVALID_ARGUMENT, e.what()};
    case AdminError::Kind::not_found:
      return {StatusCode::NOT_FOUND, e.what()};
    case AdminError::Kind::already_exists:
      return {StatusCode::ALREADY_EXISTS, e.what()};
    case AdminError::Kind::failed_precondition:
      return {StatusCode::FAILED_PRECONDITION, e.what()};
  }
  return {StatusCode::INTERNAL, e.what()};
}
// The job database could not be read or written (a full disk, an I/O error): nothing changed.
grpc::Status refused(const sqlite::StoreError& e) {
  return {StatusCode::INTERNAL, std::string("the job database: ") + e.what()};
}

v1::BranchMode to_proto(BranchMode m) {
  switch (m) {
    case BranchMode::read_write:
      return v1::BRANCH_MODE_RW;
    case BranchMode::read_only:
      return v1::BRANCH_MODE_RO;
    case BranchMode::no_create:
      return v1::BRANCH_MODE_NC;
  }
  return v1::BRANCH_MODE_UNSPECIFIED;
}

std::optional<BranchMode> from_proto(int m) {
  switch (m) {
    case v1::BRANCH_MODE_UNSPECIFIED:
    case v1::BRANCH_MODE_RW:
      return BranchMode::read_write;
    case v1::BRANCH_MODE_RO:
      return BranchMode::read_only;
    case v1::BRANCH_MODE_NC:
      return BranchMode::no_create;
    default:
      return std::nullopt;
  }
}

// Free space of each backend, asked all at once. Each lookup runs on a thread of its own, so a
// server that hangs costs its own entry ("unknown" after `wait`), never the whole listing.
std::vector<std::optional<sftp::StatVfs>> free_space_of(const std::vector<Gateway::BackendView>& bs,
                                                        std::chrono::milliseconds wait) {
  std::vector<std::future<Result<sftp::StatVfs>>> asks(bs.size());
  for (size_t i = 0; i < bs.size(); ++i) {
    if (!bs[i].backend->up()) continue;  // it would only say EIO
    std::packaged_task<Result<sftp::StatVfs>()> task(
        [b = bs[i].backend] { return b->free_space(); });
    asks[i] = task.get_future();
    std::thread(std::move(task)).detach();
  }
  auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<std::optional<sftp::StatVfs>> out(bs.size());
  for (size_t i = 0; i < bs.size(); ++i) {
    if (!asks[i].valid() || asks[i].wait_until(deadline) != std::future_status::ready) continue;
    auto v = asks[i].get();
    if (v) out[i] = *v;
  }
  return out;
}

void fill_spec(const BackendConfig& c, v1::BackendSpec* out) {
  out->set_name(c.name);
  out->set_host(c.endpoint.host);
  out->set_port(static_cast<uint32_t>(c.endpoint.port));
  out->set_user(c.endpoint.user);
  out->set_identity_file(c.endpoint.identity_file);
  out->set_known_hosts(c.endpoint.known_hosts);
  out->set_root(c.root);
  out->set_connections(static_cast<uint32_t>(c.connections));
  out->set_min_free_bytes(c.min_free_bytes);
  out->set_ssh_transport(sftp::ssh_transport_name(c.endpoint.transport));
  out->set_certificate_file(c.endpoint.certificate_file);
  out->set_ssh_config(c.endpoint.ssh_config);
  out->set_proxy_jump(c.endpoint.proxy_jump);
}

void fill_info(const Gateway::BackendView& v, const std::optional<sftp::StatVfs>& space,
               v1::BackendInfo* out) {
  SftpBackend& b = *v.backend;
  fill_spec(b.config(), out->mutable_spec());
  bool up = b.up(), draining = b.draining();
  out->set_up(up);
  out->set_draining(draining);
  out->set_state(!up        ? v1::BackendInfo::DOWN
                 : draining ? v1::BackendInfo::DRAINING
                            : v1::BackendInfo::UP);
  out->set_live_connections(static_cast<uint32_t>(b.live_connections()));
  out->set_ssh_stack(b.ssh_stacks());
  if (space) {
    uint64_t unit = space->frsize ? space->frsize : space->bsize;
    out->set_free_space_known(true);
    out->set_free_bytes(space->bavail * unit);
    out->set_total_bytes(space->blocks * unit);
  }
  const BackendCounters counted = b.counters();
  out->set_bytes_read(counted.bytes_read);
  out->set_bytes_written(counted.bytes_written);
  out->set_ops(counted.ops);
  for (auto& m : v.mounts) out->add_mounts(m);
}

// BackendInfo of one backend, free space included.
void fill_info(const Gateway::BackendView& v, v1::BackendInfo* out) {
  fill_info(v, free_space_of({v}, std::chrono::milliseconds(2000)).front(), out);
}

std::optional<Gateway::BackendView> view_of(Gateway& gw, const std::string& name) {
  for (auto& v : gw.backends())
    if (v.backend->name() == name) return v;
  return std::nullopt;
}

}  // namespace

grpc::Status AdminService::authorize(grpc::ServerContext* ctx) const {
  if (!enabled_)
    return {StatusCode::UNAUTHENTICATED,
            "admin is disabled on this gateway: set admin_token_file in the [gateway] section of "
            "its configuration"};
  if (!roles_.allows(*ctx, ClientRole::admin)) {
    refusals_.note(ctx->peer(), ClientRoles::common_name(*ctx));
    return {StatusCode::PERMISSION_DENIED,
            "admin calls need a client certificate listed in admin_clients of the gateway's "
            "[gateway.tls]"};
  }
  auto& md = ctx->client_metadata();
  auto it = md.find("x-skein-admin-token");
  if (it == md.end())
    return {StatusCode::UNAUTHENTICATED, "missing admin token (x-skein-admin-token)"};
  if (!tokens_.matches(std::string_view(it->second.data(), it->second.size()))) {
    refusals_.note(ctx->peer(), ClientRoles::common_name(*ctx));
    return {StatusCode::UNAUTHENTICATED, "wrong admin token"};
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::ListBackends(grpc::ServerContext* ctx, const v1::ListBackendsRequest*,
                                        v1::ListBackendsReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  auto views = gateway_.backends();
  auto space = free_space_of(views, std::chrono::milliseconds(2000));
  for (size_t i = 0; i < views.size(); ++i) {
    auto* info = reply->add_backends();
    fill_info(views[i], space[i], info);
    if (!jobs_) continue;
    auto pool = jobs_->pool_backend_state(info->spec().name());
    info->set_job_pool(pool.pool);
    info->set_pool_claim_ours(pool.ours);
    info->set_pool_claim_foreign(pool.foreign);
    info->set_pool_claim(pool.why_not);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::AddBackend(grpc::ServerContext* ctx, const v1::AddBackendRequest* req,
                                      v1::AddBackendReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  const auto& spec = req->backend();
  if (spec.port() > 65535)
    return {StatusCode::INVALID_ARGUMENT,
            "port must be between 1 and 65535, not " + std::to_string(spec.port())};
  if (spec.connections() > 64)
    return {StatusCode::INVALID_ARGUMENT,
            "connections must be between 1 and 64, not " + std::to_string(spec.connections())};
  auto mode = from_proto(req->mode());
  if (!mode)
    return {StatusCode::INVALID_ARGUMENT, "unknown branch mode " + std::to_string(req->mode())};
  if (req->ns().empty()) return {StatusCode::INVALID_ARGUMENT, "name the namespace to add it to"};
  if (req->mount_path().empty())
    return {StatusCode::INVALID_ARGUMENT, "name the mount path to add it at"};

  sftp::SshTransport transport = sftp::SshTransport::libssh;
  if (!spec.ssh_transport().empty()) {
    if (auto problem = sftp::parse_ssh_transport(spec.ssh_transport(), transport))
      return {StatusCode::INVALID_ARGUMENT, *problem};
  }

  Gateway::AddBackendRequest add;
  add.backend.name = spec.name();
  add.backend.endpoint.host = spec.host();
  add.backend.endpoint.port = static_cast<int>(spec.port());
  add.backend.endpoint.user = spec.user();
  add.backend.endpoint.identity_file = spec.identity_file();
  add.backend.endpoint.known_hosts = spec.known_hosts();
  add.backend.endpoint.certificate_file = spec.certificate_file();
  add.backend.endpoint.ssh_config = spec.ssh_config();
  add.backend.endpoint.proxy_jump = spec.proxy_jump();
  add.backend.root = spec.root();
  add.backend.connections = static_cast<int>(spec.connections());
  add.backend.min_free_bytes = spec.min_free_bytes();
  add.backend.endpoint.transport = transport;
  add.ns = req->ns();
  add.mount_path = req->mount_path();
  add.mode = *mode;
  add.check_connection = !req->skip_connect_check();
  try {
    auto added = gateway_.add_backend(std::move(add));
    // It answered a moment ago: open its first connection now, as the gateway does at start.
    if (!req->skip_connect_check()) (void)added.backend->connection(0);
    auto view = view_of(gateway_, added.backend->name());
    if (view) fill_info(*view, reply->mutable_backend());
    reply->set_new_mount(added.new_mount);
    reply->set_mount_path(added.mount_path);
    reply->set_layout(added.layout);
  } catch (const AdminError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::RemoveBackend(grpc::ServerContext* ctx,
                                         const v1::RemoveBackendRequest* req,
                                         v1::RemoveBackendReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  try {
    auto removed = gateway_.remove_backend(req->name());
    for (auto& m : removed.left_mounts) reply->add_left_mounts(m);
    for (auto& m : removed.dropped_mounts) reply->add_dropped_mounts(m);
  } catch (const AdminError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::DrainBackend(grpc::ServerContext* ctx,
                                        const v1::DrainBackendRequest* req,
                                        v1::DrainBackendReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  try {
    gateway_.drain_backend(req->name(), !req->undrain());
  } catch (const AdminError& e) {
    return refused(e);
  }
  if (auto view = view_of(gateway_, req->name())) fill_info(*view, reply->mutable_backend());
  return grpc::Status::OK;
}

grpc::Status AdminService::ListNamespaces(grpc::ServerContext* ctx,
                                          const v1::ListNamespacesRequest*,
                                          v1::ListNamespacesReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  for (auto& n : gateway_.namespaces()) {
    auto* out = reply->add_namespaces();
    out->set_name(n.config.name);
    out->set_create_policy(n.config.create_policy);
    out->set_token_required(!n.config.token_file.empty());
    out->set_open_files(n.open_files);
    out->set_bytes_read(n.bytes_read);
    out->set_bytes_written(n.bytes_written);
    auto mounts = n.config.mounts;
    std::sort(mounts.begin(), mounts.end(),
              [](const MountConfig& a, const MountConfig& b) { return a.path < b.path; });
    for (auto& m : mounts) {
      auto* mi = out->add_mounts();
      mi->set_path(m.path);
      mi->set_layout_kind(m.layout == LayoutKind::striped ? "striped" : "union");
      for (auto& mt : n.table->mounts())
        if (mt.path == m.path) mi->set_layout(mt.layout->describe());
      for (auto& br : m.branches) {
        auto* b = mi->add_branches();
        b->set_backend(br.backend);
        b->set_mode(to_proto(br.mode));
      }
    }
  }
  if (jobs_) {
    for (auto& r : jobs_->list()) {
      auto* out = reply->add_namespaces();
      out->set_name(r.name);
      out->set_create_policy(r.layout_kind == "union" ? "mfs" : "");
      out->set_token_required(true);
      if (auto fs = jobs_->namespace_of(r.job_id)) {
        out->set_open_files(fs->open_files());
        out->set_bytes_read(fs->bytes_read());
        out->set_bytes_written(fs->bytes_written());
      }
      auto* mi = out->add_mounts();
      mi->set_path("/");
      mi->set_layout_kind(r.layout_kind);
      mi->set_layout(jobs_->describe(r.name));
      for (auto& b : r.backends) {
        auto* br = mi->add_branches();
        br->set_backend(b);
        br->set_mode(v1::BRANCH_MODE_RW);
      }
      fill_job(r, out->mutable_job());
    }
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::jobs_configured() const {
  if (jobs_) return grpc::Status::OK;
  return {StatusCode::FAILED_PRECONDITION,
          "this gateway makes no job namespaces: its configuration has no [jobs] section"};
}

void AdminService::fill_job(const JobRecord& r, v1::JobNamespaceInfo* out) const {
  out->set_name(r.name);
  out->set_job_id(r.job_id);
  out->set_uid(r.uid);
  out->set_gid(r.gid);
  auto* l = out->mutable_layout();
  l->set_kind(r.layout_kind == "union" ? v1::JobLayout::UNION : v1::JobLayout::STRIPED);
  l->set_stripe_size(r.stripe_size);
  l->set_width(static_cast<uint32_t>(r.backends.size()));
  l->set_pool(r.pool);
  for (auto& b : r.backends) {
    l->add_backends(b);
    out->add_backends(b);
  }
  out->set_layout_description(jobs_->describe(r.name));
  out->set_quota_bytes(r.quota_bytes);
  out->set_quota_inodes(r.quota_inodes);
  out->set_bytes_used(r.bytes_used);
  out->set_inodes_used(r.inodes_used);
  out->set_created_s(r.created_s);
  out->set_expires_s(r.expires_s);
  for (auto& [k, v] : r.labels) (*out->mutable_labels())[k] = v;
  for (auto& p : jobs_->pending_removals(r.name)) out->add_pending_removals(p);
}

grpc::Status AdminService::CreateJobNamespace(grpc::ServerContext* ctx,
                                              const v1::CreateJobNamespaceRequest* req,
                                              v1::CreateJobNamespaceReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  JobRequest q;
  q.job_id = req->job_id();
  q.uid = req->uid();
  q.gid = req->gid();
  const auto& l = req->layout();
  switch (l.kind()) {
    case v1::JobLayout::KIND_UNSPECIFIED:
    case v1::JobLayout::STRIPED:
      q.layout_kind = "striped";
      break;
    case v1::JobLayout::UNION:
      q.layout_kind = "union";
      break;
    default:
      return {StatusCode::INVALID_ARGUMENT, "unknown layout kind " + std::to_string(l.kind())};
  }
  q.stripe_size = l.stripe_size();
  q.width = l.width();
  q.pool = l.pool();
  q.backends.assign(l.backends().begin(), l.backends().end());
  q.quota_bytes = req->quota_bytes();
  q.quota_inodes = req->quota_inodes();
  q.lifetime =
      std::chrono::seconds(static_cast<int64_t>(std::min<uint64_t>(req->lifetime_s(), INT64_MAX)));
  for (auto& [k, v] : req->labels()) q.labels[k] = v;
  try {
    auto created = jobs_->create(q);
    fill_job(created.record, reply->mutable_namespace_());
    reply->set_created(created.created);
    reply->set_credential(created.credential);
  } catch (const AdminError& e) {
    return refused(e);
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::DestroyJobNamespace(grpc::ServerContext* ctx,
                                               const v1::DestroyJobNamespaceRequest* req,
                                               v1::DestroyJobNamespaceReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  if (req->has_stage_out()) {
    // The copy first; the namespace goes once it is done (and stays when it fails).
    StageSpec spec;
    if (auto st = stage_spec(req->stage_out(), spec); !st.ok()) return st;
    if (spec.direction != StageDirection::out)
      return {StatusCode::INVALID_ARGUMENT, "a destroy's stage_out must have direction OUT"};
    if (spec.job_id.empty()) spec.job_id = req->job_id();
    if (spec.job_id != req->job_id())
      return {StatusCode::INVALID_ARGUMENT, "the stage_out names job '" + spec.job_id +
                                                "', the destroy job '" + req->job_id() + "'"};
    try {
      fill_stage(stages_->begin(spec, /*destroy_after=*/true), reply->mutable_stage_out());
    } catch (const AdminError& e) {
      return refused(e);
    } catch (const sqlite::StoreError& e) {
      return refused(e);
    }
    reply->set_existed(true);
    return grpc::Status::OK;
  }
  // No copy of the job begins from here on, and those under way stop before its files go.
  JobNamespaces::Destroying destroying(*jobs_, req->job_id());
  stages_->cancel_job(req->job_id());
  auto wait = std::chrono::milliseconds(req->wait_ms() ? req->wait_ms() : 30000);
  try {
    auto d = jobs_->destroy(req->job_id(), wait, "asked for by an admin");
    reply->set_existed(d.existed);
    for (auto& p : d.pending) reply->add_removal_pending(p);
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::NamespaceUsage(grpc::ServerContext* ctx,
                                          const v1::NamespaceUsageRequest* req,
                                          v1::NamespaceUsageReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  auto r = jobs_->find(req->job_id());
  if (!r) return {StatusCode::NOT_FOUND, "no job namespace for job '" + req->job_id() + "'"};
  fill_job(*r, reply->mutable_namespace_());
  return grpc::Status::OK;
}

grpc::Status AdminService::RenewJobNamespace(grpc::ServerContext* ctx,
                                             const v1::RenewJobNamespaceRequest* req,
                                             v1::NamespaceUsageReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  try {
    fill_job(jobs_->renew(req->job_id(), std::chrono::seconds(req->lifetime_s())),
             reply->mutable_namespace_());
  } catch (const AdminError& e) {
    return refused(e);
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::stage_spec(const v1::StageRequest& req, StageSpec& out) {
  out.job_id = req.job_id();
  switch (req.direction()) {
    case v1::StageRequest::IN:
      out.direction = StageDirection::in;
      break;
    case v1::StageRequest::OUT:
      out.direction = StageDirection::out;
      break;
    default:
      return {StatusCode::INVALID_ARGUMENT, "a stage needs a direction: IN or OUT"};
  }
  out.source = req.source();
  out.destination = req.destination();
  out.verify = req.verify();
  return grpc::Status::OK;
}

void AdminService::fill_stage(const StageReport& r, v1::StageOperation* out) {
  const StageRecord& s = r.record;
  out->set_id(s.id);
  auto* q = out->mutable_request();
  q->set_job_id(s.spec.job_id);
  q->set_direction(s.spec.direction == StageDirection::in ? v1::StageRequest::IN
                                                          : v1::StageRequest::OUT);
  q->set_source(s.spec.source);
  q->set_destination(s.spec.destination);
  q->set_verify(s.spec.verify);
  switch (s.state) {
    case StageState::queued:
      out->set_state(v1::StageOperation::QUEUED);
      break;
    case StageState::running:
      out->set_state(v1::StageOperation::RUNNING);
      break;
    case StageState::done:
      out->set_state(v1::StageOperation::DONE);
      break;
    case StageState::failed:
      out->set_state(v1::StageOperation::FAILED);
      break;
    case StageState::cancelled:
      out->set_state(v1::StageOperation::CANCELLED);
      break;
  }
  out->set_bytes_done(s.bytes_done);
  out->set_bytes_total(s.bytes_total);
  out->set_files_done(s.files_done);
  out->set_files_total(s.files_total);
  out->set_bytes_per_s(r.bytes_per_s);
  out->set_error(s.error);
  for (auto& f : s.failed) out->add_failed(f);
  out->set_started_s(s.started_s);
  out->set_updated_s(s.updated_s);
  out->set_finished_s(s.finished_s);
  out->set_bytes_moved(r.bytes_moved);
}

grpc::Status AdminService::StartStage(grpc::ServerContext* ctx, const v1::StageRequest* req,
                                      v1::StageOperation* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  StageSpec spec;
  if (auto st = stage_spec(*req, spec); !st.ok()) return st;
  try {
    fill_stage(stages_->begin(spec), reply);
  } catch (const AdminError& e) {
    return refused(e);
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::StageStatus(grpc::ServerContext* ctx,
                                       const v1::StageOperationRequest* req,
                                       v1::StageOperation* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  try {
    auto r = stages_->find(req->id());
    if (!r) return {StatusCode::NOT_FOUND, "no staging operation '" + req->id() + "'"};
    fill_stage(*r, reply);
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::CancelStage(grpc::ServerContext* ctx,
                                       const v1::StageOperationRequest* req,
                                       v1::StageOperation* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  try {
    fill_stage(stages_->cancel(req->id()), reply);
  } catch (const AdminError& e) {
    return refused(e);
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::ListStages(grpc::ServerContext* ctx, const v1::ListStagesRequest* req,
                                      v1::ListStagesReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  if (auto st = jobs_configured(); !st.ok()) return st;
  try {
    for (auto& r : stages_->list(req->job_id())) fill_stage(r, reply->add_operations());
  } catch (const sqlite::StoreError& e) {
    return refused(e);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Health(grpc::ServerContext* ctx, const v1::HealthRequest*,
                                  v1::HealthReply* reply) {
  if (auto st = authorize(ctx); !st.ok()) return st;
  reply->set_version(Gateway::version());
  reply->set_uptime_s(static_cast<uint64_t>(gateway_.uptime().count()));
  auto backends = gateway_.backends();
  uint32_t up = 0;
  for (auto& v : backends) up += v.backend->up() ? 1 : 0;
  reply->set_backends_up(up);
  reply->set_backends_total(static_cast<uint32_t>(backends.size()));
  for (auto& n : gateway_.namespaces()) {
    reply->add_namespaces(n.config.name);
    for (auto& m : n.table->mounts())
      if (auto why = m.layout->problem(); !why.empty())
        reply->add_problems(n.config.name + ":" + m.path + ": " + why);
  }
  reply->set_listen(gateway_.config().listen);
  return grpc::Status::OK;
}

}  // namespace skein
