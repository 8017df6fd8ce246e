// StripedFile; see striped_file.hpp.
#include "namespace/striped_file.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace skein {
StripedFile::StripedFile(StripeMap map, std::vector<std::shared_ptr<BackendFile>> parts,
                         std::string rel, int flags)
    : map_(map), parts_(std::move(parts)), flags_(flags), rel_(std::move(rel)) {}

std::string StripedFile::rel_path() const {
  std::lock_guard lock(mu_);
  return rel_;
}

void StripedFile::renamed(std::string new_rel) {
  for (auto& p : parts_)
    if (p) p->renamed(new_rel);
  std::lock_guard lock(mu_);
  rel_ = std::move(new_rel);
}

Result<SharedBytes> StripedFile::read(uint64_t offset, uint32_t size) {
  using R = Result<SharedBytes>;
  if (size == 0) return SharedBytes();
  auto ext = map_.extents(offset, size);
  std::vector<size_t> touched;
  std::vector<size_t> index_of(map_.width(), 0);
  for (size_t b = 0; b < ext.size(); ++b) {
    if (!ext[b].length) continue;
    index_of[b] = touched.size();
    touched.push_back(b);
  }
  auto got = fan_out(touched, [&](size_t b) -> R {
    if (!parts_[b]) return SharedBytes();  // no part on this backend: all holes
    return parts_[b]->read(ext[b].local_offset, static_cast<uint32_t>(ext[b].length));
  });
  if (int err = worst_error(got)) return R::failure(err);

  // A part's read is short only at that part's end. The file may still go on past it, on
  // another backend: holes read as zeros up to the logical size.
  bool whole = true;
  uint64_t known_size = 0;  // the logical size is at least this
  for (size_t i = 0; i < touched.size(); ++i) {
    uint32_t b = static_cast<uint32_t>(touched[i]);
    whole &= got[i]->size() == ext[b].length;
    if (!got[i]->empty())
      known_size = std::max(known_size, map_.logical_end(b, ext[b].local_offset + got[i]->size()));
  }
  if (whole && touched.size() == 1) return got[0].take();
  uint64_t length = size;
  if (known_size < offset + size) {
    auto total = logical_size();
    if (!total) return R::failure(total.error());
    uint64_t end = std::max(*total, known_size);
    length = end <= offset ? 0 : std::min<uint64_t>(size, end - offset);
  }
  // The parts' bytes in logical order, zeros for holes, as views: nothing is copied.
  static const char zeros[64 * 1024] = {};
  auto add_zeros = [](std::vector<std::string_view>& views, uint64_t n) {
    for (; n > 0; n -= std::min<uint64_t>(n, sizeof zeros))
      views.emplace_back(zeros, static_cast<size_t>(std::min<uint64_t>(n, sizeof zeros)));
  };
  auto keep = std::make_shared<std::vector<SharedBytes>>();
  std::vector<std::string_view> views;
  for (auto& s : map_.segments(offset, length)) {
    const SharedBytes& data = *got[index_of[s.backend]];
    const uint64_t within = s.local_offset - ext[s.backend].local_offset;
    const uint64_t n =
        within >= data.size() ? 0 : std::min<uint64_t>(s.length, data.size() - within);
    data.view(static_cast<size_t>(within), static_cast<size_t>(n), views);
    add_zeros(views, s.length - n);
  }
  for (auto& g : got) keep->push_back(g.take());
  return SharedBytes(std::move(views), std::move(keep));
}

Result<uint32_t> StripedFile::write(uint64_t offset, const SharedBytes& data) {
  using R = Result<uint32_t>;
  if (data.empty()) return static_cast<uint32_t>(0);
  std::unique_lock<std::mutex> append_lock;
  if (flags_ & O_APPEND) {
    // The parts know nothing of the logical end of file: find it, and write there.
    append_lock = std::unique_lock(append_mu_);
    auto size = logical_size();
    if (!size) return R::failure(size.error());
    offset = *size;
  }
  auto ext = map_.extents(offset, data.size());
  // A backend's share is contiguous in its part, and its stripes come in order: it is the views
  // of its segments, one after the other, never gathered into a copy.
  std::vector<std::vector<std::string_view>> share(map_.width());
  for (auto& s : map_.segments(offset, data.size()))
    data.view(s.logical_offset - offset, s.length, share[s.backend]);
  std::vector<size_t> touched;
  for (size_t b = 0; b < ext.size(); ++b)
    if (ext[b].length) touched.push_back(b);
  auto done = fan_out(touched, [&](size_t b) -> Status {
    if (!parts_[b]) return Status::failure(EBADF);
    auto r = parts_[b]->write(ext[b].local_offset, SharedBytes(std::move(share[b]), nullptr));
    return r ? ok_status() : Status::failure(r.error());
  });
  if (int err = worst_error(done)) return R::failure(err);
  return static_cast<uint32_t>(data.size());
}

Status StripedFile::fsync() {
  auto done = fan_out(parts_.size(), [&](size_t b) -> Status {
    return parts_[b] ? parts_[b]->fsync() : ok_status();
  });
  int err = worst_error(done);
  return err ? Status::failure(err) : ok_status();
}

Status StripedFile::truncate(uint64_t size) {
  auto done = fan_out(parts_.size(), [&](size_t b) -> Status {
    uint64_t local = map_.local_size(static_cast<uint32_t>(b), size);
    if (!parts_[b]) return local ? Status::failure(EBADF) : ok_status();
    return parts_[b]->truncate(local);
  });
  int err = worst_error(done);
  return err ? Status::failure(err) : ok_status();
}

Result<sftp::Attrs> StripedFile::set_attrs(const AttrChange& change) {
  return set_size_then(change, [&](const AttrChange& rest) -> Status {
    for (auto& part : parts_)
      if (part)
        if (auto r = part->set_attrs(rest); !r) return Status::failure(r.error());
    return ok_status();
  });
}

Result<sftp::Attrs> StripedFile::fstat() { return fstat_parts(nullptr); }

Result<sftp::Attrs> StripedFile::judge_handles(HandleJudge may_use) {
  judge_new_handles(may_use);
  return fstat_parts(may_use ? &may_use : nullptr);
}

Result<sftp::Attrs> StripedFile::fstat_parts(const HandleJudge* each) {
  using R = Result<sftp::Attrs>;
  auto attrs = fan_out(parts_.size(), [&](size_t b) -> R {
    if (!parts_[b]) return sftp::Attrs{};  // a missing part: empty
    auto a = parts_[b]->fstat();
    if (a && each && !(*each)(*a)) return R::failure(EACCES);
    return a;
  });
  if (int err = worst_error(attrs)) return R::failure(err);
  sftp::Attrs out = *attrs[0];
  std::vector<uint64_t> sizes;
  for (auto& a : attrs) {
    sizes.push_back(a->size);
    // Writes touch only some parts: the file changed when its latest part did. An empty part
    // other than the first has had no write; its times say nothing (StripedLayout::getattr).
    if (sizes.size() > 1 && a->size == 0) continue;
    out.mtime = std::max(out.mtime, a->mtime);
    out.atime = std::max(out.atime, a->atime);
  }
  out.size = map_.logical_size(sizes);
  out.flags |= sftp::ATTR_SIZE;
  return out;
}

Result<uint64_t> StripedFile::logical_size() {
  auto a = fstat();
  if (!a) return Result<uint64_t>::failure(a.error());
  return a->size;
}

Status StripedFile::close() {
  auto done = fan_out(parts_.size(), [&](size_t b) -> Status {
    return parts_[b] ? parts_[b]->close() : ok_status();
  });
  int err = worst_error(done);
  return err ? Status::failure(err) : ok_status();
}

}  // namespace skein
