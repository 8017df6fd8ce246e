// RemoteFile; see remote_file.hpp.
#include "backend/remote_file.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <future>

#include "backend/failure_diagnosis.hpp"
#include "backend/read_collapser.hpp"
#include "backend/reply_parsing.hpp"
#include "skein/path.hpp"

namespace skein {
using namespace sftp;

RemoteFile::RemoteFile(std::shared_ptr<SftpBackend> backend, std::string rel, int flags)
    : backend_(std::move(backend)), rel_(std::move(rel)), flags_(flags) {
  handles_.resize(backend_->pool().slot_count());
}

RemoteFile::~RemoteFile() {
  (void)close();
  if (!counted_.empty()) backend_->epochs().closed(counted_);
}

RemoteFile::InUse::InUse(RemoteFile& f) : f_(f) {
  std::lock_guard lock(f_.mu_);
  ++f_.users_;
}

RemoteFile::InUse::~InUse() {
  std::vector<Handle> closing;
  {
    std::lock_guard lock(f_.mu_);
    if (--f_.users_ == 0) closing.swap(f_.closing_);
  }
  for (auto& h : closing)
    if (h.conn->alive()) (void)h.conn->send(PacketWriter(FXP_CLOSE).str(h.handle).take());
}

std::string RemoteFile::rel_path() const {
  std::lock_guard lock(mu_);
  return rel_;
}

void RemoteFile::renamed(std::string new_rel) {
  const std::string path = backend_->remote_path(new_rel);
  std::lock_guard lock(mu_);
  if (!counted_.empty()) {
    backend_->epochs().closed(counted_);
    (void)backend_->epochs().opened(path);
    counted_ = path;
  }
  rel_ = std::move(new_rel);
  epoch_ = backend_->epochs().unique();
}

Status RemoteFile::open_first(uint32_t mode) {
  std::string rel;
  {
    std::lock_guard lock(mu_);
    rel = rel_;
  }
  // Held until the handle is open: nothing can put a symlink on the path through the gateway
  // between its checks and the OPEN.
  auto hold = backend_->paths_->hold(PathGuard::Mode::shared);
  if (auto st = backend_->confine(rel); !st) return st;
  {
    // Counted open at the path from here on, before the OPEN: a removal or rename of it from now
    // on moves its epoch (renames wait for the hold meanwhile).
    std::lock_guard lock(mu_);
    if (counted_.empty()) {
      counted_ = backend_->remote_path(rel);
      epoch_ = backend_->epochs().opened(counted_);
    }
  }
  size_t slot = backend_->pool().pick_slot();
  auto conn = backend_->connection(slot);
  if (!conn) return Status::failure(conn.error());
  Attrs a;
  if (flags_ & O_CREAT) {
    a.flags = ATTR_PERMISSIONS;
    a.permissions = mode & 07777;
  }
  Result<Reply> r = Result<Reply>::failure(EIO);
  if (flags_ & O_CREAT) {
    // Always O_EXCL on the server: O_CREAT alone would follow a symlink left at the name and
    // create its target. A create's reply needs the new file's attributes, and the mount wants
    // its directory's (they changed): asked at once, behind the OPEN on the same connection, so
    // one round trip does all.
    const std::string path = backend_->remote_path(rel);
    backend_->pool().count_ops(3);
    std::vector<Request> requests;
    requests.push_back(PacketWriter(FXP_OPEN)
                           .str(path)
                           .u32(open_flags_to_pflags(flags_ | O_EXCL))
                           .attrs(a)
                           .take());
    requests.push_back(PacketWriter(FXP_LSTAT).str(path).take());
    requests.push_back(PacketWriter(FXP_LSTAT).str(backend_->remote_path(parent_path(rel))).take());
    auto replies = (*conn)->call_all(std::move(requests));
    r = std::move(replies[0]);
    auto there = expect_attrs(std::move(replies[1]));
    if (r && r->type == FXP_HANDLE) {
      if (there) attrs_at_open_ = *there;
      if (auto da = expect_attrs(std::move(replies[2]))) parent_attrs_at_open_ = *da;
    } else if (status_code(r) == FX_FAILURE && there) {
      // The name exists: EEXIST for O_EXCL; otherwise it is opened, unless it is a symlink.
      if (flags_ & O_EXCL) return Status::failure(EEXIST);
      if (S_ISLNK(there->permissions)) return Status::failure(ELOOP);
      if (S_ISDIR(there->permissions)) return Status::failure(EISDIR);
      r = backend_->open_confined(**conn, rel, flags_ & ~(O_CREAT | O_EXCL), {}, nullptr);
    }
  } else {
    // The LSTAT that goes with the OPEN gives the file's attributes as it was opened.
    r = backend_->open_confined(**conn, rel, flags_, a, &attrs_at_open_);
  }
  if (!r) return Status::failure(r.error());
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*backend_, FailedOp::open, rel));
  auto h = expect_handle(std::move(r));
  if (!h) return Status::failure(h.error());
  {
    std::lock_guard lock(mu_);
    handles_[slot] = {*conn, *h};
  }
  // A new file gets the caller's mode even where the server's umask would take bits away.
  if ((flags_ & O_CREAT) && (mode & 07022)) {
    auto fixed =
        backend_->expect_status((*conn)->call(PacketWriter(FXP_FSETSTAT).str(*h).attrs(a).take()));
    if (fixed && attrs_at_open_) {
      attrs_at_open_->permissions = (attrs_at_open_->permissions & ~07777u) | (mode & 07777);
    } else {
      attrs_at_open_.reset();
    }
  }
  return ok_status();
}

Result<RemoteFile::Handle> RemoteFile::handle_on(size_t slot) {
  using R = Result<Handle>;
  auto conn = backend_->connection(slot);
  if (!conn) return R::failure(conn.error());
  std::string rel;
  uint64_t epoch = 0;
  HandleJudge judge;
  {
    std::lock_guard lock(mu_);
    Handle& h = handles_[slot];
    if (!h.handle.empty() && h.conn == *conn) return h;
    if (judged_ && !judge_) {
      if (auto live = live_handle_locked()) return *live;
      return R::failure(ESTALE);
    }
    rel = rel_;
    epoch = epoch_;
    judge = judge_;
  }
  // Re-open by path, confined as the first open was: the caller's access mode, never creating
  // or truncating again.
  int again = flags_ & ~(O_CREAT | O_EXCL | O_TRUNC);
  auto hold = backend_->paths_->hold(PathGuard::Mode::shared);
  if (backend_->epoch_of(rel) != epoch) {
    // The path may name another file now (an atomic replace while this one is read): never
    // opened by it again. A handle open elsewhere serves, on its own connection.
    std::lock_guard lock(mu_);
    if (auto h = live_handle_locked()) return *h;
    return R::failure(ESTALE);
  }
  if (auto st = backend_->confine(rel); !st) return R::failure(st.error());
  auto h = expect_handle(backend_->open_confined(**conn, rel, again, {}, nullptr));
  if (!h) return R::failure(h.error());
  if (judge) {
    // The path may lead to another file than the one judged at the open by now: the handle
    // serves only if the user may use the file it opened, by that file's own attributes.
    backend_->pool().count_ops(1);
    auto a = expect_attrs((*conn)->call(PacketWriter(FXP_FSTAT).str(*h).take()));
    if (!a || !judge(*a)) {
      (*conn)->send(PacketWriter(FXP_CLOSE).str(*h).take());
      if (a)
        spdlog::warn(
            "backend {}: {} now leads to a file (uid {}, mode {:o}) its opener may not use; the "
            "open file keeps to the handles it has",
            backend_->name(), rel, a->uid, a->permissions);
      std::lock_guard lock(mu_);
      if (a) judge_ = nullptr;  // no more opens by the name
      if (auto live = live_handle_locked()) return *live;
      return R::failure(a ? ESTALE : a.error());
    }
  }
  // What the slot held (a handle on a connection that died) is let go of once mu_ is released:
  // the last reference to a dead connection closes its session, which may wait on the transport,
  // and every call on the file would wait with it.
  Handle replaced;
  std::lock_guard lock(mu_);
  if (backend_->epoch_of(rel) != epoch) {
    // A removal of the path ran beside the OPEN (it moves the epoch before its REMOVE goes out,
    // and holds the paths shared as this does): the OPEN may have found the file made after it.
    (*conn)->send(PacketWriter(FXP_CLOSE).str(*h).take());
    if (auto live = live_handle_locked()) return *live;
    return R::failure(ESTALE);
  }
  Handle& slot_handle = handles_[slot];
  if (!slot_handle.handle.empty() && slot_handle.conn == *conn) {
    // Another thread opened one meanwhile; keep theirs, close ours.
    (*conn)->send(PacketWriter(FXP_CLOSE).str(*h).take());
    return slot_handle;
  }
  replaced = std::move(slot_handle);
  slot_handle = {*conn, *h};
  return slot_handle;
}

std::optional<RemoteFile::Handle> RemoteFile::live_handle_locked() const {
  for (auto& h : handles_)
    if (!h.handle.empty() && h.conn && h.conn->alive()) return h;
  return std::nullopt;
}

Result<RemoteFile::Handle> RemoteFile::any_handle() {
  {
    std::lock_guard lock(mu_);
    if (auto h = live_handle_locked()) return *h;
  }
  return handle_on(backend_->pool().pick_slot());
}

size_t slot_for_run(uint64_t run, size_t slots) {
  if (slots <= 1) return 0;
  uint64_t sum = 0;
  for (; run > 0; run /= slots) sum += run % slots;
  return static_cast<size_t>(sum % slots);
}

void RemoteFile::judge_new_handles(HandleJudge may_use) {
  std::lock_guard lock(mu_);
  judged_ = true;
  judge_ = std::move(may_use);
}

Result<SharedBytes> RemoteFile::read(uint64_t offset, uint32_t size) {
  // Keyed by the server's path and the pool: views of one backend share their fetches too.
  std::string rel;
  uint64_t epoch = 0;
  bool judged = false;
  {
    std::lock_guard lock(mu_);
    judged = judged_;
    rel = rel_;
    epoch = epoch_;
  }
  if (judged) return fetch(offset, size);  // bytes of this file's own handles only
  return ReadCollapser::shared().read(&backend_->pool(), backend_->remote_path(rel), epoch, offset,
                                      size, [&] { return fetch(offset, size); });
}

Result<SharedBytes> RemoteFile::fetch(uint64_t offset, uint32_t size) {
  using R = Result<SharedBytes>;
  if (size == 0) return SharedBytes();
  InUse use(*this);
  auto first = any_handle();
  if (!first) return R::failure(first.error());
  const uint64_t chunk =
      std::max<uint64_t>(4096, std::min<uint64_t>(first->conn->limits().max_read, 1 << 20));
  size_t nchunks = static_cast<size_t>((size + chunk - 1) / chunk);

  struct Piece {
    uint64_t off;
    uint32_t len;
    std::future<Result<Reply>> reply;
    Handle handle;
  };
  std::vector<Piece> pieces;
  pieces.reserve(nchunks);
  // A large read goes to the connection that owns its run of the file, so each server process
  // reads runs of the file in order and its kernel's read-ahead works, and the replies of one
  // read come back on one connection together; a stream's reads in flight (the mount keeps
  // several MiB of them) spread over the pool run by run. Spread chunk by chunk over the pool
  // instead, one stream read ~40% slower at ~20% more gateway CPU (1 GiB dd, one sshd, 2 cores).
  constexpr uint64_t kRun = 4 << 20;
  auto own =
      nchunks == 1 ? first : handle_on(slot_for_run(offset / kRun, backend_->pool().slot_count()));
  if (!own) own = first;  // a slot that cannot connect: use the one we have
  for (size_t i = 0; i < nchunks; ++i) {
    uint64_t off = offset + i * chunk;
    uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(chunk, offset + size - off));
    auto h = own;
    std::string ask = PacketWriter(FXP_READ).str(h->handle).u64(off).u32(len).take();
    std::future<Result<Reply>> fut;
    if (nchunks == 1) {
      // A small read in one round trip, in this thread on an idle connection (no hand-off to
      // the connection's I/O thread and back).
      std::promise<Result<Reply>> answered;
      answered.set_value(h->conn->call(std::move(ask)));
      fut = answered.get_future();
    } else {
      fut = h->conn->send(std::move(ask));
    }
    pieces.push_back({off, len, std::move(fut), *h});
  }
  backend_->pool().count_ops(1);

  // The result is views of the replies' data, which it keeps: nothing is gathered.
  auto replies = std::make_shared<std::vector<Reply>>();
  replies->reserve(nchunks);
  std::vector<std::string_view> views;
  size_t total = 0;
  bool at_eof = false;
  int err = 0;
  // One connection answers in order: waiting for the last reply first costs this thread one
  // wake-up for the whole read instead of one per reply.
  if (!pieces.empty()) pieces.back().reply.wait();
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
      if (!data->empty()) views.push_back(*data);
      got += data->size();
      total += data->size();
      replies->push_back(std::move(*r));  // the body's bytes stay where they are
      if (got == p.len) break;
      if (data->empty()) {
        // No bytes and no EOF status (OpenSSH never answers so; other servers may at the end):
        // the end of the file. The next pieces' bytes must not be taken for this one's rest.
        at_eof = true;
        break;
      }
      // A short reply from a server whose short reads mean the end of the file: no READ more
      // (a small file costs one round trip, not two).
      if (p.len <= p.handle.conn->limits().max_read && p.handle.conn->short_read_is_eof()) {
        at_eof = true;
        break;
      }
      backend_->pool().count_ops(1);
      r = p.handle.conn->call(PacketWriter(FXP_READ)
                                  .str(p.handle.handle)
                                  .u64(p.off + got)
                                  .u32(static_cast<uint32_t>(p.len - got))
                                  .take());
    }
  }
  if (err && total == 0) {
    if (err == EIO && !first->conn->alive())
      spdlog::warn("backend {}: read of {} failed: {}", backend_->name(), rel_path(),
                   first->conn->failure());
    return R::failure(err);
  }
  if (err) return R::failure(err);
  backend_->pool().count_read(total);
  return SharedBytes(std::move(views), std::move(replies));
}

Result<OpenFile::ReadWithAttrs> RemoteFile::read_reporting_attrs(uint64_t offset, uint32_t size) {
  using R = Result<ReadWithAttrs>;
  InUse use(*this);
  auto h = any_handle();
  if (!h) return R::failure(h.error());
  if (size == 0 || size > h->conn->limits().max_read || !h->conn->short_read_is_eof())
    return OpenFile::read_reporting_attrs(offset, size);
  backend_->pool().count_ops(2);
  auto replies =
      h->conn->call_all({PacketWriter(FXP_READ).str(h->handle).u64(offset).u32(size).take(),
                         PacketWriter(FXP_FSTAT).str(h->handle).take()});
  auto attrs = expect_attrs(std::move(replies[1]));
  if (!attrs) return R::failure(attrs.error());
  Result<Reply>& got = replies[0];
  if (!got) return R::failure(got.error());
  if (got->type == FXP_STATUS) {
    auto code = PacketReader(got->body).u32();
    if (code && *code == FX_EOF) return ReadWithAttrs{SharedBytes(), *attrs};
    const int e = code ? status_to_errno(*code) : EIO;
    return R::failure(e ? e : EIO);
  }
  auto owner = std::make_shared<Reply>(std::move(*got));
  auto data = PacketReader(owner->body).str();
  if (owner->type != FXP_DATA || !data || data->size() > size) return R::failure(EIO);
  backend_->pool().count_read(data->size());
  std::vector<std::string_view> pieces;
  if (!data->empty()) pieces.push_back(*data);
  return ReadWithAttrs{SharedBytes(std::move(pieces), owner), *attrs};
}

Result<uint32_t> RemoteFile::write(uint64_t offset, const SharedBytes& data) {
  return write_detaching({Extent{offset, data}}, nullptr);
}

Result<RemoteFile::Written> RemoteFile::write_reporting_attrs(uint64_t offset,
                                                              const SharedBytes& data) {
  Written out;
  auto written = write_detaching({Extent{offset, data}}, &out.attrs);
  if (!written) return Result<Written>::failure(written.error());
  out.bytes = *written;
  return out;
}

Result<uint32_t> RemoteFile::write_extents(const std::vector<Extent>& extents) {
  return write_detaching(extents, nullptr);
}

Result<uint32_t> RemoteFile::write_detaching(const std::vector<Extent>& extents,
                                             std::optional<sftp::Attrs>* attrs_after) {
  uint64_t total = 0;
  for (const Extent& e : extents) total += e.data.size();
  if (total == 0) return static_cast<uint32_t>(0);
  // Reads that start from now on, and those after the write is acknowledged, fetch afresh.
  const std::string path = backend_->remote_path(rel_path());
  ReadCollapser::shared().detach(&backend_->pool(), path);
  auto written = write_pipelined(extents, total, attrs_after);
  ReadCollapser::shared().detach(&backend_->pool(), path);
  return written;
}

namespace {

// The WRITEs of several extents (random writes) go out together, up to this many bytes at a
// time, and their answers are read before the next group: one round trip per group. A larger
// group saves little more, and costs the server: OpenSSH's sftp-server grows its buffers for a
// burst and frees them once it has drained it, so bursts of hundreds of KiB made sshd fault in
// fresh pages for each (a run of fio's random 4 KiB writes took it 1.3 CPU-s instead of 0.2, in
// about half of the runs). One extent is never split over groups: a large write's chunks go out
// together as before.
constexpr uint64_t kExtentGroupBytes = 32u << 10;
constexpr std::size_t kExtentGroupCount = 16;  // and at most this many extents, however small

// The first error among WRITE (or FSTAT) answers, 0 if none; `failure` when it was the
// protocol's unspecific FX_FAILURE, whose errno is to be diagnosed.
int first_write_error(const std::vector<Result<Reply>>& replies, bool& failure) {
  for (const auto& r : replies) {
    if (!r) return r.error();
    auto code = r->type == FXP_STATUS ? PacketReader(r->body).u32() : std::nullopt;
    if (!code) return EIO;
    if (*code == FX_FAILURE) {
      failure = true;
      return EIO;
    }
    if (*code != FX_OK) return status_to_errno(*code);
  }
  return 0;
}

}  // namespace

Result<uint32_t> RemoteFile::write_pipelined(const std::vector<Extent>& extents, uint64_t total,
                                             std::optional<Attrs>* attrs_after) {
  using R = Result<uint32_t>;
  InUse use(*this);
  // One connection takes the whole write: on an idle one the calling thread writes every chunk
  // and reads the answers itself (Connection::call_all), with no hand-off to an I/O thread. A
  // large write goes to the least busy connection: the mount keeps several in flight, each on a
  // connection of its own, so the pool works in parallel (a handle is opened there once per
  // file). A small one stays on a connection the file is open on already: an extra OPEN would
  // cost more than it saves. Appends stay on one connection, in order.
  const bool large = total > (256u << 10);
  auto h = (flags_ & O_APPEND) || !large ? any_handle() : handle_on(backend_->pool().pick_slot());
  if (!h) h = any_handle();
  if (!h) return R::failure(h.error());
  const uint64_t chunk =
      std::max<uint64_t>(4096, std::min<uint64_t>(h->conn->limits().max_write, 1 << 20));
  backend_->pool().count_ops(extents.size());
  int err = 0;
  bool failure = false;
  for (std::size_t next = 0; next < extents.size() && err == 0;) {
    // Each request's data is sent from the pieces themselves, never joined: call_all returns
    // only once every request is answered.
    std::vector<Request> requests;
    const std::size_t first = next;
    for (uint64_t group = 0; next < extents.size() && next - first < kExtentGroupCount &&
                             (group == 0 || group < kExtentGroupBytes);
         ++next) {
      const Extent& e = extents[next];
      group += e.data.size();
      for (uint64_t off = 0; off < e.data.size(); off += chunk) {
        std::vector<std::string_view> parts;
        e.data.view(off, chunk, parts);
        requests.push_back(PacketWriter(FXP_WRITE)
                               .str(h->handle)
                               .u64(e.offset + off)
                               .take_with_str(std::move(parts)));
      }
    }
    // One connection answers in order: the FSTAT sees every WRITE before it.
    const bool last = next == extents.size();
    if (attrs_after && last) requests.push_back(PacketWriter(FXP_FSTAT).str(h->handle).take());
    auto replies = h->conn->call_all(std::move(requests));
    if (attrs_after && last) {
      if (auto a = expect_attrs(std::move(replies.back()))) *attrs_after = *a;
      replies.pop_back();
    }
    err = first_write_error(replies, failure);
  }
  if (failure) err = diagnose_failure(*backend_, FailedOp::write, rel_path());
  if (err) return R::failure(err);
  backend_->pool().count_written(total);
  return static_cast<uint32_t>(total);
}

Status RemoteFile::fsync() {
  InUse use(*this);
  auto h = any_handle();
  if (!h) return Status::failure(h.error());
  if (!h->conn->has_extension("fsync@openssh.com")) return Status::failure(ENOTSUP);
  backend_->pool().count_ops(1);
  return backend_->expect_status(
      h->conn->call(PacketWriter(FXP_EXTENDED).str("fsync@openssh.com").str(h->handle).take()));
}

Status RemoteFile::truncate(uint64_t size) {
  const std::string path = backend_->remote_path(rel_path());
  ReadCollapser::shared().detach(&backend_->pool(), path);
  Status truncated = truncate_now(size);
  ReadCollapser::shared().detach(&backend_->pool(), path);
  return truncated;
}

Status RemoteFile::truncate_now(uint64_t size) {
  InUse use(*this);
  auto h = any_handle();
  if (!h) return Status::failure(h.error());
  Attrs a;
  a.flags = ATTR_SIZE;
  a.size = size;
  backend_->pool().count_ops(1);
  auto r = h->conn->call(PacketWriter(FXP_FSETSTAT).str(h->handle).attrs(a).take());
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*backend_, FailedOp::write, rel_path()));
  return backend_->expect_status(std::move(r));
}

Result<Attrs> RemoteFile::fstat() {
  InUse use(*this);
  auto h = any_handle();
  if (!h) return Result<Attrs>::failure(h.error());
  backend_->pool().count_ops(1);
  return expect_attrs(h->conn->call(PacketWriter(FXP_FSTAT).str(h->handle).take()));
}

Result<Attrs> RemoteFile::set_attrs(const AttrChange& change) {
  return set_size_then(change, [&](const AttrChange& rest) -> Status {
    Attrs current;
    if (rest.needs_current()) {
      auto c = fstat();
      if (!c) return Status::failure(c.error());
      current = *c;
    }
    InUse use(*this);
    auto h = any_handle();
    if (!h) return Status::failure(h.error());
    backend_->pool().count_ops(1);
    return backend_->expect_status(h->conn->call(
        PacketWriter(FXP_FSETSTAT).str(h->handle).attrs(rest.setstat_attrs(current)).take()));
  });
}

Status RemoteFile::close() {
  std::vector<Handle> open;
  {
    std::lock_guard lock(mu_);
    for (auto& h : handles_) {
      if (!h.handle.empty()) open.push_back(std::move(h));
      h = {};
    }
    if (users_ > 0) {  // the last call to end closes them
      for (auto& h : open) closing_.push_back(std::move(h));
      return ok_status();
    }
  }
  if (open.size() == 1) {  // the usual case: in this thread when the connection is idle
    if (!open[0].conn->alive()) return ok_status();
    return backend_->expect_status(
        open[0].conn->call(PacketWriter(FXP_CLOSE).str(open[0].handle).take()));
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
