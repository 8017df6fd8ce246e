// DataPath; see data_path.hpp.
// Lock order: DataPath::mu_ is a leaf, held only to find or forget an Inode; nothing waits for
// writes while holding it.
#include "data_path.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <vector>

#include "kernel_readahead.hpp"

namespace skein::client {

// What the open files of one inode share: the writes in flight to it, and the generation that
// tells read-ahead its blocks are out of date.
struct DataPath::Inode {
  std::atomic<uint64_t> generation{0};
  std::unique_ptr<WriteBehind> writes;  // null without write-behind
};

DataPath::File::File(DataPath& path, InodeNumber ino, std::shared_ptr<Inode> inode,
                     const GatewayClient& gateway, uint32_t flags)
    : path_(path), ino_(ino), inode_(std::move(inode)), gateway_(gateway), flags_(flags) {}

DataPath::File::~File() {
  read_ahead_.reset();
  inode_.reset();  // the last open file of the inode waits for its writes here
  path_.forget(ino_);
}

DataPath::DataPath(Options options)
    : options_(std::move(options)),
      read_budget_(std::make_shared<ByteBudget>(options_.read_budget)),
      write_budget_(std::make_shared<ByteBudget>(options_.write_budget)) {}

DataPath::~DataPath() = default;

std::unique_ptr<DataPath::File> DataPath::open(InodeNumber ino, const GatewayClient& gateway,
                                               uint32_t flags, uint64_t size) {
  if (options_.kernel_readahead_kb != 0 && !options_.mountpoint.empty()) {
    // The first open comes after FUSE_INIT, whose reply would have capped the value again; and
    // the kernel reads the value for this very file once the open returns.
    std::call_once(kernel_readahead_, [&] {
      std::string error;
      if (set_kernel_readahead(options_.mountpoint, options_.kernel_readahead_kb, error)) {
        spdlog::info("kernel read-ahead of {}: {} KiB", options_.mountpoint,
                     options_.kernel_readahead_kb);
      } else {
        spdlog::warn("kernel read-ahead left as it is: {}", error);
      }
    });
  }
  std::shared_ptr<Inode> inode;
  {
    std::lock_guard lock(mu_);
    auto& slot = inodes_[ino];
    inode = slot.lock();
    if (!inode) {
      inode = std::make_shared<Inode>();
      if (options_.write_behind) {
        const GatewayClient* gw = &gateway;
        Inode* raw = inode.get();
        inode->writes = std::make_unique<WriteBehind>(
            [gw](const FileRef& ref, uint64_t offset, std::string data,
                 WriteBehind::SendDone done) {
              gw->write_async(ref, offset, std::move(data), std::move(done));
            },
            write_budget_, options_.write,
            [raw] { raw->generation.fetch_add(1, std::memory_order_acq_rel); });
        // Random writes continue no other: those queued behind the calls in flight go several
        // to a call.
        inode->writes->batch_with([gw](const FileRef& ref, std::vector<GatewayClient::Extent> ext,
                                       WriteBehind::SendDone done) {
          gw->write_many_async(ref, std::move(ext), std::move(done));
        });
        // The last write before a close brings the file's attributes: the kernel asks for them
        // right after (a write changed them), and rsync, cp and make look at them.
        inode->writes->report_attrs_with([gw](const FileRef& ref, uint64_t offset, std::string data,
                                              WriteBehind::ReportedDone done) {
          gw->write_async_reporting(ref, offset, std::move(data), std::move(done));
        });
      }
      slot = inode;
    }
  }
  // Opened with O_TRUNC: the gateway truncated it, and other open files' read-ahead is stale.
  if (flags & O_TRUNC) inode->generation.fetch_add(1, std::memory_order_acq_rel);
  std::unique_ptr<File> file(new File(*this, ino, inode, gateway, flags));
  if (inode->writes) file->errors_seen_ = inode->writes->error_mark();
  if (inode->writes && (flags & O_ACCMODE) != O_RDONLY)
    file->writer_ = std::make_shared<WriteBehind::Writer>(flags & O_APPEND);
  if (options_.read_ahead && (flags & O_ACCMODE) != O_WRONLY) {
    file->read_ahead_ =
        std::make_unique<ReadAhead>(read_budget_, inode->generation, size, options_.read);
  }
  return file;
}

namespace {
Result<ReadData> read_data(Result<std::string> got) {
  if (!got) return Result<ReadData>::failure(got.error());
  auto buffer = std::make_shared<std::string>(got.take());
  ReadData out;
  out.size = buffer->size();
  out.pieces.emplace_back(*buffer);
  out.held.push_back(std::move(buffer));
  return out;
}
}  // namespace

Result<ReadData> DataPath::read_whole(File& file, const FileRef& ref, uint32_t size) {
  Inode& inode = *file.inode_;
  if (inode.writes && !inode.writes->idle()) inode.writes->settle();
  return read_data(file.gateway_.read(ref, 0, size, /*whole_file=*/true));
}

Result<ReadData> DataPath::read(File& file, const FileRef& ref, uint64_t offset, uint32_t size) {
  Inode& inode = *file.inode_;
  if (inode.writes && !inode.writes->idle()) inode.writes->settle();
  if (!file.read_ahead_) return read_data(file.gateway_.read(ref, offset, size));
  const GatewayClient& gateway = file.gateway_;
  return file.read_ahead_->read(
      offset, size,
      [&gateway, &ref](uint64_t at, uint32_t len, ReadAhead::FetchDone done) {
        gateway.read_async(ref, at, len, std::move(done));
      },
      [&gateway, &ref](uint64_t at, uint32_t len) -> Result<SharedBytes> {
        auto got = gateway.read(ref, at, len);
        if (!got) return Result<SharedBytes>::failure(got.error());
        auto buffer = std::make_shared<const std::string>(got.take());
        return SharedBytes({std::string_view(*buffer)}, buffer);
      });
}

Result<uint32_t> DataPath::write_through(File& file, const FileRef& ref, uint64_t offset,
                                         std::string_view data, std::optional<FileAttr>* attrs) {
  Inode& inode = *file.inode_;
  if (inode.writes) {
    inode.writes->settle();
    inode.writes->forget_attrs();  // this write changes the file's mtime, at least
  }
  auto written = file.gateway_.write(ref, offset, data, nullptr, attrs, attrs != nullptr);
  inode.generation.fetch_add(1, std::memory_order_acq_rel);
  return written;
}

Status DataPath::write(File& file, const FileRef& ref, uint64_t offset, std::string_view data,
                       const std::function<void()>& taken, bool through) {
  Inode& inode = *file.inode_;
  // Without write-behind, when asked (pages of a shared mapping), and for a write the kernel
  // sends through a file not open for writing: through to the gateway, after any writes queued
  // before it.
  if (!inode.writes || !file.writer_ || through) {
    auto written = write_through(file, ref, offset, data);
    if (!written) return Status::failure(written.error());
    if (*written != data.size()) return Status::failure(EIO);
    taken();
    return ok_status();
  }
  return inode.writes->write(file.writer_, ref, offset, data, taken);
}

Status DataPath::flush(File& file, WriteBehind::Report report) {
  Inode& inode = *file.inode_;
  if (!inode.writes) return ok_status();
  Status own = ok_status();
  if (file.writer_)
    own = inode.writes->settle(*file.writer_, report);
  else
    inode.writes->settle();
  if (report == WriteBehind::Report::fsync) {
    // Marked as reported even when the writer's own error goes instead: the same failure, once.
    Status since = inode.writes->error_since(file.errors_seen_);
    if (own) return since;
  }
  return own;
}

std::optional<FileAttr> DataPath::attrs_after_writes(File& file) {
  Inode& inode = *file.inode_;
  return inode.writes ? inode.writes->attrs_when_idle() : std::nullopt;
}

void DataPath::settle(InodeNumber ino) {
  if (auto inode = find(ino); inode && inode->writes && !inode->writes->idle())
    inode->writes->settle();
}

bool DataPath::writes_idle(InodeNumber ino) {
  auto inode = find(ino);
  return !inode || !inode->writes || inode->writes->idle();
}

void DataPath::settle_all() {
  std::vector<std::shared_ptr<Inode>> open;
  {
    std::lock_guard lock(mu_);
    for (auto& [ino, weak] : inodes_)
      if (auto inode = weak.lock()) open.push_back(std::move(inode));
  }
  for (auto& inode : open)
    if (inode->writes && !inode->writes->idle()) inode->writes->settle();
}

void DataPath::changed(InodeNumber ino) {
  if (auto inode = find(ino)) inode->generation.fetch_add(1, std::memory_order_acq_rel);
}

std::shared_ptr<DataPath::Inode> DataPath::find(InodeNumber ino) {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : it->second.lock();
}

void DataPath::forget(InodeNumber ino) {
  std::lock_guard lock(mu_);
  auto it = inodes_.find(ino);
  if (it != inodes_.end() && it->second.expired()) inodes_.erase(it);
}

}  // namespace skein::client
