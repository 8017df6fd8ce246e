// An open file on an SFTP backend, through the backend's connection pool.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend_file.hpp"
#include "backend/sftp_backend.hpp"

namespace skein {

// The connection (of `slots`) that run `run` of a file is read on: the sum of the run number's
// digits in base `slots`, modulo `slots`. Consecutive runs go to different connections (one
// stream keeps them all busy), and so do runs a power of `slots` apart: readers that split one
// file into equal parts (skein-mpi's 64 MiB chunks are 16 runs of 4 MiB) would otherwise all read
// on one connection, one server process, at the same time.
size_t slot_for_run(uint64_t run, size_t slots);

// An open file on one backend. It holds one SFTP handle per pool connection it uses, opened on
// demand, so large reads and writes spread over the pool; a handle lost with its connection is
// re-opened by path (never with O_CREAT, O_EXCL or O_TRUNC again).
class RemoteFile final : public BackendFile {
 public:
  RemoteFile(std::shared_ptr<SftpBackend> backend, std::string rel, int flags);
  ~RemoteFile() override;
  RemoteFile(const RemoteFile&) = delete;
  RemoteFile& operator=(const RemoteFile&) = delete;

  std::string rel_path() const override;
  SftpBackend& backend() { return *backend_; }
  int flags() const { return flags_; }

  // Opens the first handle with the caller's flags; errors are the caller's. With O_CREAT, the
  // file's and its directory's attributes are asked for in the same round trip (see below).
  Status open_first(uint32_t mode);
  // After an open_first with O_CREAT: the file's attributes and its parent directory's, as the
  // server saw them right after the open (requests on one connection are served in order).
  // After one without: the file's, as the server saw them as it opened it (before an O_TRUNC).
  // Empty when the server did not give them.
  std::optional<sftp::Attrs> attrs_at_open() const override { return attrs_at_open_; }
  std::optional<sftp::Attrs> parent_attrs_at_open() const override { return parent_attrs_at_open_; }
  // Reads up to `size` bytes; shorter only at end of file. Requests are kept in flight over
  // several connections and short server replies are continued. Concurrent reads of the same
  // range of the same file share one fetch (ReadCollapser).
  Result<SharedBytes> read(uint64_t offset, uint32_t size) override;
  // A read of at most one READ (the server's max_read, where a short answer is the end of the
  // file) and an FSTAT behind it, of the same handle, in one round trip; larger ones as
  // OpenFile's. Its bytes are this handle's own: never shared with another read.
  Result<ReadWithAttrs> read_reporting_attrs(uint64_t offset, uint32_t size) override;
  // Writes all of `data`, its chunks pipelined on one connection (see write_pipelined); the
  // first error is returned. The pieces go to libssh as they are, never joined.
  Result<uint32_t> write(uint64_t offset, const SharedBytes& data) override;
  // The same, with an FSTAT behind the WRITEs on their connection: no extra round trip.
  Result<Written> write_reporting_attrs(uint64_t offset, const SharedBytes& data) override;
  // The extents' WRITEs pipelined on one connection, a group of up to 32 KiB (or one larger
  // extent) at a time: one round trip per group; a group that fails ends the call.
  Result<uint32_t> write_extents(const std::vector<Extent>& extents) override;
  Status fsync() override;
  Status truncate(uint64_t size) override;
  Result<sftp::Attrs> fstat() override;
  Result<sftp::Attrs> set_attrs(const AttrChange& change) override;
  // Closes every handle. Further calls re-open. Handles that calls under way still use are
  // closed when the last of those calls ends (the server may hand a closed handle's string to
  // the next OPEN, so a late WRITE with it would land in another file); their CLOSE is then not
  // waited for, and its error is not reported.
  Status close() override;
  // Moves the file's identity after a rename (the gateway follows the path its mount names the
  // file by). Which file the new path names cannot be told for sure (the request may be older
  // than another rename): the file opens nothing by path from then on, and its reads are shared
  // with no other file's.
  void renamed(std::string new_rel) override;
  // handle_on() then FSTATs each handle it opens by path and uses it only if `may_use` accepts
  // its attributes; without `may_use`, and after one refusal, it opens none by path and answers
  // a live handle of another slot (or ESTALE when none is). Reads go to the server without
  // ReadCollapser.
  void judge_new_handles(HandleJudge may_use) override;

 private:
  struct Handle {
    std::shared_ptr<sftp::Connection> conn;
    std::string handle;
  };
  // Held by every call that sends requests with a handle, for as long as it may send them.
  class InUse {
   public:
    explicit InUse(RemoteFile& f);
    ~InUse();
    InUse(const InUse&) = delete;
    InUse& operator=(const InUse&) = delete;

   private:
    RemoteFile& f_;
  };
  // The handle on `slot`, opening it by path when needed; while the path may name another file
  // than the one opened (its epoch moved on: renamed over or away, removed), a handle already
  // open on another slot instead, or ESTALE when none is.
  Result<Handle> handle_on(size_t slot);
  Result<Handle> any_handle();
  // A handle open on a live connection, if any; mu_ held.
  std::optional<Handle> live_handle_locked() const;
  // The SFTP requests behind read(), write() and truncate().
  Result<SharedBytes> fetch(uint64_t offset, uint32_t size);
  // write(), write_reporting_attrs() and write_extents(): write_pipelined, with reads of the
  // file that are in flight or start meanwhile kept from sharing their bytes with later ones.
  Result<uint32_t> write_detaching(const std::vector<Extent>& extents,
                                   std::optional<sftp::Attrs>* attrs_after);
  // `total`: the extents' bytes. With `attrs_after`, an FSTAT goes behind the WRITEs and its
  // answer lands there (left empty when the server gives none).
  Result<uint32_t> write_pipelined(const std::vector<Extent>& extents, uint64_t total,
                                   std::optional<sftp::Attrs>* attrs_after);
  Status truncate_now(uint64_t size);

  std::shared_ptr<SftpBackend> backend_;
  std::optional<sftp::Attrs> attrs_at_open_, parent_attrs_at_open_;  // set by open_first
  mutable std::mutex mu_;  // guards rel_, epoch_, judged_, judge_, handles_, users_ and closing_
  std::string rel_;
  uint64_t epoch_ = 0;   // of rel_ when the file was opened there (PathEpochs)
  bool judged_ = false;  // judge_new_handles() was called
  HandleJudge judge_;    // its judge; empty: no handle opened by path
  std::string counted_;  // the server path PathEpochs counts the file open at; "" if none
  int flags_;
  std::vector<Handle> handles_;  // by slot; empty handle string = not open
  size_t users_ = 0;             // calls holding an InUse
  std::vector<Handle> closing_;  // closed while in use: closed when users_ comes to 0
};

}  // namespace skein
