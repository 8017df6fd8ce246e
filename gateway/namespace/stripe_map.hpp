// Where the bytes of a striped file live: pure arithmetic, no I/O. A file striped with stripe size
// S over W backends keeps logical stripe k (bytes [k*S, (k+1)*S)) on backend k mod W, in that
// backend's part file at local offset (k / W) * S: each part holds its stripes packed densely, in
// order, so a logical range touches one contiguous local range per backend. See docs/striping.md.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace skein {

class StripeMap {
 public:
  // A piece of a logical range that lies within one stripe.
  struct Segment {
    uint32_t backend;
    uint64_t logical_offset;
    uint64_t local_offset;
    uint64_t length;
  };
  // All of one backend's share of a logical range: contiguous in its part file.
  struct Extent {
    uint64_t local_offset = 0;
    uint64_t length = 0;  // 0: the range does not touch this backend
  };

  // `stripe_size` > 0, `width` > 0.
  StripeMap(uint64_t stripe_size, uint32_t width);
  uint64_t stripe_size() const { return stripe_; }
  uint32_t width() const { return width_; }

  uint32_t backend_of(uint64_t logical_offset) const;
  uint64_t local_offset(uint64_t logical_offset) const;
  // The logical offset of byte `local_offset` of backend `backend`'s part.
  uint64_t logical_offset(uint32_t backend, uint64_t local_offset) const;

  // The stripe pieces of [offset, offset + length), in logical order.
  std::vector<Segment> segments(uint64_t offset, uint64_t length) const;
  // Each backend's share of [offset, offset + length), indexed by backend (size `width`).
  std::vector<Extent> extents(uint64_t offset, uint64_t length) const;

  // The logical size implied by a part of `local_size` bytes on `backend`: one past the logical
  // offset of its last byte (0 for an empty part).
  uint64_t logical_end(uint32_t backend, uint64_t local_size) const;
  // A file's logical size from its parts' sizes (indexed by backend; a missing part counts as 0).
  uint64_t logical_size(std::span<const uint64_t> local_sizes) const;
  // The length of `backend`'s part when the file is exactly `logical_size` bytes long: the bytes
  // of [0, logical_size) that it holds. Truncation sets every part to this.
  uint64_t local_size(uint32_t backend, uint64_t logical_size) const;

 private:
  uint64_t stripe_;
  uint32_t width_;
};

}  // namespace skein
