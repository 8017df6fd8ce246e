// An open file of a striped layout: one BackendFile per backend, each holding that backend's part
// (see stripe_map.hpp and docs/striping.md). A read or write of a range is split by stripe and
// sent to every backend it touches at once; holes inside the logical size read as zeros.
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include "backend/backend_file.hpp"
#include "namespace/layout.hpp"
#include "namespace/stripe_map.hpp"

namespace skein {

// Runs f(i) for every i of `which` at once: the first on the calling thread, each other one on a
// thread of its own (SFTP calls block). Results come back in the order of `which`.
template <typename F>
auto fan_out(const std::vector<size_t>& which, F f)
    -> std::vector<std::invoke_result_t<F&, size_t>> {
  using R = std::invoke_result_t<F&, size_t>;
  std::vector<R> out;
  out.reserve(which.size());
  if (which.empty()) return out;
  std::vector<std::future<R>> rest;
  std::vector<size_t> inline_too;  // where no thread could be started
  for (size_t k = 1; k < which.size(); ++k) {
    try {
      rest.push_back(std::async(std::launch::async, [&f, i = which[k]] { return f(i); }));
    } catch (const std::system_error&) {
      rest.emplace_back();
      inline_too.push_back(k);
    }
  }
  out.push_back(f(which[0]));
  for (size_t k = 1; k < which.size(); ++k) {
    auto& fut = rest[k - 1];
    out.push_back(fut.valid() ? fut.get() : f(which[k]));
  }
  return out;
}

// The same over 0 .. n-1.
template <typename F>
auto fan_out(size_t n, F f) {
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  return fan_out(all, std::move(f));
}

// The most telling error among per-backend results (0 when all succeeded).
template <typename R>
int worst_error(const std::vector<R>& results) {
  int err = 0;
  for (auto& r : results)
    if (!r) err = most_telling_error(err, r.error());
  return err;
}

class StripedFile final : public OpenFile {
 public:
  // `parts[b]` is backend b's part; null where a read-only open found none (it reads as holes).
  // `flags` are the caller's open(2) flags; the parts are opened without O_APPEND, which this
  // class carries out itself at the logical end of file.
  StripedFile(StripeMap map, std::vector<std::shared_ptr<BackendFile>> parts, std::string rel,
              int flags);
  ~StripedFile() override = default;  // each part closes its handles
  StripedFile(const StripedFile&) = delete;
  StripedFile& operator=(const StripedFile&) = delete;

  // Up to `size` bytes; shorter only at the logical end of file.
  Result<SharedBytes> read(uint64_t offset, uint32_t size) override;
  // All of `data` on every backend it touches, or the most telling error among them. Each
  // backend's share goes to it as views of `data`, never gathered.
  Result<uint32_t> write(uint64_t offset, const SharedBytes& data) override;
  Status fsync() override;
  // Cuts or extends every part to its share of `size`.
  Status truncate(uint64_t size) override;
  // Part 0's attributes with the logical size and the latest times of all parts.
  Result<sftp::Attrs> fstat() override;
  // The size as truncate(); mode, owner and times on every part.
  Result<sftp::Attrs> set_attrs(const AttrChange& change) override;
  Status close() override;
  std::string rel_path() const override;
  void renamed(std::string new_rel) override;
  // Each part's new handles judged by that part's own attributes.
  void judge_new_handles(HandleJudge may_use) override {
    for (auto& p : parts_)
      if (p) p->judge_new_handles(may_use);
  }
  // fstat(), each part's own attributes judged: the parts were opened by path, one server after
  // another, and any may be another file than part 0's.
  Result<sftp::Attrs> judge_handles(HandleJudge may_use) override;

  // The logical size now, from the size of every part.
  Result<uint64_t> logical_size();

 private:
  // fstat(); with `each`, every part's attributes must pass it (else EACCES).
  Result<sftp::Attrs> fstat_parts(const HandleJudge* each);

  StripeMap map_;
  std::vector<std::shared_ptr<BackendFile>> parts_;  // by backend; fixed after construction
  int flags_;
  mutable std::mutex mu_;  // guards rel_
  std::string rel_;
  std::mutex append_mu_;  // one O_APPEND write at a time: each needs the size the last one left
};

}  // namespace skein
