/* skein-mpi's library: collective operations of an MPI job on files of skein mounts.
 *
 * skein_mpi_bcast reads each file once from the gateway, whatever the number of nodes, and puts
 * its bytes into the page cache of every node's skein mount, so that the application then reads
 * it with plain POSIX calls and no gateway traffic. One rank per node (a node: the ranks of
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), or of SKEIN_MPI_NODE / SKEIN_MPI_NODE_MAP, see
 * docs/mpi.md) is its leader; the file's chunks are divided among the leaders, each leader's
 * mount fetches its chunks, and the chunks go to the other leaders over MPI.
 *
 * Every function is collective over `comm`: every rank calls it with the same arguments and gets
 * the same result. On failure it returns non-zero on every rank and, when `error` is not null,
 * writes the first failure (with the rank that met it) there. No rank is left waiting. */
#ifndef SKEIN_MPI_H
#define SKEIN_MPI_H

#include <mpi.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct skein_mpi_options {
  size_t chunk_size;       /* bytes per chunk; 0: 4 MiB */
  int verify;              /* non-zero: afterwards every rank reads the files through its mount
                              and the SHA-256 digests must agree */
  const char* control_dir; /* where the mounts' control sockets are; NULL: this user's own
                              directory, then /run/skein (root's mounts, a job's among them) */
  int quiet;               /* non-zero: rank 0 prints nothing (no progress, no summary) */
  double progress_s;       /* seconds between rank 0's progress reports on stdout; 0: none;
                              below 0: a bar every 0.25 s on a terminal, else a line every 10 s */
} skein_mpi_options;

/* Default options (chunk 4 MiB, no verify, default control directory, default progress). */
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

#ifdef __cplusplus
}
#endif

#endif /* SKEIN_MPI_H */
