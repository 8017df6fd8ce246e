// What makes a layout a job's scratch namespace: every file shows the job's owner (the storage
// servers see one service account), a chown to anybody else is EPERM, and the quota is counted and
// enforced here, over all backends, before anything is sent: EDQUOT when a write, a truncate or a
// new name would pass it. `df` shows the quota as the size and the usage as used.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "jobs/quota.hpp"
#include "namespace/layout.hpp"
#include "namespace/link_names.hpp"
#include "namespace/name_locks.hpp"

namespace skein {

class JobLayout final : public Layout {
 public:
  JobLayout(std::shared_ptr<Layout> inner, uint32_t uid, uint32_t gid,
            std::shared_ptr<Quota> quota);

  const std::shared_ptr<Quota>& quota() const { return quota_; }
  const std::shared_ptr<Layout>& inner() const { return inner_; }

  Result<sftp::Attrs> getattr(const std::string& rel) override;
  std::vector<Result<sftp::Attrs>> getattr_each(const std::vector<std::string>& rels) override;
  Result<sftp::Attrs> setattr(const std::string& rel, const AttrChange& change,
                              OpenFile* open) override;
  Result<std::vector<DirEntryAttrs>> readdir(const std::string& rel) override;
  Result<sftp::Attrs> mkdir(const std::string& rel, uint32_t mode) override;
  Status rmdir(const std::string& rel) override;
  Status unlink(const std::string& rel) override;
  Result<std::optional<sftp::Attrs>> unlink_reporting_parent(const std::string& rel) override;
  Status rename(const std::string& from, const std::string& to, unsigned flags) override;
  Result<sftp::Attrs> symlink(const std::string& rel, const std::string& target) override;
  Result<std::string> readlink(const std::string& rel) override;
  Result<sftp::Attrs> link(const std::string& existing, const std::string& rel) override;
  Result<sftp::StatVfs> statfs(const std::string& rel) override;
  Result<std::shared_ptr<OpenFile>> open(const std::string& rel, int flags) override;
  // open(), through the inner layout's open_to_change.
  Result<std::shared_ptr<OpenFile>> open_to_change(const std::string& rel, int flags) override;
  Result<Created> create(const std::string& rel, int flags, uint32_t mode) override;
  // The inner layout's, with each file's inode and bytes taken from the quota first (EDQUOT for
  // a file that would pass it) and what its rename replaced (looked at first, as rename() does)
  // given back.
  std::vector<Result<MadeWholeFile>> write_whole_files(
      const std::vector<NewWholeFile>& files) override;
  std::vector<std::shared_ptr<Backend>> backends() const override { return inner_->backends(); }
  std::string describe() const override { return inner_->describe(); }
  void prepare() override { inner_->prepare(); }
  std::string problem() const override { return inner_->problem(); }

 private:
  // open() and open_to_change(): the inner layout's, a reader owned by the job's user, a writer
  // counted against the quota.
  Result<std::shared_ptr<OpenFile>> open_through(const std::string& rel, int flags, bool to_change);
  sftp::Attrs owned(sftp::Attrs a) const;
  // A file that was at `rel` with `attrs` is gone: its bytes and inode go back to the quota.
  void removed(const std::string& rel, const sftp::Attrs& attrs);
  Result<sftp::Attrs> owned(Result<sftp::Attrs> r) const;
  // A writable handle that counts what its writes and truncations add or take away; `flags` as
  // it was opened (with O_APPEND, every write lands at the file's end, whatever its offset).
  std::shared_ptr<OpenFile> counted(std::shared_ptr<OpenFile> file, const std::string& rel,
                                    std::optional<uint64_t> size, int flags);
  // What removing `a` (a name that goes) gives back.
  void give_back(const sftp::Attrs& a);
  // The name `rel` of a file with attributes `a` goes (removed, or replaced by a rename): what it
  // counted goes back, except the bytes of a file whose last name it was while a handle holds it
  // open (they stay on the server until the last close, OpenSizes::Cell::orphan_of).
  void name_goes(const std::string& rel, const sftp::Attrs& a);

  std::shared_ptr<Layout> inner_;
  uint32_t uid_, gid_;
  std::shared_ptr<Quota> quota_;
  std::shared_ptr<OpenSizes> sizes_ = std::make_shared<OpenSizes>();
  // Usage counts every name as a copy would, so a file with N names counts N times: what it
  // grows or shrinks by through any of them is taken or given back N times, and each name that
  // goes gives back the file's size. Names not known here (linked before the gateway started)
  // are counted by the recount at its start.
  std::shared_ptr<LinkNames> links_ = std::make_shared<LinkNames>();
  // A name's look and change (unlink, rename) in one hold: two of them on one name, racing, would
  // each give back what they looked at.
  NameLocks names_;
};

}  // namespace skein
