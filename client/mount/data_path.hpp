// The mount's data path: read-ahead and write-behind for its open files, and what the other
// operations need from it. Writes are acknowledged before the gateway has them, so whatever asks
// the gateway about a file's contents or size (a read, getattr, setattr, fsync, flush, close)
// first waits here for that file's writes; and a file that changes has its read-ahead forgotten.
// Nothing here knows about FUSE: fuse_ops calls in with inode numbers and FileRefs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "byte_budget.hpp"
#include "gateway_client.hpp"
#include "inode_table.hpp"
#include "read_ahead.hpp"
#include "skein/result.hpp"
#include "write_behind.hpp"

namespace skein::client {

class DataPath {
  struct Inode;  // what the open files of one inode share

 public:
  struct Options {
    bool read_ahead = true;
    ReadAhead::Options read;
    uint64_t read_budget = 48 << 20;  // bytes read ahead, across the mount
    bool write_behind = true;
    WriteBehind::Limits write;
    uint64_t write_budget = 32 << 20;  // bytes written but not yet acknowledged, ditto
    // The kernel's read-ahead for the mount, set at the first open (0: leave it as it is).
    std::string mountpoint;
    unsigned kernel_readahead_kb = 0;
  };

  // One open file's part of the data path.
  class File {
   public:
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

   private:
    friend class DataPath;
    File(DataPath& path, InodeNumber ino, std::shared_ptr<DataPath::Inode> inode,
         const GatewayClient& gateway, uint32_t flags);

    DataPath& path_;
    const InodeNumber ino_;
    std::shared_ptr<DataPath::Inode> inode_;
    const GatewayClient& gateway_;
    const uint32_t flags_;
    std::shared_ptr<WriteBehind::Writer> writer_;  // when open for writing, with write-behind
    std::unique_ptr<ReadAhead> read_ahead_;        // null without read-ahead
    // The file's write errors this open file's fsync has reported (WriteBehind::error_mark);
    // guarded by the WriteBehind's mutex.
    uint64_t errors_seen_ = 0;
  };

  DataPath() : DataPath(Options{}) {}
  explicit DataPath(Options options);
  ~DataPath();
  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  // A file opened or created on inode `ino`, `size` bytes long when the gateway opened it.
  // `gateway` must outlive the File.
  std::unique_ptr<File> open(InodeNumber ino, const GatewayClient& gateway, uint32_t flags,
                             uint64_t size);
  // The file's bytes at [offset, offset + size), fewer only at end of file.
  Result<ReadData> read(File& file, const FileRef& ref, uint64_t offset, uint32_t size);
  // The file's first `size` bytes in one call that leaves the gateway holding no handle
  // (ReadRequest.whole_file), past the read-ahead: for a deferred open's read of a whole file.
  Result<ReadData> read_whole(File& file, const FileRef& ref, uint32_t size);
  // Takes the write (the bytes are copied); an earlier write's error may come back instead.
  // On success `taken` has run, exactly once, as soon as the bytes were safe here: before they
  // went to the gateway, with write-behind. `file` may be gone once `taken` has run (it lets the
  // kernel close it): nothing of it is used after.
  Status write(File& file, const FileRef& ref, uint64_t offset, std::string_view data,
               const std::function<void()>& taken, bool through = false);
  // A write straight to the gateway, after the writes queued before it; with `attrs`, it brings
  // back the file's attributes right after it (GatewayClient::write's report_attrs): for a
  // file's first write, which may be all of it.
  Result<uint32_t> write_through(File& file, const FileRef& ref, uint64_t offset,
                                 std::string_view data, std::optional<FileAttr>* attrs = nullptr);
  // Every write to the file acknowledged by the gateway; then the error of one of this open
  // file's writes that `report` has not made yet, if any (WriteBehind::Writer). For flush (and
  // release, as an fsync: the last chance), and fsync. An fsync also reports a write error of
  // the file since this file was opened, or since its last fsync reported one, through
  // whichever open file it was written (as Linux does for NFS and local file systems: `sync
  // FILE` opens it read-only).
  Status flush(File& file, WriteBehind::Report report);
  // The file's attributes right after its last write, when that write brought them and nothing
  // has been written to it since (WriteBehind::attrs_when_idle); else nullopt.
  std::optional<FileAttr> attrs_after_writes(File& file);

  // Waits for every write to `ino` (before its attributes are asked for or changed).
  void settle(InodeNumber ino);
  // Whether no write to `ino` is queued or on its way to the gateway.
  bool writes_idle(InodeNumber ino);
  // Waits for every write of the mount (before a listing carries sizes).
  void settle_all();
  // `ino` changed otherwise than through write (truncated, written by another mount): what was
  // read ahead for it goes.
  void changed(InodeNumber ino);

 private:
  std::shared_ptr<Inode> find(InodeNumber ino);
  void forget(InodeNumber ino);

  const Options options_;
  const std::shared_ptr<ByteBudget> read_budget_;
  const std::shared_ptr<ByteBudget> write_budget_;
  std::once_flag kernel_readahead_;
  std::mutex mu_;                                                 // guards inodes_
  std::unordered_map<InodeNumber, std::weak_ptr<Inode>> inodes_;  // with open files
};

}  // namespace skein::client
