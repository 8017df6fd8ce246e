// Backend and RemoteFile; see backend.hpp.
#include "backend/backend.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <future>
#include <random>

#include "backend/remote_file.hpp"
#include "backend/reply_parsing.hpp"
#include "skein/path.hpp"

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

}  // namespace

Backend::Backend(BackendConfig cfg)
    : cfg_(std::move(cfg)), paths_(PathGuard::of(cfg_.endpoint.host, cfg_.endpoint.port)) {
  int n = std::max(1, cfg_.connections);
  for (int i = 0; i < n; ++i) slots_.push_back(std::make_unique<Slot>());
}

Backend::~Backend() {
  {
    std::lock_guard lock(probe_mu_);
    stopping_ = true;
  }
  probe_cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (warmer_.joinable()) warmer_.join();
}

void Backend::warm_up() {
  if (warmer_.joinable()) return;
  warmer_ = std::thread([this] {
    for (size_t i = 0; i < slots_.size(); ++i) {
      {
        std::lock_guard lock(probe_mu_);
        if (stopping_) return;
      }
      if (!connection(i)) return;  // down: the prober takes over
    }
  });
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

size_t Backend::live_connections() const {
  size_t n = 0;
  for (auto& s : slots_) {
    std::lock_guard lock(s->mu);
    if (s->conn && s->conn->alive()) ++n;
  }
  return n;
}

std::string Backend::ssh_stacks() const {
  bool native = false, libssh = false;
  for (auto& s : slots_) {
    std::lock_guard lock(s->mu);
    if (!s->conn || !s->conn->alive()) continue;
    (s->conn->stack() == sftp::SshStack::libssh ? libssh : native) = true;
  }
  return native && libssh ? "native,libssh" : native ? "native" : libssh ? "libssh" : "";
}

void Backend::mark_down(const std::string& why) {
  std::lock_guard lock(probe_mu_);
  if (up_.exchange(false)) spdlog::warn("backend {} is down: {}", cfg_.name, why);
  if (probing_ || stopping_) return;
  probing_ = true;
  if (prober_.joinable()) prober_.join();  // a finished earlier prober
  prober_ = std::thread([this] { probe_until_up(); });
}

std::unique_ptr<Connection> Backend::connect(std::string& error) {
  // The connection calls back on the thread that saw the deadline go by; the Backend outlives
  // its connections (it owns them, and every RemoteFile holding one holds the Backend too).
  return Connection::connect(cfg_.endpoint, error, [this](const std::string& why) { hung(why); });
}

void Backend::hung(const std::string& why) {
  mark_down(why);
  for (auto& slot : slots_) {
    std::unique_lock lock(slot->mu, std::try_to_lock);  // a slot reconnecting fails on its own
    if (lock && slot->conn) slot->conn->shutdown("backend " + cfg_.name + " is down: " + why);
  }
}

void Backend::probe_until_up() {
  // Callers never wait for a server that is down: they get EIO at once while this thread
  // reconnects, backing off exponentially with jitter.
  for (int failures = 0;; ++failures) {
    {
      std::unique_lock lock(probe_mu_);
      if (probe_cv_.wait_for(lock, backoff_delay(failures), [this] { return stopping_; })) {
        probing_ = false;
        return;
      }
    }
    std::string error;
    auto c = connect(error);
    if (!c) {
      spdlog::debug("backend {}: reconnect attempt {} failed: {}", cfg_.name, failures + 1, error);
      continue;
    }
    {
      Slot& s = *slots_[0];
      std::lock_guard lock(s.mu);
      s.conn = std::shared_ptr<Connection>(std::move(c));
    }
    std::lock_guard lock(probe_mu_);
    probing_ = false;
    up_ = true;
    spdlog::info("backend {} is back up", cfg_.name);
    return;
  }
}

Result<std::shared_ptr<Connection>> Backend::connection(size_t slot) {
  using R = Result<std::shared_ptr<Connection>>;
  Slot& s = *slots_[slot % slots_.size()];
  {
    std::lock_guard lock(s.mu);
    if (s.conn && s.conn->alive()) return s.conn;
    if (s.conn) {
      spdlog::warn("backend {}: {}", cfg_.name, s.conn->failure());
      s.conn.reset();
    }
  }
  if (!up_) return R::failure(EIO);
  // The server was answering a moment ago: reconnect this slot now.
  std::lock_guard lock(s.mu);
  if (s.conn && s.conn->alive()) return s.conn;  // another caller did it meanwhile
  std::string error;
  auto c = connect(error);
  if (!c) {
    mark_down(error);
    return R::failure(EIO);
  }
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

std::future<Result<Reply>> Backend::start(std::string framed) {
  ++ops;
  auto conn = connection(pick_slot());
  if (!conn) {
    std::promise<Result<Reply>> p;
    p.set_value(Result<Reply>::failure(conn.error()));
    return p.get_future();
  }
  return (*conn)->send(std::move(framed));
}

Backend::PendingLstat Backend::start_lstat(std::string_view rel) {
  PendingLstat p;
  p.hold_ = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) {
    p.done_ = Result<Attrs>::failure(st.error());
    return p;
  }
  p.reply_ = start(PacketWriter(FXP_LSTAT).str(remote_path(rel)).take());
  return p;
}

Result<Attrs> Backend::PendingLstat::attrs() {
  if (!done_) done_ = expect_attrs(reply_.get());
  hold_ = PathGuard::Hold();
  return *done_;
}

std::vector<PathGuard::Hold> Backend::hold_paths(
    const std::vector<std::shared_ptr<Backend>>& backends) {
  std::vector<PathGuard*> guards;
  for (auto& b : backends) guards.push_back(b->paths_.get());
  return PathGuard::hold_all(std::move(guards));
}

Result<Attrs> Backend::attrs_of(Result<Reply> reply) { return expect_attrs(std::move(reply)); }

void Backend::changed_on_server(std::string_view rel) { paths_->forget_tree(remote_path(rel)); }

Status Backend::confine(std::string_view rel, Confine what) {
  // The directories to look at, from the top: each prefix of `rel` ending before a '/', and
  // `rel` itself for Confine::self.
  std::vector<std::string> unknown;
  for (size_t pos = rel.find('/', 1); pos != std::string_view::npos; pos = rel.find('/', pos + 1)) {
    std::string dir = remote_path(rel.substr(0, pos));
    if (!paths_->verified(dir)) unknown.push_back(std::move(dir));
  }
  if (what == Confine::self && rel.size() > 1) {
    std::string dir = remote_path(rel);
    if (!paths_->verified(dir)) unknown.push_back(std::move(dir));
  }
  if (unknown.empty()) return ok_status();
  std::vector<Result<Reply>> replies;
  for (int attempt = 0;; ++attempt) {
    auto conn = connection(pick_slot());
    if (!conn) return Status::failure(conn.error());
    std::vector<Request> asks;
    for (auto& dir : unknown) asks.push_back(PacketWriter(FXP_LSTAT).str(dir).take());
    ops += asks.size();
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
      spdlog::debug("backend {}: {} is a symlink: not followed (ELOOP)", cfg_.name, unknown[i]);
      return Status::failure(ELOOP);
    }
    if (!S_ISDIR(a->permissions)) return Status::failure(ENOTDIR);
    paths_->mark_verified(unknown[i]);
  }
  return ok_status();
}

Result<Attrs> Backend::lstat_confined(std::string_view rel) {
  auto a = expect_attrs(call(PacketWriter(FXP_LSTAT).str(remote_path(rel)).take(), true));
  if (a && S_ISDIR(a->permissions) && rel.size() > 1) paths_->mark_verified(remote_path(rel));
  return a;
}

Result<Reply> Backend::open_confined(Connection& conn, const std::string& rel, int flags,
                                     const Attrs& attrs, std::optional<Attrs>* lstat) {
  const std::string path = remote_path(rel);
  const std::string open = PacketWriter(FXP_OPEN)
                               .str(path)
                               .u32(open_flags_to_pflags(flags & ~(O_CREAT | O_EXCL)))
                               .attrs(attrs)
                               .take();
  const std::string look = PacketWriter(FXP_LSTAT).str(path).take();
  ops += 2;
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

Result<StatVfs> Backend::free_space() {
  {
    std::lock_guard lock(probe_mu_);
    if (free_cache_ &&
        std::chrono::steady_clock::now() - free_cache_time_ < std::chrono::seconds(2))
      return *free_cache_;
  }
  auto v = statvfs("/");
  if (!v) return v;
  std::lock_guard lock(probe_mu_);
  free_cache_ = *v;
  free_cache_time_ = std::chrono::steady_clock::now();
  return v;
}

bool Backend::accepts_new_files() {
  if (!up_ || draining_) return false;
  if (cfg_.min_free_bytes == 0) return true;
  auto v = free_space();
  if (!v) return false;
  return v->bavail * (v->frsize ? v->frsize : v->bsize) >= cfg_.min_free_bytes;
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
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return Result<Attrs>::failure(st.error());
  return lstat_confined(rel);
}

Status Backend::setstat(std::string_view rel, const Attrs& attrs) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  // SETSTAT follows a symlink; lsetstat does not, but OpenSSH's cannot change the size. Where
  // the plain one must be used, look first: under the hold nothing can swap the file for a
  // symlink through the gateway meanwhile.
  auto conn = connection(pick_slot());
  if (!conn) return Status::failure(conn.error());
  bool use_l = !(attrs.flags & ATTR_SIZE) && (*conn)->has_extension("lsetstat@openssh.com");
  if (!use_l) {
    auto a = lstat_confined(rel);
    if (!a) return Status::failure(a.error());
    if (S_ISLNK(a->permissions)) return Status::failure(ELOOP);
  }
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
  // OPENDIR follows a symlink at the end too: the directory itself must be a verified one.
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel, Confine::self); !st) return R::failure(st.error());
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
    // The server lists with lstat: a directory here is a real one.
    for (auto& e : out)
      if (S_ISDIR(e.attrs.permissions) && is_valid_entry_name(e.filename))
        paths_->mark_verified(remote_path(join_path(rel, e.filename)));
    return out;
  }
}

Status Backend::mkdir(std::string_view rel, uint32_t mode) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  Attrs a;
  a.flags = ATTR_PERMISSIONS;
  a.permissions = mode & 07777;
  auto r = call(PacketWriter(FXP_MKDIR).str(remote_path(rel)).attrs(a).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("mkdir", rel));
  auto st = expect_status(std::move(r));
  if (st) paths_->mark_verified(remote_path(rel));
  // The server's umask may have taken bits the caller asked for (the client applied its own).
  if (st && (mode & 07022)) (void)setstat(rel, a);
  return st;
}

Status Backend::rmdir(std::string_view rel) {
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  auto r = call(PacketWriter(FXP_RMDIR).str(remote_path(rel)).take(), false);
  if (status_code(r) == FX_OK) paths_->forget_tree(remote_path(rel));
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
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return st;
  auto r = call(PacketWriter(FXP_REMOVE).str(remote_path(rel)).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("unlink", rel));
  return expect_status(std::move(r));
}

Status Backend::rename(std::string_view from, std::string_view to, unsigned flags) {
  // It can put a symlink (or a tree holding one) where a directory was: nothing else runs on
  // this server's paths meanwhile, and what was verified at either name is looked at again.
  auto hold = paths_->hold(PathGuard::Mode::exclusive);
  if (auto st = confine(from); !st) return st;
  if (auto st = confine(to); !st) return st;
  struct Forget {
    Backend& b;
    std::string_view from, to;
    ~Forget() {
      b.paths_->forget_tree(b.remote_path(from));
      b.paths_->forget_tree(b.remote_path(to));
    }
  } forget{*this, from, to};
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
  // The target is stored as it is (a mount's kernel resolves it, on its own side); the new link
  // must not appear under an operation that has just checked that name as a directory.
  auto hold = paths_->hold(PathGuard::Mode::exclusive);
  if (auto st = confine(rel); !st) return st;
  paths_->forget_tree(remote_path(rel));
  // OpenSSH takes the target first and the new link second (the reverse of the draft).
  auto r = call(PacketWriter(FXP_SYMLINK).str(target).str(remote_path(rel)).take(), false);
  auto code = status_code(r);
  if (code && *code == FX_FAILURE) return Status::failure(diagnose_failure("symlink", rel));
  return expect_status(std::move(r));
}

Result<std::string> Backend::readlink(std::string_view rel) {
  using R = Result<std::string>;
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return R::failure(st.error());
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
  // A hard link of a symlink is a symlink: exclusive, as for symlink().
  auto hold = paths_->hold(PathGuard::Mode::exclusive);
  if (auto st = confine(existing); !st) return st;
  if (auto st = confine(rel); !st) return st;
  paths_->forget_tree(remote_path(rel));
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
  // statvfs follows a symlink at the end: ask for a directory known to be one.
  auto hold = paths_->hold(PathGuard::Mode::shared);
  if (auto st = confine(rel); !st) return R::failure(st.error());
  std::string asked(rel);
  if (asked.size() > 1 && !paths_->verified(remote_path(asked))) asked = parent_path(asked);
  rel = asked;
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

Status Backend::clone_dirs(std::string_view rel_dir, Backend& model) {
  if (rel_dir.empty() || rel_dir == "/") return ok_status();
  auto here = lstat(rel_dir);
  if (here) return S_ISDIR(here->permissions) ? ok_status() : Status::failure(ENOTDIR);
  if (here.error() != ENOENT) return Status::failure(here.error());
  auto pos = rel_dir.rfind('/');
  auto st = clone_dirs(pos == 0 ? std::string_view("/") : rel_dir.substr(0, pos), model);
  if (!st) return st;
  auto m = model.lstat(rel_dir);
  if (!m) return Status::failure(m.error());
  st = mkdir(rel_dir, m->permissions & 07777);
  if (!st && st.error() != EEXIST) return st;
  Attrs a = *m;
  a.flags &= ATTR_UIDGID | ATTR_PERMISSIONS | ATTR_ACMODTIME;
  a.permissions &= 07777;
  (void)setstat(rel_dir, a);
  return ok_status();
}

Result<std::shared_ptr<RemoteFile>> Backend::open(std::string_view rel, int flags, uint32_t mode) {
  auto f = std::make_shared<RemoteFile>(shared_from_this(), std::string(rel), flags);
  auto st = f->open_first(mode);
  if (!st) return Result<std::shared_ptr<RemoteFile>>::failure(st.error());
  return f;
}

}  // namespace skein
