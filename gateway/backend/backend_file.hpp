// An open file on one backend: all of a union's file, or one part of a striped file.
#pragma once

#include <optional>

#include "namespace/layout.hpp"
#include "sftp/protocol.hpp"

namespace skein {

class BackendFile : public OpenFile {
 public:
  // After an open with O_CREAT: the file's attributes and its directory's, as the backend saw
  // them right after the open; empty when it did not say. After an open of an existing file, the
  // file's attributes as it was opened (before an O_TRUNC), when the backend got them with it.
  virtual std::optional<sftp::Attrs> attrs_at_open() const = 0;
  virtual std::optional<sftp::Attrs> parent_attrs_at_open() const = 0;
  // The file's attributes as it was opened when the open brought them, else asked (FSTAT).
  Result<sftp::Attrs> attrs_as_opened() {
    if (auto known = attrs_at_open()) return *known;
    return fstat();
  }
};

}  // namespace skein
