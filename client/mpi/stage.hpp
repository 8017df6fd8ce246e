// The parallel tree copy behind `skein-mpi stage-in` and `stage-out`, and skein_mpi_stage_in and
// skein_mpi_stage_out of skein/mpi.h; docs/mpi.md, "stage-in and stage-out".
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

namespace skein::mpi {

// A stage's chunk size when none is given (`skein-mpi stage-in` and `stage-out`, and the library's
// chunk_size 0).
constexpr uint64_t kDefaultStageChunk = 64u << 20;

// Copies the tree `src` to `dst` over every rank of `comm` (collective). Files larger than
// `chunk` bytes go in chunks of that size. Returns 0, or 1 on every rank. Rank 0 gets the line
// that sums it up in `summary`, and the failures, one per line, in `failures`; an early failure
// (SRC missing, DST inside it, a rank that cannot work) is in every rank's `failures`.
int stage(MPI_Comm comm, const std::string& src, const std::string& dst, uint64_t chunk,
          bool verify, const std::string& control_dir, double progress_s, std::string& summary,
          std::string& failures);

}  // namespace skein::mpi
