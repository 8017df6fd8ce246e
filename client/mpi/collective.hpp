// What skein-mpi's operations share: agreeing on failures (so that no rank waits for one that
// gave up), strings over MPI, and the nodes of a job with their leaders and mounts.
#pragma once

#include <mpi.h>
#include <sys/stat.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace skein::mpi {

// Every rank of `comm` calls it with its own failure ("" when fine). Returns "" on every rank if
// every rank was fine, else on every rank the failure of the lowest failing rank, prefixed with
// its rank in MPI_COMM_WORLD.
std::string agree(MPI_Comm comm, const std::string& mine);

// "WHAT: strerror(errno)".
std::string errno_text(const std::string& what);
// What is wrong with `bytes` as a chunk size ("must be a multiple of 4096 ..."), or "".
std::string chunk_size_problem(uint64_t bytes);
// An exception inside a function of the C API: said on stderr; where MPI is in use, the job is
// aborted (MPI_Abort), since one rank cannot return while the others wait for it in a collective
// call. Returns 70 (where MPI is not in use, no other rank waits).
int internal_error(MPI_Comm comm, const char* what) noexcept;
// `call()` for a function of the C API: no exception (out of memory, a working directory gone)
// crosses into the application's C frames.
template <typename Call>
int without_exceptions(MPI_Comm comm, Call&& call) noexcept {
  try {
    return call();
  } catch (const std::exception& e) {
    return internal_error(comm, e.what());
  } catch (...) {
    return internal_error(comm, nullptr);
  }
}
// The arguments of a collective call, judged on every rank and agreed on, so that no rank goes on
// while another returns: `bad` is this rank's verdict ("" when fine), `alike` the values that
// must be the same on every rank (chunk size, verify). Returns "" on every rank, or on every rank
// the lowest failing rank's verdict, else that the values in `alike` differ between ranks.
std::string agree_on_arguments(MPI_Comm comm, const std::string& bad,
                               const std::vector<unsigned long long>& alike);
// Why the library cannot work with `comm` now (MPI not initialised, or finalised; no
// communicator), or "".
std::string mpi_problem(MPI_Comm comm);
// The SHA-256 of the regular file at `path` in hex (opened as open_regular opens it), read with
// plain reads; "" with `error` set when it cannot be read.
std::string sha256_hex(const std::string& path, std::string& error);
// Opens `path` with `flags` (and O_CLOEXEC) only if it is a regular file: a symlink at its name
// is not followed, and anything else is refused without waiting for it. A listed file replaced
// by a FIFO would otherwise hold this rank in its open while the others wait for it in collective
// calls; the open is made with O_NONBLOCK, which is taken off again once fstat has shown a regular
// file (unless `flags` asked for it). The descriptor (and its stat in `st`, if given), or -1 with
// `error` saying why.
int open_regular(const std::string& path, int flags, std::string& error, struct stat* st = nullptr);
// Test hook (docs/mpi.md, tests/e2e/mpi_test.cpp): with SKEIN_MPI_TEST_HOLD=PATH set, rank 0
// (`rank` is its rank in the operation's communicator) makes PATH.held and waits (up to 120 s)
// until PATH exists, so that a test can change files at a known point of an operation; the
// other ranks wait for it as for any slow rank. Without the variable it returns at once.
void test_hold(int rank);

// MPI_Wait without spinning: Open MPI's blocking waits poll, and the ranks of a node that wait
// for its leader (or a leader waiting for a slower one) would take the CPUs its mount, the
// gateway and sshd need. Tests, then sleeps between tests: from 20 us, doubling up to
// `max_pause_ns`. The default lets a rank that waits seconds for its leader wake 250 times a
// second; a wait of a few ms still ends within about its own length.
void wait_quietly(MPI_Request& request, long max_pause_ns = 4'000'000);

// `s` from rank `root` of `comm`, on every rank.
void bcast_string(MPI_Comm comm, std::string& s, int root);
void bcast_strings(MPI_Comm comm, std::vector<std::string>& v, int root);
// Every rank's `mine` into `all` on every rank: rank 0's strings first, then rank 1's, and so on.
// Strings hold no NUL; `mine` may be `all`. False on every rank, and `all` empty, when all of them
// together (with a byte each) are 2 GiB or more.
bool allgather_strings(MPI_Comm comm, const std::vector<std::string>& mine,
                       std::vector<std::string>& all);

// This rank's node. Nodes are the ranks of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), unless
// overridden (one machine simulating several nodes, for tests and benchmarks):
//   SKEIN_MPI_NODE=KEY and SKEIN_MPI_MOUNT=DIR, set per rank (mpirun -x ... : -x ...), or
//   SKEIN_MPI_NODE_MAP=KEY=DIR,KEY=DIR,... with one entry per rank of MPI_COMM_WORLD, in order.
// Ranks with the same KEY are one node; DIR is where that node's skein mount is (the mount rank
// 0's paths name is used when no DIR is given).
struct Node {
  MPI_Comm world = MPI_COMM_NULL;    // the operation's communicator (a duplicate)
  MPI_Comm local = MPI_COMM_NULL;    // the ranks of this node
  MPI_Comm leaders = MPI_COMM_NULL;  // one rank per node (rank 0 of `local`); null elsewhere
  int rank = 0;                      // in `world`
  int size = 1;
  int node = 0;   // this node's index among the leaders
  int nodes = 1;  // how many there are
  bool leader = false;
  std::string mount_override;  // DIR from the override, or ""
  ~Node();
};

// Collective over `comm`. On failure (a malformed override) returns "" nowhere: the error is
// agreed, and set in `error` on every rank.
bool make_node(MPI_Comm comm, Node& node, std::string& error);

}  // namespace skein::mpi
