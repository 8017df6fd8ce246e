// Stripe arithmetic; see stripe_map.hpp.
#include "namespace/stripe_map.hpp"

#include <algorithm>
#include <cassert>

namespace skein {

StripeMap::StripeMap(uint64_t stripe_size, uint32_t width) : stripe_(stripe_size), width_(width) {
  assert(stripe_ > 0 && width_ > 0);
}

uint32_t StripeMap::backend_of(uint64_t logical_offset) const {
  return static_cast<uint32_t>((logical_offset / stripe_) % width_);
}

uint64_t StripeMap::local_offset(uint64_t logical_offset) const {
  uint64_t k = logical_offset / stripe_;
  return (k / width_) * stripe_ + logical_offset % stripe_;
}

uint64_t StripeMap::logical_offset(uint32_t backend, uint64_t local_offset) const {
  uint64_t k = (local_offset / stripe_) * width_ + backend;
  return k * stripe_ + local_offset % stripe_;
}

std::vector<StripeMap::Segment> StripeMap::segments(uint64_t offset, uint64_t length) const {
  std::vector<Segment> out;
  uint64_t end = offset + length;
  for (uint64_t pos = offset; pos < end;) {
    uint64_t len = std::min(stripe_ - pos % stripe_, end - pos);
    out.push_back({backend_of(pos), pos, local_offset(pos), len});
    pos += len;
  }
  return out;
}

std::vector<StripeMap::Extent> StripeMap::extents(uint64_t offset, uint64_t length) const {
  std::vector<Extent> out(width_);
  for (auto& s : segments(offset, length)) {
    Extent& e = out[s.backend];
    // A backend's stripes of a contiguous logical range are consecutive in its part.
    if (e.length == 0) e.local_offset = s.local_offset;
    assert(s.local_offset == e.local_offset + e.length);
    e.length += s.length;
  }
  return out;
}

uint64_t StripeMap::logical_end(uint32_t backend, uint64_t local_size) const {
  if (local_size == 0) return 0;
  return logical_offset(backend, local_size - 1) + 1;
}

uint64_t StripeMap::logical_size(std::span<const uint64_t> local_sizes) const {
  uint64_t size = 0;
  for (size_t b = 0; b < local_sizes.size() && b < width_; ++b)
    size = std::max(size, logical_end(static_cast<uint32_t>(b), local_sizes[b]));
  return size;
}

uint64_t StripeMap::local_size(uint32_t backend, uint64_t logical_size) const {
  uint64_t full = logical_size / stripe_;  // whole stripes below logical_size
  uint64_t rem = logical_size % stripe_;   // bytes of the partial stripe `full`
  // Whole stripes k < full with k mod W == backend: ceil((full - backend) / W).
  uint64_t whole = full > backend ? (full - backend + width_ - 1) / width_ : 0;
  uint64_t size = whole * stripe_;
  if (rem && full % width_ == backend) size += rem;  // the partial stripe is this backend's
  return size;
}

}  // namespace skein
