// What every Backend shares; see backend.hpp.
#include "backend/backend.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include "backend/backend_file.hpp"

namespace skein {

std::vector<Result<WholeFile>> Backend::read_whole_files(const std::vector<std::string>& rels,
                                                         uint32_t max_bytes) {
  std::vector<Result<WholeFile>> out;
  out.reserve(rels.size());
  for (const std::string& rel : rels) {
    auto f = open(rel, O_RDONLY, 0);
    if (!f) {
      out.push_back(Result<WholeFile>::failure(f.error()));
      continue;
    }
    auto attrs = (*f)->attrs_as_opened();
    if (!attrs) {
      (void)(*f)->close();
      out.push_back(Result<WholeFile>::failure(attrs.error()));
      continue;
    }
    out.push_back(read_whole_and_close(**f, *attrs, max_bytes));
  }
  return out;
}
std::vector<Result<MadeWholeFile>> Backend::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  using R = Result<MadeWholeFile>;
  std::vector<R> out;
  out.reserve(files.size());
  for (const NewWholeFile& f : files) {
    out.push_back([&]() -> R {
      // Writable by its owner until it is whole; its mode comes with its times.
      auto file = open(f.partial, O_WRONLY | O_CREAT | O_TRUNC, (f.mode & 0777) | S_IWUSR);
      if (!file) return R::failure(file.error());
      auto fail = [&](int error, bool is_open) {
        if (is_open) (void)(*file)->close();
        (void)unlink(f.partial);
        return R::failure(error);
      };
      if (!f.data.empty()) {
        auto w = (*file)->write(0, f.data);
        if (!w) return fail(w.error(), true);
        if (*w != f.data.size()) return fail(EIO, true);
      }
      sftp::Attrs a;
      a.flags = sftp::ATTR_PERMISSIONS | sftp::ATTR_ACMODTIME;
      a.permissions = f.mode & 07777;
      a.atime = static_cast<uint32_t>(f.atime_s);
      a.mtime = static_cast<uint32_t>(f.mtime_s);
      auto set = setstat_reporting(f.partial, a);
      if (!set) return fail(set.error(), true);
      if (auto st = (*file)->close(); !st) return fail(st.error(), false);
      auto moved = rename_reporting_parents(f.partial, f.path, 0);
      if (!moved) return fail(moved.error(), false);
      auto attrs = *set ? Result<sftp::Attrs>(**set) : lstat(f.path);
      if (!attrs) return R::failure(attrs.error());
      return MadeWholeFile{*attrs, moved->to_dir};
    }());
  }
  return out;
}

std::unique_ptr<Backend::PendingLstat> Backend::start_lstat(std::string_view rel) {
  // Answered before it is waited for.
  class Answered final : public PendingLstat {
   public:
    explicit Answered(Result<sftp::Attrs> a) : attrs_(std::move(a)) {}
    Result<sftp::Attrs> attrs() override { return attrs_; }

   private:
    Result<sftp::Attrs> attrs_;
  };
  return std::make_unique<Answered>(lstat(rel));
}

Backend::LstatBatch Backend::lstat_each(const std::vector<std::shared_ptr<Backend>>& backends,
                                        std::string_view rel) {
  // A backend's lookup holds its path guard from its check until its answer. Holding one guard
  // while waiting for another could deadlock against a thread that takes them the other way
  // round (with a rename waiting for one of them): take them all first, in one order.
  LstatBatch batch;
  std::vector<PathGuard*> guards;
  for (auto& b : backends)
    if (auto* g = b->path_guard()) guards.push_back(g);
  batch.holds_ = PathGuard::hold_all(std::move(guards));
  batch.asks_.reserve(backends.size());
  for (auto& b : backends) batch.asks_.push_back(b->start_lstat(rel));
  return batch;
}

}  // namespace skein
