// The in-memory backend of the unit tests; see fake_backend.hpp.
#include "fake_backend.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "skein/path.hpp"

namespace skein::test {

struct FakeBackend::Node {
  uint32_t type = S_IFREG;  // S_IFDIR, S_IFREG or S_IFLNK
  uint32_t mode = 0644;
  uint32_t uid = 1000, gid = 1000;
  uint32_t atime = 0, mtime = 0;
  std::string data;    // a file's contents
  std::string target;  // a symlink's
  uint32_t links = 1;  // a file's names
};

struct FakeBackend::Tree {
  struct Failure {
    std::string op, path;  // path empty: any
    int err;
  };
  mutable std::mutex mu;                               // guards everything here
  std::map<std::string, std::shared_ptr<Node>> nodes;  // by path below the root; "/" the root
  bool down = false, full = false, read_only = false, draining = false;
  bool makes_whole_files = false;
  bool owner_modes_checked = false;
  uint64_t min_free = 0, total = static_cast<uint64_t>(1) << 30,
           free = static_cast<uint64_t>(1) << 30;
  std::vector<Failure> failures;
  std::map<std::string, std::function<void()>, std::less<>> next_hooks;  // by op (on_next)
  std::map<std::string, size_t, std::less<>> calls;
  size_t all_calls = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint32_t clock = 1700000000;
  std::vector<OpenFile::HandleJudge> judges;  // given to its files (judge_new_handles)

  uint32_t tick() { return ++clock; }

  // Counts a call of `op` on `path` and says whether it fails at once (down, or a failure the
  // test asked for).
  int enter(std::string_view op, const std::string& path) {
    ++all_calls;
    ++calls[std::string(op)];
    if (auto h = next_hooks.find(op); h != next_hooks.end()) {
      auto hook = std::move(h->second);
      next_hooks.erase(h);
      // Run without the lock the caller holds (and takes again after): the hook may use this
      // backend itself, as another caller would between two of its calls.
      mu.unlock();
      hook();
      mu.lock();
    }
    if (down) return EIO;
    for (auto& f : failures)
      if (f.op == op && (f.path.empty() || f.path == path)) return f.err;
    return 0;
  }
  // EACCES when the owner may not do `bits` (S_IRUSR, S_IWUSR, S_IXUSR) in directory `dir`, as
  // an account that is not root (owner_modes_checked).
  int denied(const std::string& dir, uint32_t bits) const {
    if (!owner_modes_checked) return 0;
    auto n = find(dir.empty() ? "/" : dir);
    return n && n->type == S_IFDIR && (n->mode & bits) != bits ? EACCES : 0;
  }
  std::shared_ptr<Node> find(const std::string& path) const {
    auto it = nodes.find(path);
    return it == nodes.end() ? nullptr : it->second;
  }
  // Every directory above `path` must be a real one, as for SftpBackend's confinement.
  int walk(const std::string& path) const {
    for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
      auto n = find(path.substr(0, pos));
      if (!n) return ENOENT;
      if (n->type == S_IFLNK) return ELOOP;
      if (n->type != S_IFDIR) return ENOTDIR;
    }
    return 0;
  }
  bool has_children(const std::string& dir) const {
    const std::string below = dir == "/" ? "/" : dir + "/";
    auto it = nodes.upper_bound(below);
    return it != nodes.end() && it->first.starts_with(below);
  }
  uint32_t subdirs(const std::string& dir) const {
    uint32_t n = 0;
    const std::string below = dir == "/" ? "/" : dir + "/";
    for (auto it = nodes.upper_bound(below); it != nodes.end() && it->first.starts_with(below);
         ++it)
      if (it->first.find('/', below.size()) == std::string::npos && it->second->type == S_IFDIR)
        ++n;
    return n;
  }
  sftp::Attrs attrs_of(const std::string& path, const Node& n) const {
    sftp::Attrs a;
    a.flags = sftp::ATTR_SIZE | sftp::ATTR_UIDGID | sftp::ATTR_PERMISSIONS | sftp::ATTR_ACMODTIME;
    a.permissions = n.type | n.mode;
    a.uid = n.uid;
    a.gid = n.gid;
    a.atime = n.atime;
    a.mtime = n.mtime;
    a.size = n.type == S_IFREG ? n.data.size() : n.type == S_IFLNK ? n.target.size() : 4096;
    (void)path;
    return a;
  }
  uint32_t link_count(const std::string& path, const Node& n) const {
    return n.type == S_IFDIR ? 2 + subdirs(path) : n.links;
  }
  void touch_parent(const std::string& path) {
    if (auto p = find(parent_path(path))) p->mtime = tick();
  }
  std::shared_ptr<Node> add(const std::string& path, uint32_t type, uint32_t mode) {
    auto n = std::make_shared<Node>();
    n->type = type;
    n->mode = mode & 07777;
    n->atime = n->mtime = tick();
    nodes[path] = n;
    touch_parent(path);
    return n;
  }
  void make_parents(const std::string& path) {
    for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1))
      if (!find(path.substr(0, pos))) add(path.substr(0, pos), S_IFDIR, 0755);
  }
  void remove(const std::string& path) {
    auto n = find(path);
    if (n && n->type == S_IFREG && n->links > 0) --n->links;
    nodes.erase(path);
    touch_parent(path);
  }
  uint64_t free_now() const { return full ? 0 : free; }
};

namespace {
using Tree = FakeBackend::Tree;
using Node = FakeBackend::Node;

Status status(int err) { return err ? Status::failure(err) : ok_status(); }
}  // namespace

// An open file of the fake: it holds the node, as a descriptor holds an inode, so it survives an
// unlink or a rename of its name.
class FakeBackend::File final : public BackendFile {
 public:
  File(std::shared_ptr<Tree> tree, std::shared_ptr<Node> node, std::string full, std::string rel,
       int flags)
      : tree_(std::move(tree)),
        node_(std::move(node)),
        full_(std::move(full)),
        rel_(std::move(rel)),
        flags_(flags) {}

  void judge_new_handles(HandleJudge may_use) override {
    std::lock_guard lock(tree_->mu);
    tree_->judges.push_back(std::move(may_use));
  }
  Result<SharedBytes> read(uint64_t offset, uint32_t size) override {
    using R = Result<SharedBytes>;
    std::lock_guard lock(tree_->mu);
    if (int e = tree_->enter("read", full_)) return R::failure(e);
    if (node_->type == S_IFDIR) return R::failure(EISDIR);
    if ((flags_ & O_ACCMODE) == O_WRONLY) return R::failure(EBADF);
    auto copy = std::make_shared<std::string>(
        offset >= node_->data.size() ? std::string() : node_->data.substr(offset, size));
    tree_->bytes_read += copy->size();
    if (copy->empty()) return SharedBytes();
    return SharedBytes({std::string_view(*copy)}, copy);
  }
  Result<uint32_t> write(uint64_t offset, const SharedBytes& data) override {
    using R = Result<uint32_t>;
    std::lock_guard lock(tree_->mu);
    if (int e = tree_->enter("write", full_)) return R::failure(e);
    if ((flags_ & O_ACCMODE) == O_RDONLY) return R::failure(EBADF);
    if (tree_->read_only) return R::failure(EACCES);
    if (flags_ & O_APPEND) offset = node_->data.size();
    if (tree_->full && offset + data.size() > node_->data.size()) return R::failure(ENOSPC);
    std::string bytes = data.flatten();
    if (node_->data.size() < offset + bytes.size()) node_->data.resize(offset + bytes.size(), '\0');
    node_->data.replace(offset, bytes.size(), bytes);
    node_->mtime = tree_->tick();
    tree_->bytes_written += bytes.size();
    return static_cast<uint32_t>(bytes.size());
  }
  Status fsync() override {
    std::lock_guard lock(tree_->mu);
    return status(tree_->enter("fsync", full_));
  }
  Status truncate(uint64_t size) override {
    std::lock_guard lock(tree_->mu);
    if (int e = tree_->enter("truncate", full_)) return Status::failure(e);
    if (tree_->read_only) return Status::failure(EACCES);
    if (tree_->full && size > node_->data.size()) return Status::failure(ENOSPC);
    node_->data.resize(size, '\0');
    node_->mtime = tree_->tick();
    return ok_status();
  }
  Result<sftp::Attrs> fstat() override {
    std::lock_guard lock(tree_->mu);
    if (int e = tree_->enter("fstat", full_)) return Result<sftp::Attrs>::failure(e);
    return tree_->attrs_of(full_, *node_);
  }
  // Mode, owner and size (not the times), as FSETSTAT through the handle.
  Result<sftp::Attrs> set_attrs(const AttrChange& change) override {
    using R = Result<sftp::Attrs>;
    std::lock_guard lock(tree_->mu);
    if (int e = tree_->enter("setstat", full_)) return R::failure(e);
    if (tree_->read_only) return R::failure(EACCES);
    if (change.mode) node_->mode = *change.mode & 07777;
    if (change.uid) node_->uid = *change.uid;
    if (change.gid) node_->gid = *change.gid;
    if (change.size) node_->data.resize(*change.size, '\0');
    return tree_->attrs_of(full_, *node_);
  }
  Status close() override {
    std::lock_guard lock(tree_->mu);
    ++tree_->all_calls;
    return ok_status();
  }
  std::string rel_path() const override {
    std::lock_guard lock(tree_->mu);
    return rel_;
  }
  void renamed(std::string new_rel) override {
    std::lock_guard lock(tree_->mu);
    rel_ = std::move(new_rel);
  }
  std::optional<sftp::Attrs> attrs_at_open() const override { return attrs_at_open_; }
  std::optional<sftp::Attrs> parent_attrs_at_open() const override { return parent_attrs_at_open_; }

  std::optional<sftp::Attrs> attrs_at_open_, parent_attrs_at_open_;

 private:
  std::shared_ptr<Tree> tree_;
  std::shared_ptr<Node> node_;
  std::string full_;
  std::string rel_;  // guarded by tree_->mu
  int flags_;
};

std::shared_ptr<FakeBackend> FakeBackend::make(std::string name) {
  auto tree = std::make_shared<Tree>();
  tree->add("/", S_IFDIR, 0755);
  return std::shared_ptr<FakeBackend>(new FakeBackend(std::move(tree), "", std::move(name)));
}

FakeBackend::FakeBackend(std::shared_ptr<Tree> tree, std::string prefix, std::string name)
    : tree_(std::move(tree)), prefix_(std::move(prefix)), name_(std::move(name)) {}

std::string FakeBackend::full(std::string_view rel) const {
  if (prefix_.empty()) return std::string(rel.empty() ? "/" : rel);
  if (rel.empty() || rel == "/") return prefix_;
  return prefix_ + std::string(rel);
}

// --- What the test controls.

void FakeBackend::set_down(bool down) {
  std::lock_guard lock(tree_->mu);
  tree_->down = down;
}
void FakeBackend::set_full(bool full) {
  std::lock_guard lock(tree_->mu);
  tree_->full = full;
}
void FakeBackend::set_read_only(bool read_only) {
  std::lock_guard lock(tree_->mu);
  tree_->read_only = read_only;
}
void FakeBackend::set_makes_whole_files(bool makes) {
  std::lock_guard lock(tree_->mu);
  tree_->makes_whole_files = makes;
}
void FakeBackend::set_draining(bool draining) {
  std::lock_guard lock(tree_->mu);
  tree_->draining = draining;
}
void FakeBackend::set_min_free_bytes(uint64_t bytes) {
  std::lock_guard lock(tree_->mu);
  tree_->min_free = bytes;
}
void FakeBackend::set_space(uint64_t total_bytes, uint64_t free_bytes) {
  std::lock_guard lock(tree_->mu);
  tree_->total = total_bytes;
  tree_->free = free_bytes;
}
void FakeBackend::fail(std::string op, std::string rel, int err) {
  std::lock_guard lock(tree_->mu);
  tree_->failures.push_back({std::move(op), rel.empty() ? rel : full(rel), err});
}
void FakeBackend::set_owner_modes_checked(bool checked) {
  std::lock_guard lock(tree_->mu);
  tree_->owner_modes_checked = checked;
}
void FakeBackend::on_next(std::string op, std::function<void()> hook) {
  std::lock_guard lock(tree_->mu);
  tree_->next_hooks[std::move(op)] = std::move(hook);
}
void FakeBackend::clear_failures() {
  std::lock_guard lock(tree_->mu);
  tree_->failures.clear();
}

void FakeBackend::put_dir(std::string_view rel, uint32_t mode) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  tree_->make_parents(path);
  if (!tree_->find(path)) tree_->add(path, S_IFDIR, mode);
}
void FakeBackend::put_file(std::string_view rel, std::string_view contents, uint32_t mode) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  tree_->make_parents(path);
  tree_->add(path, S_IFREG, mode)->data = std::string(contents);
}
void FakeBackend::put_symlink(std::string_view rel, std::string_view target) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  tree_->make_parents(path);
  tree_->add(path, S_IFLNK, 0777)->target = std::string(target);
}
bool FakeBackend::has(std::string_view rel) const {
  std::lock_guard lock(tree_->mu);
  return tree_->find(full(rel)) != nullptr;
}
std::optional<std::string> FakeBackend::contents(std::string_view rel) const {
  std::lock_guard lock(tree_->mu);
  auto n = tree_->find(full(rel));
  if (!n || n->type != S_IFREG) return std::nullopt;
  return n->data;
}
std::optional<sftp::Attrs> FakeBackend::attrs(std::string_view rel) const {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  auto n = tree_->find(path);
  if (!n) return std::nullopt;
  return tree_->attrs_of(path, *n);
}
std::vector<std::string> FakeBackend::names(std::string_view rel) const {
  std::lock_guard lock(tree_->mu);
  const std::string dir = full(rel);
  const std::string below = dir == "/" ? "/" : dir + "/";
  std::vector<std::string> out;
  for (auto it = tree_->nodes.upper_bound(below);
       it != tree_->nodes.end() && it->first.starts_with(below); ++it)
    if (it->first.find('/', below.size()) == std::string::npos)
      out.push_back(it->first.substr(below.size()));
  return out;
}
size_t FakeBackend::calls() const {
  std::lock_guard lock(tree_->mu);
  return tree_->all_calls;
}
size_t FakeBackend::calls(std::string_view op) const {
  std::lock_guard lock(tree_->mu);
  auto it = tree_->calls.find(op);
  return it == tree_->calls.end() ? 0 : it->second;
}

std::vector<OpenFile::HandleJudge> FakeBackend::judges() const {
  std::lock_guard lock(tree_->mu);
  return tree_->judges;
}

// --- Backend.

bool FakeBackend::up() const {
  std::lock_guard lock(tree_->mu);
  return !tree_->down;
}
bool FakeBackend::draining() const {
  std::lock_guard lock(tree_->mu);
  return tree_->draining;
}
bool FakeBackend::accepts_new_files() {
  std::lock_guard lock(tree_->mu);
  if (tree_->down || tree_->draining) return false;
  return tree_->min_free == 0 || tree_->free_now() >= tree_->min_free;
}
BackendCounters FakeBackend::counters() const {
  std::lock_guard lock(tree_->mu);
  return {tree_->bytes_read, tree_->bytes_written, tree_->all_calls};
}

Result<sftp::Attrs> FakeBackend::lstat(std::string_view rel) {
  using R = Result<sftp::Attrs>;
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("lstat", path)) return R::failure(e);
  if (int e = tree_->walk(path)) return R::failure(e);
  auto n = tree_->find(path);
  if (!n) return R::failure(ENOENT);
  return tree_->attrs_of(path, *n);
}

Status FakeBackend::setstat(std::string_view rel, const sftp::Attrs& a) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("setstat", path)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(path)) return Status::failure(e);
  auto n = tree_->find(path);
  if (!n) return Status::failure(ENOENT);
  if (a.flags & sftp::ATTR_SIZE) {
    if (n->type == S_IFLNK) return Status::failure(ELOOP);
    if (n->type == S_IFDIR) return Status::failure(EISDIR);
    if (tree_->full && a.size > n->data.size()) return Status::failure(ENOSPC);
    n->data.resize(a.size, '\0');
    n->mtime = tree_->tick();
  }
  if (a.flags & sftp::ATTR_PERMISSIONS) n->mode = a.permissions & 07777;
  if (a.flags & sftp::ATTR_UIDGID) {
    n->uid = a.uid;
    n->gid = a.gid;
  }
  if (a.flags & sftp::ATTR_ACMODTIME) {
    n->atime = a.atime;
    n->mtime = a.mtime;
  }
  return ok_status();
}

Result<std::vector<sftp::NameEntry>> FakeBackend::list_dir(std::string_view rel) {
  using R = Result<std::vector<sftp::NameEntry>>;
  std::lock_guard lock(tree_->mu);
  const std::string dir = full(rel);
  if (int e = tree_->enter("list_dir", dir)) return R::failure(e);
  if (int e = tree_->walk(dir)) return R::failure(e);
  auto n = tree_->find(dir);
  if (!n) return R::failure(ENOENT);
  if (n->type == S_IFLNK) return R::failure(ELOOP);
  if (n->type != S_IFDIR) return R::failure(ENOTDIR);
  if (int e = tree_->denied(dir, S_IRUSR | S_IXUSR)) return R::failure(e);
  std::vector<sftp::NameEntry> out;
  const std::string below = dir == "/" ? "/" : dir + "/";
  for (auto it = tree_->nodes.upper_bound(below);
       it != tree_->nodes.end() && it->first.starts_with(below); ++it) {
    if (it->first.find('/', below.size()) != std::string::npos) continue;
    std::string name = it->first.substr(below.size());
    auto a = tree_->attrs_of(it->first, *it->second);
    char longname[512];
    std::snprintf(longname, sizeof longname, "%s %4u user group %8llu Jan  1 00:00 %s",
                  it->second->type == S_IFDIR ? "drwxr-xr-x" : "-rw-r--r--",
                  tree_->link_count(it->first, *it->second), (unsigned long long)a.size,
                  name.c_str());
    out.push_back({std::move(name), longname, a});
  }
  return out;
}

Status FakeBackend::mkdir(std::string_view rel, uint32_t mode) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("mkdir", path)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(path)) return Status::failure(e);
  if (tree_->find(path)) return Status::failure(EEXIST);
  if (!tree_->find(parent_path(path))) return Status::failure(ENOENT);
  if (tree_->full) return Status::failure(ENOSPC);
  tree_->add(path, S_IFDIR, mode);
  return ok_status();
}

Status FakeBackend::rmdir(std::string_view rel) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("rmdir", path)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(path)) return Status::failure(e);
  auto n = tree_->find(path);
  if (!n) return Status::failure(ENOENT);
  if (n->type != S_IFDIR) return Status::failure(ENOTDIR);
  if (path == "/" || path == prefix_) return Status::failure(EBUSY);
  if (int e = tree_->denied(parent_path(path), S_IWUSR | S_IXUSR)) return Status::failure(e);
  if (tree_->has_children(path)) return Status::failure(ENOTEMPTY);
  tree_->remove(path);
  return ok_status();
}

Status FakeBackend::unlink(std::string_view rel) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("unlink", path)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(path)) return Status::failure(e);
  auto n = tree_->find(path);
  if (!n) return Status::failure(ENOENT);
  if (n->type == S_IFDIR) return Status::failure(EISDIR);
  if (int e = tree_->denied(parent_path(path), S_IWUSR | S_IXUSR)) return Status::failure(e);
  tree_->remove(path);
  return ok_status();
}

Status FakeBackend::rename(std::string_view from_rel, std::string_view to_rel, unsigned flags) {
  std::lock_guard lock(tree_->mu);
  const std::string from = full(from_rel), to = full(to_rel);
  if (int e = tree_->enter("rename", from)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(from)) return Status::failure(e);
  if (int e = tree_->walk(to)) return Status::failure(e);
  auto src = tree_->find(from);
  if (!src) return Status::failure(ENOENT);
  if (!tree_->find(parent_path(to))) return Status::failure(ENOENT);
  if (from == to) return ok_status();
  // Two names of one file (hard links): rename(2) does nothing, and both stay.
  if (auto dst = tree_->find(to); dst && dst == src) return ok_status();
  if (src->type == S_IFDIR && path_is_under(to, from)) return Status::failure(EINVAL);
  if (auto dst = tree_->find(to)) {
    if (flags & 1) return Status::failure(EEXIST);
    if (src->type == S_IFDIR && dst->type != S_IFDIR) return Status::failure(ENOTDIR);
    if (src->type != S_IFDIR && dst->type == S_IFDIR) return Status::failure(EISDIR);
    if (dst->type == S_IFDIR && tree_->has_children(to)) return Status::failure(ENOTEMPTY);
    tree_->remove(to);
  }
  std::vector<std::pair<std::string, std::shared_ptr<Node>>> moved;
  for (auto it = tree_->nodes.begin(); it != tree_->nodes.end();) {
    if (path_is_under(it->first, from)) {
      moved.emplace_back(to + it->first.substr(from.size()), it->second);
      it = tree_->nodes.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [path, node] : moved) tree_->nodes[path] = node;
  tree_->touch_parent(from);
  tree_->touch_parent(to);
  return ok_status();
}

Status FakeBackend::symlink(std::string_view target, std::string_view rel) {
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("symlink", path)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(path)) return Status::failure(e);
  if (tree_->find(path)) return Status::failure(EEXIST);
  if (!tree_->find(parent_path(path))) return Status::failure(ENOENT);
  if (tree_->full) return Status::failure(ENOSPC);
  tree_->add(path, S_IFLNK, 0777)->target = std::string(target);
  return ok_status();
}

Result<std::string> FakeBackend::readlink(std::string_view rel) {
  using R = Result<std::string>;
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("readlink", path)) return R::failure(e);
  if (int e = tree_->walk(path)) return R::failure(e);
  auto n = tree_->find(path);
  if (!n) return R::failure(ENOENT);
  if (n->type != S_IFLNK) return R::failure(EINVAL);
  return n->target;
}

Status FakeBackend::link(std::string_view existing_rel, std::string_view rel) {
  std::lock_guard lock(tree_->mu);
  const std::string existing = full(existing_rel), path = full(rel);
  if (int e = tree_->enter("link", path)) return Status::failure(e);
  if (tree_->read_only) return Status::failure(EACCES);
  if (int e = tree_->walk(existing)) return Status::failure(e);
  if (int e = tree_->walk(path)) return Status::failure(e);
  auto n = tree_->find(existing);
  if (!n) return Status::failure(ENOENT);
  if (n->type == S_IFDIR) return Status::failure(EPERM);
  if (tree_->find(path)) return Status::failure(EEXIST);
  if (!tree_->find(parent_path(path))) return Status::failure(ENOENT);
  ++n->links;
  tree_->nodes[path] = n;
  tree_->touch_parent(path);
  return ok_status();
}

Result<sftp::StatVfs> FakeBackend::statvfs(std::string_view rel) {
  using R = Result<sftp::StatVfs>;
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("statvfs", path)) return R::failure(e);
  if (int e = tree_->walk(path)) return R::failure(e);
  sftp::StatVfs v;
  v.bsize = v.frsize = 4096;
  v.blocks = tree_->total / 4096;
  v.bfree = v.bavail = tree_->free_now() / 4096;
  v.files = 1000000;
  v.ffree = v.favail = tree_->full ? 0 : v.files - tree_->nodes.size();
  v.namemax = 255;
  return v;
}

Result<std::shared_ptr<BackendFile>> FakeBackend::open(std::string_view rel, int flags,
                                                       uint32_t mode) {
  using R = Result<std::shared_ptr<BackendFile>>;
  std::lock_guard lock(tree_->mu);
  const std::string path = full(rel);
  if (int e = tree_->enter("open", path)) return R::failure(e);
  if (int e = tree_->walk(path)) return R::failure(e);
  const bool writes = (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC);
  auto n = tree_->find(path);
  std::optional<sftp::Attrs> created, parent;
  if (n) {
    if ((flags & O_CREAT) && (flags & O_EXCL)) return R::failure(EEXIST);
    if (n->type == S_IFLNK) return R::failure(ELOOP);
    if (n->type == S_IFDIR && writes) return R::failure(EISDIR);
    if (writes && tree_->read_only) return R::failure(EACCES);
    if (flags & O_TRUNC) {
      n->data.clear();
      n->mtime = tree_->tick();
    }
  } else {
    if (!(flags & O_CREAT)) return R::failure(ENOENT);
    if (tree_->read_only) return R::failure(EACCES);
    auto dir = tree_->find(parent_path(path));
    if (!dir) return R::failure(ENOENT);
    if (tree_->full) return R::failure(ENOSPC);
    n = tree_->add(path, S_IFREG, mode);
    created = tree_->attrs_of(path, *n);
    parent = tree_->attrs_of(parent_path(path), *dir);
  }
  auto f = std::make_shared<File>(tree_, n, path, std::string(rel), flags);
  f->attrs_at_open_ = created;
  f->parent_attrs_at_open_ = parent;
  return std::shared_ptr<BackendFile>(std::move(f));
}

Result<std::shared_ptr<Backend>> FakeBackend::subtree(std::string_view rel) {
  using R = Result<std::shared_ptr<Backend>>;
  auto norm = normalize_virtual_path(rel);
  if (rel.empty() || !norm || *norm != rel) return R::failure(EINVAL);
  if (rel == "/") return std::shared_ptr<Backend>(shared_from_this());
  const std::string prefix = full(rel);
  return std::shared_ptr<Backend>(
      std::shared_ptr<FakeBackend>(new FakeBackend(tree_, prefix, name_ + ":" + prefix)));
}

std::vector<std::optional<Result<MadeWholeFile>>> FakeBackend::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  using R = Result<MadeWholeFile>;
  {
    std::lock_guard lock(tree_->mu);
    if (!tree_->makes_whole_files) return Backend::write_whole_files(files);
  }
  std::vector<std::optional<R>> out;
  for (const NewWholeFile& f : files) {
    out.push_back([&]() -> R {
      auto file = open(f.partial, O_WRONLY | O_CREAT | O_EXCL, (f.mode & 0777) | S_IWUSR);
      if (!file) return R::failure(file.error());
      auto fail = [&](int err) {
        (void)unlink(f.partial);
        return R::failure(err);
      };
      if (!f.data.empty()) {
        auto wrote = (*file)->write(0, f.data);
        if (!wrote || *wrote != f.data.size()) return fail(wrote ? EIO : wrote.error());
      }
      if (auto st = (*file)->close(); !st) return fail(st.error());
      sftp::Attrs a;
      a.flags = sftp::ATTR_PERMISSIONS | sftp::ATTR_ACMODTIME;
      a.permissions = f.mode & 07777;
      a.atime = static_cast<uint32_t>(f.atime_s);
      a.mtime = static_cast<uint32_t>(f.mtime_s);
      if (auto st = setstat(f.partial, a); !st) return fail(st.error());
      if (auto st = rename(f.partial, f.path, 0); !st) return fail(st.error());
      auto attrs = lstat(f.path);
      if (!attrs) return R::failure(attrs.error());
      auto dir = lstat(parent_path(f.path));
      return MadeWholeFile{*attrs, dir ? std::optional<sftp::Attrs>(*dir) : std::nullopt};
    }());
  }
  return out;
}

}  // namespace skein::test
