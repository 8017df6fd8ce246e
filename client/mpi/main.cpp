// skein-mpi: collective operations of an MPI job on skein mounts (docs/mpi.md).
//   skein-mpi bcast [--verify] [--chunk BYTES] PATH...
//   skein-mpi prefetch [--verify] [--chunk BYTES] PATH...
//   skein-mpi stage-in|stage-out [--verify] [--chunk BYTES] [--control-dir DIR]
//                                [--progress SECONDS] SRC DST
// Run under mpirun or srun; every rank runs the same command. Failures are printed by rank 0 and
// every rank exits with status 1.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "skein/mpi.h"

namespace skein::mpi {
int stage(MPI_Comm comm, const std::string& src, const std::string& dst, uint64_t chunk,
          bool verify, const std::string& control_dir, double progress_s, std::string& summary,
          std::string& failures);
}

namespace {

constexpr const char* kUsage =
    "usage: skein-mpi bcast|prefetch [--verify] [--quiet] [--chunk BYTES] [--control-dir DIR] "
    "PATH...\n"
    "       skein-mpi stage-in|stage-out [--verify] [--chunk BYTES] [--control-dir DIR]\n"
    "                 [--progress SECONDS] SRC DST\n";

int usage_error(int rank, const std::string& what) {
  if (rank == 0) std::fprintf(stderr, "skein-mpi: %s\n%s", what.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Only this thread calls MPI; bcast's helper threads talk to the mount.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Arguments are the same on every rank, so every rank reaches the same verdict on them.
  int rc = 0;
  std::vector<std::string> args(argv + 1, argv + argc);
  skein_mpi_options options;
  skein_mpi_options_init(&options);
  std::string control_dir;
  std::vector<std::string> paths;
  std::string command = args.empty() ? "" : args[0];
  const bool staging = command == "stage-in" || command == "stage-out";
  bool chunk_given = false;
  double progress_s = -1;  // stage: a bar every 0.25 s on a terminal, else a line every 10 s
  if (command != "bcast" && command != "prefetch" && !staging) {
    rc = usage_error(rank, command.empty() ? "no command" : "unknown command '" + command + "'");
  }
  for (std::size_t i = 1; rc == 0 && i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--verify") {
      options.verify = 1;
    } else if (a == "--quiet") {
      options.quiet = 1;
    } else if (a == "--chunk" || a == "--control-dir" || (staging && a == "--progress")) {
      if (i + 1 >= args.size()) {
        rc = usage_error(rank, a + " needs a value");
        break;
      }
      const std::string& v = args[++i];
      if (a == "--control-dir") {
        control_dir = v;
      } else if (a == "--progress") {
        char* end = nullptr;
        progress_s = std::strtod(v.c_str(), &end);
        if (v.empty() || !end || *end || !(progress_s >= 0 && progress_s <= 86400)) {
          rc = usage_error(rank, "--progress takes seconds between reports, 0 to 86400 (0: none)");
          break;
        }
      } else {
        char* end = nullptr;
        unsigned long long n = std::strtoull(v.c_str(), &end, 10);
        if (!end || *end || n < 4096 || n % 4096 != 0 || n > (1ULL << 30)) {
          rc = usage_error(rank, "--chunk must be a multiple of 4096 between 4096 and 1 GiB");
          break;
        }
        options.chunk_size = std::size_t(n);
        chunk_given = true;
      }
    } else if (a == "--") {
      paths.insert(paths.end(), args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    } else if (a.rfind("--", 0) == 0) {
      rc = usage_error(rank, "unknown option " + a);
    } else {
      paths.push_back(a);
    }
  }
  if (rc == 0 && paths.empty()) rc = usage_error(rank, "no PATH given");
  if (rc == 0 && staging && paths.size() != 2) rc = usage_error(rank, command + " takes SRC DST");
  if (rc == 0 && staging) {
    std::string summary, failures;
    const uint64_t chunk = chunk_given ? options.chunk_size : (64u << 20);
    const int r = skein::mpi::stage(MPI_COMM_WORLD, paths[0], paths[1], chunk, options.verify != 0,
                                    control_dir, progress_s, summary, failures);
    if (rank == 0) {
      if (!summary.empty()) std::printf("%s\n", summary.c_str());
      std::fflush(stdout);
      if (r != 0)
        std::fprintf(stderr, "skein-mpi %s: failed:\n%s", command.c_str(), failures.c_str());
    }
    rc = r;
  } else if (rc == 0) {
    if (!control_dir.empty()) options.control_dir = control_dir.c_str();
    std::vector<const char*> p;
    for (auto& s : paths) p.push_back(s.c_str());
    char error[4096] = "";
    const int r = command == "bcast"
                      ? skein_mpi_bcast(MPI_COMM_WORLD, p.data(), static_cast<int>(p.size()),
                                        &options, error, sizeof error)
                      : skein_mpi_prefetch(MPI_COMM_WORLD, p.data(), static_cast<int>(p.size()),
                                           &options, error, sizeof error);
    if (r != 0) {
      if (rank == 0) std::fprintf(stderr, "skein-mpi %s: %s\n", command.c_str(), error);
      rc = 1;
    }
  }
  MPI_Finalize();
  return rc;
}
