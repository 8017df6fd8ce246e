// What every Layout shares; see layout.hpp.
#include "namespace/layout.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

namespace skein {

std::vector<Result<sftp::Attrs>> Layout::getattr_each(const std::vector<std::string>& rels) {
  std::vector<Result<sftp::Attrs>> out;
  out.reserve(rels.size());
  for (const std::string& rel : rels) out.push_back(getattr(rel));
  return out;
}

Result<uint32_t> OpenFile::write_extents(const std::vector<Extent>& extents) {
  uint64_t written = 0;
  for (const Extent& e : extents) {
    auto w = write(e.offset, e.data);
    if (!w) return w;
    if (*w != e.data.size()) return Result<uint32_t>::failure(EIO);  // a short write
    written += *w;
  }
  return static_cast<uint32_t>(written);
}

Result<sftp::Attrs> OpenFile::set_size_then(
    const AttrChange& change, const std::function<Status(const AttrChange& rest)>& set_rest) {
  using R = Result<sftp::Attrs>;
  if (change.size)
    if (auto st = truncate(*change.size); !st) return R::failure(st.error());
  AttrChange rest = change;
  rest.size.reset();
  if (rest.mode || rest.uid || rest.gid || rest.atime_s || rest.mtime_s)
    if (auto st = set_rest(rest); !st) return R::failure(st.error());
  return fstat();
}

Result<WholeFile> read_whole_and_close(OpenFile& file, const sftp::Attrs& attrs, uint32_t max_bytes,
                                       bool attrs_of_file, bool same_file) {
  using R = Result<WholeFile>;
  WholeFile whole{attrs, {}};
  int error = 0;
  if (!S_ISREG(attrs.permissions)) {
    error = S_ISDIR(attrs.permissions) ? EISDIR : EINVAL;
  } else if (attrs.size > max_bytes) {
    error = EFBIG;
  } else {
    // One byte more than allowed: a file that grew since its open shows as too long.
    // `attrs_of_file`: the attributes answered are those of the file read (the open's were a
    // look at its name).
    auto read = attrs_of_file || same_file ? file.read_reporting_attrs(0, max_bytes + 1)
                                           : [&]() -> Result<OpenFile::ReadWithAttrs> {
      auto data = file.read(0, max_bytes + 1);
      if (!data) return Result<OpenFile::ReadWithAttrs>::failure(data.error());
      return OpenFile::ReadWithAttrs{data.take(), attrs};
    }();
    if (!read)
      error = read.error();
    else if (read->data.size() > max_bytes || read->attrs.size > max_bytes)
      error = EFBIG;
    else if (!S_ISREG(read->attrs.permissions))
      error = EINVAL;
    else if (same_file && (read->attrs.permissions != attrs.permissions ||
                           read->attrs.uid != attrs.uid || read->attrs.gid != attrs.gid))
      error = ESTALE;
    else
      whole = WholeFile{attrs_of_file ? read->attrs : attrs, std::move(read->data)};
  }
  (void)file.close();
  if (error != 0) return R::failure(error);
  return whole;
}

std::vector<Result<WholeFile>> Layout::read_whole_files(const std::vector<std::string>& rels,
                                                        uint32_t max_bytes, bool attrs_of_files) {
  std::vector<Result<WholeFile>> out;
  out.reserve(rels.size());
  for (const std::string& rel : rels) {
    auto f = open_with_attrs(rel, O_RDONLY);
    out.push_back(f ? read_whole_and_close(*f->file, f->attrs, max_bytes, attrs_of_files)
                    : Result<WholeFile>::failure(f.error()));
  }
  return out;
}

std::vector<Result<MadeWholeFile>> Layout::write_whole_files(
    const std::vector<NewWholeFile>& files) {
  using R = Result<MadeWholeFile>;
  std::vector<R> out;
  out.reserve(files.size());
  for (const NewWholeFile& f : files) {
    out.push_back([&]() -> R {
      // Writable by its owner until it is whole; its mode comes with its times. Always a new
      // file: what is found at the partial's name (an earlier run's, or another user's file moved
      // there by the caller) is removed, never written over.
      const uint32_t mode = (f.mode & 0777) | S_IWUSR;
      auto made = create(f.partial, O_WRONLY | O_CREAT | O_EXCL, mode);
      if (!made && made.error() == EEXIST) {
        (void)unlink(f.partial);
        made = create(f.partial, O_WRONLY | O_CREAT | O_EXCL, mode);
      }
      if (!made) return R::failure(made.error());
      auto fail = [&](int error, bool is_open) {
        if (is_open) (void)made->file->close();
        (void)unlink(f.partial);
        return R::failure(error);
      };
      if (!f.data.empty()) {
        auto w = made->file->write(0, f.data);
        if (!w) return fail(w.error(), true);
        if (*w != f.data.size()) return fail(EIO, true);
      }
      AttrChange change;
      change.mode = f.mode & 07777;
      change.atime_s = f.atime_s;
      change.mtime_s = f.mtime_s;
      auto set = setattr(f.partial, change, made->file.get());
      if (!set) return fail(set.error(), true);
      if (auto st = made->file->close(); !st) return fail(st.error(), false);
      auto moved = rename_reporting_parents(f.partial, f.path, 0);
      if (!moved) return fail(moved.error(), false);
      return MadeWholeFile{*set, moved->to_dir};
    }());
  }
  return out;
}

std::vector<Result<MadeWholeFile>> Layout::made_the_rest_here(
    const std::vector<NewWholeFile>& files,
    std::vector<std::optional<Result<MadeWholeFile>>> made) {
  made.resize(files.size());
  std::vector<NewWholeFile> rest;
  std::vector<size_t> rest_at;
  for (size_t i = 0; i < files.size(); ++i) {
    if (made[i]) continue;
    rest.push_back(files[i]);
    rest_at.push_back(i);
  }
  if (!rest.empty()) {
    auto here = Layout::write_whole_files(rest);
    for (size_t k = 0; k < rest_at.size() && k < here.size(); ++k)
      made[rest_at[k]] = std::move(here[k]);
  }
  std::vector<Result<MadeWholeFile>> out;
  out.reserve(files.size());
  for (auto& m : made) out.push_back(m ? std::move(*m) : Result<MadeWholeFile>::failure(EIO));
  return out;
}

}  // namespace skein
