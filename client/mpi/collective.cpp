// Agreement, strings and nodes; see collective.hpp.
#include "collective.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>

namespace skein::mpi {

std::string errno_text(const std::string& what) {
  const int e = errno;
  return what + ": " + std::strerror(e);
}

int internal_error(MPI_Comm comm, const char* what) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool in_use = initialized && !finalized;
  std::fprintf(stderr, "skein-mpi: internal error%s%s%s\n", what ? ": " : "", what ? what : "",
               in_use ? "; aborting the job" : "");
  std::fflush(stderr);
  if (in_use) MPI_Abort(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, 70);
  return 70;
}

std::string agree_on_arguments(MPI_Comm comm, const std::string& bad,
                               const std::vector<unsigned long long>& alike) {
  std::string failure = agree(comm, bad);
  if (!failure.empty() || alike.empty()) return failure;
  std::vector<unsigned long long> low(alike.size()), high(alike.size());
  const int n = static_cast<int>(alike.size());
  MPI_Allreduce(alike.data(), low.data(), n, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  MPI_Allreduce(alike.data(), high.data(), n, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  if (low != high)
    return "options differ between ranks (chunk_size or verify): every rank must pass the same";
  return "";
}

std::string mpi_problem(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized) return "MPI is not initialised: call MPI_Init first";
  if (finalized) return "MPI is finalised";
  if (comm == MPI_COMM_NULL) return "the communicator is MPI_COMM_NULL";
  return "";
}

std::string chunk_size_problem(uint64_t bytes) {
  if (bytes >= 4096 && bytes % 4096 == 0 && bytes <= (uint64_t{1} << 30)) return "";
  return "must be a multiple of 4096 from 4096 to 1 GiB (1073741824), not " + std::to_string(bytes);
}

int open_regular(const std::string& path, int flags, std::string& error, struct stat* st) {
  struct stat own;
  if (!st) st = &own;
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ELOOP && ::lstat(path.c_str(), st) == 0 && S_ISLNK(st->st_mode)) {
      error = path + " is a symlink, not a regular file";
    } else {
      errno = e;
      error = errno_text(path);
    }
    return -1;
  }
  auto blocking = [&] {
    const int now = ::fcntl(fd, F_GETFL);
    return now >= 0 && ::fcntl(fd, F_SETFL, now & ~O_NONBLOCK) == 0;
  };
  if (::fstat(fd, st) != 0)
    error = errno_text(path);
  else if (!S_ISREG(st->st_mode))
    error = path + " is not a regular file";
  else if (!(flags & O_NONBLOCK) && !blocking())
    error = errno_text(path);
  else
    return fd;
  ::close(fd);
  return -1;
}

void test_hold(int rank) {
  const char* hold = std::getenv("SKEIN_MPI_TEST_HOLD");
  if (rank != 0 || !hold || !*hold) return;
  const std::string held = std::string(hold) + ".held";
  if (int fd = ::open(held.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644); fd >= 0) ::close(fd);
  for (int i = 0; i < 12000 && ::access(hold, F_OK) != 0; ++i) {
    timespec t{0, 10000000};
    ::nanosleep(&t, nullptr);
  }
}

std::string sha256_hex(const std::string& path, std::string& error) {
  int fd = open_regular(path, O_RDONLY, error);
  if (fd < 0) return "";
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno_text(path);
      break;
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (!error.empty()) return "";
  std::string hex;
  char b[3];
  for (unsigned i = 0; i < len; ++i) {
    std::snprintf(b, sizeof b, "%02x", md[i]);
    hex += b;
  }
  return hex;
}

void wait_quietly(MPI_Request& request, long max_pause_ns) {
  int done = 0;
  long pause_ns = 20000;
  for (;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    timespec t{0, pause_ns};
    ::nanosleep(&t, nullptr);
    pause_ns = std::min(pause_ns * 2, max_pause_ns);
  }
}

std::string agree(MPI_Comm comm, const std::string& mine) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int first = mine.empty() ? INT_MAX : rank;
  int lowest = INT_MAX;
  MPI_Request r;
  MPI_Iallreduce(&first, &lowest, 1, MPI_INT, MPI_MIN, comm, &r);
  wait_quietly(r);
  if (lowest == INT_MAX) return "";
  std::string msg = "rank " + std::to_string(world_rank) + ": " + mine;
  bcast_string(comm, msg, lowest);
  return msg;
}

void bcast_string(MPI_Comm comm, std::string& s, int root) {
  unsigned long long n = s.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm);
  s.resize(n);
  // In pieces of 1 GiB: MPI's counts are ints, and a tree's list of paths may pass 2 GiB.
  constexpr unsigned long long kPiece = 1ull << 30;
  for (unsigned long long at = 0; at < n; at += kPiece)
    MPI_Bcast(s.data() + at, static_cast<int>(std::min(kPiece, n - at)), MPI_CHAR, root, comm);
}

void bcast_strings(MPI_Comm comm, std::vector<std::string>& v, int root) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string joined;
  if (rank == root) {
    for (auto& s : v) {
      joined += s;
      joined.push_back('\0');
    }
  }
  bcast_string(comm, joined, root);
  if (rank == root) return;
  v.clear();
  std::size_t at = 0;
  while (at < joined.size()) {
    std::size_t end = joined.find('\0', at);
    v.push_back(joined.substr(at, end - at));
    at = end + 1;
  }
}

bool allgather_strings(MPI_Comm comm, const std::vector<std::string>& mine,
                       std::vector<std::string>& all) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::string joined;
  for (auto& s : mine) {
    joined += s;
    joined.push_back('\0');
  }
  all.clear();  // `mine` may be `all`
  const long long n = static_cast<long long>(joined.size());
  std::vector<long long> lens(static_cast<std::size_t>(size));
  MPI_Allgather(&n, 1, MPI_LONG_LONG, lens.data(), 1, MPI_LONG_LONG, comm);
  long long total = 0;
  for (long long l : lens) total += l;
  if (total >= INT_MAX) return false;
  std::vector<int> counts(lens.begin(), lens.end()), displs(static_cast<std::size_t>(size));
  for (int r = 1; r < size; ++r)
    displs[std::size_t(r)] = displs[std::size_t(r - 1)] + counts[std::size_t(r - 1)];
  std::string joined_all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(joined.data(), static_cast<int>(n), MPI_CHAR, joined_all.data(), counts.data(),
                 displs.data(), MPI_CHAR, comm);
  for (std::size_t at = 0; at < joined_all.size();) {
    const std::size_t end = joined_all.find('\0', at);
    all.push_back(joined_all.substr(at, end - at));
    at = end + 1;
  }
  return true;
}

Node::~Node() {
  if (leaders != MPI_COMM_NULL) MPI_Comm_free(&leaders);
  if (local != MPI_COMM_NULL) MPI_Comm_free(&local);
  if (world != MPI_COMM_NULL) MPI_Comm_free(&world);
}

namespace {

// KEY and DIR of this rank from the override; false when there is none.
bool override_of(int rank, int size, std::string& key, std::string& dir, std::string& error) {
  if (const char* map = std::getenv("SKEIN_MPI_NODE_MAP"); map && *map) {
    std::vector<std::string> entries;
    std::stringstream in(map);
    for (std::string e; std::getline(in, e, ',');) entries.push_back(e);
    if (static_cast<int>(entries.size()) != size) {
      error = "SKEIN_MPI_NODE_MAP has " + std::to_string(entries.size()) + " entries for " +
              std::to_string(size) + " ranks (one KEY=DIR per rank)";
      return true;
    }
    const std::string& e = entries[std::size_t(rank)];
    auto eq = e.find('=');
    key = e.substr(0, eq);
    if (eq != std::string::npos) dir = e.substr(eq + 1);
    if (key.empty()) error = "SKEIN_MPI_NODE_MAP entry " + std::to_string(rank) + " has no KEY";
    return true;
  }
  if (const char* k = std::getenv("SKEIN_MPI_NODE"); k && *k) {
    key = k;
    if (const char* m = std::getenv("SKEIN_MPI_MOUNT")) dir = m;
    return true;
  }
  if (const char* m = std::getenv("SKEIN_MPI_MOUNT"); m && *m) dir = m;
  return false;
}

}  // namespace

bool make_node(MPI_Comm comm, Node& node, std::string& error) {
  MPI_Comm_dup(comm, &node.world);
  MPI_Comm_rank(node.world, &node.rank);
  MPI_Comm_size(node.world, &node.size);
  // The map has an entry per rank of MPI_COMM_WORLD: `comm` may be a part of it, in another
  // order (an application's call on a communicator of its own).
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::string key, dir, mine;
  const bool overridden = override_of(world_rank, world_size, key, dir, mine);
  error = agree(node.world, mine);
  if (!error.empty()) return false;
  node.mount_override = dir;
  // Every rank must agree on whether there is an override.
  int o = overridden ? 1 : 0, all = 0;
  MPI_Allreduce(&o, &all, 1, MPI_INT, MPI_SUM, node.world);
  if (all != 0 && all != node.size) {
    error = "SKEIN_MPI_NODE is set on some ranks only (set it on every rank, or none)";
    return false;
  }
  if (overridden) {
    // The colour of a key: the lowest rank that has it.
    constexpr int kKey = 256;
    std::vector<char> keys(std::size_t(kKey) * std::size_t(node.size));
    std::string padded = key.substr(0, kKey - 1);
    padded.resize(kKey, '\0');
    MPI_Allgather(padded.data(), kKey, MPI_CHAR, keys.data(), kKey, MPI_CHAR, node.world);
    int colour = node.rank;
    for (int r = 0; r < node.size; ++r) {
      if (std::string(keys.data() + std::size_t(r) * kKey) == padded.c_str()) {
        colour = r;
        break;
      }
    }
    MPI_Comm_split(node.world, colour, node.rank, &node.local);
  } else {
    MPI_Comm_split_type(node.world, MPI_COMM_TYPE_SHARED, node.rank, MPI_INFO_NULL, &node.local);
  }
  int local_rank = 0;
  MPI_Comm_rank(node.local, &local_rank);
  node.leader = local_rank == 0;
  MPI_Comm_split(node.world, node.leader ? 0 : MPI_UNDEFINED, node.rank, &node.leaders);
  if (node.leader) {
    MPI_Comm_rank(node.leaders, &node.node);
    MPI_Comm_size(node.leaders, &node.nodes);
  }
  MPI_Bcast(&node.node, 1, MPI_INT, 0, node.local);
  MPI_Bcast(&node.nodes, 1, MPI_INT, 0, node.world);
  return true;
}

}  // namespace skein::mpi
