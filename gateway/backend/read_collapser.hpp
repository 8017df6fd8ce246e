// Collapses concurrent reads of the same range of the same backend file into one SFTP fetch (the
// CernVM-FS cvmfs/fetch.h pattern): the first reader fetches, and readers asking for the same
// (backend, path, epoch, offset, length) while that fetch is in flight wait for it and share its
// result, whether they come from one mount or several. Only reads in flight together are joined:
// nothing is kept once a fetch is done. A write or truncate through the gateway detaches the file's
// fetches in flight when it starts and when it ends, so a read that starts after a write was
// acknowledged never joins a fetch that might have missed it. The readers share the fetched
// buffers themselves (SharedBytes), not copies.
#pragma once

#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "skein/result.hpp"
#include "skein/shared_bytes.hpp"

namespace skein {

class ReadCollapser {
 public:
  using Fetch = std::function<Result<SharedBytes>()>;

  // The one the gateway's backends share.
  static ReadCollapser& shared();

  // The bytes of `size` at `offset` of `path` on `backend`, of the file opened there at `epoch`
  // (PathEpochs: files opened at other epochs may be other files): from `fetch`, or from the
  // identical fetch another caller has in flight.
  Result<SharedBytes> read(const void* backend, const std::string& path, uint64_t epoch,
                           uint64_t offset, uint32_t size, const Fetch& fetch);
  // `path` on `backend` is changing: later reads do not join its fetches in flight.
  void detach(const void* backend, const std::string& path);

  // Reads that joined another's fetch, since start; for stats and tests.
  uint64_t collapsed() const;

 private:
  struct Key {
    std::uintptr_t backend;
    std::string path;
    uint64_t epoch;
    uint64_t offset;
    uint32_t size;
    auto operator<=>(const Key&) const = default;
  };
  struct Flight;

  mutable std::mutex mu_;
  std::condition_variable landed_;                    // a fetch with waiters finished
  std::map<Key, std::shared_ptr<Flight>> in_flight_;  // guarded by mu_
  uint64_t collapsed_ = 0;                            // guarded by mu_
};

}  // namespace skein
