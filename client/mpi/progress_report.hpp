// Rank 0's progress of a stage or a bcast: a bar redrawn on a terminal, as `skeinctl stage
// --wait` draws one, else a line at each report (docs/mpi.md).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

namespace skein::mpi {

// Bytes, whole files, chunks of large files (stage only: 0 in its total leaves them out).
using Tallies = std::array<long long, 3>;

// Whether this rank's output ends on a terminal. Open MPI hands its local ranks a pty of their own
// for stdout, whatever mpirun's own stdout is (a job's log file, say), so under Open MPI the
// answer is whether the parent's (mpirun's or orted's) stdout is a terminal.
bool output_is_terminal();

class ProgressReport {
 public:
  // `every_s`: seconds between reports, 0 for none, below 0 for the default (0.25 s on a
  // terminal, else 10 s).
  ProgressReport(double every_s, const Tallies& total);
  // Ends the bar's line, if one was drawn.
  ~ProgressReport();
  ProgressReport(const ProgressReport&) = delete;
  ProgressReport& operator=(const ProgressReport&) = delete;
  // Whether a report is due: callers whose tallies cost something to gather ask first.
  bool due() const;
  // Shows `done` if a report is due, or if `last` (and any was asked for).
  void show(const Tallies& done, bool last = false);

 private:
  const bool tty_;
  const double every_;
  const Tallies total_;
  bool drawn_ = false;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point shown_ = start_;
};

}  // namespace skein::mpi
