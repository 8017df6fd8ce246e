// skein-mpi: collective operations of an MPI job on skein mounts (docs/mpi.md).
//   skein-mpi bcast|prefetch [--verify] [--quiet] [--chunk BYTES] [--control-dir DIR]
//                            [--progress SECONDS] PATH...
//   skein-mpi stage-in|stage-out [--verify] [--chunk BYTES] [--control-dir DIR]
//                                [--progress SECONDS] SRC DST
// Run under mpirun or srun; every rank runs the same command. Failures are printed by rank 0 and
// every rank exits with status 1; a usage error is status 2 (and --help 0) on every rank.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collective.hpp"
#include "skein/mpi.h"
#include "stage.hpp"

namespace {

struct Args {
  bool verify = false, quiet = false;
  uint64_t chunk = 0;  // 0: the command's default
  std::string control_dir;
  double progress_s = -1;  // a bar every 0.25 s on a terminal, else a line every 10 s
  std::vector<std::string> paths;
  std::string src, dst;
};

// --chunk: a multiple of 4096 from 4096 to 1 GiB.
const CLI::Validator kChunk(
    [](std::string& v) -> std::string {
      uint64_t n = 0;
      if (!CLI::detail::lexical_cast(v, n))
        return "must be a multiple of 4096 from 4096 to 1 GiB (1073741824), not " + v;
      return skein::mpi::chunk_size_problem(n);
    },
    "");

// --progress: seconds, a number from 0 to a day (CLI11's range check would print the bounds as
// 0.000000 to 86400.000000, and call "abc" out of range).
const CLI::Validator kSeconds(
    [](std::string& v) -> std::string {
      double s = -1;
      if (!CLI::detail::lexical_cast(v, s) || !(s >= 0 && s <= 86400))
        return "must be a number of seconds from 0 to 86400 (0: no progress), not " + v;
      return "";
    },
    "");

void add_shared(CLI::App* c, Args& a, const char* verify, const char* chunk_default) {
  c->add_flag("--verify", a.verify, verify);
  c->add_option("--chunk", a.chunk, std::string("Bytes per chunk (default ") + chunk_default + ")")
      ->check(kChunk)
      ->type_name("BYTES");
  c->add_option("--progress", a.progress_s,
                "Seconds between rank 0's reports of progress (default: a bar every 0.25 s on a "
                "terminal, else a line every 10 s; 0: none)")
      ->check(kSeconds)
      ->type_name("SECONDS");
  c->add_option("--control-dir", a.control_dir,
                "Where the mounts' control sockets are (default: this user's own directory, then "
                "/run/skein)")
      ->type_name("DIR");
}

}  // namespace

int main(int argc, char** argv) {
  // Only this thread calls MPI; bcast's helper threads talk to the mount.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  // Arguments are the same on every rank, so every rank reaches the same verdict on them; only
  // rank 0 says it.
  Args a;
  CLI::App app{
      "skein-mpi: collective operations of an MPI job on skein mounts. Run it under mpirun or "
      "srun: every rank runs the same command (docs/mpi.md).",
      "skein-mpi"};
  app.require_subcommand(1);
  CLI::App* bcast = app.add_subcommand(
      "bcast",
      "Fetch each file (directories: every regular file below them) once from the gateway and "
      "fill every node's page cache with it");
  CLI::App* prefetch = app.add_subcommand(
      "prefetch", "As bcast, and first every node's mount looks up everything below PATHs");
  for (CLI::App* c : {bcast, prefetch}) {
    add_shared(c, a,
               "Afterwards every rank reads the files through its mount and the SHA-256 digests "
               "must agree",
               "4 MiB");
    c->add_flag("--quiet", a.quiet, "Rank 0 prints nothing: no progress, summary or digests");
    c->add_option("PATH", a.paths, "Files or directories on a skein mount, as rank 0 sees them")
        ->required();
  }
  CLI::App* stage_in =
      app.add_subcommand("stage-in", "Copy the tree SRC (on a skein mount) to DST, on every rank");
  CLI::App* stage_out =
      app.add_subcommand("stage-out", "Copy the tree SRC to DST (on a skein mount), on every rank");
  for (CLI::App* c : {stage_in, stage_out}) {
    add_shared(c, a, "Afterwards compare the SHA-256 of every file of SRC with its copy's",
               "64 MiB");
    c->add_option("SRC", a.src, "The tree to copy")->required();
    c->add_option("DST", a.dst, "Where to copy it (made if missing)")->required();
  }
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "skein-mpi: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  });
  int rc = 0;
  int verdict = -1;  // -1: a command to run; 0: --help given; 2: a usage error
  try {
    // A first word that is neither an option nor a command: said as such (CLI11 would only say
    // that a command is required).
    bool known = argc < 2 || argv[1][0] == '-';
    for (const CLI::App* c : {bcast, prefetch, stage_in, stage_out})
      known = known || c->get_name() == argv[1];
    if (!known) throw CLI::ValidationError(std::string("unknown command '") + argv[1] + "'");
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is fine (0); a usage error is 2.
    rc = rank == 0 ? app.exit(e) : e.get_exit_code();
    verdict = rc == 0 ? 0 : 2;
  }
  // Every rank's verdict, agreed: ranks given other command lines (an MPMD launch, `A : B`) must
  // not run into the first collective call while the others have ended.
  {
    int mine[2] = {verdict, -verdict}, all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const int highest = all[0], lowest = -all[1];
    if (highest >= 0) {
      if (lowest != highest && rank == 0)
        std::fprintf(stderr,
                     "skein-mpi: the ranks were not all given a command to run (some were "
                     "refused, or asked for --help); give every rank the same command line\n");
      MPI_Finalize();
      return lowest == highest ? highest : 2;
    }
  }

  const std::string command = app.get_subcommands()[0]->get_name();
  if (stage_in->parsed() || stage_out->parsed()) {
    std::string summary, failures;
    const uint64_t chunk = a.chunk ? a.chunk : skein::mpi::kDefaultStageChunk;
    // As the library's functions: an internal error is said, and ends the job, not one rank.
    rc = skein::mpi::without_exceptions(MPI_COMM_WORLD, [&] {
      return skein::mpi::stage(MPI_COMM_WORLD, a.src, a.dst, chunk, a.verify, a.control_dir,
                               a.progress_s, summary, failures);
    });
    if (rank == 0) {
      if (!summary.empty()) std::printf("%s\n", summary.c_str());
      std::fflush(stdout);
      if (rc != 0)
        std::fprintf(stderr, "skein-mpi %s: failed:\n%s", command.c_str(), failures.c_str());
    }
  } else {
    skein_mpi_options options;
    skein_mpi_options_init(&options);
    if (a.chunk) options.chunk_size = static_cast<std::size_t>(a.chunk);
    options.verify = a.verify ? 1 : 0;
    options.quiet = a.quiet ? 1 : 0;
    if (!a.control_dir.empty()) options.control_dir = a.control_dir.c_str();
    options.progress_s = a.progress_s;
    std::vector<const char*> p;
    for (auto& s : a.paths) p.push_back(s.c_str());
    char error[4096] = "";
    const int r = bcast->parsed()
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
