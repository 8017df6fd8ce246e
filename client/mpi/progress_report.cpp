// Rank 0's progress reports; see progress_report.hpp.
#include "progress_report.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "skein/progress.hpp"

namespace skein::mpi {

bool output_is_terminal() {
  if (!::isatty(STDOUT_FILENO)) return false;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return true;
  const std::string parent_out = "/proc/" + std::to_string(::getppid()) + "/fd/1";
  const int fd = ::open(parent_out.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool tty = ::isatty(fd) != 0;
  ::close(fd);
  return tty;
}

ProgressReport::ProgressReport(double every_s, const Tallies& total)
    : tty_(output_is_terminal()),
      every_(every_s >= 0 ? every_s
             : tty_       ? 0.25
                          : 10.0),
      total_(total) {}

ProgressReport::~ProgressReport() {
  if (drawn_) {
    std::printf("\n");
    std::fflush(stdout);
  }
}

bool ProgressReport::due() const {
  return every_ > 0 && total_[1] + total_[2] > 0 &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - shown_).count() >= every_;
}

void ProgressReport::show(const Tallies& done, bool last) {
  if (every_ <= 0 || total_[1] + total_[2] == 0 || !(last || due())) return;
  const auto now = std::chrono::steady_clock::now();
  shown_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done[0]) / secs : 0.0;
  const char* of = tty_ ? " / " : " of ";
  std::string counts = std::to_string(done[1]) + of + std::to_string(total_[1]) + " files";
  if (total_[2] > 0)
    counts +=
        (tty_ ? "  " : ", ") + std::to_string(done[2]) + of + std::to_string(total_[2]) + " chunks";
  const std::string bytes =
      size_text(static_cast<double>(done[0])) + of + size_text(static_cast<double>(total_[0]));
  if (tty_) {
    const double f = fraction_done(static_cast<double>(done[0]), static_cast<double>(total_[0]),
                                   static_cast<double>(done[1] + done[2]),
                                   static_cast<double>(total_[1] + total_[2]));
    std::printf("\r%s  %s  %s  %s/s   ", progress_bar(f).c_str(), bytes.c_str(), counts.c_str(),
                size_text(rate).c_str());
    drawn_ = true;
  } else {
    std::printf("skein-mpi: %s, %s, %s/s, %.1f s\n", bytes.c_str(), counts.c_str(),
                size_text(rate).c_str(), secs);
  }
  std::fflush(stdout);
}

}  // namespace skein::mpi
