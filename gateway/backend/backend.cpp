// Backend and RemoteFile; see backend.hpp.
#include "backend/backend.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <random>

namespace skein {
using namespace sftp;
namespace {

constexpr auto kBackoffBase = std::chrono::milliseconds(100);
constexpr auto kBackoffMax = std::chrono::milliseconds(3000);

std::chrono::milliseconds backoff_delay(int failures) {
  thread_local std::mt19937 rng{std::random_device{}()};
  auto d = kBackoffBase * (1 << std::min(failures, 10));
  if (d > kBackoffMax) d = kBackoffMax;
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return std::chrono::milliseconds(int64_t(double(d.count()) * jitter(rng)));
}

Result<Attrs> expect_attrs(Result<Reply> r) {
  if (!r) return Result<Attrs>::failure(r.error());
  if (r->type == FXP_STATUS) {
    auto code = PacketReader(r->body).u32();
    int e = code ? status_to_errno(*code) : EIO;
    return Result<Attrs>::failure(e ? e : EIO);
  }
  if (r->type != FXP_ATTRS) return Result<Attrs>::failure(EIO);
  auto a = PacketReader(r->body).attrs();
  if (!a) return Result<Attrs>::failure(EIO);
  return *a;
}

Result<std::string> expect_handle(Result<Reply> r) {
  if (!r) return Result<std::string>::failure(r.error());
  if (r->type == FXP_STATUS) {
    auto code = PacketReader(r->body).u32();
    int e = code ? status_to_errno(*code) : EIO;
    return Result<std::string>::failure(e ? e : EIO);
  }
  if (r->type != FXP_HANDLE) return Result<std::string>::failure(EIO);
  auto h = PacketReader(r->body).str();
  if (!h) return Result<std::string>::failure(EIO);
  return std::string(*h);
}

// Raw status code of a STATUS reply, or nullopt.
std::optional<uint32_t> status_code(const Result<Reply>& r) {
  if (!r || r->type != FXP_STATUS) return std::nullopt;
  return PacketReader(r->body).u32();
}

}  // namespace

Backend::Backend(BackendConfig cfg) : cfg_(std::move(cfg)) {
  int n = std::max(1, cfg_.connections);
  for (int i = 0; i < n; ++i) slots_.push_back(std::make_unique<Slot>());
}

std::string Backend::remote_path(std::string_view rel) const {
  if (rel.empty() || rel == "/") return cfg_.root;
  std::string out = cfg_.root;
  if (!out.empty() && out.back() == '/') out.pop_back();
  out += rel;
  return out;
}

size_t Backend::pick_slot() {
  // Prefer a live connection with the fewest requests in flight; among equals, rotate.
  size_t start = round_robin_.fetch_add(1) % slots_.size();
  size_t best = start;
  size_t best_load = SIZE_MAX;
  for (size_t k = 0; k < slots_.size(); ++k) {
    size_t i = (start + k) % slots_.size();
    std::shared_ptr<Connection> c;
    {
      std::unique_lock lock(slots_[i]->mu, std::try_to_lock);
      if (!lock) continue;
      c = slots_[i]->conn;
    }
    size_t load = (c && c->alive()) ? c->in_flight() : SIZE_MAX - 1;
    if (load < best_load) {
      best = i;
      best_load = load;
      if (load == 0) break;
    }
  }
  return best;
}

Result<std::shared_ptr<Connection>> Backend::connection(size_t slot) {
  using R = Result<std::shared_ptr<Connection>>;
  Slot& s = *slots_[slot % slots_.size()];
  std::lock_guard lock(s.mu);
  if (s.conn && s.conn->alive()) return s.conn;
  auto now = std::chrono::steady_clock::now();
  if (s.conn) {
    spdlog::warn("backend {}: {}", cfg_.name, s.conn->failure());
    s.conn.reset();
  }
  if (now < s.next_attempt) return R::failure(EIO);
  std::string error;
  auto c = Connection::connect(cfg_.endpoint, error);
  if (!c) {
    s.next_attempt = now + backoff_delay(s.failures++);
    if (up_.exchange(false) || s.failures == 1)
      spdlog::warn("backend {} is down: {}", cfg_.name, error);
    return R::failure(EIO);
  }
  if (!up_.exchange(true)) spdlog::info("backend {} is back up", cfg_.name);
  s.failures = 0;
  s.conn = std::shared_ptr<Connection>(std::move(c));
  return s.conn;
}

Result<Reply> Backend::call(const std::string& framed, bool idempotent) {
  ++ops;
  for (int attempt = 0;; ++attempt) {
    auto conn = connection(pick_slot());
    if (!conn) return Result<Reply>::failure(conn.error());
    auto r = (*conn)->call(framed);
    if (r || (*conn)->alive() || !idempotent || attempt > 0) return r;
  }
}

Status Backend::expect_status(Result<Reply> r) {
  if (!r) return Status::failure(r.error());
  if (r->type != FXP_STATUS) return Status::failure(EIO);
  auto code = PacketReader(r->body).u32();
  if (!code) return Status::failure(EIO);
  int e = status_to_errno(*code);
  return e ? Status::failure(e) : ok_status();
}

int Backend::diagnose_failure(std::string_view op, std::string_view rel, std::string_view other) {
  // OpenSSH's sftp-server reports EEXIST, ENOTEMPTY, EISDIR, ENOSPC and others all as
  // SSH_FX_FAILURE; look at the tree to tell the caller which one it was.
  auto here = lstat(rel);
  if (op == "mkdir" || op == "symlink" || op == "link") {
    if (here) return EEXIST;
    if (op == "link" && !other.empty()) {
      auto src = lstat(other);
      if (src && S_ISDIR(src->permissions)) return EPERM;
    }
  } else if (op == "rmdir") {
    if (!here) return ENOENT;
    if (!S_ISDIR(here->permissions)) return ENOTDIR;
    auto entries = list_dir(rel);
    if (entries && !entries->empty()) return ENOTEMPTY;
  } else if (op == "unlink") {
    if (here && S_ISDIR(here->permissions)) return EISDIR;
  } else if (op == "open") {
    if (here && S_ISDIR(here->permissions)) return EISDIR;
  } else if (op == "rename") {
    // rel = source, other = target
    auto dst = lstat(other);
    if (here && dst) {
      bool sdir = S_ISDIR(here->permissions), ddir = S_ISDIR(dst->permissions);
      if (sdir && !ddir) return ENOTDIR;
      if (!sdir && ddir) return EISDIR;
      if (ddir) {
        auto entries = list_dir(other);
        if (entries && !entries->empty()) return ENOTEMPTY;
      }
    }
    if (here && S_ISDIR(here->permissions) && other.size() > rel.size() &&
        other.substr(0, rel.size()) == rel && other[rel.size()] == '/')
      return EINVAL;
  }
  if (op == "write" || op == "create" || op == "mkdir" || op == "open") {
    auto vfs = statvfs(op == "write" ? rel : std::string_view("/"));
    if (vfs && vfs->bavail == 0) return ENOSPC;
    if (vfs && vfs->favail == 0 && op != "write") return ENOSPC;
  }
  return EIO;
}

Result<Attrs> Backend::lstat(std::string_view rel) {
  return expect_attrs(call(PacketWriter(FXP_LSTAT).str(remote_path(rel)).take(), true));
}

Result<Attrs> Backend::stat(std::string_view rel) {
  return expect_attrs(call(PacketWriter(FXP_STAT).str(remote_path(rel)).take(), true));
}

Status Backend::setstat(std::string_view rel, const Attrs& attrs) {
  // Times on a symlink must not follow it; lsetstat does that where offered.
  bool use_l = !(attrs.flags & ATTR_SIZE) && !(attrs.flags & ATTR_PERMISSIONS) &&
               slot_count() > 0 && connection(0) &&
               (*connection(0))->has_extension("lsetstat@openssh.com");
  std::string pkt = use_l ? PacketWriter(FXP_EXTENDED)
                                .str("lsetstat@openssh.com")
                                .str(remote_path(rel))
                                .attrs(attrs)
                                .take()
                          : PacketWriter(FXP_SETSTAT).str(remote_path(rel)).attrs(attrs).take();
  auto r = call(pkt, true);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("setstat", rel));
  return expect_status(std::move(r));
}

Result<std::vector<NameEntry>> Backend::list_dir(std::string_view rel) {
  using R = Result<std::vector<NameEntry>>;
  for (int attempt = 0;; ++attempt) {
    auto conn = connection(pick_slot());
    if (!conn) return R::failure(conn.error());
    ++ops;
    auto h = expect_handle((*conn)->call(PacketWriter(FXP_OPENDIR).str(remote_path(rel)).take()));
    if (!h) {
      if (!(*conn)->alive() && attempt == 0) continue;
      if (h.error() == EIO) {
        auto a = lstat(rel);
        if (a && !S_ISDIR(a->permissions)) return R::failure(ENOTDIR);
      }
      return R::failure(h.error());
    }
    std::vector<NameEntry> out;
    // Keep a window of READDIR requests in flight; each returns a batch or EOF.
    constexpr int kWindow = 4;
    std::deque<std::future<Result<Reply>>> inflight;
    bool eof = false;
    int err = 0;
    auto request = [&] {
      inflight.push_back((*conn)->send(PacketWriter(FXP_READDIR).str(*h).take()));
    };
    for (int i = 0; i < kWindow; ++i) request();
    while (!inflight.empty()) {
      auto r = inflight.front().get();
      inflight.pop_front();
      if (!r) {
        err = r.error();
      } else if (r->type == FXP_STATUS) {
        auto code = PacketReader(r->body).u32();
        if (code && *code == FX_EOF)
          eof = true;
        else
          err = code ? (status_to_errno(*code) ? status_to_errno(*code) : EIO) : EIO;
      } else if (r->type == FXP_NAME) {
        PacketReader pr(r->body);
        auto count = pr.u32();
        for (uint32_t i = 0; count && i < *count; ++i) {
          auto name = pr.str();
          auto longname = pr.str();
          auto attrs = pr.attrs();
          if (!name || !longname || !attrs) {
            err = EIO;
            break;
          }
          if (*name == "." || *name == "..") continue;
          out.push_back({std::string(*name), std::string(*longname), *attrs});
        }
      } else {
        err = EIO;
      }
      if (!eof && !err) request();
    }
    (*conn)->send(PacketWriter(FXP_CLOSE).str(*h).take());
    if (err) {
      if (!(*conn)->alive() && attempt == 0) continue;
      return R::failure(err);
    }
    return out;
  }
}

Status Backend::mkdir(std::string_view rel, uint32_t mode) {
  Attrs a;
  a.flags = ATTR_PERMISSIONS;
  a.permissions = mode & 07777;
  auto r = call(PacketWriter(FXP_MKDIR).str(remote_path(rel)).attrs(a).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("mkdir", rel));
  auto st = expect_status(std::move(r));
  // The server's umask may have taken bits the caller asked for (the client applied its own).
  if (st && (mode & 07022)) (void)setstat(rel, a);
  return st;
}

Status Backend::rmdir(std::string_view rel) {
  auto r = call(PacketWriter(FXP_RMDIR).str(remote_path(rel)).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("rmdir", rel));
  if (code && *code == FX_NO_SUCH_FILE) {
    // ENOTDIR also arrives as "no such file".
    auto a = lstat(rel);
    if (a && !S_ISDIR(a->permissions)) return Status::failure(ENOTDIR);
  }
  return expect_status(std::move(r));
}

Status Backend::unlink(std::string_view rel) {
  auto r = call(PacketWriter(FXP_REMOVE).str(remote_path(rel)).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("unlink", rel));
  return expect_status(std::move(r));
}

Status Backend::rename(std::string_view from, std::string_view to, unsigned flags) {
  auto conn = connection(pick_slot());
  if (!conn) return Status::failure(conn.error());
  bool posix = (*conn)->has_extension("posix-rename@openssh.com");
  if (flags & 1) {  // RENAME_NOREPLACE: plain SFTP rename refuses to replace
    posix = false;
  } else if (!posix) {
    return Status::failure(ENOTSUP);  // cannot replace atomically without the extension
  }
  ++ops;
  std::string pkt =
      posix ? PacketWriter(FXP_EXTENDED)
                  .str("posix-rename@openssh.com")
                  .str(remote_path(from))
                  .str(remote_path(to))
                  .take()
            : PacketWriter(FXP_RENAME).str(remote_path(from)).str(remote_path(to)).take();
  auto r = (*conn)->call(pkt);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) {
    if (!posix && lstat(to)) return Status::failure(EEXIST);
    return Status::failure(diagnose_failure("rename", from, to));
  }
  return expect_status(std::move(r));
}

Status Backend::symlink(std::string_view target, std::string_view rel) {
  // OpenSSH takes the target first and the new link second (the reverse of the draft).
  auto r = call(PacketWriter(FXP_SYMLINK).str(target).str(remote_path(rel)).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("symlink", rel));
  return expect_status(std::move(r));
}

Result<std::string> Backend::readlink(std::string_view rel) {
  using R = Result<std::string>;
  auto r = call(PacketWriter(FXP_READLINK).str(remote_path(rel)).take(), true);
  if (!r) return R::failure(r.error());
  if (r->type == FXP_STATUS) {
    auto code = PacketReader(r->body).u32();
    if (code && *code == FX_FAILURE) return R::failure(EINVAL);  // not a symlink
    int e = code ? status_to_errno(*code) : EIO;
    return R::failure(e ? e : EIO);
  }
  PacketReader pr(r->body);
  auto count = pr.u32();
  auto name = pr.str();
  if (r->type != FXP_NAME || !count || *count < 1 || !name) return R::failure(EIO);
  return std::string(*name);
}

Status Backend::link(std::string_view existing, std::string_view rel) {
  auto conn = connection(pick_slot());
  if (!conn) return Status::failure(conn.error());
  if (!(*conn)->has_extension("hardlink@openssh.com")) return Status::failure(ENOTSUP);
  ++ops;
  auto r = (*conn)->call(PacketWriter(FXP_EXTENDED)
                             .str("hardlink@openssh.com")
                             .str(remote_path(existing))
                             .str(remote_path(rel))
                             .take());
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("link", rel, existing));
  return expect_status(std::move(r));
}

Result<StatVfs> Backend::statvfs(std::string_view rel) {
  using R = Result<StatVfs>;
  auto conn = connection(pick_slot());
  if (!conn) return R::failure(conn.error());
  if (!(*conn)->has_extension("statvfs@openssh.com")) return R::failure(ENOTSUP);
  ++ops;
  auto r = (*conn)->call(
      PacketWriter(FXP_EXTENDED).str("statvfs@openssh.com").str(remote_path(rel)).take());
  if (!r) return R::failure(r.error());
  if (r->type == FXP_STATUS) {
    auto code = PacketReader(r->body).u32();
    int e = code ? status_to_errno(*code) : EIO;
    return R::failure(e ? e : EIO);
  }
  PacketReader pr(r->body);
  StatVfs v;
  uint64_t* fields[] = {&v.bsize, &v.frsize, &v.blocks, &v.bfree, &v.bavail, &v.files,
                        &v.ffree, &v.favail, &v.fsid,   &v.flag,  &v.namemax};
  for (auto* f : fields) {
    auto x = pr.u64();
    if (!x) return R::failure(EIO);
    *f = *x;
  }
  return v;
}

Result<std::shared_ptr<RemoteFile>> Backend::open(std::string_view rel, int flags, uint32_t mode) {
  auto f = std::make_shared<RemoteFile>(shared_from_this(), std::string(rel), flags);
  auto st = f->open_first(mode);
  if (!st) return Result<std::shared_ptr<RemoteFile>>::failure(st.error());
  return f;
}

// ---------------------------------------------------------------------------------------------
// RemoteFile

RemoteFile::RemoteFile(std::shared_ptr<Backend> backend, std::string rel, int flags)
    : backend_(std::move(backend)), rel_(std::move(rel)), flags_(flags) {
  handles_.resize(backend_->slot_count());
}

RemoteFile::~RemoteFile() { (void)close(); }

void RemoteFile::renamed(std::string new_rel) {
  std::lock_guard lock(mu_);
  rel_ = std::move(new_rel);
}

Status RemoteFile::open_first(uint32_t mode) {
  size_t slot = backend_->pick_slot();
  auto conn = backend_->connection(slot);
  if (!conn) return Status::failure(conn.error());
  Attrs a;
  if (flags_ & O_CREAT) {
    a.flags = ATTR_PERMISSIONS;
    a.permissions = mode & 07777;
  }
  std::string path;
  {
    std::lock_guard lock(mu_);
    path = backend_->remote_path(rel_);
  }
  ++backend_->ops;
  auto r = (*conn)->call(
      PacketWriter(FXP_OPEN).str(path).u32(open_flags_to_pflags(flags_)).attrs(a).take());
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) {
    if ((flags_ & O_CREAT) && (flags_ & O_EXCL) && backend_->lstat(rel_))
      return Status::failure(EEXIST);
    return Status::failure(backend_->diagnose_failure("open", rel_));
  }
  auto h = expect_handle(std::move(r));
  if (!h) return Status::failure(h.error());
  {
    std::lock_guard lock(mu_);
    handles_[slot] = {*conn, *h};
  }
  // A new file gets the caller's mode even where the server's umask would take bits away.
  if ((flags_ & O_CREAT) && (mode & 07022)) {
    (void)(*conn)->call(PacketWriter(FXP_FSETSTAT).str(*h).attrs(a).take());
  }
  return ok_status();
}

Result<RemoteFile::Handle> RemoteFile::handle_on(size_t slot) {
  using R = Result<Handle>;
  auto conn = backend_->connection(slot);
  if (!conn) return R::failure(conn.error());
  std::string path;
  {
    std::lock_guard lock(mu_);
    Handle& h = handles_[slot];
    if (!h.handle.empty() && h.conn == *conn) return h;
    path = backend_->remote_path(rel_);
  }
  // Re-open by path: the caller's access mode, never creating or truncating again.
  int again = flags_ & ~(O_CREAT | O_EXCL | O_TRUNC);
  ++backend_->ops;
  auto r = (*conn)->call(
      PacketWriter(FXP_OPEN).str(path).u32(open_flags_to_pflags(again)).attrs({}).take());
  auto h = expect_handle(std::move(r));
  if (!h) return R::failure(h.error());
  std::lock_guard lock(mu_);
  Handle& slot_handle = handles_[slot];
  if (!slot_handle.handle.empty() && slot_handle.conn == *conn) {
    // Another thread opened one meanwhile; keep theirs, close ours.
    (*conn)->send(PacketWriter(FXP_CLOSE).str(*h).take());
    return slot_handle;
  }
  slot_handle = {*conn, *h};
  return slot_handle;
}

Result<RemoteFile::Handle> RemoteFile::any_handle() {
  {
    std::lock_guard lock(mu_);
    for (auto& h : handles_)
      if (!h.handle.empty() && h.conn && h.conn->alive()) return h;
  }
  return handle_on(backend_->pick_slot());
}

Result<std::string> RemoteFile::read(uint64_t offset, uint32_t size) {
  using R = Result<std::string>;
  if (size == 0) return std::string();
  auto first = any_handle();
  if (!first) return R::failure(first.error());
  const uint64_t chunk =
      std::max<uint64_t>(4096, std::min<uint64_t>(first->conn->limits().max_read, 1 << 20));
  size_t nchunks = size_t((size + chunk - 1) / chunk);

  struct Piece {
    uint64_t off;
    uint32_t len;
    std::future<Result<Reply>> reply;
    Handle handle;
  };
  std::vector<Piece> pieces;
  pieces.reserve(nchunks);
  size_t start_slot = backend_->pick_slot();
  for (size_t i = 0; i < nchunks; ++i) {
    uint64_t off = offset + i * chunk;
    uint32_t len = uint32_t(std::min<uint64_t>(chunk, offset + size - off));
    auto h = nchunks == 1 ? first : handle_on((start_slot + i) % backend_->slot_count());
    if (!h) h = first;  // a slot that cannot connect: use the one we have
    auto fut = h->conn->send(PacketWriter(FXP_READ).str(h->handle).u64(off).u32(len).take());
    pieces.push_back({off, len, std::move(fut), *h});
  }
  ++backend_->ops;

  std::string out;
  out.reserve(size);
  bool at_eof = false;
  int err = 0;
  for (auto& p : pieces) {
    auto r = p.reply.get();
    if (at_eof || err) continue;  // drain the rest
    uint64_t got = 0;
    // Continue short replies until this piece is whole or the file ends.
    for (;;) {
      if (!r) {
        err = r.error();
        break;
      }
      if (r->type == FXP_STATUS) {
        auto code = PacketReader(r->body).u32();
        if (code && *code == FX_EOF) {
          at_eof = true;
        } else {
          int e = code ? status_to_errno(*code) : EIO;
          err = e ? e : EIO;
        }
        break;
      }
      auto data = PacketReader(r->body).str();
      if (r->type != FXP_DATA || !data || data->size() > p.len - got) {
        err = EIO;
        break;
      }
      out.append(*data);
      got += data->size();
      if (got == p.len || data->empty()) break;
      r = p.handle.conn->call(PacketWriter(FXP_READ)
                                  .str(p.handle.handle)
                                  .u64(p.off + got)
                                  .u32(uint32_t(p.len - got))
                                  .take());
    }
  }
  if (err && out.empty()) {
    if (err == EIO && !first->conn->alive())
      spdlog::warn("backend {}: read of {} failed: {}", backend_->name(), rel_,
                   first->conn->failure());
    return R::failure(err);
  }
  if (err) return R::failure(err);
  backend_->bytes_read += out.size();
  return out;
}

Result<uint32_t> RemoteFile::write(uint64_t offset, std::string_view data) {
  using R = Result<uint32_t>;
  if (data.empty()) return uint32_t(0);
  auto first = any_handle();
  if (!first) return R::failure(first.error());
  const uint64_t chunk =
      std::max<uint64_t>(4096, std::min<uint64_t>(first->conn->limits().max_write, 1 << 20));
  size_t nchunks = size_t((data.size() + chunk - 1) / chunk);
  // Appends land wherever the end of file is when they arrive: keep them on one connection, in
  // order. Other writes spread over the pool.
  bool spread = !(flags_ & O_APPEND) && nchunks > 1;
  std::vector<std::future<Result<Reply>>> replies;
  size_t start_slot = backend_->pick_slot();
  for (size_t i = 0; i < nchunks; ++i) {
    uint64_t off = i * chunk;
    auto len = std::min<uint64_t>(chunk, data.size() - off);
    auto h = spread ? handle_on((start_slot + i) % backend_->slot_count()) : first;
    if (!h) h = first;
    replies.push_back(h->conn->send(PacketWriter(FXP_WRITE)
                                        .str(h->handle)
                                        .u64(offset + off)
                                        .str(data.substr(off, len))
                                        .take()));
  }
  ++backend_->ops;
  int err = 0;
  bool failure = false;
  for (auto& f : replies) {
    auto r = f.get();
    if (err) continue;
    if (!r) {
      err = r.error();
      continue;
    }
    auto code = r->type == FXP_STATUS ? PacketReader(r->body).u32() : std::nullopt;
    if (!code) {
      err = EIO;
    } else if (*code == FX_FAILURE) {
      failure = true;
      err = EIO;
    } else if (*code != FX_OK) {
      err = status_to_errno(*code);
    }
  }
  if (failure) err = backend_->diagnose_failure("write", rel_);
  if (err) return R::failure(err);
  backend_->bytes_written += data.size();
  return uint32_t(data.size());
}

Status RemoteFile::fsync() {
  auto h = any_handle();
  if (!h) return Status::failure(h.error());
  if (!h->conn->has_extension("fsync@openssh.com")) return Status::failure(ENOTSUP);
  ++backend_->ops;
  return backend_->expect_status(
      h->conn->call(PacketWriter(FXP_EXTENDED).str("fsync@openssh.com").str(h->handle).take()));
}

Status RemoteFile::truncate(uint64_t size) {
  auto h = any_handle();
  if (!h) return Status::failure(h.error());
  Attrs a;
  a.flags = ATTR_SIZE;
  a.size = size;
  ++backend_->ops;
  auto r = h->conn->call(PacketWriter(FXP_FSETSTAT).str(h->handle).attrs(a).take());
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(backend_->diagnose_failure("write", rel_));
  return backend_->expect_status(std::move(r));
}

Result<Attrs> RemoteFile::fstat() {
  auto h = any_handle();
  if (!h) return Result<Attrs>::failure(h.error());
  ++backend_->ops;
  return expect_attrs(h->conn->call(PacketWriter(FXP_FSTAT).str(h->handle).take()));
}

Status RemoteFile::close() {
  std::vector<Handle> open;
  {
    std::lock_guard lock(mu_);
    for (auto& h : handles_) {
      if (!h.handle.empty()) open.push_back(std::move(h));
      h = {};
    }
  }
  std::vector<std::future<Result<Reply>>> replies;
  for (auto& h : open)
    if (h.conn->alive())
      replies.push_back(h.conn->send(PacketWriter(FXP_CLOSE).str(h.handle).take()));
  Status result;
  for (auto& f : replies) {
    auto st = backend_->expect_status(f.get());
    if (!st && result) result = st;
  }
  return result;
}

}  // namespace skein
