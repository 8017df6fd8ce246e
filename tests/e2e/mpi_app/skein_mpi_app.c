/* An application of skein/mpi.h, in C, as a user builds it: `mpicc skein_mpi_app.c -lskein_mpi`
 * (tests/e2e/mpi_test.cpp compiles it so and runs it under mpirun).
 *
 *   skein_mpi_app [--chunk BYTES] [--chunk-on-rank-1 BYTES] [--paths-on-rank-0]
 *                 [--error-size BYTES] [--verify] [--quiet] [--half-comm] bcast PATH...
 *   skein_mpi_app [...] stage-in|stage-out SRC DST
 *   skein_mpi_app --before-init
 *
 * Every rank prints one line, "rank R: rc N: ERROR" (the newlines of the error as "|"), and exits
 * with the call's result. --chunk-on-rank-1 sets the chunk size on rank 1 alone;
 * --paths-on-rank-0 gives bcast its paths on rank 0 alone (the others pass none); --half-comm
 * makes each call on a communicator of half of MPI_COMM_WORLD's ranks (the upper half's ranks in
 * reverse order), as an application that splits its ranks does. --before-init
 * calls skein_mpi_stage_in before MPI_Init and prints "before init: rc N: ERROR". */
#include <skein/mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--before-init") == 0) {
    char error[256] = "";
    const int rc = skein_mpi_stage_in(MPI_COMM_WORLD, "/a", "/b", NULL, error, sizeof error);
    printf("before init: rc %d: %s\n", rc, error);
    return rc == 0;
  }
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  skein_mpi_options options;
  skein_mpi_options_init(&options);
  size_t error_size = 4096;
  int paths_on_rank_0 = 0, half_comm = 0;
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; ++i) {
    if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc)
      options.chunk_size = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--chunk-on-rank-1") == 0 && i + 1 < argc) {
      const size_t chunk = strtoull(argv[++i], NULL, 10);
      if (rank == 1) options.chunk_size = chunk;
    } else if (strcmp(argv[i], "--paths-on-rank-0") == 0)
      paths_on_rank_0 = 1;
    else if (strcmp(argv[i], "--error-size") == 0 && i + 1 < argc)
      error_size = strtoull(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--verify") == 0)
      options.verify = 1;
    else if (strcmp(argv[i], "--quiet") == 0)
      options.quiet = 1;
    else if (strcmp(argv[i], "--half-comm") == 0)
      half_comm = 1;
    else
      break;
  }
  if (i >= argc || (strcmp(argv[i], "bcast") != 0 && strcmp(argv[i], "stage-in") != 0 &&
                    strcmp(argv[i], "stage-out") != 0)) {
    fprintf(stderr, "usage: skein_mpi_app [options] bcast|stage-in|stage-out PATH...\n");
    MPI_Finalize();
    return 2;
  }
  options.progress_s = 0;
  MPI_Comm comm = MPI_COMM_WORLD;
  if (half_comm) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int upper = rank >= size / 2;
    MPI_Comm_split(MPI_COMM_WORLD, upper, upper ? size - rank : rank, &comm);
  }
  const char* op = argv[i++];
  char* error = malloc(error_size + 1);
  memset(error, '#', error_size + 1); /* a byte written past error_size shows */
  if (error_size > 0) error[0] = '\0';
  int rc = 2;
  if (strcmp(op, "bcast") == 0) {
    const int mine = !paths_on_rank_0 || rank == 0;
    rc = skein_mpi_bcast(comm, mine ? (const char* const*)(argv + i) : NULL, mine ? argc - i : 0,
                         &options, error, error_size);
  } else if (strcmp(op, "stage-in") == 0 && argc - i == 2)
    rc = skein_mpi_stage_in(comm, argv[i], argv[i + 1], &options, error, error_size);
  else if (strcmp(op, "stage-out") == 0 && argc - i == 2)
    rc = skein_mpi_stage_out(comm, argv[i], argv[i + 1], &options, error, error_size);
  else
    snprintf(error, error_size, "bad arguments");
  const char* shown = error;
  if (error[error_size] != '#') {
    shown = "written past error_size";
  } else if (error_size == 0) {
    shown = ""; /* nothing may be written there, not even a NUL */
  } else {
    for (char* c = error; *c; ++c)
      if (*c == '\n') *c = '|';
  }
  printf("rank %d: rc %d: %s\n", rank, rc, shown);
  fflush(stdout);
  free(error);
  if (comm != MPI_COMM_WORLD) MPI_Comm_free(&comm);
  MPI_Finalize();
  return rc;
}
