// A subtree striped over W backends with stripe size S, for aggregate bandwidth: stripe k of a
// file lives on backend k mod W. Every backend holds a part file at the file's path with its
// stripes packed densely (stripe_map.hpp; the on-disk format is in docs/striping.md).
// - Backend 0 is the authority for names: a name exists when backend 0 has it, and its type,
//   mode, owner and link count come from there. The other backends hold parts only; a part that
//   is missing reads as holes, and a part without a name on backend 0 is an orphan that a new file
//   of that name truncates.
// - Directories exist on every backend; one missing on a backend is created when needed.
// - Symlinks live on backend 0 only; hard links are made on every backend.
// - Every change needs every backend: one that is down fails it at once with EIO.
// - Each backend holds a stripe record (stripe_record.hpp) at its root. Nothing is served until
//   the records match the configuration; a configuration that no longer fits the files gets EIO
//   and an error in the log, never reads or writes at the wrong offsets.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend_file.hpp"
#include "namespace/layout.hpp"
#include "namespace/name_locks.hpp"
#include "namespace/stripe_map.hpp"
#include "namespace/stripe_record.hpp"

namespace skein {

class StripedLayout final : public Layout {
 public:
  // `backends` in stripe order (at least one); `stripe_size` > 0.
  StripedLayout(std::vector<std::shared_ptr<Backend>> backends, uint64_t stripe_size);

  Result<sftp::Attrs> getattr(const std::string& rel) override;
  // Every backend asked about every path at once.
  std::vector<Result<sftp::Attrs>> getattr_each(const std::vector<std::string>& rels) override;
  Result<sftp::Attrs> setattr(const std::string& rel, const AttrChange& change,
                              OpenFile* open) override;
  Result<std::vector<DirEntryAttrs>> readdir(const std::string& rel) override;
  Result<sftp::Attrs> mkdir(const std::string& rel, uint32_t mode) override;
  Status rmdir(const std::string& rel) override;
  Status unlink(const std::string& rel) override;
  Status rename(const std::string& from, const std::string& to, unsigned flags) override;
  Result<sftp::Attrs> symlink(const std::string& rel, const std::string& target) override;
  Result<std::string> readlink(const std::string& rel) override;
  Result<sftp::Attrs> link(const std::string& existing, const std::string& rel) override;
  Result<sftp::StatVfs> statfs(const std::string& rel) override;
  Result<std::shared_ptr<OpenFile>> open(const std::string& rel, int flags) override;
  Result<Created> create(const std::string& rel, int flags, uint32_t mode) override;
  // A file of one stripe or less lives on backend 0 alone: those whose names hold no bytes on
  // the other backends are made there together (Backend::write_whole_files). Larger files, the
  // others, and those backend 0 leaves to the layout, are made one by one, every part anew
  // (Layout::write_whole_files).
  std::vector<Result<MadeWholeFile>> write_whole_files(
      const std::vector<NewWholeFile>& files) override;
  std::vector<std::shared_ptr<Backend>> backends() const override { return backends_; }
  // "striped(1 MiB x 3: a, b, c)", followed by " refused: WHY" while its stripe records do not
  // fit the configuration.
  std::string describe() const override;
  // Checks (or writes) the stripe records.
  void prepare() override { (void)check_records(); }
  // "refused: WHY" while the stripe records do not fit.
  std::string problem() const override;

  const StripeMap& map() const { return map_; }

 private:
  Backend& primary() const { return *backends_[0]; }
  size_t width() const { return backends_.size(); }
  // The attributes of the path whose answers from every backend are in `asks` from `first_at` on
  // (backend 0's first): a regular file's size from all its parts.
  Result<sftp::Attrs> combined(Backend::LstatBatch& asks, size_t first_at) const;
  // EIO when any backend is down: a change must reach every part, and must not wait for one.
  Status all_up() const;
  // Every operation starts here. `rel` naming the stripe record (or its temporary) fails with
  // `reserved_err`; otherwise EIO until the backends' records have been found to match (checked
  // once, then trusted while the layout lives).
  Status ready(const std::string& rel, int reserved_err);
  // Reads every backend's record and judges them; writes them where none was finished.
  Status check_records();
  Result<FoundRecord> read_record(size_t b);
  Status write_record(size_t b, const StripeRecord& record);
  // Opens backend b's part of `rel`; a part (or its directory) missing on b > 0 is created with
  // `mode`, and given the owner and group of `like` (part 0's attributes) where given. With
  // `missing_ok`, a part that cannot be created is null (it reads as holes).
  Result<std::shared_ptr<BackendFile>> open_part(size_t b, const std::string& rel, int flags,
                                                 uint32_t mode, bool missing_ok,
                                                 const sftp::Attrs* like = nullptr);
  // Sets every part of `rel` (whose part 0 has attributes `like`) to its share of `size`.
  Status truncate_parts(const std::string& rel, uint64_t size, const sftp::Attrs& like);
  // Makes directory `rel` on backend b > 0 (like backend 0's), whatever stray is in the way.
  Status make_dir_on(size_t b, const std::string& rel, uint32_t mode);
  // Removes whatever `rel` is on backend b > 0, with anything below it: orphans, since backend 0
  // no longer names them.
  void remove_orphan(size_t b, const std::string& rel);

  std::vector<std::shared_ptr<Backend>> backends_;
  StripeMap map_;
  // Held by a change of a name across the backends (create, unlink, rename, link, mkdir,
  // rmdir), from backend 0's answer to the last part's: an unlink's removal of the parts must
  // not take those of a file created under the name meanwhile, nor a rename move them.
  NameLocks names_;

  std::atomic<bool> records_ok_{false};
  std::mutex check_mu_;                               // one check at a time
  std::chrono::steady_clock::time_point refused_at_;  // guarded by check_mu_
  mutable std::mutex refusal_mu_;                     // a leaf
  std::string refusal_;  // why the last check refused; empty: it did not (refusal_mu_)
  std::string refusal() const;
  void set_refusal(std::string why);
  // describe() without the refusal, for the log.
  std::string shape() const;
};

}  // namespace skein
