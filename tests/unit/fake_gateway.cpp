// The in-memory fake gateway of the mount's unit tests; see fake_gateway.hpp.
#include "fake_gateway.hpp"

#include <fcntl.h>
#include <stdio.h>  // RENAME_NOREPLACE, RENAME_EXCHANGE
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "skein/path.hpp"
#include "skein/v1/fs.grpc.pb.h"

namespace skein::test {

namespace pb = ::skein::v1;
using grpc::ServerContext;

namespace {

bool is_dir(uint32_t mode) { return S_ISDIR(mode); }

}  // namespace

// Fills `attr` from a node.
static void fill_attr(const std::shared_ptr<FakeGateway::Node>& node, pb::Attr* attr);

class FakeGateway::Names final : public pb::Namespace::Service {
 public:
  explicit Names(FakeGateway& gw) : gw_(gw) {}

  grpc::Status GetAttr(ServerContext*, const pb::PathRequest* req, pb::AttrReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("GetAttr");
    if (int e = gw_.failure_locked("GetAttr", req->path())) return error(reply, e);
    auto node = gw_.find_locked(req->path());
    if (!node) return error(reply, ENOENT);
    fill_attr(node, reply->mutable_attr());
    return grpc::Status::OK;
  }

  grpc::Status SetAttr(ServerContext*, const pb::SetAttrRequest* req,
                       pb::AttrReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("SetAttr");
    if (int e = gw_.failure_locked("SetAttr", req->path())) return error(reply, e);
    std::shared_ptr<Node> node;
    if (auto h = gw_.handles_.find(req->handle()); req->handle() && h != gw_.handles_.end()) {
      node = h->second.second;
    } else {
      node = gw_.find_locked(req->path());
    }
    if (!node) return error(reply, ENOENT);
    if (req->fields() & pb::SetAttrRequest::MODE) node->mode = (node->mode & S_IFMT) | req->mode();
    if (req->fields() & pb::SetAttrRequest::SIZE) {
      if (is_dir(node->mode)) return error(reply, EISDIR);
      node->data.resize(req->size());
    }
    if (req->fields() & pb::SetAttrRequest::MTIME) node->mtime_ns = req->mtime_ns();
    if (req->fields() & (pb::SetAttrRequest::SIZE | pb::SetAttrRequest::MTIME_NOW))
      node->mtime_ns = gw_.tick_locked();
    fill_attr(node, reply->mutable_attr());
    return grpc::Status::OK;
  }

  grpc::Status ReadDir(ServerContext*, const pb::PathRequest* req,
                       grpc::ServerWriter<pb::ReadDirReply>* writer) override {
    pb::ReadDirReply batch;
    {
      std::unique_lock lock(gw_.mu_);
      gw_.count_locked("ReadDir");
      gw_.listings_released_.wait(lock, [&] { return !gw_.hold_listings_; });
      if (int e = gw_.failure_locked("ReadDir", req->path())) {
        batch.set_error(e);
      } else if (auto node = gw_.find_locked(req->path()); !node) {
        batch.set_error(ENOENT);
      } else if (!is_dir(node->mode)) {
        batch.set_error(ENOTDIR);
      } else {
        for (const auto& [path, child] : gw_.tree_) {
          if (path == "/" || parent_path(path) != req->path()) continue;
          auto* e = batch.add_entries();
          e->set_name(path.substr(path.rfind('/') + 1));
          fill_attr(child, e->mutable_attr());
        }
      }
    }
    writer->Write(batch);
    return grpc::Status::OK;
  }

  grpc::Status Mkdir(ServerContext*, const pb::MkdirRequest* req, pb::AttrReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Mkdir");
    if (int e = gw_.failure_locked("Mkdir", req->path())) return error(reply, e);
    if (int e = can_create(req->path())) return error(reply, e);
    auto node = std::make_shared<Node>(Node{S_IFDIR | req->mode(), "", "", gw_.tick_locked(), 2});
    gw_.tree_[req->path()] = node;
    gw_.touch_parent_locked(req->path());
    fill_attr(node, reply->mutable_attr());
    return grpc::Status::OK;
  }

  grpc::Status Rmdir(ServerContext*, const pb::PathRequest* req, pb::ErrorReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Rmdir");
    if (int e = gw_.failure_locked("Rmdir", req->path())) return error(reply, e);
    auto node = gw_.find_locked(req->path());
    if (!node) return error(reply, ENOENT);
    if (!is_dir(node->mode)) return error(reply, ENOTDIR);
    if (gw_.has_children_locked(req->path())) return error(reply, ENOTEMPTY);
    gw_.tree_.erase(req->path());
    gw_.touch_parent_locked(req->path());
    return grpc::Status::OK;
  }

  grpc::Status Unlink(ServerContext*, const pb::PathRequest* req, pb::ErrorReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Unlink");
    if (int e = gw_.failure_locked("Unlink", req->path())) return error(reply, e);
    auto node = gw_.find_locked(req->path());
    if (!node) return error(reply, ENOENT);
    if (is_dir(node->mode)) return error(reply, EISDIR);
    --node->nlink;
    gw_.tree_.erase(req->path());
    gw_.touch_parent_locked(req->path());
    fill_attr(gw_.find_locked(parent_path(req->path())), reply->mutable_parent_attr());
    return grpc::Status::OK;
  }

  grpc::Status Rename(ServerContext*, const pb::RenameRequest* req,
                      pb::ErrorReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Rename");
    if (int e = gw_.failure_locked("Rename", req->from())) return error(reply, e);
    const std::string& from = req->from();
    const std::string& to = req->to();
    auto source = gw_.find_locked(from);
    if (!source) return error(reply, ENOENT);
    auto target_dir = gw_.find_locked(parent_path(to));
    if (!target_dir || !is_dir(target_dir->mode)) return error(reply, ENOENT);
    auto target = gw_.find_locked(to);
    if ((req->flags() & RENAME_NOREPLACE) && target) return error(reply, EEXIST);
    if ((req->flags() & RENAME_EXCHANGE) && !target) return error(reply, ENOENT);
    if (!(req->flags() & RENAME_EXCHANGE) && target && is_dir(target->mode) &&
        gw_.has_children_locked(to))
      return error(reply, ENOTEMPTY);
    auto from_tree = take_subtree(from);
    auto to_tree = take_subtree(to);
    place_subtree(from_tree, from, to);
    if (req->flags() & RENAME_EXCHANGE) place_subtree(to_tree, to, from);
    gw_.touch_parent_locked(from);
    gw_.touch_parent_locked(to);
    return grpc::Status::OK;
  }

  grpc::Status Symlink(ServerContext*, const pb::SymlinkRequest* req,
                       pb::AttrReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Symlink");
    if (int e = gw_.failure_locked("Symlink", req->path())) return error(reply, e);
    if (int e = can_create(req->path())) return error(reply, e);
    auto node = std::make_shared<Node>(Node{S_IFLNK | 0777, "", req->target(), gw_.tick_locked()});
    gw_.tree_[req->path()] = node;
    gw_.touch_parent_locked(req->path());
    fill_attr(node, reply->mutable_attr());
    return grpc::Status::OK;
  }

  grpc::Status Readlink(ServerContext*, const pb::PathRequest* req,
                        pb::ReadlinkReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Readlink");
    if (int e = gw_.failure_locked("Readlink", req->path())) return error(reply, e);
    auto node = gw_.find_locked(req->path());
    if (!node) return error(reply, ENOENT);
    if (!S_ISLNK(node->mode)) return error(reply, EINVAL);
    reply->set_target(node->target);
    return grpc::Status::OK;
  }

  grpc::Status Link(ServerContext*, const pb::LinkRequest* req, pb::AttrReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Link");
    if (int e = gw_.failure_locked("Link", req->path())) return error(reply, e);
    auto node = gw_.find_locked(req->existing());
    if (!node) return error(reply, ENOENT);
    if (is_dir(node->mode)) return error(reply, EPERM);
    if (int e = can_create(req->path())) return error(reply, e);
    ++node->nlink;
    gw_.tree_[req->path()] = node;  // the same file under a second name
    gw_.touch_parent_locked(req->path());
    fill_attr(node, reply->mutable_attr());
    return grpc::Status::OK;
  }

  grpc::Status StatFs(ServerContext*, const pb::PathRequest* req, pb::StatFsReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("StatFs");
    if (int e = gw_.failure_locked("StatFs", req->path())) return error(reply, e);
    reply->set_block_size(4096);
    reply->set_blocks(1000);
    reply->set_blocks_free(600);
    reply->set_blocks_available(500);
    reply->set_files(100);
    reply->set_files_free(90);
    reply->set_files_available(90);
    reply->set_name_max(255);
    return grpc::Status::OK;
  }

  // 0, or why `path` cannot be made: it exists, or its directory does not.
  int can_create(const std::string& path) {
    if (gw_.find_locked(path)) return EEXIST;
    auto dir = gw_.find_locked(parent_path(path));
    if (!dir) return ENOENT;
    return is_dir(dir->mode) ? 0 : ENOTDIR;
  }

  template <typename Reply>
  static grpc::Status error(Reply* reply, int e) {
    reply->set_error(e);
    return grpc::Status::OK;
  }

 private:
  std::map<std::string, std::shared_ptr<Node>> take_subtree(const std::string& path) {
    std::map<std::string, std::shared_ptr<Node>> out;
    for (auto it = gw_.tree_.begin(); it != gw_.tree_.end();) {
      if (it->first == path || path_is_under(it->first, path)) {
        out.insert(*it);
        it = gw_.tree_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  void place_subtree(const std::map<std::string, std::shared_ptr<Node>>& subtree,
                     const std::string& from, const std::string& to) {
    for (const auto& [path, node] : subtree) gw_.tree_[to + path.substr(from.size())] = node;
  }

  FakeGateway& gw_;
};

class FakeGateway::Data final : public pb::Data::Service {
 public:
  explicit Data(FakeGateway& gw) : gw_(gw) {}

  grpc::Status Open(ServerContext*, const pb::OpenRequest* req, pb::OpenReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Open");
    if (int e = gw_.failure_locked("Open", req->path())) return Names::error(reply, e);
    auto node = gw_.find_locked(req->path());
    if (!node) return Names::error(reply, ENOENT);
    if (is_dir(node->mode) && (req->flags() & O_ACCMODE) != O_RDONLY)
      return Names::error(reply, EISDIR);
    if (req->flags() & O_TRUNC) {
      node->data.clear();
      node->mtime_ns = gw_.tick_locked();
    }
    reply->set_attr_of_file(req->attrs_of_file());  // a node is its file: asked, it is so
    return opened(req->path(), node, reply);
  }

  grpc::Status Create(ServerContext*, const pb::OpenRequest* req, pb::OpenReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Create");
    if (int e = gw_.failure_locked("Create", req->path())) return Names::error(reply, e);
    auto node = gw_.find_locked(req->path());
    if (node && (req->flags() & O_EXCL)) return Names::error(reply, EEXIST);
    if (!node) {
      auto dir = gw_.find_locked(parent_path(req->path()));
      if (!dir) return Names::error(reply, ENOENT);
      node = std::make_shared<Node>(Node{S_IFREG | req->mode(), "", "", gw_.tick_locked()});
      gw_.tree_[req->path()] = node;
      gw_.touch_parent_locked(req->path());
    } else if (req->flags() & O_TRUNC) {
      node->data.clear();
      node->mtime_ns = gw_.tick_locked();
    }
    fill_attr(gw_.find_locked(parent_path(req->path())), reply->mutable_parent_attr());
    return opened(req->path(), node, reply);
  }

  grpc::Status ReadFiles(ServerContext*, const pb::ReadFilesRequest* req,
                         pb::ReadFilesReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("ReadFiles");
    for (const std::string& path : req->paths()) {
      pb::FileContent* f = reply->add_files();
      auto node = gw_.find_locked(path);
      if (int e = gw_.failure_locked("ReadFiles", path)) {
        f->set_error(e);
      } else if (!node) {
        f->set_error(ENOENT);
      } else if (is_dir(node->mode)) {
        f->set_error(EISDIR);
      } else if (node->data.size() > req->max_bytes()) {
        f->set_error(EFBIG);
      } else {
        fill_attr(node, f->mutable_attr());
        f->set_data(node->data);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status Read(ServerContext*, const pb::ReadRequest* req, pb::ReadReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Read");
    if (req->whole_file()) gw_.count_locked("Read.whole_file");
    if (int e = gw_.failure_locked("Read", req->file().path())) return Names::error(reply, e);
    auto node = node_of(req->file());
    if (!node) return Names::error(reply, ENOENT);
    if (req->offset() < node->data.size())
      reply->set_data(node->data.substr(req->offset(), req->size()));
    return grpc::Status::OK;
  }

  grpc::Status Write(ServerContext*, const pb::WriteRequest* req, pb::WriteReply* reply) override {
    std::unique_lock lock(gw_.mu_);
    gw_.count_locked("Write");
    gw_.writes_released_.wait(lock, [&] { return !gw_.hold_writes_; });
    if (int e = gw_.failure_locked("Write", req->file().path())) return Names::error(reply, e);
    const pb::FileRef& file = req->file();
    const bool made = file.create() && !gw_.handles_.count(file.handle());
    if (made) {
      // An asynchronous create's first call: made as Create makes it, under the mount's handle.
      gw_.count_locked("Write.create");
      if (int e = gw_.failure_locked("Create", file.path())) return Names::error(reply, e);
      auto node = gw_.find_locked(file.path());
      if (!node) {
        if (!gw_.find_locked(parent_path(file.path()))) return Names::error(reply, ENOENT);
        node =
            std::make_shared<Node>(Node{S_IFREG | file.create_mode(), "", "", gw_.tick_locked()});
        gw_.tree_[file.path()] = node;
        gw_.touch_parent_locked(file.path());
      } else if (file.flags() & O_TRUNC) {
        node->data.clear();
      }
      gw_.handles_[file.handle()] = {file.path(), node};
      fill_attr(gw_.find_locked(parent_path(file.path())), reply->mutable_parent_attr());
    }
    auto node = node_of(file);
    if (!node) return Names::error(reply, ENOENT);
    const std::string& data = req->data();
    const uint64_t end = req->offset() + data.size();
    if (node->data.size() < end) node->data.resize(end);
    node->data.replace(req->offset(), data.size(), data);
    node->mtime_ns = gw_.tick_locked();
    reply->set_written(static_cast<uint32_t>(data.size()));
    // As the gateway does: the file's attributes after a write from offset 0 that made the file,
    // or one that asks for them.
    if (req->more_size() == 0 && !data.empty() &&
        ((made && req->offset() == 0) || req->report_attrs())) {
      if (req->report_attrs()) gw_.count_locked("Write.report_attrs");
      fill_attr(node, reply->mutable_file_attr());
    }
    return grpc::Status::OK;
  }

  grpc::Status Flush(ServerContext*, const pb::FileRef*, pb::ErrorReply*) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Flush");
    return grpc::Status::OK;
  }

  grpc::Status Fsync(ServerContext*, const pb::FsyncRequest* req, pb::ErrorReply* reply) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Fsync");
    if (int e = gw_.failure_locked("Fsync", req->file().path())) return Names::error(reply, e);
    return grpc::Status::OK;
  }

  grpc::Status Release(ServerContext*, const pb::FileRef* req, pb::ErrorReply*) override {
    std::lock_guard lock(gw_.mu_);
    gw_.count_locked("Release");
    gw_.handles_.erase(req->handle());
    return grpc::Status::OK;
  }

 private:
  grpc::Status opened(const std::string& path, const std::shared_ptr<Node>& node,
                      pb::OpenReply* reply) {
    const uint64_t handle = gw_.next_handle_++;
    gw_.handles_[handle] = {path, node};
    reply->set_handle(handle);
    fill_attr(node, reply->mutable_attr());
    return grpc::Status::OK;
  }
  // The file a FileRef names: by its handle, or (a handle this gateway does not know) by path.
  std::shared_ptr<Node> node_of(const pb::FileRef& file) {
    if (auto h = gw_.handles_.find(file.handle()); h != gw_.handles_.end()) return h->second.second;
    return gw_.find_locked(file.path());
  }

  FakeGateway& gw_;
};

static void fill_attr(const std::shared_ptr<FakeGateway::Node>& node, pb::Attr* attr) {
  attr->set_mode(node->mode);
  attr->set_nlink(node->nlink);
  attr->set_uid(0);
  attr->set_gid(0);
  attr->set_size(S_ISLNK(node->mode) ? node->target.size() : node->data.size());
  attr->set_blocks((node->data.size() + 511) / 512);
  attr->set_atime_ns(node->mtime_ns);
  attr->set_mtime_ns(node->mtime_ns);
  attr->set_ctime_ns(node->mtime_ns);
}

FakeGateway::FakeGateway()
    : names_(std::make_unique<Names>(*this)), data_(std::make_unique<Data>(*this)) {
  tree_["/"] = std::make_shared<Node>(Node{S_IFDIR | 0755, "", "", clock_ns_, 2});
  grpc::ServerBuilder builder;
  builder.RegisterService(names_.get());
  builder.RegisterService(data_.get());
  server_ = builder.BuildAndStart();
}

FakeGateway::~FakeGateway() {
  hold_writes(false);  // a test that failed while holding them: let the calls end
  hold_listings(false);
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

std::shared_ptr<grpc::Channel> FakeGateway::channel() {
  return server_->InProcessChannel(grpc::ChannelArguments());
}

void FakeGateway::put_dir(const std::string& path, uint32_t mode) {
  std::lock_guard lock(mu_);
  tree_[path] = std::make_shared<Node>(Node{S_IFDIR | mode, "", "", tick_locked(), 2});
  touch_parent_locked(path);
}

void FakeGateway::put_file(const std::string& path, const std::string& content, uint32_t mode) {
  std::lock_guard lock(mu_);
  if (auto node = find_locked(path)) {  // rewritten in place: open handles see it
    node->data = content;
    node->mtime_ns = tick_locked();
    return;
  }
  tree_[path] = std::make_shared<Node>(Node{S_IFREG | mode, content, "", tick_locked()});
  touch_parent_locked(path);
}

bool FakeGateway::exists(const std::string& path) const {
  std::lock_guard lock(mu_);
  return find_locked(path) != nullptr;
}

std::string FakeGateway::content(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto node = find_locked(path);
  return node ? node->data : std::string();
}

void FakeGateway::remove(const std::string& path) {
  std::lock_guard lock(mu_);
  for (auto it = tree_.begin(); it != tree_.end();) {
    if (it->first != "/" && (it->first == path || path_is_under(it->first, path))) {
      it = tree_.erase(it);
    } else {
      ++it;
    }
  }
  touch_parent_locked(path);
}

std::vector<std::string> FakeGateway::names(const std::string& dir) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  for (const auto& [path, node] : tree_) {
    if (path != "/" && parent_path(path) == dir) out.push_back(path.substr(path.rfind('/') + 1));
  }
  return out;
}

int FakeGateway::calls(const std::string& method) const {
  std::lock_guard lock(mu_);
  auto it = calls_.find(method);
  return it == calls_.end() ? 0 : it->second;
}

int FakeGateway::total_calls() const {
  std::lock_guard lock(mu_);
  int total = 0;
  for (auto& [method, n] : calls_) total += n;
  return total;
}

void FakeGateway::reset_calls() {
  std::lock_guard lock(mu_);
  calls_.clear();
}

std::size_t FakeGateway::open_handles() const {
  std::lock_guard lock(mu_);
  return handles_.size();
}

void FakeGateway::fail(const std::string& method, const std::string& path, int error) {
  std::lock_guard lock(mu_);
  if (error == 0) {
    failures_.erase({method, path});
  } else {
    failures_[{method, path}] = error;
  }
}

void FakeGateway::hold_writes(bool hold) {
  {
    std::lock_guard lock(mu_);
    hold_writes_ = hold;
  }
  writes_released_.notify_all();
}

void FakeGateway::hold_listings(bool hold) {
  {
    std::lock_guard lock(mu_);
    hold_listings_ = hold;
  }
  listings_released_.notify_all();
}

int FakeGateway::failure_locked(const std::string& method, const std::string& path) {
  auto it = failures_.find({method, path});
  return it == failures_.end() ? 0 : it->second;
}

std::shared_ptr<FakeGateway::Node> FakeGateway::find_locked(const std::string& path) const {
  auto it = tree_.find(path);
  return it == tree_.end() ? nullptr : it->second;
}

bool FakeGateway::has_children_locked(const std::string& path) const {
  return std::any_of(tree_.begin(), tree_.end(), [&](const auto& entry) {
    return entry.first != path && path_is_under(entry.first, path);
  });
}

void FakeGateway::touch_parent_locked(const std::string& path) {
  if (auto dir = find_locked(parent_path(path))) dir->mtime_ns = tick_locked();
}

}  // namespace skein::test
