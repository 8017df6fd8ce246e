/* skein-mpi's library: collective operations of an MPI job on files of skein mounts.
 *
 * skein_mpi_bcast reads each file once from the gateway, whatever the number of nodes, and puts
 * its bytes into the page cache of every node's skein mount, so that the application then reads
 * it with plain POSIX calls and no gateway traffic. One rank per node (a node: the ranks of
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or of SKEIN_MPI_NODE / SKEIN_MPI_NODE_MAP, see
 * docs/mpi.md) is its leader; the file's chunks are divided among the leaders, each leader's
 * mount fetches its chunks, and the chunks go to the other leaders over MPI. skein_mpi_stage_in
 * and skein_mpi_stage_out copy a tree to or from a skein mount on every rank at once.
 *
 * Link with -lskein_mpi (libskein_mpi.so; docs/mpi.md, "The library"), under mpicc or with
 * the MPI's own flags. It exports these functions and nothing else, and uses MPI's C API only.
 *
 * Every function is collective over `comm`: every rank calls it with the same arguments and gets
 * the same result. On failure it returns non-zero on every rank and, when `error` is not null,
 * writes the first failure (with the rank that met it) there. No rank is left waiting. Call them
 * between MPI_Init and MPI_Finalize (outside, they return non-zero and say so), from the thread
 * that makes the process's MPI calls: their own threads make none (MPI_THREAD_FUNNELED is
 * enough). */
#ifndef SKEIN_MPI_H
#define SKEIN_MPI_H

#include <mpi.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct skein_mpi_options {
  size_t chunk_size;       /* bytes per chunk, a multiple of 4096 up to 1 GiB; 0: the default
                              (bcast and prefetch 4 MiB, stage 64 MiB) */
  int verify;              /* non-zero: afterwards bcast and prefetch have every rank read the
                              files through its mount, and the SHA-256 digests must agree; a
                              stage compares the SHA-256 of every file with its copy's */
  const char* control_dir; /* where the mounts' control sockets are; NULL: this user's own
                              directory, then /run/skein (root's mounts, a job's among them) */
  int quiet;               /* non-zero: rank 0 prints nothing (no progress, no summary) */
  double progress_s;       /* seconds between rank 0's progress reports on stdout; 0: none;
                              below 0: a bar every 0.25 s on a terminal, else a line every 10 s */
} skein_mpi_options;

/* Default options (the operation's chunk size, no verify, default control directory, default
 * progress). */
void skein_mpi_options_init(skein_mpi_options* options);

/* Broadcasts the files (directories: every regular file below them) into the page cache of every
 * node's mount. `paths` are absolute paths on a skein mount (rank 0's are the ones used).
 * Returns 0, or non-zero with `error` (at most `error_size` bytes) set. */
int skein_mpi_bcast(MPI_Comm comm, const char* const* paths, int npaths,
                    const skein_mpi_options* options, char* error, size_t error_size);

/* As skein_mpi_bcast, and first every node's mount also looks up every file and directory
 * below `paths` (warming its metadata caches). */
int skein_mpi_prefetch(MPI_Comm comm, const char* const* paths, int npaths,
                       const skein_mpi_options* options, char* error, size_t error_size);

/* Copies the tree `src` to `dst` (made if missing), files and chunks of large files spread over
 * every rank: stage-in from a skein mount, stage-out to one (either may be any directory; the
 * two names are the same copy). Modes, mtimes and symlinks are kept; a file gets its name only
 * when it is complete; a call again after a failure copies only what is missing. Rank 0 prints
 * progress and a summary line on stdout unless `quiet`. Returns 0, or non-zero on every rank
 * with `error` set to the failures, one per line ("PATH: WHAT"; as many as fit, then
 * "... and N more"; in a buffer too small for that, as much of the first as fits). */
int skein_mpi_stage_in(MPI_Comm comm, const char* src, const char* dst,
                       const skein_mpi_options* options, char* error, size_t error_size);
int skein_mpi_stage_out(MPI_Comm comm, const char* src, const char* dst,
                        const skein_mpi_options* options, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif /* SKEIN_MPI_H */
