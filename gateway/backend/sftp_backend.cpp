// SFTP backends and their subtree views; see sftp_backend.hpp.
#include "backend/sftp_backend.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <deque>
#include <future>

#include "backend/failure_diagnosis.hpp"
#include "backend/remote_file.hpp"
#include "backend/reply_parsing.hpp"
#include "skein/path.hpp"

namespace skein {
using namespace sftp;

SftpBackend::SftpBackend(BackendConfig cfg)
    : server_(std::make_shared<Server>(std::move(cfg))),
      paths_(PathGuard::of(config().endpoint.host, config().endpoint.port)),
      name_(config().name) {}

SftpBackend::SftpBackend(std::shared_ptr<Server> server, std::shared_ptr<PathGuard> paths,
                         std::string prefix, std::string name)
    : server_(std::move(server)),
      paths_(std::move(paths)),
      prefix_(std::move(prefix)),
      name_(std::move(name)) {}

Result<std::shared_ptr<Backend>> SftpBackend::subtree(std::string_view rel) {
  using R = Result<std::shared_ptr<Backend>>;
  auto norm = normalize_virtual_path(rel);
  if (rel.empty() || !norm || *norm != rel) return R::failure(EINVAL);
  if (rel == "/") return std::shared_ptr<Backend>(shared_from_this());
  std::string prefix = in_export(rel);
  // The view is made with the constructor only this class may call.
  return std::shared_ptr<Backend>(std::shared_ptr<SftpBackend>(
      new SftpBackend(server_, paths_, prefix, config().name + ":" + prefix)));
}

std::string SftpBackend::in_export(std::string_view rel) const {
  if (prefix_.empty()) return std::string(rel.empty() ? "/" : rel);
  if (rel.empty() || rel == "/") return prefix_;
  return prefix_ + std::string(rel);
}

std::string SftpBackend::export_path(std::string_view in_export) const {
  const std::string& root = config().root;
  if (in_export.empty() || in_export == "/") return root;
  std::string out = root;
  if (!out.empty() && out.back() == '/') out.pop_back();
  out += in_export;
  return out;
}

std::string SftpBackend::remote_path(std::string_view rel) const {
  return export_path(in_export(rel));
}

Backend::ServerPlace SftpBackend::server_place(std::string_view rel) const {
  const sftp::Endpoint& at = config().endpoint;
  return {"sftp " + at.host + ":" + std::to_string(at.port), remote_path(rel)};
}

// An LSTAT sent without waiting; it holds the path guard (on the thread that started it) until
// its answer is taken.
class SftpBackend::SentLstat final : public PendingLstat {
 public:
  SentLstat(PathGuard::Hold hold, std::future<Result<Reply>> reply)
      : hold_(std::move(hold)), reply_(std::move(reply)) {}
  explicit SentLstat(int err) : done_(Result<Attrs>::failure(err)) {}
  Result<Attrs> attrs() override {
    if (!done_) done_ = expect_attrs(reply_.get());
    hold_ = PathGuard::Hold();
    return *done_;
  }

 private:
  PathGuard::Hold hold_;
  std::future<Result<Reply>> reply_;
  std::optional<Result<Attrs>> done_;  // set when answered, or failed before anything was sent
};

std::unique_ptr<Backend::PendingLstat> SftpBackend::start_lstat(std::string_view rel) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return std::make_unique<SentLstat>(st.error());
  return std::make_unique<SentLstat>(
      std::move(hold), pool().start(PacketWriter(FXP_LSTAT).str(remote_path(rel)).take()));
}

Result<Attrs> SftpBackend::attrs_of(Result<Reply> reply) { return expect_attrs(std::move(reply)); }

void SftpBackend::changed_on_server(std::string_view rel, bool replaced_there) {
  paths_->forget_tree(remote_path(rel));
  if (replaced_there) epochs().replaced(remote_path(rel), false);
}

Status SftpBackend::confine(std::string_view rel, Confine what) {
  // The directories to look at, from the top: each prefix of the path ending before a '/', and
  // the path itself for Confine::self. For a view, its root and what lies above it count too.
  const std::string path = in_export(rel);
  std::vector<std::string> unknown;
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string dir = export_path(std::string_view(path).substr(0, pos));
    if (!paths_->verified(dir)) unknown.push_back(std::move(dir));
  }
  if (what == Confine::self && path.size() > 1) {
    std::string dir = export_path(path);
    if (!paths_->verified(dir)) unknown.push_back(std::move(dir));
  }
  if (unknown.empty()) return ok_status();
  std::vector<Result<Reply>> replies;
  for (int attempt = 0;; ++attempt) {
    auto conn = pool().connection(pool().pick_slot());
    if (!conn) return Status::failure(conn.error());
    std::vector<Request> asks;
    for (auto& dir : unknown) asks.push_back(PacketWriter(FXP_LSTAT).str(dir).take());
    pool().count_ops(asks.size());
    replies = (*conn)->call_all(std::move(asks));
    // A connection that died (the server restarted): once more on a fresh one, as call() does.
    if (replies[0] || (*conn)->alive() || attempt > 0) break;
  }
  // In order: a later LSTAT went through whatever an earlier one found, so only the answers up
  // to the first that is not a directory count.
  for (size_t i = 0; i < unknown.size(); ++i) {
    auto a = expect_attrs(std::move(replies[i]));
    if (!a) return Status::failure(a.error());
    if (S_ISLNK(a->permissions)) {
      spdlog::debug("backend {}: {} is a symlink: not followed (ELOOP)", name_, unknown[i]);
      return Status::failure(ELOOP);
    }
    if (!S_ISDIR(a->permissions)) return Status::failure(ENOTDIR);
    paths_->mark_verified(unknown[i]);
  }
  return ok_status();
}

Result<Attrs> SftpBackend::lstat_confined(std::string_view rel) {
  auto a = expect_attrs(pool().call(PacketWriter(FXP_LSTAT).str(remote_path(rel)).take(), true));
  if (a && S_ISDIR(a->permissions) && in_export(rel).size() > 1)
    paths_->mark_verified(remote_path(rel));
  return a;
}

Result<Reply> SftpBackend::open_confined(Connection& conn, const std::string& rel, int flags,
                                         const Attrs& attrs, std::optional<Attrs>* lstat) {
  const std::string path = remote_path(rel);
  const std::string open = PacketWriter(FXP_OPEN)
                               .str(path)
                               .u32(open_flags_to_pflags(flags & ~(O_CREAT | O_EXCL)))
                               .attrs(attrs)
                               .take();
  const std::string look = PacketWriter(FXP_LSTAT).str(path).take();
  pool().count_ops(2);
  if (flags & O_TRUNC) {
    // Truncating through a symlink would already have changed its target: look first.
    auto a = expect_attrs(conn.call(look));
    if (!a) return Result<Reply>::failure(a.error());
    if (S_ISLNK(a->permissions)) return Result<Reply>::failure(ELOOP);
    if (lstat) *lstat = *a;
    return conn.call(open);
  }
  // A plain open does nothing until the handle is used: ask both at once, and drop the handle
  // of a symlink unused.
  auto replies = conn.call_all({look, open});
  auto a = expect_attrs(std::move(replies[0]));
  if (a && S_ISLNK(a->permissions)) {
    if (auto h = expect_handle(std::move(replies[1])))
      conn.send(PacketWriter(FXP_CLOSE).str(*h).take());
    return Result<Reply>::failure(ELOOP);
  }
  if (a && lstat) *lstat = *a;
  return std::move(replies[1]);
}

Result<StatVfs> SftpBackend::free_space() {
  {
    std::lock_guard lock(free_mu_);
    if (free_cache_ &&
        std::chrono::steady_clock::now() - free_cache_time_ < std::chrono::seconds(2))
      return *free_cache_;
  }
  auto v = statvfs("/");
  if (!v) return v;
  std::lock_guard lock(free_mu_);
  free_cache_ = *v;
  free_cache_time_ = std::chrono::steady_clock::now();
  return v;
}

bool SftpBackend::accepts_new_files() {
  if (!up() || draining()) return false;
  const uint64_t min_free = config().min_free_bytes;
  if (min_free == 0) return true;
  auto v = free_space();
  if (!v) return false;
  return v->bavail * (v->frsize ? v->frsize : v->bsize) >= min_free;
}

Status SftpBackend::expect_status(Result<Reply> r) {
  if (!r) return Status::failure(r.error());
  if (r->type != FXP_STATUS) return Status::failure(EIO);
  auto code = PacketReader(r->body).u32();
  if (!code) return Status::failure(EIO);
  int e = status_to_errno(*code);
  return e ? Status::failure(e) : ok_status();
}

Result<Attrs> SftpBackend::lstat(std::string_view rel) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return Result<Attrs>::failure(st.error());
  return lstat_confined(rel);
}

Status SftpBackend::setstat(std::string_view rel, const Attrs& attrs) {
  auto r = setstat_sending(rel, attrs, false);
  return r ? ok_status() : Status::failure(r.error());
}

Result<std::optional<Attrs>> SftpBackend::setstat_reporting(std::string_view rel,
                                                            const Attrs& attrs) {
  return setstat_sending(rel, attrs, true);
}

Result<std::optional<Attrs>> SftpBackend::setstat_sending(std::string_view rel, const Attrs& attrs,
                                                          bool report) {
  using R = Result<std::optional<Attrs>>;
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return R::failure(st.error());
  // SETSTAT follows a symlink; lsetstat does not, but OpenSSH's cannot change the size. Where
  // the plain one must be used, look first: under the hold nothing can swap the file for a
  // symlink through the gateway meanwhile.
  auto conn = pool().connection(pool().pick_slot());
  if (!conn) return R::failure(conn.error());
  bool use_l = !(attrs.flags & ATTR_SIZE) && (*conn)->has_extension("lsetstat@openssh.com");
  if (!use_l) {
    auto a = lstat_confined(rel);
    if (!a) return R::failure(a.error());
    if (S_ISLNK(a->permissions)) return R::failure(ELOOP);
  }
  std::string pkt = use_l ? PacketWriter(FXP_EXTENDED)
                                .str("lsetstat@openssh.com")
                                .str(remote_path(rel))
                                .attrs(attrs)
                                .take()
                          : PacketWriter(FXP_SETSTAT).str(remote_path(rel)).attrs(attrs).take();
  if (!report || !use_l) {
    auto r = pool().call(pkt, true);
    auto code = status_code(r);
    if (code && *code == FX_FAILURE)
      return R::failure(diagnose_failure(*this, FailedOp::setstat, rel));
    if (auto st = expect_status(std::move(r)); !st) return R::failure(st.error());
    return std::optional<Attrs>();
  }
  // With the LSTAT behind it on the same connection: sftp-server answers in order, so the LSTAT
  // sees what the lsetstat left.
  pool().count_ops(2);
  auto replies =
      (*conn)->call_all({std::move(pkt), PacketWriter(FXP_LSTAT).str(remote_path(rel)).take()});
  const auto code = status_code(replies[0]);
  auto after = expect_attrs(std::move(replies[1]));
  if (code && *code == FX_FAILURE) {
    // A mode cannot be set on a symlink itself (Linux): say so, as the layouts do.
    if (after && S_ISLNK(after->permissions)) return R::failure(ELOOP);
    return R::failure(diagnose_failure(*this, FailedOp::setstat, rel));
  }
  if (auto st = expect_status(std::move(replies[0])); !st) return R::failure(st.error());
  return after ? std::optional<Attrs>(*after) : std::nullopt;
}

Result<std::vector<NameEntry>> SftpBackend::list_dir(std::string_view rel) {
  using R = Result<std::vector<NameEntry>>;
  // OPENDIR follows a symlink at the end too: the directory itself must be a verified one.
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel, Confine::self); !st) return R::failure(st.error());
  for (int attempt = 0;; ++attempt) {
    auto conn = pool().connection(pool().pick_slot());
    if (!conn) return R::failure(conn.error());
    pool().count_ops(1);
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
    // The server lists with lstat: a directory here is a real one.
    for (auto& e : out)
      if (S_ISDIR(e.attrs.permissions) && is_valid_entry_name(e.filename))
        paths_->mark_verified(remote_path(join_path(rel, e.filename)));
    return out;
  }
}

Status SftpBackend::mkdir(std::string_view rel, uint32_t mode) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  Attrs a;
  a.flags = ATTR_PERMISSIONS;
  a.permissions = mode & 07777;
  auto r = pool().call(PacketWriter(FXP_MKDIR).str(remote_path(rel)).attrs(a).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*this, FailedOp::mkdir, rel));
  auto st = expect_status(std::move(r));
  if (st) paths_->mark_verified(remote_path(rel));
  // The server's umask may have taken bits the caller asked for (the client applied its own).
  if (st && (mode & 07022)) (void)setstat(rel, a);
  return st;
}

Status SftpBackend::rmdir(std::string_view rel) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  auto r = pool().call(PacketWriter(FXP_RMDIR).str(remote_path(rel)).take(), false);
  if (status_code(r) == FX_OK) paths_->forget_tree(remote_path(rel));
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*this, FailedOp::rmdir, rel));
  if (code && *code == FX_NO_SUCH_FILE) {
    // ENOTDIR also arrives as "no such file".
    auto a = lstat(rel);
    if (a && !S_ISDIR(a->permissions)) return Status::failure(ENOTDIR);
  }
  return expect_status(std::move(r));
}

Status SftpBackend::unlink(std::string_view rel) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  // Before and after: a file opened at the name while the REMOVE is on its way is not taken for
  // one opened there after it.
  replacing(rel);
  auto reply = pool().call(PacketWriter(FXP_REMOVE).str(remote_path(rel)).take(), false);
  const bool answered = status_code(reply).has_value();
  Status st = removed(std::move(reply), rel);
  replacing_done(rel, st.ok(), !answered);
  return st;
}

void SftpBackend::replacing(std::string_view rel) {
  const std::string path = remote_path(rel);
  epochs().expect_echo(path);
  epochs().replaced(path, true);
}

void SftpBackend::replacing_done(std::string_view rel, bool done, bool unknown) {
  const std::string path = remote_path(rel);
  if (done || unknown) epochs().replaced(path, true);  // it may have gone
  if (!done) epochs().no_echo(path);  // the first move stays: harmless, the file may still be read
}

Status SftpBackend::removed(Result<Reply> reply, std::string_view rel) {
  auto code = status_code(reply);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*this, FailedOp::unlink, rel));
  return expect_status(std::move(reply));
}

Result<std::optional<Attrs>> SftpBackend::unlink_reporting_parent(std::string_view rel) {
  using R = Result<std::optional<Attrs>>;
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return R::failure(st.error());
  auto conn = connection(pool().pick_slot());
  if (!conn) return R::failure(conn.error());
  // sftp-server answers in order: the LSTAT sees the directory as the REMOVE left it.
  pool().count_ops(2);
  replacing(rel);  // before and after, as unlink()
  auto replies = (*conn)->call_all(
      {PacketWriter(FXP_REMOVE).str(remote_path(rel)).take(),
       PacketWriter(FXP_LSTAT).str(remote_path(parent_path(std::string(rel)))).take()});
  const bool answered = status_code(replies[0]).has_value();
  Status st = removed(std::move(replies[0]), rel);
  replacing_done(rel, st.ok(), !answered);
  if (!st) return R::failure(st.error());
  auto dir = expect_attrs(std::move(replies[1]));
  return dir ? std::optional<Attrs>(*dir) : std::nullopt;
}

Status SftpBackend::rename(std::string_view from, std::string_view to, unsigned flags) {
  auto r = renamed(from, to, flags, false);
  return r ? ok_status() : Status::failure(r.error());
}

Result<RenameParents> SftpBackend::rename_reporting_parents(std::string_view from,
                                                            std::string_view to, unsigned flags) {
  return renamed(from, to, flags, true);
}

Result<RenameParents> SftpBackend::renamed(std::string_view from, std::string_view to,
                                           unsigned flags, bool report) {
  using R = Result<RenameParents>;
  // It can put a symlink (or a tree holding one) where a directory was: nothing else runs on
  // this server's paths meanwhile, and what was verified at either name is looked at again.
  auto hold = paths_->hold(PathGuard::Mode::exclusive);
  if (auto st = confine(from); !st) return R::failure(st.error());
  if (auto st = confine(to); !st) return R::failure(st.error());
  struct Forget {
    SftpBackend& b;
    std::string_view from, to;
    bool sent = false;     // the rename went to the server (its echo expected)
    bool renamed = false;  // the server did it
    bool unknown = false;  // no answer: it may have
    ~Forget() {            // with the paths still held: no open runs between the rename and this
      b.paths_->forget_tree(b.remote_path(from));
      b.paths_->forget_tree(b.remote_path(to));
      if (renamed || unknown) {
        b.replaced(from);
        b.replaced(to);
      }
      if (sent && !renamed) {
        b.epochs().no_echo(b.remote_path(from));
        b.epochs().no_echo(b.remote_path(to));
      }
    }
  } forget{*this, from, to};
  auto conn = pool().connection(pool().pick_slot());
  if (!conn) return R::failure(conn.error());
  bool posix = (*conn)->has_extension("posix-rename@openssh.com");
  if (flags & 1) {  // RENAME_NOREPLACE: plain SFTP rename refuses to replace
    posix = false;
  } else if (!posix) {
    return R::failure(ENOTSUP);  // cannot replace atomically without the extension
  }
  std::vector<Request> asks;
  asks.push_back(posix
                     ? PacketWriter(FXP_EXTENDED)
                           .str("posix-rename@openssh.com")
                           .str(remote_path(from))
                           .str(remote_path(to))
                           .take()
                     : PacketWriter(FXP_RENAME).str(remote_path(from)).str(remote_path(to)).take());
  // sftp-server answers in order: the LSTATs see the directories as the rename left them.
  const std::string from_dir = parent_path(std::string(from)),
                    to_dir = parent_path(std::string(to));
  if (report) {
    asks.push_back(PacketWriter(FXP_LSTAT).str(remote_path(from_dir)).take());
    if (to_dir != from_dir) asks.push_back(PacketWriter(FXP_LSTAT).str(remote_path(to_dir)).take());
  }
  pool().count_ops(asks.size());
  epochs().expect_echo(remote_path(from));
  epochs().expect_echo(remote_path(to));
  forget.sent = true;
  auto replies = (*conn)->call_all(std::move(asks));
  auto code = status_code(replies[0]);
  forget.unknown = !code;
  if (code && *code == FX_FAILURE) {
    if (!posix && lstat(to)) return R::failure(EEXIST);
    return R::failure(diagnose_failure(*this, FailedOp::rename, from, to));
  }
  if (auto st = expect_status(std::move(replies[0])); !st) return R::failure(st.error());
  forget.renamed = true;
  RenameParents out;
  if (report) {
    if (auto a = expect_attrs(std::move(replies[1]))) out.from_dir = *a;
    if (to_dir == from_dir) {
      out.to_dir = out.from_dir;
    } else if (auto a = expect_attrs(std::move(replies[2]))) {
      out.to_dir = *a;
    }
  }
  return out;
}

Status SftpBackend::symlink(std::string_view target, std::string_view rel) {
  // The target is stored as it is (a mount's kernel resolves it, on its own side); the new link
  // must not appear under an operation that has just checked that name as a directory.
  auto hold = paths_->hold(PathGuard::Mode::exclusive);
  if (auto st = confine(rel); !st) return st;
  paths_->forget_tree(remote_path(rel));
  // OpenSSH takes the target first and the new link second (the reverse of the draft).
  auto r = pool().call(PacketWriter(FXP_SYMLINK).str(target).str(remote_path(rel)).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*this, FailedOp::symlink, rel));
  return expect_status(std::move(r));
}

Result<std::string> SftpBackend::readlink(std::string_view rel) {
  using R = Result<std::string>;
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return R::failure(st.error());
  auto r = pool().call(PacketWriter(FXP_READLINK).str(remote_path(rel)).take(), true);
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

Status SftpBackend::link(std::string_view existing, std::string_view rel) {
  // A hard link of a symlink is a symlink: exclusive, as for symlink().
  auto hold = paths_->hold(PathGuard::Mode::exclusive);
  if (auto st = confine(existing); !st) return st;
  if (auto st = confine(rel); !st) return st;
  paths_->forget_tree(remote_path(rel));
  auto conn = pool().connection(pool().pick_slot());
  if (!conn) return Status::failure(conn.error());
  if (!(*conn)->has_extension("hardlink@openssh.com")) return Status::failure(ENOTSUP);
  pool().count_ops(1);
  auto r = (*conn)->call(PacketWriter(FXP_EXTENDED)
                             .str("hardlink@openssh.com")
                             .str(remote_path(existing))
                             .str(remote_path(rel))
                             .take());
  auto code = status_code(r);
  if (code && *code == FX_FAILURE)
    return Status::failure(diagnose_failure(*this, FailedOp::link, rel, existing));
  return expect_status(std::move(r));
}

Result<StatVfs> SftpBackend::statvfs(std::string_view rel) {
  using R = Result<StatVfs>;
  // statvfs follows a symlink at the end: ask for a directory known to be one.
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return R::failure(st.error());
  std::string asked = in_export(rel);
  if (asked.size() > 1 && !paths_->verified(export_path(asked))) asked = parent_path(asked);
  auto conn = pool().connection(pool().pick_slot());
  if (!conn) return R::failure(conn.error());
  if (!(*conn)->has_extension("statvfs@openssh.com")) return R::failure(ENOTSUP);
  pool().count_ops(1);
  auto r = (*conn)->call(
      PacketWriter(FXP_EXTENDED).str("statvfs@openssh.com").str(export_path(asked)).take());
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

Result<std::shared_ptr<BackendFile>> SftpBackend::open(std::string_view rel, int flags,
                                                       uint32_t mode) {
  auto f = std::make_shared<RemoteFile>(shared_from_this(), std::string(rel), flags);
  auto st = f->open_first(mode);
  if (!st) return Result<std::shared_ptr<BackendFile>>::failure(st.error());
  return std::shared_ptr<BackendFile>(std::move(f));
}

namespace {

// Whether the attributes of a file opened by name (its FSTAT) are those its name's LSTAT saw just
// before: the same type, mode, owner, group, size and mtime. SFTP names no inode, so a file swapped
// in at the name between the two (a symlink the OPEN followed) shows as another one unless it is
// alike in all of these.
bool same_file_as_looked(const Attrs& opened, const Attrs& looked) {
  auto both = [&](uint32_t flag) { return (opened.flags & flag) && (looked.flags & flag); };
  return both(ATTR_PERMISSIONS) && opened.permissions == looked.permissions && both(ATTR_UIDGID) &&
         opened.uid == looked.uid && opened.gid == looked.gid && both(ATTR_SIZE) &&
         opened.size == looked.size && both(ATTR_ACMODTIME) && opened.mtime == looked.mtime;
}

}  // namespace

std::vector<Result<WholeFile>> SftpBackend::read_whole_files(const std::vector<std::string>& rels,
                                                             uint32_t max_bytes,
                                                             bool attrs_of_files) {
  std::vector<Result<WholeFile>> out(rels.size(), Result<WholeFile>::failure(EIO));
  std::vector<bool> again(rels.size(), false);  // for the default way
  {
    // Held until every handle is open: as for open_first().
    auto hold = paths_->hold(PathGuard::Mode::shared);
    auto conn = connection(pool().pick_slot());
    if (!conn || !(*conn)->short_read_is_eof() ||
        uint64_t{max_bytes} + 1 > (*conn)->limits().max_read)
      return Backend::read_whole_files(rels, max_bytes, attrs_of_files);
    Connection& c = **conn;
    // First round: every file's LSTAT. Only a regular file that fits is opened: an OPEN of a
    // fifo would wait in the server for a writer.
    std::vector<size_t> asked;
    std::vector<Request> looks;
    for (size_t i = 0; i < rels.size(); ++i) {
      if (auto st = confine(rels[i]); !st) {
        out[i] = Result<WholeFile>::failure(st.error());
        continue;
      }
      asked.push_back(i);
      looks.push_back(PacketWriter(FXP_LSTAT).str(remote_path(rels[i])).take());
    }
    pool().count_ops(looks.size());
    auto looked = c.call_all(std::move(looks));
    std::vector<std::pair<size_t, Attrs>> to_open;
    std::vector<Request> opens;
    for (size_t k = 0; k < asked.size(); ++k) {
      const size_t i = asked[k];
      const auto code = status_code(looked[k]);
      auto attrs = expect_attrs(std::move(looked[k]));
      int error = 0;
      if (!attrs) {
        if (code && (*code == FX_NO_SUCH_FILE || *code == FX_PERMISSION_DENIED))
          error = attrs.error();
        else
          again[i] = true;
      } else if (S_ISLNK(attrs->permissions)) {
        error = ELOOP;
      } else if (S_ISDIR(attrs->permissions)) {
        error = EISDIR;
      } else if (!S_ISREG(attrs->permissions)) {
        error = EINVAL;
      } else if (!(attrs->flags & ATTR_SIZE)) {
        again[i] = true;
      } else if (attrs->size > max_bytes) {
        error = EFBIG;
      } else {
        to_open.push_back({i, *attrs});
        opens.push_back(PacketWriter(FXP_OPEN)
                            .str(remote_path(rels[i]))
                            .u32(open_flags_to_pflags(O_RDONLY))
                            .attrs({})
                            .take());
      }
      if (error) out[i] = Result<WholeFile>::failure(error);
    }
    pool().count_ops(opens.size());
    auto opened = c.call_all(std::move(opens));
    // Last round: each file's READ of one byte more than its size (a short answer is its end),
    // its FSTAT, and its CLOSE; in rounds of READs the connection's window holds. The FSTAT's
    // attributes are of the file read: the LSTAT looked at a name, which may lead to another
    // file by the time of the OPEN (a symlink swapped in on the server, which the OPEN follows).
    // A file whose FSTAT is not what its LSTAT saw (type, mode, owner, group, size, mtime) goes
    // the default way, which looks again; its bytes are not answered.
    struct Reading {
      size_t i;
      Attrs looked;  // the LSTAT's
      uint32_t asked;
      size_t reply;  // index of its READ's reply in its round; its FSTAT's is next
    };
    std::vector<Reading> reading;
    std::vector<Request> round;
    size_t round_bytes = 0;
    uint64_t bytes = 0;
    auto send_round = [&] {
      if (round.empty()) return;
      pool().count_ops(round.size());
      auto replies = c.call_all(std::move(round));
      for (auto& r : reading) {
        Result<Reply>& got = replies[r.reply];
        auto attrs = expect_attrs(std::move(replies[r.reply + 1]));
        // Another file than the one looked at, or one that grew: the default way, which
        // looks again.
        if (!attrs || !S_ISREG(attrs->permissions) || !(attrs->flags & ATTR_SIZE) ||
            attrs->size >= r.asked || !same_file_as_looked(*attrs, r.looked)) {
          again[r.i] = true;
          continue;
        }
        if (!attrs_of_files) attrs = r.looked;
        const auto code = status_code(got);
        if (code && *code == FX_EOF) {  // empty
          out[r.i] = WholeFile{*attrs, {}};
          continue;
        }
        if (!got || got->type != FXP_DATA) {
          again[r.i] = true;
          continue;
        }
        auto owner = std::make_shared<Reply>(std::move(*got));
        auto data = PacketReader(owner->body).str();
        if (!data || data->size() >= r.asked) {  // unreadable, or it grew since its LSTAT
          again[r.i] = true;
          continue;
        }
        bytes += data->size();
        std::vector<std::string_view> pieces;
        if (!data->empty()) pieces.push_back(*data);
        out[r.i] = WholeFile{*attrs, SharedBytes(std::move(pieces), owner)};
      }
      reading.clear();
      round.clear();
      round_bytes = 0;
    };
    for (size_t k = 0; k < to_open.size(); ++k) {
      const auto& [i, attrs] = to_open[k];
      auto handle = expect_handle(std::move(opened[k]));
      if (!handle) {
        again[i] = true;
        continue;
      }
      const auto ask = static_cast<uint32_t>(attrs.size + 1);
      if (round_bytes + ask > c.read_window()) send_round();
      reading.push_back({i, attrs, ask, round.size()});
      round.push_back(PacketWriter(FXP_READ).str(*handle).u64(0).u32(ask).take());
      round.push_back(PacketWriter(FXP_FSTAT).str(*handle).take());
      round.push_back(PacketWriter(FXP_CLOSE).str(*handle).take());
      round_bytes += ask;
    }
    send_round();
    pool().count_read(bytes);
  }
  std::vector<std::string> rest;
  for (size_t i = 0; i < rels.size(); ++i)
    if (again[i]) rest.push_back(rels[i]);
  if (rest.empty()) return out;
  auto got = Backend::read_whole_files(rest, max_bytes, attrs_of_files);
  for (size_t i = 0, k = 0; i < rels.size(); ++i)
    if (again[i]) out[i] = std::move(got[k++]);
  return out;
}

std::vector<std::optional<Result<MadeWholeFile>>> SftpBackend::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  using R = Result<MadeWholeFile>;
  std::vector<std::optional<R>> out(files.size(), R::failure(EIO));
  std::vector<bool> again(files.size(), false);  // left to the layout
  std::vector<size_t> remove;                    // partials left by a failed file
  {
    auto conn = connection(pool().pick_slot());
    if (!conn || !(*conn)->has_extension("posix-rename@openssh.com"))
      return Backend::write_whole_files(files);  // every file to the layout
    Connection& c = **conn;
    // A plain "no such file" or "permission denied" is the file's answer; anything else is left
    // to the layout's way, which diagnoses it.
    auto final_error = [](const Result<Reply>& r) -> int {
      const auto code = status_code(r);
      if (code && (*code == FX_NO_SUCH_FILE || *code == FX_PERMISSION_DENIED))
        return status_to_errno(*code);
      return 0;
    };

    // First round: the partials' OPENs, with O_EXCL as every create here (O_CREAT alone would
    // follow a symlink left at the name), held as open() holds until the handles are open.
    std::vector<size_t> asked;
    std::vector<Result<Reply>> opened;
    {
      auto hold = paths_->hold(PathGuard::Mode::shared);
      std::vector<Request> opens;
      for (size_t i = 0; i < files.size(); ++i) {
        if (auto st = confine(files[i].partial); !st) {
          out[i] = R::failure(st.error());
          continue;
        }
        Attrs a;
        a.flags = ATTR_PERMISSIONS;
        a.permissions = (files[i].mode & 0777) | S_IWUSR;  // writable by its owner until whole
        asked.push_back(i);
        opens.push_back(PacketWriter(FXP_OPEN)
                            .str(remote_path(files[i].partial))
                            .u32(open_flags_to_pflags(O_WRONLY | O_CREAT | O_EXCL))
                            .attrs(a)
                            .take());
      }
      pool().count_ops(opens.size());
      opened = c.call_all(std::move(opens));
    }

    // Second round: each file's WRITEs, its mode and times (FSETSTAT) and its CLOSE. A WRITE's
    // data is sent from the caller's pieces; the connection copies only a small one, to join it
    // with the requests around it.
    const uint64_t chunk =
        std::max<uint64_t>(4096, std::min<uint64_t>(c.limits().max_write, 1 << 20));
    struct Writing {
      size_t i;
      size_t first, count;  // its requests in the round
    };
    std::vector<Writing> writing;
    std::vector<Request> round;
    for (size_t k = 0; k < asked.size(); ++k) {
      const size_t i = asked[k];
      const int error = final_error(opened[k]);
      auto handle = expect_handle(std::move(opened[k]));
      if (!handle) {
        if (error)
          out[i] = R::failure(error);
        else
          again[i] = true;
        continue;
      }
      const NewWholeFile& f = files[i];
      Writing w{i, round.size(), 0};
      for (uint64_t off = 0; off < f.data.size(); off += chunk) {
        std::vector<std::string_view> parts;
        f.data.view(off, chunk, parts);
        round.push_back(
            PacketWriter(FXP_WRITE).str(*handle).u64(off).take_with_str(std::move(parts)));
      }
      Attrs a;
      a.flags = ATTR_PERMISSIONS | ATTR_ACMODTIME;
      a.permissions = f.mode & 07777;
      a.atime = static_cast<uint32_t>(f.atime_s);
      a.mtime = static_cast<uint32_t>(f.mtime_s);
      round.push_back(PacketWriter(FXP_FSETSTAT).str(*handle).attrs(a).take());
      round.push_back(PacketWriter(FXP_CLOSE).str(*handle).take());
      w.count = round.size() - w.first;
      writing.push_back(w);
    }
    pool().count_ops(round.size());
    auto replies = c.call_all(std::move(round));
    std::vector<size_t> written;
    uint64_t bytes = 0;
    for (const Writing& w : writing) {
      bool ok = true;
      for (size_t r = w.first; r < w.first + w.count && ok; ++r) {
        const auto code = status_code(replies[r]);
        ok = code && *code == FX_OK;
      }
      if (ok) {
        written.push_back(w.i);
        bytes += files[w.i].data.size();
      } else {
        again[w.i] = true;  // the layout's way makes the partial anew and says why
      }
    }
    pool().count_written(bytes);

    // Last round, holding the server's paths as every rename does (what was verified at either
    // name is looked at again): the RENAMEs, then each file's LSTAT and its directory's once.
    std::vector<size_t> renaming;
    std::vector<Result<Reply>> answers;
    std::vector<std::string> dirs;
    {
      auto hold = paths_->hold(PathGuard::Mode::exclusive);
      std::vector<Request> asks;
      for (size_t i : written) {
        const NewWholeFile& f = files[i];
        auto st = confine(f.partial);
        if (st) st = confine(f.path);
        if (!st) {
          out[i] = R::failure(st.error());
          remove.push_back(i);
          continue;
        }
        renaming.push_back(i);
        asks.push_back(PacketWriter(FXP_EXTENDED)
                           .str("posix-rename@openssh.com")
                           .str(remote_path(f.partial))
                           .str(remote_path(f.path))
                           .take());
      }
      // sftp-server answers in order: the LSTATs see the files and directories as the renames
      // left them.
      for (size_t i : renaming) {
        asks.push_back(PacketWriter(FXP_LSTAT).str(remote_path(files[i].path)).take());
        const std::string dir = parent_path(files[i].path);
        if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
      }
      for (const std::string& dir : dirs)
        asks.push_back(PacketWriter(FXP_LSTAT).str(remote_path(dir)).take());
      pool().count_ops(asks.size());
      for (size_t i : renaming) {
        epochs().expect_echo(remote_path(files[i].partial));
        epochs().expect_echo(remote_path(files[i].path));
      }
      answers = c.call_all(std::move(asks));
      for (size_t k = 0; k < renaming.size(); ++k) {
        const NewWholeFile& f = files[renaming[k]];
        paths_->forget_tree(remote_path(f.partial));
        paths_->forget_tree(remote_path(f.path));
        // Moved where the rename was done or may have been; an echo only of one done.
        const auto code = status_code(answers[k]);
        if (!code || *code == FX_OK) {
          replaced(f.partial);
          replaced(f.path);
        }
        if (!code || *code != FX_OK) {
          epochs().no_echo(remote_path(f.partial));
          epochs().no_echo(remote_path(f.path));
        }
      }
    }
    std::vector<std::optional<Attrs>> dir_attrs(dirs.size());
    // The answers: each file's RENAME, then its LSTAT, then the directories'.
    const size_t n = renaming.size();
    for (size_t d = 0; d < dirs.size(); ++d) {
      if (auto a = expect_attrs(std::move(answers[2 * n + d]))) dir_attrs[d] = *a;
    }
    for (size_t k = 0; k < n; ++k) {
      const size_t i = renaming[k];
      Result<Reply>& renamed = answers[k];
      const auto code = status_code(renamed);
      if (!code || *code != FX_OK) {
        if (const int error = final_error(renamed)) {
          out[i] = R::failure(error);
          remove.push_back(i);
        } else {
          again[i] = true;
        }
        continue;
      }
      auto attrs = expect_attrs(std::move(answers[n + k]));
      if (!attrs) {
        out[i] = R::failure(attrs.error());
        continue;
      }
      const std::string dir = parent_path(files[i].path);
      const size_t d = static_cast<size_t>(std::find(dirs.begin(), dirs.end(), dir) - dirs.begin());
      out[i] = MadeWholeFile{*attrs, dir_attrs[d]};
    }
  }
  for (size_t i : remove) (void)unlink(files[i].partial);
  for (size_t i = 0; i < files.size(); ++i)
    if (again[i]) out[i].reset();
  return out;
}

}  // namespace skein
