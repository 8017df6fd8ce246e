// Heap settings for processes that stream file contents through MiB-sized buffers made and
// freed all the time (the gateway's and the mount's requests and replies).
#pragma once

#include <malloc.h>

namespace skein {

// Past its mmap threshold (128 KiB at first) glibc maps and unmaps each such buffer, and every
// reuse pays a page fault per 4 KiB: a tenth of the mount's CPU and a quarter of the gateway's
// when streaming. Keep them on the heap instead, in a few arenas that give back what they do not
// reuse: four readers at once peaked at 149 MiB RSS in the mount with a 64 MiB trim threshold
// and an arena per thread, 110 MiB like this.
inline void keep_large_buffers_on_heap() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 8 << 20);
  mallopt(M_ARENA_MAX, 4);
}

}  // namespace skein
