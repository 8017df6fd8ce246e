// How a mount's subtree is laid out over backends. A Layout carries out every filesystem
// operation on paths relative to its mount point; NamespaceFs picks the mount, handles the
// directories above mount points and the open-file table, and delegates the rest here.
// Layouts: UnionLayout (one backend, or a union of branches) and StripedLayout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "sftp/protocol.hpp"
#include "skein/result.hpp"
#include "skein/shared_bytes.hpp"

namespace skein {

struct DirEntryAttrs {
  std::string name;
  sftp::Attrs attrs;
  uint32_t nlink = 1;
};

// What a SetAttr asks to change; unset fields stay as they are.
struct AttrChange {
  std::optional<uint32_t> mode;
  std::optional<uint32_t> uid, gid;
  std::optional<uint64_t> size;
  std::optional<int64_t> atime_s, mtime_s;  // seconds; SFTP v3 keeps no finer times
  bool to_now = false;                      // the times are "now" (utimes(NULL), touch)

  // The SETSTAT attributes for mode, owner and times (not the size: layouts truncate their own
  // way), the half of a pair that is not changed taken from `current`.
  sftp::Attrs setstat_attrs(const sftp::Attrs& current) const {
    sftp::Attrs a;
    if (mode) {
      a.flags |= sftp::ATTR_PERMISSIONS;
      a.permissions = *mode & 07777;
    }
    if (uid || gid) {
      a.flags |= sftp::ATTR_UIDGID;
      a.uid = uid.value_or(current.uid);
      a.gid = gid.value_or(current.gid);
    }
    if (atime_s || mtime_s) {
      a.flags |= sftp::ATTR_ACMODTIME;
      a.atime = static_cast<uint32_t>(atime_s.value_or(current.atime));
      a.mtime = static_cast<uint32_t>(mtime_s.value_or(current.mtime));
    }
    return a;
  }
  // Whether setstat_attrs() takes anything from `current`: half of a pair is changed.
  bool needs_current() const {
    return uid.has_value() != gid.has_value() || atime_s.has_value() != mtime_s.has_value();
  }
};

// An open file, whatever the layout behind it.
class OpenFile {
 public:
  virtual ~OpenFile() = default;
  // Up to `size` bytes; shorter only at end of file. The bytes are views of the buffers they
  // arrived in (the SFTP replies'), which the result keeps alive: nothing is gathered.
  virtual Result<SharedBytes> read(uint64_t offset, uint32_t size) = 0;
  // All of `data`, or an error with the real errno. The data comes in pieces (a received gRPC
  // message's slices), which are sent as they are, never joined.
  virtual Result<uint32_t> write(uint64_t offset, const SharedBytes& data) = 0;
  // write(), with the file's attributes right after it where the file gets them in the same
  // round trip (an FSTAT behind the WRITEs); nullopt where it does not.
  struct Written {
    uint32_t bytes = 0;
    std::optional<sftp::Attrs> attrs;
  };
  virtual Result<Written> write_reporting_attrs(uint64_t offset, const SharedBytes& data) {
    auto w = write(offset, data);
    if (!w) return Result<Written>::failure(w.error());
    return Written{*w, std::nullopt};
  }
  // Several writes in one go (random writes the mount gathered into one call): each extent's
  // bytes as write() would write them, in order. All of their bytes, or the first failure. A file
  // may send several before any answer comes back (RemoteFile does, a group at a time on one
  // connection), so where one fails, others of its group may have been written too; as with any
  // write-back cache, the writer learns of the failure and not of which bytes made it.
  struct Extent {
    uint64_t offset = 0;
    SharedBytes data;
  };
  virtual Result<uint32_t> write_extents(const std::vector<Extent>& extents);
  virtual Status fsync() = 0;
  virtual Status truncate(uint64_t size) = 0;
  virtual Result<sftp::Attrs> fstat() = 0;
  // `change` made through the file's handles, never by its path (FSETSTAT, and truncate() for the
  // size); the attributes after it. This one cannot (EOPNOTSUPP).
  virtual Result<sftp::Attrs> set_attrs(const AttrChange& change) {
    (void)change;
    return Result<sftp::Attrs>::failure(EOPNOTSUPP);
  }
  // read(), with fstat() after it: the bytes and the attributes of the file they are of (its
  // owner, group and mode), whatever name the file has by then. Where a caller's permission is
  // judged by the attributes, they must be these, not a look at the path beside the open. This
  // one reads, then asks; RemoteFile asks both of its handle in one round trip.
  struct ReadWithAttrs {
    SharedBytes data;
    sftp::Attrs attrs;
  };
  virtual Result<ReadWithAttrs> read_reporting_attrs(uint64_t offset, uint32_t size) {
    auto data = read(offset, size);
    if (!data) return Result<ReadWithAttrs>::failure(data.error());
    auto attrs = fstat();
    if (!attrs) return Result<ReadWithAttrs>::failure(attrs.error());
    return ReadWithAttrs{data.take(), *attrs};
  }
  virtual Status close() = 0;
  // The file's path relative to its mount, and its update after a rename.
  virtual std::string rel_path() const = 0;
  virtual void renamed(std::string new_rel) = 0;
  // Whether a user the gateway does not trust may use a file with these attributes (its own,
  // from an FSTAT of a handle) as the user's open asked.
  using HandleJudge = std::function<bool(const sftp::Attrs&)>;
  // For a file judged by its own attributes for a user the gateway does not trust
  // (OpenRequest.as_user), whose path may lead to another file before the gateway hears of it.
  // From now on the file reads and writes only through the handles it has open (judged by the
  // caller) and handles it opens by path whose own attributes `may_use` accepts (RemoteFile, one
  // FSTAT per handle), and never shares a read made through another file's handle. A handle
  // refused so is closed unused.
  virtual void judge_new_handles(HandleJudge may_use) { (void)may_use; }
  // judge_new_handles(may_use), then the attributes the open is judged by (fstat()). Where the
  // file is several handles opened by path (a striped file's parts), each one's own attributes
  // must pass `may_use` too, else EACCES.
  virtual Result<sftp::Attrs> judge_handles(HandleJudge may_use) {
    judge_new_handles(std::move(may_use));
    return fstat();
  }

 protected:
  // The shape of every set_attrs(): the size through truncate(), then the rest of `change` (mode,
  // owner, times), if any, through `set_rest`, then fstat().
  Result<sftp::Attrs> set_size_then(const AttrChange& change,
                                    const std::function<Status(const AttrChange& rest)>& set_rest);
};

// The whole of `file`, opened with attributes `attrs`, if it is a regular file of at most
// `max_bytes` (see Backend::read_whole_files), with `attrs`, or with `attrs_of_file` the
// attributes of the file read (read_reporting_attrs); closes it. `same_file`: `attrs` were a look
// at the file's name before its open (which follows a symlink swapped in between, on the server);
// the file read must show the same type, mode, owner and group (its FSTAT, asked with the READ),
// else ESTALE and none of its bytes.
Result<WholeFile> read_whole_and_close(OpenFile& file, const sftp::Attrs& attrs, uint32_t max_bytes,
                                       bool attrs_of_file, bool same_file = false);

struct Created {
  std::shared_ptr<OpenFile> file;
  sftp::Attrs attrs;
  std::optional<sftp::Attrs> parent_attrs;  // the directory right after the create, when known
};

class Layout {
 public:
  virtual ~Layout() = default;
  virtual Result<sftp::Attrs> getattr(const std::string& rel) = 0;
  // getattr() of each of `rels`, in the order asked. This one asks one after another; the
  // striped layout asks every backend about every path at once.
  virtual std::vector<Result<sftp::Attrs>> getattr_each(const std::vector<std::string>& rels);
  // `open` is the caller's open file when it has one (for truncation through a handle).
  virtual Result<sftp::Attrs> setattr(const std::string& rel, const AttrChange& change,
                                      OpenFile* open) = 0;
  virtual Result<std::vector<DirEntryAttrs>> readdir(const std::string& rel) = 0;
  virtual Result<sftp::Attrs> mkdir(const std::string& rel, uint32_t mode) = 0;
  virtual Status rmdir(const std::string& rel) = 0;
  virtual Status unlink(const std::string& rel) = 0;
  // unlink(), with the directory's attributes right after it where the layout gets them in the
  // same round trip (NFS's post-op attributes); nullopt where it does not.
  virtual Result<std::optional<sftp::Attrs>> unlink_reporting_parent(const std::string& rel) {
    if (auto st = unlink(rel); !st) return Result<std::optional<sftp::Attrs>>::failure(st.error());
    return std::optional<sftp::Attrs>();
  }
  virtual Status rename(const std::string& from, const std::string& to, unsigned flags) = 0;
  // rename(), with the attributes of both directories right after it where the layout gets them
  // in the same round trip; nullopt where it does not.
  virtual Result<RenameParents> rename_reporting_parents(const std::string& from,
                                                         const std::string& to, unsigned flags) {
    if (auto st = rename(from, to, flags); !st) return Result<RenameParents>::failure(st.error());
    return RenameParents{};
  }
  virtual Result<sftp::Attrs> symlink(const std::string& rel, const std::string& target) = 0;
  virtual Result<std::string> readlink(const std::string& rel) = 0;
  virtual Result<sftp::Attrs> link(const std::string& existing, const std::string& rel) = 0;
  virtual Result<sftp::StatVfs> statfs(const std::string& rel) = 0;
  // Opens an existing file (never creates; O_TRUNC truncates).
  virtual Result<std::shared_ptr<OpenFile>> open(const std::string& rel, int flags) = 0;
  // open() of a file or directory whose attributes are to be changed through the handle
  // (OpenFile::set_attrs, a change judged for a user the gateway does not trust): refused where
  // setattr() would refuse the change whoever asks (EROFS: the copy is on a read-only branch).
  virtual Result<std::shared_ptr<OpenFile>> open_to_change(const std::string& rel, int flags) {
    return open(rel, flags);
  }
  // open(), with the file's attributes as it was opened (before an O_TRUNC). This one asks for
  // them first; a layout that gets them with the open itself saves the round trip.
  struct OpenedWithAttrs {
    std::shared_ptr<OpenFile> file;
    sftp::Attrs attrs;
  };
  virtual Result<OpenedWithAttrs> open_with_attrs(const std::string& rel, int flags) {
    auto attrs = getattr(rel);
    if (!attrs) return Result<OpenedWithAttrs>::failure(attrs.error());
    auto f = open(rel, flags);
    if (!f) return Result<OpenedWithAttrs>::failure(f.error());
    return OpenedWithAttrs{*f, *attrs};
  }
  // The whole of each of `rels` as Backend::read_whole_files gives it. This one opens, reads and
  // closes one file after another; a layout on one backend lets the backend batch them.
  virtual std::vector<Result<WholeFile>> read_whole_files(const std::vector<std::string>& rels,
                                                          uint32_t max_bytes, bool attrs_of_files);
  // Each of `files` (paths relative to the mount) made as NewWholeFile says, in the order given,
  // as Backend::write_whole_files. This one makes one file after another with the layout's own
  // create, write, setattr, close and rename; a layout on one backend lets the backend batch them.
  virtual std::vector<Result<MadeWholeFile>> write_whole_files(
      const std::vector<NewWholeFile>& files);
  // Creates (or, without O_EXCL, opens) a file.
  virtual Result<Created> create(const std::string& rel, int flags, uint32_t mode) = 0;
  // Every backend the layout uses, for statistics and aggregate statfs.
  virtual std::vector<std::shared_ptr<Backend>> backends() const = 0;
  // "union(a, b)" or "striped(4 MiB x 3: a, b, c)", for admins.
  virtual std::string describe() const = 0;
  // Called once the gateway has connected its backends, on a thread of its own, so that what a
  // layout checks before it serves is checked (and logged) at start, not at the first call.
  virtual void prepare() {}
  // Why the layout serves nothing now although its backends may be up (a striped layout whose
  // stripe records do not fit); empty when there is no such reason.
  virtual std::string problem() const { return {}; }

 protected:
  // The answers of a batch of `files` that made some of them (a backend's, as a rule), with each
  // file it left (nullopt) made here, Layout::write_whole_files' way.
  std::vector<Result<MadeWholeFile>> made_the_rest_here(
      const std::vector<NewWholeFile>& files,
      std::vector<std::optional<Result<MadeWholeFile>>> made);
};

// The space of several servers added up, in 4 KiB fragments, for statfs of unions, stripes and
// the directories above mount points.
class SpaceTotal {
 public:
  SpaceTotal() {
    sum_.bsize = sum_.frsize = 4096;
    sum_.namemax = 255;
  }
  // Adds one server's statvfs; without `available`, its free space is not offered for new files.
  void add(const sftp::StatVfs& v, bool available = true) {
    any_ = true;
    double scale =
        static_cast<double>(v.frsize ? v.frsize : v.bsize) / static_cast<double>(sum_.frsize);
    sum_.blocks += static_cast<uint64_t>(static_cast<double>(v.blocks) * scale);
    sum_.bfree += static_cast<uint64_t>(static_cast<double>(v.bfree) * scale);
    if (available) sum_.bavail += static_cast<uint64_t>(static_cast<double>(v.bavail) * scale);
    sum_.files += v.files;
    sum_.ffree += v.ffree;
    sum_.favail += v.favail;
    if (v.namemax) sum_.namemax = std::min(sum_.namemax, v.namemax);
  }
  bool any() const { return any_; }
  const sftp::StatVfs& sum() const { return sum_; }

 private:
  sftp::StatVfs sum_{};
  bool any_ = false;
};

// Ranks errors across backends: the most telling one wins. A specific answer (EACCES, ENOSPC,
// ENOTEMPTY...) beats a read-only branch, which beats "not there", which beats a server that
// could not be asked.
int error_rank(int err);
inline int most_telling_error(int a, int b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return error_rank(b) > error_rank(a) ? b : a;
}

}  // namespace skein
