#include "jobs/pool_claim.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include "backend/backend_file.hpp"
#include "skein/shared_bytes.hpp"

namespace skein {
namespace {

constexpr uint32_t kMaxClaimBytes = 64 * 1024;

std::string failed_at(std::string_view path, const char* what, int err) {
  return std::string(what) + " " + std::string(path) + ": " + std::strerror(err);
}

Result<std::string> read_claim(Backend& backend) {
  auto file = backend.open(kPoolClaimPath, O_RDONLY, 0);
  if (!file) return Result<std::string>::failure(file.error());
  auto data = (*file)->read(0, kMaxClaimBytes);
  (void)(*file)->close();
  if (!data) return Result<std::string>::failure(data.error());
  return data->flatten();
}

}  // namespace

std::string pool_claim_text(const std::string& identity, const std::string& database,
                            const std::string& host, int64_t now_s) {
  char when[32] = "";
  const std::time_t t = static_cast<std::time_t>(now_s);
  std::tm tm{};
  if (gmtime_r(&t, &tm)) std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return "# skein: the root of a backend of a job pool ([[jobs.pool]] in the gateway's\n"
         "# configuration). Its job-* directories belong to the skein gateway whose job database\n"
         "# has the identity below: a gateway with another database makes no job directory here\n"
         "# and removes none. Should that database be gone for good, remove this file: the next\n"
         "# gateway to look takes the backend over, and the job directories it does not know\n"
         "# become orphans, removed after its orphan_grace.\n"
         "identity = \"" +
         identity + "\"\ndatabase = \"" + database + "\"\nhost = \"" + host + "\"\nclaimed = \"" +
         when + "\"\n";
}

std::optional<std::string> pool_claim_identity(std::string_view text) {
  constexpr std::string_view kKey = "identity = \"";
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    if (line.substr(0, kKey.size()) == kKey) {
      std::string_view rest = line.substr(kKey.size());
      size_t quote = rest.find('"');
      if (quote == std::string_view::npos || quote == 0) return std::nullopt;
      return std::string(rest.substr(0, quote));
    }
    at = end + 1;
  }
  return std::nullopt;
}

PoolClaim claim_pool_backend(Backend& backend, const std::string& identity,
                             const std::string& text) {
  using Kind = PoolClaim::Kind;
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto existing = read_claim(backend);
    if (existing) {
      auto named = pool_claim_identity(*existing);
      if (named && *named == identity) return {Kind::ours, ""};
      return {Kind::foreign, named.value_or("")};
    }
    if (existing.error() != ENOENT)
      return {Kind::failed, failed_at(kPoolClaimPath, "cannot read", existing.error())};
    // None: written whole under a name of this database's, then renamed to the claim's name
    // without replacing, which fails if another gateway's claim got there first (then read).
    const std::string mine = std::string(kPoolClaimPath) + "." + identity;
    auto file = backend.open(mine, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!file) return {Kind::failed, failed_at(mine, "cannot write", file.error())};
    auto owner = std::make_shared<const std::string>(text);
    auto written = (*file)->write(0, SharedBytes({std::string_view(*owner)}, owner));
    Status synced = written ? (*file)->fsync() : Status::failure(written.error());
    Status closed = (*file)->close();
    int err = !written ? written.error() : !closed ? closed.error() : 0;
    if (!err && !synced && synced.error() != EOPNOTSUPP) err = synced.error();
    if (err) {
      (void)backend.unlink(mine);
      return {Kind::failed, failed_at(mine, "cannot write", err)};
    }
    Status renamed = backend.rename(mine, kPoolClaimPath, 1 /* RENAME_NOREPLACE */);
    if (renamed) return {Kind::made, ""};
    (void)backend.unlink(mine);
    if (renamed.error() != EEXIST)
      return {Kind::failed, failed_at(kPoolClaimPath, "cannot make", renamed.error())};
  }
  return {Kind::failed, std::string(kPoolClaimPath) + " came and went while it was looked at"};
}

}  // namespace skein
