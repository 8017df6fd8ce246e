// ReadCollapser; see read_collapser.hpp.
#include "backend/read_collapser.hpp"

namespace skein {

struct ReadCollapser::Flight {
  // Guarded by ReadCollapser::mu_.
  int waiters = 0;
  std::shared_ptr<const Result<SharedBytes>> result;  // set when done, only if someone waits
};

ReadCollapser& ReadCollapser::shared() {
  static ReadCollapser collapser;
  return collapser;
}

Result<SharedBytes> ReadCollapser::read(const void* backend, const std::string& path,
                                        uint64_t epoch, uint64_t offset, uint32_t size,
                                        const Fetch& fetch) {
  Key key{reinterpret_cast<std::uintptr_t>(backend), path, epoch, offset, size};
  std::shared_ptr<Flight> flight;
  {
    std::unique_lock lock(mu_);
    auto it = in_flight_.find(key);
    if (it != in_flight_.end()) {
      flight = it->second;
      ++flight->waiters;
      ++collapsed_;
      landed_.wait(lock, [&] { return flight->result != nullptr; });
      return *flight->result;
    }
    flight = std::make_shared<Flight>();
    in_flight_.emplace(key, flight);
  }
  Result<SharedBytes> got = fetch();
  int waiters = 0;
  {
    std::lock_guard lock(mu_);
    auto it = in_flight_.find(key);
    if (it != in_flight_.end() && it->second == flight) in_flight_.erase(it);
    // Nobody joins once it is out of the table, so the waiters counted now are all there are.
    waiters = flight->waiters;
  }
  if (waiters > 0) {
    auto shared = std::make_shared<const Result<SharedBytes>>(got);  // views, not the bytes
    {
      std::lock_guard lock(mu_);
      flight->result = std::move(shared);
    }
    landed_.notify_all();
  }
  return got;
}

void ReadCollapser::detach(const void* backend, const std::string& path) {
  std::lock_guard lock(mu_);
  const auto id = reinterpret_cast<std::uintptr_t>(backend);
  auto it = in_flight_.lower_bound(Key{id, path, 0, 0, 0});
  while (it != in_flight_.end() && it->first.backend == id && it->first.path == path)
    it = in_flight_.erase(it);
}

uint64_t ReadCollapser::collapsed() const {
  std::lock_guard lock(mu_);
  return collapsed_;
}

}  // namespace skein
