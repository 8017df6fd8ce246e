// A subtree served by one backend or by a union of branches (mergerfs semantics):
// - lookup is first-found in branch order (all branches are asked at once);
// - a directory on several branches is merged; readdir asks every branch concurrently and the
//   first branch wins a duplicate name; a branch that is down drops out, with a warning;
// - create, mkdir and symlink go where the create policy says, cloning the parent directories
//   onto that branch where they are missing;
// - unlink, rmdir, chmod, chown, utimens and truncate act on every copy (rmdir only when every
//   copy is empty: else ENOTEMPTY, and none is removed);
// - rename stays on each branch that holds the source and moves every copy; where it cannot,
//   it fails with EXDEV so that mv copies instead; a target a read-only branch holds is EROFS;
//   a failure on one branch fails the rename, the copies already moved moved back;
// - errors are ranked across branches: any success wins, else the most telling error.
// A single backend is the one-branch case.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "namespace/branch.hpp"
#include "namespace/create_policy.hpp"
#include "namespace/layout.hpp"
#include "namespace/name_locks.hpp"

namespace skein {

class UnionLayout final : public Layout {
 public:
  UnionLayout(std::vector<Branch> branches, std::shared_ptr<CreatePolicy> policy);

  Result<sftp::Attrs> getattr(const std::string& rel) override;
  // Every branch asked about every path at once; each answer as getattr() gives it.
  std::vector<Result<sftp::Attrs>> getattr_each(const std::vector<std::string>& rels) override;
  Result<sftp::Attrs> setattr(const std::string& rel, const AttrChange& change,
                              OpenFile* open) override;
  Result<std::vector<DirEntryAttrs>> readdir(const std::string& rel) override;
  Result<sftp::Attrs> mkdir(const std::string& rel, uint32_t mode) override;
  Status rmdir(const std::string& rel) override;
  Status unlink(const std::string& rel) override;
  Result<std::optional<sftp::Attrs>> unlink_reporting_parent(const std::string& rel) override;
  Status rename(const std::string& from, const std::string& to, unsigned flags) override;
  Result<RenameParents> rename_reporting_parents(const std::string& from, const std::string& to,
                                                 unsigned flags) override;
  Result<sftp::Attrs> symlink(const std::string& rel, const std::string& target) override;
  Result<std::string> readlink(const std::string& rel) override;
  Result<sftp::Attrs> link(const std::string& existing, const std::string& rel) override;
  Result<sftp::StatVfs> statfs(const std::string& rel) override;
  Result<std::shared_ptr<OpenFile>> open(const std::string& rel, int flags) override;
  // The copy open() would open, refused (EROFS) on a read-only branch, as setattr() is.
  Result<std::shared_ptr<OpenFile>> open_to_change(const std::string& rel, int flags) override;
  // One branch: the OPEN alone, the file's attributes coming with it (one round trip, not three).
  Result<OpenedWithAttrs> open_with_attrs(const std::string& rel, int flags) override;
  // One branch: its backend reads the files together.
  std::vector<Result<WholeFile>> read_whole_files(const std::vector<std::string>& rels,
                                                  uint32_t max_bytes, bool attrs_of_files) override;
  // One branch that takes new files: its backend makes the files together, and this layout
  // those it leaves.
  std::vector<Result<MadeWholeFile>> write_whole_files(
      const std::vector<NewWholeFile>& files) override;
  Result<Created> create(const std::string& rel, int flags, uint32_t mode) override;
  std::vector<std::shared_ptr<Backend>> backends() const override;
  std::string describe() const override;

  const std::vector<Branch>& branches() const { return branches_; }
  const CreatePolicy& policy() const { return *policy_; }

 private:
  struct Copy {
    const Branch* branch;
    sftp::Attrs attrs;
  };
  // Every branch's answer for `rel`, asked at once: the copies found, in branch order, and the
  // most telling error among the branches that do not have it.
  struct Lookup {
    std::vector<Copy> copies;
    int error = ENOENT;
  };
  Lookup lookup_all(const std::string& rel);
  // The lookup of one path whose answers from every branch are in `answers` from `first_at` on.
  Lookup looked_up(Backend::LstatBatch& answers, size_t first_at);
  // The first copy in branch order.
  Result<Copy> find(const std::string& rel);
  // open() of the first copy of `rel` (several branches); `to_change`: refused on a read-only
  // branch even for reading (open_to_change).
  Result<std::shared_ptr<OpenFile>> open_found(const std::string& rel, int flags, bool to_change);
  // The branch a new entry `rel` goes to, with its parent directories in place.
  Result<const Branch*> branch_for_new(const std::string& rel);
  // ENOTEMPTY when any directory copy of `rel` in `found` holds an entry (every copy listed at
  // once), else the error of a listing that failed.
  Status every_copy_empty(const std::string& rel, const Lookup& found);
  // Applies `op` to every copy of `rel`; read-only copies count as EROFS.
  template <typename Op>
  Status on_every_copy(const std::string& rel, Op op);
  // The same on the copies a lookup found.
  template <typename Op>
  Status on_every_copy(const Lookup& found, Op op);

  std::vector<Branch> branches_;
  std::shared_ptr<CreatePolicy> policy_;
  // Held from the look for a new entry's name to its creation (create, mkdir, symlink, link over
  // several branches): two calls that each found no `rel` and were each placed on another
  // branch (rand, mfs) would both succeed, O_EXCL too, one entry hiding the other.
  NameLocks new_entry_locks_;
};

}  // namespace skein
