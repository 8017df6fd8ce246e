// What every Backend shares; see backend.hpp.
#include "backend/backend.hpp"

#include <fcntl.h>

#include "backend/backend_file.hpp"

namespace skein {

std::vector<Result<WholeFile>> Backend::read_whole_files(const std::vector<std::string>& rels,
                                                         uint32_t max_bytes, bool attrs_of_files) {
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
    out.push_back(read_whole_and_close(**f, *attrs, max_bytes, attrs_of_files, /*same_file=*/true));
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
  return lstat_all(backends, std::span<const std::string_view>(&rel, 1));
}

Backend::LstatBatch Backend::lstat_each(const std::vector<std::shared_ptr<Backend>>& backends,
                                        const std::vector<std::string>& rels) {
  std::vector<std::string_view> views(rels.begin(), rels.end());
  return lstat_all(backends, views);
}

Backend::LstatBatch Backend::lstat_all(const std::vector<std::shared_ptr<Backend>>& backends,
                                       std::span<const std::string_view> rels) {
  // A backend's lookup holds its path guard from its check until its answer. Holding one guard
  // while waiting for another could deadlock against a thread that takes them the other way
  // round (with a rename waiting for one of them): take them all first, in one order.
  LstatBatch batch;
  std::vector<PathGuard*> guards;
  for (auto& b : backends)
    if (auto* g = b->path_guard()) guards.push_back(g);
  batch.holds_ = PathGuard::hold_all(std::move(guards));
  batch.asks_.reserve(rels.size() * backends.size());
  for (std::string_view rel : rels)
    for (auto& b : backends) batch.asks_.push_back(b->start_lstat(rel));
  return batch;
}

}  // namespace skein
