// Namespace and Data service adapters; see fs_services.hpp.
#include "service/fs_services.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "coherence/invalidation_rules.hpp"
#include "skein/path.hpp"
#include "wire/bulk_message.hpp"
#include "wire/limits.hpp"

namespace skein {
namespace {

using grpc::ServerContext;
using grpc::StatusCode;

// The namespace and normalised path a request names, or a gRPC error.
struct Target {
  std::shared_ptr<NamespaceFs> ns;
  std::string path;
};

// `path` normalised, or nothing with `status` saying why it is refused.
std::optional<std::string> checked_path(const std::string& path, grpc::Status& status) {
  if (path.size() > kMaxPathBytes) {
    status = grpc::Status(StatusCode::INVALID_ARGUMENT, "path of " + std::to_string(path.size()) +
                                                            " bytes: longer than " +
                                                            std::to_string(kMaxPathBytes));
    return std::nullopt;
  }
  auto norm = normalize_virtual_path(path);
  if (!norm)
    status = grpc::Status(StatusCode::INVALID_ARGUMENT,
                          "bad path '" + path + "': must be absolute, without '..' above /");
  return norm;
}

std::optional<Target> resolve(const NamespaceRegistry& reg, grpc::ServerContextBase* ctx,
                              const std::string& ns, const std::string& path,
                              grpc::Status& status) {
  auto fs = reg.authorize(ctx, ns, status);
  if (!fs) return std::nullopt;
  auto norm = checked_path(path, status);
  if (!norm) return std::nullopt;
  return Target{std::move(fs), std::move(*norm)};
}

void fill_attr(const sftp::Attrs& a, v1::Attr* out, uint32_t nlink = 0) {
  out->set_mode(a.permissions);
  out->set_nlink(nlink ? nlink : (S_ISDIR(a.permissions) ? 2 : 1));
  out->set_uid(a.uid);
  out->set_gid(a.gid);
  out->set_size(a.size);
  out->set_atime_ns(static_cast<int64_t>(a.atime) * 1000000000);
  out->set_mtime_ns(static_cast<int64_t>(a.mtime) * 1000000000);
  out->set_ctime_ns(static_cast<int64_t>(a.mtime) * 1000000000);
  out->set_blocks((a.size + 511) / 512);
}

template <typename Reply>
grpc::Status attr_reply(const Result<sftp::Attrs>& r, Reply* reply) {
  if (r)
    fill_attr(*r, reply->mutable_attr());
  else
    reply->set_error(r.error());
  return grpc::Status::OK;
}

grpc::Status error_reply(const skein::Status& st, v1::ErrorReply* reply) {
  reply->set_error(st.error());
  return grpc::Status::OK;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The calling mount's id (`x-skein-mount` metadata), or "": valid while the call is.
std::string_view mount_id_of(const grpc::ServerContextBase* ctx) {
  auto& md = ctx->client_metadata();
  auto it = md.find("x-skein-mount");
  return it == md.end() || it->second.size() > wire::kMaxMountIdBytes
             ? std::string_view()
             : std::string_view(it->second.data(), it->second.size());
}
std::string mount_of(const grpc::ServerContextBase* ctx) { return std::string(mount_id_of(ctx)); }

// Counts the caller among the mounts that cache `path` (and, with `entry`, its directory) before
// the call reads it: a change another mount makes while the call is on its way to the server is
// then announced to the caller too, whose mount then does not keep the reply for long (its cache
// ticket saw the invalidation). Counted only after the read, the caller would miss that change
// and keep what the read found until the path changed again. Taken back by a failed call.
InvalidationBroker::Reading will_serve(InvalidationBroker* b, grpc::ServerContextBase* ctx,
                                       const Target& t, bool entry) {
  return b ? b->will_serve(t.ns->name(), mount_of(ctx), t.path, entry)
           : InvalidationBroker::Reading{};
}
template <typename R>
void unless_served(InvalidationBroker* b, const InvalidationBroker::Reading& reading, const R& r) {
  if (b && !r) b->not_served(reading);
}
// Reports to the broker, when there is one.
void served(InvalidationBroker* b, grpc::ServerContextBase* ctx, const Target& t,
            const std::string& path, const Result<sftp::Attrs>& attrs, bool entry) {
  if (b && attrs) b->served(t.ns->name(), mount_of(ctx), path, SeenAttrs::of(*attrs), entry);
}
// Reports a change the mount `mount` made in `ns` (invalidation_rules.hpp says what it makes
// stale): the other mounts are told; of the file's other names linked through the gateway
// (NamespaceFs::links), every mount, the writer's too, since its kernel holds each name as a file
// of its own.
void report_change(InvalidationBroker* b, NamespaceFs& ns, const std::string& mount, Change change,
                   const std::string& path, const std::string& other = {}) {
  if (!b) return;
  b->changed(ns.name(), invalidations_for(change, path, other), mount);
  if (auto names = invalidations_for_other_names(change, ns.links().others(path)); !names.empty())
    b->changed(ns.name(), names, "");
}
// Reports a change `t`'s caller made.
void changed(InvalidationBroker* b, grpc::ServerContextBase* ctx, const Target& t, Change change,
             const std::string& path, const std::string& other = {}) {
  report_change(b, *t.ns, mount_of(ctx), change, path, other);
}
// A create `t`'s caller made (Create, or an asynchronous create's first Write): the other mounts
// told, and the caller's mount counted among those that cache the file and its directory.
void created(InvalidationBroker* b, grpc::ServerContextBase* ctx, const Target& t,
             const NamespaceFs::Opened& made) {
  changed(b, ctx, t, Change::create, t.path);
  served(b, ctx, t, t.path, made.attrs, true);
  if (made.parent_attrs) served(b, ctx, t, parent_path(t.path), *made.parent_attrs, false);
}

// Runs work(from, to) for the slices [0, slice), [slice, 2 slice), ... of [0, count), up to
// `at_once` slices at a time: in this thread and in up to at_once - 1 helpers on the pool. This
// thread never waits for a helper to start (the pool may be full, of calls like this one): once
// it finds no slice left, helpers that start later take none, and it waits only for those
// running one. `work` may use the caller's locals.
void run_in_slices(CallPlacement& placement, size_t count, size_t slice, size_t at_once,
                   const std::function<void(size_t, size_t)>& work) {
  struct Shared {
    const std::function<void(size_t, size_t)>* work = nullptr;
    size_t count = 0, slice = 0;
    std::atomic<size_t> next{0};
    std::mutex mu;
    std::condition_variable idle;
    size_t running = 0;  // helpers between their start and their last slice
    bool closed = false;
    void take() {
      for (size_t from; (from = next.fetch_add(1) * slice) < count;)
        (*work)(from, std::min(count, from + slice));
    }
  };
  auto shared = std::make_shared<Shared>();
  shared->work = &work;
  shared->count = count;
  shared->slice = slice;
  const size_t slices = (count + slice - 1) / slice;
  const size_t extra = slices == 0 ? 0 : std::min(slices, at_once) - 1;
  for (size_t k = 0; k < extra; ++k) {
    placement.help([shared] {
      {
        std::lock_guard lock(shared->mu);
        if (shared->closed) return;
        ++shared->running;
      }
      shared->take();
      std::lock_guard lock(shared->mu);
      if (--shared->running == 0) shared->idle.notify_all();
    });
  }
  shared->take();
  std::unique_lock lock(shared->mu);
  shared->closed = true;
  shared->idle.wait(lock, [&] { return shared->running == 0; });
}

}  // namespace

// --- Namespace ---------------------------------------------------------------------------------

grpc::Status NamespaceService::get_attr(grpc::ServerContextBase* ctx, const v1::PathRequest* req,
                                        v1::AttrReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  const auto reading = will_serve(broker_, ctx, *t, true);
  auto r = t->ns->getattr(t->path);
  unless_served(broker_, reading, r);
  served(broker_, ctx, *t, t->path, r, true);
  return attr_reply(r, reply);
}

namespace {
// The `as_user` of a request (SetAttrRequest, OpenRequest, FileRef), if it has one: the user a
// mount does not trust, for whom the call is judged.
template <typename Message>
std::optional<Credentials> credentials_of(const Message& m) {
  if (!m.has_as_user()) return std::nullopt;
  const v1::Credentials& c = m.as_user();
  return Credentials{c.uid(), c.gid(), {c.groups().begin(), c.groups().end()}};
}
}  // namespace

grpc::Status NamespaceService::set_attr(grpc::ServerContextBase* ctx, const v1::SetAttrRequest* req,
                                        v1::AttrReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  using F = v1::SetAttrRequest;
  uint32_t f = req->fields();
  AttrChange ch;
  if (f & F::MODE) ch.mode = req->mode();
  if (f & F::UID) ch.uid = req->uid();
  if (f & F::GID) ch.gid = req->gid();
  if (f & F::SIZE) ch.size = req->size();
  if (f & F::ATIME_NOW)
    ch.atime_s = now_s();
  else if (f & F::ATIME)
    ch.atime_s = req->atime_ns() / 1000000000;
  if (f & F::MTIME_NOW)
    ch.mtime_s = now_s();
  else if (f & F::MTIME)
    ch.mtime_s = req->mtime_ns() / 1000000000;
  ch.to_now = (f & (F::ATIME_NOW | F::MTIME_NOW)) && !(f & (F::ATIME | F::MTIME));
  const std::optional<Credentials> as_user = credentials_of(*req);
  auto r = t->ns->setattr(t->path, ch, req->handle(), as_user ? &*as_user : nullptr);
  if (r) {
    // Through an open file: where it is now (see DataService::write).
    const auto now_at = req->handle() ? t->ns->path_of(req->handle()) : std::nullopt;
    changed(broker_, ctx, *t, Change::setattr, now_at.value_or(t->path));
    served(broker_, ctx, *t, t->path, r, false);
  }
  return attr_reply(r, reply);
}

grpc::Status NamespaceService::ReadDir(ServerContext* ctx, const v1::PathRequest* req,
                                       grpc::ServerWriter<v1::ReadDirReply>* writer) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  // The caller counts among those that cache the directory before it is read, so that a change
  // made while it is being read reaches the caller.
  if (broker_) broker_->served(t->ns->name(), mount_of(ctx), t->path, std::nullopt, false);
  auto entries = t->ns->readdir(t->path);
  v1::ReadDirReply batch;
  if (!entries) {
    batch.set_error(entries.error());
    writer->Write(batch);
    return grpc::Status::OK;
  }
  // The entries' attributes come with the listing (readdirplus), and the caller's kernel keeps
  // them without a lookup: names made or removed in a subdirectory must reach it (a change in a
  // directory is told to the mounts that cache that directory), and while the servers are not
  // watched revalidation must look at the files too (a file rewritten on its server leaves its
  // directory as it was, and the kernel would show its old size and mtime for its whole TTL).
  if (broker_) {
    const bool files_too = !broker_->servers_watched(t->ns->name());
    std::vector<std::pair<std::string, SeenAttrs>> listed;
    for (const auto& e : *entries)
      if ((files_too || S_ISDIR(e.attrs.permissions)) && e.name != "." && e.name != "..")
        listed.emplace_back(join_path(t->path, e.name), SeenAttrs::of(e.attrs));
    broker_->served_listed(t->ns->name(), mount_of(ctx), listed);
  }
  constexpr int kBatch = 2000;
  for (auto& e : *entries) {
    auto* out = batch.add_entries();
    out->set_name(e.name);
    fill_attr(e.attrs, out->mutable_attr(), e.nlink);
    if (batch.entries_size() == kBatch) {
      if (!writer->Write(batch)) return grpc::Status(StatusCode::CANCELLED, "client went away");
      batch.Clear();
    }
  }
  if (batch.entries_size() > 0 || entries->empty()) writer->Write(batch);
  return grpc::Status::OK;
}

grpc::Status NamespaceService::mkdir(grpc::ServerContextBase* ctx, const v1::MkdirRequest* req,
                                     v1::AttrReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  // The caller counts among the mounts that cache the directory before it exists, so that a name
  // another mount makes in it at once is announced to the caller, which may take the directory
  // for empty from this reply on (the mount's known names).
  if (broker_) broker_->served(t->ns->name(), mount_of(ctx), t->path, std::nullopt, true);
  auto r = t->ns->mkdir(t->path, req->mode());
  if (r) {
    changed(broker_, ctx, *t, Change::mkdir, t->path);
    served(broker_, ctx, *t, t->path, r, true);
  }
  return attr_reply(r, reply);
}

grpc::Status NamespaceService::rmdir(grpc::ServerContextBase* ctx, const v1::PathRequest* req,
                                     v1::ErrorReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  auto st = t->ns->rmdir(t->path);
  if (st) changed(broker_, ctx, *t, Change::rmdir, t->path);
  return error_reply(st, reply);
}

grpc::Status NamespaceService::unlink(grpc::ServerContextBase* ctx, const v1::PathRequest* req,
                                      v1::ErrorReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  auto r = t->ns->unlink_reporting_parent(t->path);
  if (!r) {
    reply->set_error(r.error());
    return grpc::Status::OK;
  }
  changed(broker_, ctx, *t, Change::unlink, t->path);
  if (*r) {
    served(broker_, ctx, *t, parent_path(t->path), **r, false);
    fill_attr(**r, reply->mutable_parent_attr());
  }
  return grpc::Status::OK;
}

grpc::Status NamespaceService::rename(grpc::ServerContextBase* ctx, const v1::RenameRequest* req,
                                      v1::ErrorReply* reply) {
  grpc::Status s;
  auto from = resolve(registry_, ctx, req->ns(), req->from(), s);
  if (!from) return s;
  auto to = resolve(registry_, ctx, req->ns(), req->to(), s);
  if (!to) return s;
  // The caller's kernel keeps what it cached under the new names: the caller counts among those
  // that cache them before the rename, so that a change made there at once reaches it.
  if (broker_) broker_->renaming(from->ns->name(), mount_of(ctx), from->path, to->path);
  auto r = from->ns->rename(from->path, to->path, req->flags());
  if (!r) {
    reply->set_error(r.error());
    return grpc::Status::OK;
  }
  changed(broker_, ctx, *from, rename_change(req->flags()), from->path, to->path);
  // Both directories as the rename left them, when the layout said.
  if (r->from_dir) {
    served(broker_, ctx, *from, parent_path(from->path), *r->from_dir, false);
    fill_attr(*r->from_dir, reply->mutable_parent_attr());
  }
  if (r->to_dir) {
    served(broker_, ctx, *to, parent_path(to->path), *r->to_dir, false);
    fill_attr(*r->to_dir, reply->mutable_new_parent_attr());
  }
  return grpc::Status::OK;
}

grpc::Status NamespaceService::symlink(grpc::ServerContextBase* ctx, const v1::SymlinkRequest* req,
                                       v1::AttrReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  if (req->target().empty() || req->target().find('\0') != std::string::npos ||
      req->target().size() > kMaxPathBytes)
    return grpc::Status(StatusCode::INVALID_ARGUMENT,
                        "symlink target must be non-empty text of at most " +
                            std::to_string(kMaxPathBytes) + " bytes");
  auto r = t->ns->symlink(t->path, req->target());
  if (r) {
    changed(broker_, ctx, *t, Change::symlink, t->path);
    served(broker_, ctx, *t, t->path, r, true);
  }
  return attr_reply(r, reply);
}

grpc::Status NamespaceService::readlink(grpc::ServerContextBase* ctx, const v1::PathRequest* req,
                                        v1::ReadlinkReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  auto r = t->ns->readlink(t->path);
  if (r)
    reply->set_target(*r);
  else
    reply->set_error(r.error());
  return grpc::Status::OK;
}

grpc::Status NamespaceService::link(grpc::ServerContextBase* ctx, const v1::LinkRequest* req,
                                    v1::AttrReply* reply) {
  grpc::Status s;
  auto from = resolve(registry_, ctx, req->ns(), req->existing(), s);
  if (!from) return s;
  auto to = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!to) return s;
  auto r = from->ns->link(from->path, to->path);
  if (r) changed(broker_, ctx, *to, Change::link, from->path, to->path);
  if (r) {
    fill_attr(*r, reply->mutable_attr(), 2);
  } else {
    reply->set_error(r.error());
  }
  return grpc::Status::OK;
}

grpc::Status NamespaceService::statfs(grpc::ServerContextBase* ctx, const v1::PathRequest* req,
                                      v1::StatFsReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  auto r = t->ns->statfs(t->path);
  if (!r) {
    reply->set_error(r.error());
    return grpc::Status::OK;
  }
  reply->set_block_size(r->bsize);
  reply->set_fragment_size(r->frsize);
  reply->set_blocks(r->blocks);
  reply->set_blocks_free(r->bfree);
  reply->set_blocks_available(r->bavail);
  reply->set_files(r->files);
  reply->set_files_free(r->ffree);
  reply->set_files_available(r->favail);
  reply->set_name_max(r->namemax ? r->namemax : 255);
  return grpc::Status::OK;
}

// --- Data --------------------------------------------------------------------------------------

grpc::Status DataService::open(grpc::ServerContextBase* ctx, const v1::OpenRequest* req,
                               v1::OpenReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  const std::optional<Credentials> as_user = credentials_of(*req);
  const auto reading = will_serve(broker_, ctx, *t, false);
  auto r = t->ns->open(t->path, static_cast<int>(req->flags()), mount_id_of(ctx),
                       req->attrs_of_file(), as_user ? &*as_user : nullptr);
  unless_served(broker_, reading, r);
  if (!r) {
    reply->set_error(r.error());
    return grpc::Status::OK;
  }
  if (req->flags() & O_TRUNC) changed(broker_, ctx, *t, Change::truncate_on_open, t->path);
  served(broker_, ctx, *t, t->path, r->attrs, false);
  reply->set_handle(r->handle);
  fill_attr(r->attrs, reply->mutable_attr());
  reply->set_attr_of_file(req->attrs_of_file() || as_user);
  reply->set_judged(as_user.has_value());
  return grpc::Status::OK;
}

grpc::Status DataService::create(grpc::ServerContextBase* ctx, const v1::OpenRequest* req,
                                 v1::OpenReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  const std::optional<Credentials> as_user = credentials_of(*req);
  const auto reading = will_serve(broker_, ctx, *t, true);
  auto r = t->ns->create(t->path, static_cast<int>(req->flags()), req->mode(), mount_id_of(ctx),
                         as_user ? &*as_user : nullptr);
  unless_served(broker_, reading, r);
  if (!r) {
    reply->set_error(r.error());
    return grpc::Status::OK;
  }
  created(broker_, ctx, *t, *r);
  reply->set_handle(r->handle);
  fill_attr(r->attrs, reply->mutable_attr());
  if (r->parent_attrs) fill_attr(*r->parent_attrs, reply->mutable_parent_attr());
  reply->set_judged(as_user.has_value());
  return grpc::Status::OK;
}

namespace {
// The open file a FileRef names, re-opened by path when the gateway no longer has it.
// `ns`, when given, is set to the file's namespace. `one_read`, when given for a file opened for
// reading (ReadRequest.whole_file), lets an unknown handle be opened for this use alone: it is
// then set to the file, which the caller closes.
// A FileRef with `create` (the first call after a mount's asynchronous create) makes the file
// when the handle is unknown here, and reports the create as Create does, before the call's own
// change: the other mounts hear of the new name before the creator's call returns.
std::shared_ptr<OpenFile> open_file(const NamespaceRegistry& reg, InvalidationBroker* broker,
                                    grpc::ServerContextBase* ctx, const v1::FileRef& ref,
                                    grpc::Status& s, int& err,
                                    std::shared_ptr<NamespaceFs>* ns = nullptr,
                                    std::shared_ptr<OpenFile>* one_read = nullptr,
                                    std::optional<NamespaceFs::Opened>* made_here = nullptr) {
  auto t = resolve(reg, ctx, ref.ns(), ref.path(), s);
  if (!t) return nullptr;
  if (ref.create() && !made_here) {  // only a Write creates (fs.proto, FileRef.create)
    s = grpc::Status(StatusCode::INVALID_ARGUMENT, "FileRef.create is only for Write");
    return nullptr;
  }
  if (ref.create() && ref.has_as_user()) {
    // The create of a user the mount does not trust is never deferred: it is judged at Create.
    s = grpc::Status(StatusCode::INVALID_ARGUMENT, "FileRef.create is not for a judged user");
    return nullptr;
  }
  if (ns) *ns = t->ns;
  bool just_opened = false;
  std::optional<NamespaceFs::Opened> made;
  const NamespaceFs::CreateAtFirstUse create{ref.create_mode() & 07777, &made};
  const std::optional<Credentials> as_user = credentials_of(ref);
  auto f = one_read && (ref.flags() & O_ACCMODE) == O_RDONLY && !as_user
               ? t->ns->file_for_one_read(ref.handle(), t->path, just_opened)
               : t->ns->file(ref.handle(), t->path, static_cast<int>(ref.flags()),
                             ref.create() ? &create : nullptr, mount_id_of(ctx),
                             as_user ? &*as_user : nullptr);
  if (!f) {
    err = f.error();
    return nullptr;
  }
  if (made) {
    created(broker, ctx, *t, *made);
    *made_here = std::move(made);
  }
  if (just_opened) *one_read = *f;
  return *f;
}
}  // namespace

grpc::ServerUnaryReactor* DataService::Read(grpc::CallbackServerContext* ctx,
                                            const grpc::ByteBuffer* request,
                                            grpc::ByteBuffer* response) {
  auto* reactor = ctx->DefaultReactor();
  v1::ReadRequest req;
  grpc::ByteBuffer copy(*request);  // shares the slices
  if (!grpc::SerializationTraits<v1::ReadRequest>::Deserialize(&copy, &req).ok()) {
    reactor->Finish(grpc::Status(StatusCode::INVALID_ARGUMENT, "malformed ReadRequest"));
    return reactor;
  }
  const bool small = req.size() <= kInlineIoBytes;
  placement_.run_call(ctx, reactor, small, [this, ctx, reactor, response, req = std::move(req)] {
    v1::ReadReply head;
    SharedBytes data;
    std::shared_ptr<OpenFile> one_read;
    grpc::Status s = read(ctx, req, head, data, one_read);
    if (s.ok())
      *response =
          wire::serialize_with_bytes(head, v1::ReadReply::kDataFieldNumber, std::move(data));
    reactor->Finish(s);
    // A file opened for this read alone: closed once the reply is on its way.
    if (one_read) (void)one_read->close();
  });
  return reactor;
}

grpc::Status DataService::read(grpc::ServerContextBase* ctx, const v1::ReadRequest& req,
                               v1::ReadReply& reply, SharedBytes& data,
                               std::shared_ptr<OpenFile>& one_read) {
  if (req.size() > wire::kMaxIoSize)
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "read size over 1 MiB");
  grpc::Status s;
  int err = 0;
  std::shared_ptr<NamespaceFs> ns;
  auto f = open_file(registry_, broker_, ctx, req.file(), s, err, &ns,
                     req.whole_file() ? &one_read : nullptr);
  if (!f) {
    if (!s.ok()) return s;
    reply.set_error(err);
    return grpc::Status::OK;
  }
  auto r = f->read(req.offset(), req.size());
  if (r) {
    data = r.take();
    ns->count_read(data.size());
  } else
    reply.set_error(r.error());
  return grpc::Status::OK;
}

namespace {

// Whether a write that failed with `error` may have changed the file all the same: every failure
// but a refusal before anything was sent (the quota, the file size limit).
bool may_have_landed(int error) { return error != EDQUOT && error != EFBIG; }

// The bytes a WriteRequest carries: its data and its extents'.
uint64_t write_bytes(const v1::WriteRequest& req, const SharedBytes& data) {
  uint64_t total = data.size();
  for (const auto& e : req.more()) total += e.data().size();
  return total;
}

}  // namespace

grpc::ServerUnaryReactor* DataService::Write(grpc::CallbackServerContext* ctx,
                                             const grpc::ByteBuffer* request,
                                             grpc::ByteBuffer* response) {
  auto* reactor = ctx->DefaultReactor();
  v1::WriteRequest req;
  SharedBytes data;  // views of the request's own slices, which it keeps alive
  if (!wire::parse_with_bytes(*request, v1::WriteRequest::kDataFieldNumber, req, data)) {
    reactor->Finish(grpc::Status(StatusCode::INVALID_ARGUMENT, "malformed WriteRequest"));
    return reactor;
  }
  // A small write may run inline, and so may a few small ones the mount gathered (random writes),
  // which go to the server together (OpenFile::write_extents): a round trip or two. More would
  // hold a gRPC thread too long.
  const bool small = write_bytes(req, data) <= kInlineIoBytes && req.more_size() < kInlineExtents;
  placement_.run_call(ctx, reactor, small,
                      [this, ctx, reactor, response, req = std::move(req), data = std::move(data)] {
                        v1::WriteReply reply;
                        grpc::Status s = write(ctx, req, data, reply);
                        if (s.ok()) {
                          bool own;
                          s = grpc::SerializationTraits<v1::WriteReply>::Serialize(reply, response,
                                                                                   &own);
                        }
                        reactor->Finish(s);
                      });
  return reactor;
}

grpc::Status DataService::write(grpc::ServerContextBase* ctx, const v1::WriteRequest& req,
                                const SharedBytes& data, v1::WriteReply& reply) {
  const uint64_t total = write_bytes(req, data);
  if (total > wire::kMaxIoSize)
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "write over 1 MiB");
  if (req.more_size() >= wire::kMaxWriteExtents)
    return grpc::Status(
        StatusCode::INVALID_ARGUMENT,
        "write of more than " + std::to_string(wire::kMaxWriteExtents) + " extents");
  grpc::Status s;
  int err = 0;
  std::shared_ptr<NamespaceFs> ns;
  std::optional<NamespaceFs::Opened> made;
  auto f = open_file(registry_, broker_, ctx, req.file(), s, err, &ns, nullptr, &made);
  if (!f) {
    if (!s.ok()) return s;
    reply.set_error(err);
    return grpc::Status::OK;
  }
  if (made && made->parent_attrs) fill_attr(*made->parent_attrs, reply.mutable_parent_attr());
  Result<uint32_t> r = Result<uint32_t>::failure(EIO);
  std::optional<sftp::Attrs> after;  // the file's attributes right after the write, if known
  if (req.more_size() == 0 && !data.empty() &&
      ((made && req.offset() == 0) || req.report_attrs())) {
    // Its attributes come with the write, in the same round trip: an asynchronous create's first
    // write (the file's whole content, as a rule), or a write the mount asked them of (the last
    // before a close, as a rule).
    auto w = f->write_reporting_attrs(req.offset(), data);
    r = w ? Result<uint32_t>(w->bytes) : Result<uint32_t>::failure(w.error());
    if (w && w->attrs) {
      after = w->attrs;
      fill_attr(*after, reply.mutable_file_attr());
    }
  } else if (req.more_size() == 0) {
    r = f->write(req.offset(), data);
  } else {
    // Random writes the mount gathered: the extents in order, sent together where the file can
    // (OpenFile::write_extents). Their bytes live in the request, which outlives the writes.
    std::vector<OpenFile::Extent> extents;
    extents.reserve(static_cast<std::size_t>(req.more_size()) + 1);
    extents.push_back({req.offset(), data});
    for (const auto& e : req.more())
      extents.push_back({e.offset(), SharedBytes({std::string_view(e.data())}, nullptr)});
    r = f->write_extents(extents);
  }
  const uint64_t written = r ? *r : 0;
  if (r && written != total) r = Result<uint32_t>::failure(EIO);  // a short write
  // Where the writer's mount saw the file, and where it is now (renamed through another mount
  // since, the other mounts cache it there).
  const std::string seen_at = *normalize_virtual_path(req.file().path());  // checked by open_file
  const std::string path = ns->path_of(req.file().handle()).value_or(seen_at);
  if (r) {
    reply.set_written(static_cast<uint32_t>(written));
    ns->count_written(written);
    // Every other mount that caches this file hears of it before the writer does.
    if (broker_) {
      report_change(broker_, *ns, mount_of(ctx), Change::write, path);
      // The writer now holds the file as the write left it (its attributes went back with the
      // reply): revalidation compares the server's file with that.
      if (after)
        broker_->served(req.file().ns(), mount_of(ctx), seen_at, SeenAttrs::of(*after), true);
    }
  } else {
    // A failed write may have landed in part (a striped file's other servers, a chunk of a
    // pipelined write): the others that cache the file hear of it all the same. Refused before
    // anything was sent (the quota, the file size limit), it changed nothing.
    if (broker_ && may_have_landed(r.error()))
      report_change(broker_, *ns, mount_of(ctx), Change::write, path);
    reply.set_error(r.error());
  }
  return grpc::Status::OK;
}

grpc::Status DataService::flush(grpc::ServerContextBase* ctx, const v1::FileRef* req,
                                v1::ErrorReply* reply) {
  // Writes are acknowledged only once the server has them, so there is nothing left to push;
  // still check the request, so a bad token or namespace is reported here too.
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  (void)reply;
  return grpc::Status::OK;
}

grpc::Status DataService::fsync(grpc::ServerContextBase* ctx, const v1::FsyncRequest* req,
                                v1::ErrorReply* reply) {
  grpc::Status s;
  int err = 0;
  auto f = open_file(registry_, broker_, ctx, req->file(), s, err);
  if (!f) {
    if (!s.ok()) return s;
    reply->set_error(err);
    return grpc::Status::OK;
  }
  return error_reply(f->fsync(), reply);
}

grpc::Status DataService::release(grpc::ServerContextBase* ctx, const v1::FileRef* req,
                                  v1::ErrorReply* reply) {
  grpc::Status s;
  auto t = resolve(registry_, ctx, req->ns(), req->path(), s);
  if (!t) return s;
  return error_reply(t->ns->release(req->handle()), reply);
}

grpc::Status DataService::read_files(grpc::ServerContextBase* ctx, const v1::ReadFilesRequest* req,
                                     v1::ReadFilesReply* reply) {
  const int count = req->paths_size();
  if (count > wire::kMaxReadFiles)
    return grpc::Status(StatusCode::INVALID_ARGUMENT,
                        "ReadFiles: more than " + std::to_string(wire::kMaxReadFiles) + " paths");
  if (static_cast<uint64_t>(count) * req->max_bytes() > wire::kMaxIoSize)
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "ReadFiles: paths x max_bytes over 1 MiB (" +
                                                          std::to_string(count) + " x " +
                                                          std::to_string(req->max_bytes()) + ")");
  grpc::Status s;
  auto ns = registry_.authorize(ctx, req->ns(), s);
  if (!ns) return s;
  std::vector<std::string> paths;
  paths.reserve(static_cast<size_t>(count));
  for (const std::string& p : req->paths()) {
    auto norm = checked_path(p, s);
    if (!norm) return s;
    paths.push_back(std::move(*norm));
  }
  // Slices of the files at once, so that their SFTP requests are in flight together (on the
  // backends' connections) rather than one round trip after another.
  std::vector<Result<WholeFile>> got(paths.size(), Result<WholeFile>::failure(EIO));
  run_in_slices(placement_, paths.size(), kReadFilesSlice, kReadFilesAtOnce,
                [&](size_t from, size_t to) {
                  auto read = ns->read_whole_files({paths.begin() + from, paths.begin() + to},
                                                   req->max_bytes(), req->attrs_of_files());
                  for (size_t i = from; i < to && i - from < read.size(); ++i)
                    got[i] = std::move(read[i - from]);
                });
  uint64_t bytes = 0;
  for (auto& g : got) {
    v1::FileContent* f = reply->add_files();
    if (!g) {
      f->set_error(g.error());
      continue;
    }
    fill_attr(g->attrs, f->mutable_attr());
    f->set_attr_of_file(req->attrs_of_files());
    std::string* data = f->mutable_data();
    data->reserve(g->data.size());
    for (std::string_view piece : g->data.pieces()) data->append(piece);
    bytes += g->data.size();
  }
  ns->count_read(bytes);
  return grpc::Status::OK;
}

grpc::Status DataService::write_files(grpc::ServerContextBase* ctx,
                                      const v1::WriteFilesRequest* req,
                                      v1::WriteFilesReply* reply) {
  const int count = req->files_size();
  auto refuse = [](const std::string& why) {
    return grpc::Status(StatusCode::INVALID_ARGUMENT, "WriteFiles: " + why);
  };
  if (count > wire::kMaxWriteFiles)
    return refuse("more than " + std::to_string(wire::kMaxWriteFiles) + " files");
  uint64_t total = 0;
  for (const v1::NewFile& f : req->files()) total += f.data().size();
  if (total > wire::kMaxIoSize)
    return refuse("the files' data is over 1 MiB (" + std::to_string(total) + " bytes)");
  grpc::Status s;
  auto ns = registry_.authorize(ctx, req->ns(), s);
  if (!ns) return s;
  std::vector<NewWholeFile> files;
  files.reserve(static_cast<size_t>(count));
  for (const v1::NewFile& f : req->files()) {
    auto path = checked_path(f.path(), s);
    if (!path) return s;
    auto partial = checked_path(f.partial(), s);
    if (!partial) return s;
    if (*partial == *path || parent_path(*partial) != parent_path(*path))
      return refuse("partial '" + f.partial() + "' is not another name in the directory of '" +
                    f.path() + "'");
    if (f.mode() & ~07777u)
      return refuse("mode " + std::to_string(f.mode()) + " of '" + f.path() +
                    "' has more than permission bits");
    // The request outlives the call's work: its bytes are written from where they arrived.
    std::vector<std::string_view> pieces;
    if (!f.data().empty()) pieces.push_back(f.data());
    files.push_back({std::move(*path), std::move(*partial), SharedBytes(std::move(pieces), nullptr),
                     f.mode(), f.atime_ns() / 1000000000, f.mtime_ns() / 1000000000});
  }
  // Slices of the files at once: a backend sends a slice's requests together, on one connection.
  std::vector<Result<MadeWholeFile>> made(files.size(), Result<MadeWholeFile>::failure(EIO));
  run_in_slices(placement_, files.size(), kWriteFilesSlice, kWriteFilesAtOnce,
                [&](size_t from, size_t to) {
                  auto got = ns->write_whole_files({files.begin() + from, files.begin() + to});
                  for (size_t i = from; i < to && i - from < got.size(); ++i)
                    made[i] = std::move(got[i - from]);
                });
  uint64_t bytes = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    v1::FileWritten* out = reply->add_files();
    const Target t{ns, files[i].path};
    if (!made[i]) {
      // It may have replaced the name all the same (its RENAME answered, the look after it not:
      // the connection dropped between the two), so the others drop the name and the file, as
      // for a failed write. Refused before anything was sent (the quota, the size), it changed
      // nothing.
      if (may_have_landed(made[i].error())) changed(broker_, ctx, t, Change::create, t.path);
      out->set_error(made[i].error());
      continue;
    }
    // As a create that replaced what was there: the other mounts drop the name and the file, and
    // the caller counts among those that cache both.
    changed(broker_, ctx, t, Change::create, t.path);
    served(broker_, ctx, t, t.path, made[i]->attrs, true);
    fill_attr(made[i]->attrs, out->mutable_attr());
    if (made[i]->parent_attrs) {
      served(broker_, ctx, t, parent_path(t.path), *made[i]->parent_attrs, false);
      fill_attr(*made[i]->parent_attrs, out->mutable_parent_attr());
    }
    bytes += files[i].data.size();
  }
  ns->count_written(bytes);
  return grpc::Status::OK;
}

}  // namespace skein
