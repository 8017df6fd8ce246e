// Bytes held as pieces of buffers that one owner keeps alive: a string, or the slices of a
// received gRPC message, whose contents are then never copied on their way to the kernel.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace skein {

class SharedBytes {
 public:
  SharedBytes() = default;
  // Views into buffers that `owner` keeps alive.
  SharedBytes(std::vector<std::string_view> pieces, std::shared_ptr<const void> owner)
      : pieces_(std::move(pieces)), owner_(std::move(owner)) {
    for (auto p : pieces_) size_ += p.size();
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::vector<std::string_view>& pieces() const { return pieces_; }

  // Appends views of bytes [from, from + n) (clipped to the end) to `out`; returns how many.
  std::size_t view(std::size_t from, std::size_t n, std::vector<std::string_view>& out) const {
    std::size_t done = 0;
    for (auto p : pieces_) {
      if (done == n) break;
      if (from >= p.size()) {
        from -= p.size();
        continue;
      }
      auto part = p.substr(from, n - done);
      out.push_back(part);
      done += part.size();
      from = 0;
    }
    return done;
  }

  // What keeps the pieces alive (for handing them to another owner, e.g. gRPC slices).
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // A copy in one string.
  std::string flatten() const {
    std::string s;
    s.reserve(size_);
    for (auto p : pieces_) s.append(p);
    return s;
  }

 private:
  std::vector<std::string_view> pieces_;
  std::shared_ptr<const void> owner_;
  std::size_t size_ = 0;
};

}  // namespace skein
