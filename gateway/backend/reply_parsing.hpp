// Turning SFTP replies into results: shared by SftpBackend and RemoteFile.
#pragma once

#include <optional>
#include <string>

#include "sftp/protocol.hpp"
#include "skein/result.hpp"

namespace skein::sftp {

inline Result<Attrs> expect_attrs(Result<Reply> r) {
  if (!r) return Result<Attrs>::failure(r.error());
  if (r->type == FXP_STATUS) {
    auto code = PacketReader(r->body).u32();
    int e = code ? status_to_errno(*code) : EIO;
    return Result<Attrs>::failure(e ? e : EIO);
  }
  if (r->type != FXP_ATTRS) return Result<Attrs>::failure(EIO);
  auto a = PacketReader(r->body).attrs();
  if (!a) return Result<Attrs>::failure(EIO);
  return *a;
}

inline Result<std::string> expect_handle(Result<Reply> r) {
  if (!r) return Result<std::string>::failure(r.error());
  if (r->type == FXP_STATUS) {
    auto code = PacketReader(r->body).u32();
    int e = code ? status_to_errno(*code) : EIO;
    return Result<std::string>::failure(e ? e : EIO);
  }
  if (r->type != FXP_HANDLE) return Result<std::string>::failure(EIO);
  auto h = PacketReader(r->body).str();
  if (!h) return Result<std::string>::failure(EIO);
  return std::string(*h);
}

// Raw status code of a STATUS reply, or nullopt.
inline std::optional<uint32_t> status_code(const Result<Reply>& r) {
  if (!r || r->type != FXP_STATUS) return std::nullopt;
  return PacketReader(r->body).u32();
}

}  // namespace skein::sftp
