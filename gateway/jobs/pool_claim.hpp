// Whose job directories a pool's backend holds. The root of every backend of a [[jobs.pool]]
// carries a file, `.skein-pool`, naming the identity of the job database (JobStore::identity) of
// the gateway that makes and removes job directories there. Without it, two gateways with two
// databases on the same servers (a second gateway pointed at the production pool, a database
// lost and made anew) would each take the other's job directories for orphans and reap them, and
// a create of a job the other serves would remove its directory as one "left from before".
//
// A gateway writes the file at its first look at a backend that has none, under a name of its
// own first and then renamed into place (never over another), so that the file is never seen half
// written and of two gateways at once only one claims the backend. A backend whose file names
// another database is used for nothing: no job directory is made there and none reaped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "backend/backend.hpp"

namespace skein {

inline constexpr std::string_view kPoolClaimPath = "/.skein-pool";

// The file's text: the identity, and for an admin who finds it, what it means and where it
// comes from.
std::string pool_claim_text(const std::string& identity, const std::string& database,
                            const std::string& host, int64_t now_s);
// The identity a claim's text names (its `identity = "..."` line); nullopt when it names none.
std::optional<std::string> pool_claim_identity(std::string_view text);

struct PoolClaim {
  enum class Kind {
    ours,     // the file names this identity
    made,     // there was none: written now, naming this identity
    foreign,  // the file names another database, or none
    failed,   // the backend could not be asked or written (down, an I/O error): ask again later
  };
  Kind kind = Kind::failed;
  std::string detail;  // foreign: the identity it names ("" for none); failed: why
};

// Reads the backend's claim, and where there is none writes `text`, which names `identity`.
PoolClaim claim_pool_backend(Backend& backend, const std::string& identity,
                             const std::string& text);

}  // namespace skein
