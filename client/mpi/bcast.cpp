// skein_mpi_bcast and skein_mpi_prefetch; see skein/mpi.h and docs/mpi.md.
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collective.hpp"
#include "control_socket.hpp"
#include "fill_tag.hpp"
#include "mount_control.hpp"
#include "progress_report.hpp"
#include "skein/mpi.h"

namespace fs = std::filesystem;

namespace skein::mpi {
namespace {

struct Entry {
  std::string rel;  // path in the namespace below the mount, "/..."
  bool dir = false;
  uint64_t size = 0;  // a file's, as rank 0 listed it (for its progress only)
};

// Rank 0's part: resolves `paths` to paths below one skein mount and lists the files of trees.
std::string resolve(const std::vector<std::string>& paths, const std::string& mount_override,
                    std::string& mount, std::vector<Entry>& entries) {
  if (paths.empty()) return "no paths given";
  for (const std::string& p : paths) {
    if (p.empty()) return "an empty path";
    // A PATH given is followed where it is a symlink, or lies below one, as cat or cp would: the
    // mount's fills name files by their paths in the namespace, never through a symlink.
    std::error_code ec;
    std::string abs = fs::canonical(p, ec).string();
    if (ec) return p + ": " + ec.message();
    // Below rank 0's own mount (the override's, if any), else below any skein mount.
    std::string m = mount_override.empty() ? "" : fs::weakly_canonical(mount_override, ec).string();
    if (ec) m = mount_override;
    while (m.size() > 1 && m.back() == '/') m.pop_back();
    if (m.empty() || (abs != m && abs.rfind(m + "/", 0) != 0)) m = skein_mount_of(abs);
    if (m.empty()) {
      std::string named = fs::absolute(p).lexically_normal().string();
      while (named.size() > 1 && named.back() == '/') named.pop_back();
      return p + (abs == named
                      ? " is not on a skein mount"
                      : " leads through a symlink to " + abs + ", which is not on a skein mount");
    }
    if (!mount.empty() && mount != m)
      return "the paths are on different mounts: " + mount + ", " + m;
    mount = m;
    const std::string rel = namespace_path(abs, m);
    struct stat st;
    if (::stat(abs.c_str(), &st) != 0) return errno_text(p);
    if (S_ISREG(st.st_mode)) {
      entries.push_back({rel, false, static_cast<uint64_t>(st.st_size)});
    } else if (S_ISDIR(st.st_mode)) {
      entries.push_back({rel, true});
      fs::recursive_directory_iterator it(abs, ec), end;
      if (ec) return p + ": " + ec.message();
      for (; it != end; it.increment(ec)) {
        if (ec) return p + ": " + ec.message();
        auto status = it->symlink_status(ec);
        if (ec) return it->path().string() + ": " + ec.message();
        std::string r = namespace_path(it->path().string(), m);
        if (fs::is_directory(status))
          entries.push_back({r, true});
        else if (fs::is_regular_file(status))
          entries.push_back({r, false, it->file_size(ec)});
        if (ec) return it->path().string() + ": " + ec.message();
      }
      if (ec) return p + ": " + ec.message();
    } else {
      return p + " is neither a regular file nor a directory";
    }
  }
  return "";
}

struct Options {
  std::size_t chunk = 4 << 20;
  bool verify = false;
  bool quiet = false;
  double progress_s = -1;  // see skein_mpi_options
  std::string control_dir;
  // Some leader's mount stores only tagged bytes for this user (docs/mpi.md, "Security").
  bool tagged = false;
};

// What a leader's mount fetched from the gateway for a bcast.
struct Tally {
  uint64_t fetched = 0;    // its chunks, each fetched by this node alone
  uint64_t again = 0;      // ranges the page cache let go of before the end, fetched again
  uint64_t refetched = 0;  // other nodes' chunks whose tag the mount refused, fetched here too
  std::string refusal;     // the first such refusal
  std::mutex mu;           // for the threads that add to it

  // `bytes` of other nodes' chunks fetched here, their store refused for `why`.
  void refetch(uint64_t bytes, const std::string& why) {
    std::lock_guard lock(mu);
    refetched += bytes;
    if (refusal.empty()) refusal = why;
  }
};

// Rank 0's report of the bytes of the file being broadcast that every leader has (after a
// round); empty elsewhere.
using Progress = std::function<void(uint64_t bytes)>;

// Runs one `fill` command for a chunk of the file being broadcast; "" or the failure.
using Fill =
    std::function<std::string(const char* mode, uint64_t off, uint64_t len, uint64_t slot)>;

// Slot sets of the buffer: round r uses set r % kDepth (a chunk per leader), so that while round
// r's chunks are being stored, round r+1's are broadcast and rounds r+2 and r+3 fetched.
constexpr uint64_t kDepth = 4;
// Fetches a leader has its mount make at once: while one is storing its pieces into the page
// cache, the other's reads keep the gateway busy.
constexpr int kFetchers = 2;
constexpr std::size_t kTagSize = client::FillTag::kSize;
// The largest chunk where tags are needed: what a mount takes at once from a user it does not
// give every command.
constexpr std::size_t kMaxTaggedChunk = 64u << 20;

// A mount takes a tagged store only if its tag was made FillTag::kSettled after the second of
// the file's mtime began (fill_tag.hpp): a file written just now, by this node's clock, is
// fetched once that time has passed. An mtime further ahead (a server's clock ahead of this
// node's, a file touched into the future) is not waited for: the stores refuse its tags, and each
// node fetches the other nodes' chunks itself.
void wait_until_settled(int64_t mtime_ns) {
  using namespace std::chrono;
  const auto settled = system_clock::time_point(seconds(client::FillTag::settled_from(mtime_ns)));
  const auto wait = settled - system_clock::now();
  if (wait > wait.zero() && wait <= client::FillTag::kSettled + seconds(1))
    std::this_thread::sleep_for(wait);
}

// Takes the tag of a `fill fetch` answer ("ok LENGTH TAG") into `to`; "" or the failure.
std::string take_tag(const std::string& answer, const Mount& mount, char* to) {
  const std::string tag = answer.substr(answer.rfind(' ') + 1, kTagSize);
  if (tag.size() != kTagSize) return mount.dir + ": fill fetch gave no tag (" + answer + ")";
  std::memcpy(to, tag.data(), kTagSize);
  return "";
}

// A mount's failure of a fill of `rel`, in bcast's words where the mount says the file is no
// longer the version opened ("PATH changed (...)").
std::string changed_during_bcast(const std::string& rel, const std::string& e) {
  if (e.find(rel + " changed") == std::string::npos) return e;
  return rel + " changed during bcast (" + e + ")";
}

// Has the mount store another node's chunk (`store`). A mount that does not take the fetching
// mount's tag (it holds another token of the namespace, the clocks differ, an mtime ahead) has
// this node fetch the chunk itself instead (`fetch`, into the same place in the buffer, which
// nothing else touches meanwhile). Returns the failure, or "".
std::string store_or_fetch(const std::function<std::string()>& store,
                           const std::function<std::string()>& fetch, uint64_t bytes,
                           Tally& tally) {
  std::string e = store();
  if (e.find(client::FillTag::kRefused) == std::string::npos) return e;
  const std::string why = e;
  e = fetch();
  if (e.empty()) tally.refetch(bytes, why);
  return e;
}

// A leader's rounds of one file (`chunks` chunks of `size` bytes), in three stages that overlap:
// kFetchers threads have this node's mount fetch its chunk of each round into the round's slot
// set (up to kDepth rounds ahead of the stores), this thread broadcasts each round's chunks over
// the leaders' communicator once every leader has fetched its own, and a thread has the mount
// store the chunks the other leaders fetched. Every leader learns every failure at the next
// round's agreement, and stops there: every leader stops after the same round. Returns this
// leader's failure (or "another node failed"), "" when every leader finished.
std::string pipelined_rounds(Node& node, Buffer& buf, const Options& o, uint64_t chunks,
                             uint64_t size, const Fill& fill, std::vector<char>& tags, Tally& tally,
                             const Progress& progress) {
  const uint64_t L = static_cast<uint64_t>(node.nodes);
  const uint64_t self = static_cast<uint64_t>(node.node);
  const uint64_t rounds = (chunks + L - 1) / L;
  auto slot = [&](uint64_t round, uint64_t l) { return (round % kDepth) * L + l; };
  auto length = [&](uint64_t k) { return std::min<uint64_t>(o.chunk, size - k * o.chunk); };

  std::mutex mu;
  std::condition_variable cv;
  uint64_t next_fetch = 0;                // the next round a fetcher takes
  std::vector<bool> was_fetched(rounds);  // own chunk of the round is in the buffer
  uint64_t was_broadcast = 0;             // rounds handed to the storer
  uint64_t was_stored = 0;                // rounds whose slot set is free again
  bool stop = false;                      // a failure: the stages end
  std::string fetch_failure, store_failure;
  uint64_t fetch_bytes = 0;

  auto fetch_rounds = [&] {
    for (;;) {
      uint64_t r = 0;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] {
          return stop || !fetch_failure.empty() || next_fetch >= rounds ||
                 next_fetch < was_stored + kDepth;
        });
        if (stop || !fetch_failure.empty() || next_fetch >= rounds) return;
        r = next_fetch++;
      }
      const uint64_t k = r * L + self;
      std::string e;
      if (k < chunks) e = fill("fetch", k * o.chunk, length(k), slot(r, self));
      std::lock_guard lock(mu);
      if (!e.empty() && fetch_failure.empty()) fetch_failure = e;
      if (e.empty() && k < chunks) fetch_bytes += length(k);
      was_fetched[r] = true;
      cv.notify_all();
      if (!e.empty()) return;
    }
  };
  std::vector<std::thread> fetchers;
  for (int i = 0; i < kFetchers; ++i) fetchers.emplace_back(fetch_rounds);
  std::thread storer([&] {
    for (uint64_t r = 0; r < rounds; ++r) {
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || r < was_broadcast; });
        if (stop) return;
      }
      std::string e;
      for (uint64_t l = 0; l < L && e.empty(); ++l) {
        const uint64_t k = r * L + l;
        if (l == self || k >= chunks) continue;
        // The chunk's slot stays untouched until this round is stored.
        e = store_or_fetch([&] { return fill("store", k * o.chunk, length(k), slot(r, l)); },
                           [&] { return fill("fetch", k * o.chunk, length(k), slot(r, l)); },
                           length(k), tally);
      }
      std::lock_guard lock(mu);
      if (!e.empty()) store_failure = e;
      was_stored = r + 1;
      cv.notify_all();
      if (!e.empty()) return;
    }
  });

  std::string mine;
  std::vector<int> counts(L), offsets(L);  // of each round's allgather
  for (uint64_t r = 0; r < rounds; ++r) {
    {
      std::unique_lock lock(mu);
      cv.wait(lock,
              [&] { return was_fetched[r] || !fetch_failure.empty() || !store_failure.empty(); });
      mine = !fetch_failure.empty() ? fetch_failure : store_failure;
    }
    int bad = mine.empty() ? 0 : 1, any = 0;
    MPI_Request agreed;
    MPI_Iallreduce(&bad, &any, 1, MPI_INT, MPI_MAX, node.leaders, &agreed);
    wait_quietly(agreed, 500'000);  // on the pipeline's path: a leader stalls for no longer
    if (any) {
      if (mine.empty()) mine = "another node failed";  // its own failure is the agreed one
      break;
    }
    // Every leader is here now: the chunks go at full speed (a blocking collective polls, which
    // moves the bytes faster than tests between sleeps would). The round's slots lie in leader
    // order, one after another, so one allgather gives every leader the others' chunks, at less
    // cost than a broadcast from each (docs/benchmarks.md, "One gateway handle per file for the
    // fills"); a buffer too large for int offsets takes a broadcast from each leader instead.
    if (L * o.chunk <= static_cast<uint64_t>(INT_MAX)) {
      for (uint64_t l = 0; l < L; ++l) {
        const uint64_t k = r * L + l;
        counts[l] = k < chunks ? static_cast<int>(length(k)) : 0;
        offsets[l] = static_cast<int>(l * o.chunk);
      }
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf.data + slot(r, 0) * o.chunk,
                     counts.data(), offsets.data(), MPI_BYTE, node.leaders);
    } else {
      for (uint64_t l = 0; l < L && r * L + l < chunks; ++l) {
        MPI_Bcast(buf.data + slot(r, l) * o.chunk, static_cast<int>(length(r * L + l)), MPI_BYTE,
                  static_cast<int>(l), node.leaders);
      }
    }
    // With the chunks, the tags their mounts gave them, for mounts that store only tagged bytes.
    if (!tags.empty())
      MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, tags.data() + slot(r, 0) * kTagSize,
                    static_cast<int>(kTagSize), MPI_CHAR, node.leaders);
    {
      std::lock_guard lock(mu);
      was_broadcast = r + 1;
      cv.notify_all();
    }
    if (r == 0) test_hold(node.rank);  // after the first round of each file
    if (progress) progress(std::min<uint64_t>(size, (r + 1) * L * o.chunk));
  }
  {
    std::unique_lock lock(mu);
    if (!mine.empty()) {
      stop = true;
      cv.notify_all();
    }
  }
  for (auto& f : fetchers) f.join();
  storer.join();
  tally.fetched += fetch_bytes;
  if (mine.empty()) mine = store_failure;  // a store of the last rounds
  return mine;
}

// One file, collectively. Returns the agreed failure or "".
std::string bcast_file(Node& node, const Mount& mount, Buffer& buf, const Options& o,
                       const std::string& rel, Tally& tally, const Progress& progress) {
  const std::string local_path = mount.dir + rel;
  // Leaders open the file through their mount (the open the mount keeps page cache for) and
  // agree on its version.
  int fd = -1;
  std::string mine;
  long long meta[2] = {0, 0};  // mtime_ns, size
  if (node.leader) {
    struct stat st;
    fd = open_regular(local_path, O_RDONLY, mine, &st);
    if (fd >= 0) {
      meta[0] = mtime_ns_of(st);
      meta[1] = st.st_size;
    }
  }
  std::string failure = agree(node.world, mine);
  auto close_fd = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
  };
  if (!failure.empty()) {
    close_fd();
    return failure;
  }
  if (node.leader) {
    long long first[2] = {meta[0], meta[1]};
    MPI_Bcast(first, 2, MPI_LONG_LONG, 0, node.leaders);
    if (first[0] != meta[0] || first[1] != meta[1])
      mine = rel + " changed during bcast (nodes see different sizes or mtimes)";
  }
  failure = agree(node.world, mine);
  if (!failure.empty()) {
    close_fd();
    return failure;
  }
  if (node.leader && o.tagged) wait_until_settled(meta[0]);
  if (node.leader) {
    const uint64_t size = static_cast<uint64_t>(meta[1]);
    const uint64_t chunks = (size + o.chunk - 1) / o.chunk;
    // `fill MODE` of bytes [off, off + len) of the file, to or from chunk `slot` of the buffer.
    // Where a leader's mount stores only tagged bytes (the user is not privileged there), every
    // fetch asks for the tag of its chunk and every store hands it on (docs/mpi.md, "Security").
    std::vector<char> tags(o.tagged ? kDepth * static_cast<uint64_t>(node.nodes) * kTagSize : 0);
    const Fill fill = [&](const char* mode, uint64_t off, uint64_t len, uint64_t slot) {
      const bool fetch = std::string(mode) == "fetch", with_tag = !tags.empty() && len > 0;
      std::string m = mode;
      if (with_tag)
        m += fetch ? ":tag" : ":" + std::string(tags.data() + slot * kTagSize, kTagSize);
      std::string answer;
      std::string e =
          mount.command(fill_command(m.c_str(), meta[0], size, off, len, slot * o.chunk, rel),
                        &answer, buf.fd, len);
      if (e.empty() && with_tag && fetch)
        e = take_tag(answer, mount, tags.data() + slot * kTagSize);
      return changed_during_bcast(rel, e);
    };
    mine = pipelined_rounds(node, buf, o, chunks, size, fill, tags, tally, progress);
    // The kernel may have let go of some pages already (or not taken them): each leader asks its
    // mount to fetch the ranges that are not resident (mincore on a mapping of the file, which
    // reads nothing), so that a later read does not miss and start the mount's read-ahead.
    if (mine.empty() && size > 0) {
      void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
        std::vector<unsigned char> resident((size + page - 1) / page);
        if (::mincore(map, size, resident.data()) == 0) {
          for (uint64_t p = 0; p < resident.size() && mine.empty();) {
            if (resident[p] & 1) {
              ++p;
              continue;
            }
            uint64_t q = p;
            while (q < resident.size() && !(resident[q] & 1) && (q - p) * page < o.chunk) ++q;
            const uint64_t off = p * page;
            const uint64_t len = std::min<uint64_t>((q - p) * page, size - off);
            mine = fill("fetch", off, len, 0);
            if (mine.empty()) tally.again += len;
            p = q;
          }
        }
        ::munmap(map, size);
      }
    }
    // The version stored is still the current one.
    if (mine.empty()) mine = fill("store", 0, 0, 0);
  }
  close_fd();
  // Failures of the leaders: "another node failed" is never the lowest unless it is the only
  // kind, so prefer a real one.
  if (mine == "another node failed") mine = "";
  return agree(node.world, mine);
}

// Files of at most one chunk go many at a time: such a file gains nothing from the pipeline of
// rounds, and the collectives around each file (its version agreed, its round agreed) cost more
// than its bytes: a tree of 2,000 files of 4 KiB on two nodes took 26 ms a file one at a time,
// 0.2 ms in batches (docs/benchmarks.md, "Trees of small files").
// Files a leader holds open at once; its mount holds a gateway handle for each it fetches, and an
// SFTP server's process has a limit on open files (often 1,024).
constexpr std::size_t kBatchFiles = 256;
constexpr std::size_t kBatchWorkers = 4;  // opens, and fill commands without fill-files, at once
// The end of the buffer holds the list of a batch's files for a `fill-files` command: a line
// each, with a name of up to PATH_MAX bytes %-encoded.
constexpr std::size_t kListArea = kBatchFiles * (3 * PATH_MAX + 128);

// Runs work(j) for every j in [0, n) on up to kBatchWorkers threads (this one among them);
// after a failure no more are started. Returns the first failure, or "".
std::string run_on_workers(std::size_t n, const std::function<std::string(std::size_t)>& work) {
  std::mutex mu;
  std::size_t next = 0;
  std::string failure;
  auto worker = [&] {
    for (;;) {
      std::size_t j = 0;
      {
        std::lock_guard lock(mu);
        if (!failure.empty() || next >= n) return;
        j = next++;
      }
      std::string e = work(j);
      if (!e.empty()) {
        std::lock_guard lock(mu);
        if (failure.empty()) failure = std::move(e);
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < std::min(n, kBatchWorkers); ++t) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  return failure;
}

// A batch of files of at most one chunk each, as listed. Every leader opens them all through its
// mount, and the leaders agree on their versions (leader 0's, which every rank learns). Each
// file goes to one leader, the one with the fewest bytes so far; each leader fetches its files
// into its region of the buffer (regions in leader order, one after another), one allgather
// hands every leader the others' regions, and each has its mount store those. A file found
// larger than a chunk, or one that no longer fits the buffer, is left in `later` (on every rank
// alike) for the rounds of one file at a time. Returns the agreed failure or "".
std::string bcast_batch(Node& node, const Mount& mount, Buffer& buf, const Options& o,
                        const std::vector<const Entry*>& files, Tally& tally,
                        std::vector<const Entry*>& later) {
  const std::size_t n = files.size();
  std::vector<int> fds(n, -1);
  std::vector<long long> meta(2 * n, 0);  // mtime_ns, size
  auto close_all = [&] {
    for (int& fd : fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  };
  std::string mine;
  if (node.leader) {
    // Opens through the mount are a round trip each where the mount has not looked the name up.
    mine = run_on_workers(n, [&](std::size_t j) {
      const std::string p = mount.dir + files[j]->rel;
      struct stat st;
      std::string error;
      fds[j] = open_regular(p, O_RDONLY, error, &st);
      if (fds[j] < 0) return error;
      meta[2 * j] = mtime_ns_of(st);
      meta[2 * j + 1] = st.st_size;
      return std::string();
    });
  }
  std::string failure = agree(node.world, mine);
  if (!failure.empty()) {
    close_all();
    return failure;
  }
  std::vector<long long> first = meta;  // world rank 0 is leader 0
  MPI_Bcast(first.data(), static_cast<int>(2 * n), MPI_LONG_LONG, 0, node.world);
  for (std::size_t j = 0; node.leader && j < n && mine.empty(); ++j) {
    if (first[2 * j] != meta[2 * j] || first[2 * j + 1] != meta[2 * j + 1])
      mine = files[j]->rel + " changed during bcast (nodes see different sizes or mtimes)";
  }
  failure = agree(node.world, mine);
  if (!failure.empty()) {
    close_all();
    return failure;
  }

  // The layout, from leader 0's versions: on every rank alike.
  const std::size_t L = static_cast<std::size_t>(node.nodes);
  const uint64_t capacity =
      std::min<uint64_t>(uint64_t{o.chunk} * kDepth * L, static_cast<uint64_t>(INT_MAX));
  std::vector<int> owner(n, -1);   // the leader that fetches file j; -1: later
  std::vector<uint64_t> at(n, 0);  // its offset in the owner's region
  std::vector<uint64_t> region(L, 0);
  uint64_t total = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const uint64_t size = static_cast<uint64_t>(first[2 * j + 1]);
    if (size > o.chunk || total + size > capacity) {
      later.push_back(files[j]);
      continue;
    }
    const std::size_t l =
        static_cast<std::size_t>(std::min_element(region.begin(), region.end()) - region.begin());
    owner[j] = static_cast<int>(l);
    at[j] = region[l];
    region[l] += size;
    total += size;
  }
  std::vector<uint64_t> start(L, 0);
  for (std::size_t l = 1; l < L; ++l) start[l] = start[l - 1] + region[l - 1];

  if (node.leader && total > 0) {
    const std::size_t self = static_cast<std::size_t>(node.node);
    if (o.tagged) {
      // A file written just now: its tags are taken once the second of its mtime is over.
      int64_t latest = INT64_MIN;
      for (std::size_t j = 0; j < n; ++j)
        if (owner[j] >= 0) latest = std::max<int64_t>(latest, first[2 * j]);
      wait_until_settled(latest);
    }
    std::vector<char> tags(o.tagged ? n * kTagSize : 0, 0);
    auto fill = [&](const char* mode, std::size_t j, bool with_tag) {
      const uint64_t size = static_cast<uint64_t>(first[2 * j + 1]);
      const bool fetch = std::string(mode) == "fetch";
      std::string m = mode;
      if (with_tag) m += fetch ? ":tag" : ":" + std::string(tags.data() + j * kTagSize, kTagSize);
      std::string answer;
      std::string e = mount.command(
          fill_command(m.c_str(), first[2 * j], size, 0, size,
                       start[static_cast<std::size_t>(owner[j])] + at[j], files[j]->rel),
          &answer, buf.fd, size);
      if (e.empty() && with_tag && fetch) e = take_tag(answer, mount, tags.data() + j * kTagSize);
      return changed_during_bcast(files[j]->rel, e);
    };
    std::vector<std::size_t> own, others;
    for (std::size_t j = 0; j < n; ++j) {
      if (owner[j] < 0 || first[2 * j + 1] == 0) continue;
      (static_cast<std::size_t>(owner[j]) == self ? own : others).push_back(j);
    }
    auto size_of = [&](std::size_t j) { return static_cast<uint64_t>(first[2 * j + 1]); };
    // `fill-files` of the files `js`: a command for as many as its list area and 64 MiB hold.
    // Each file's failure ("" when done) goes to `each`. False where the mount does not know the
    // command (an older skein-mount): the files then go a `fill` command each.
    auto fill_many = [&](bool fetch, const std::vector<std::size_t>& js,
                         std::vector<std::string>& each) {
      each.assign(js.size(), "");
      // Test hook (tests/e2e/mpi_test.cpp): as with a mount that does not know the command.
      if (std::getenv("SKEIN_MPI_TEST_NO_FILL_FILES")) return false;
      const uint64_t list_at = buf.size - kListArea;
      for (std::size_t a = 0; a < js.size();) {
        std::string list;
        uint64_t bytes = 0;
        std::size_t b = a;
        for (; b < js.size(); ++b) {
          const std::size_t j = js[b];
          const std::string tag =
              !fetch && o.tagged ? std::string(tags.data() + j * kTagSize, kTagSize) : "-";
          const std::string line =
              std::to_string(first[2 * j]) + " " + std::to_string(size_of(j)) + " " +
              std::to_string(start[static_cast<std::size_t>(owner[j])] + at[j]) + " " + tag + " " +
              client::ControlSocket::path_field(files[j]->rel) + "\n";
          if (b > a &&
              (list.size() + line.size() > kListArea || bytes + size_of(j) > kMaxTaggedChunk))
            break;
          list += line;
          bytes += size_of(j);
        }
        std::memcpy(buf.data + list_at, list.data(), list.size());
        const std::string mode = fetch ? (o.tagged ? "fetch:tag" : "fetch") : "store";
        std::string answer;
        const std::string e = mount.command("fill-files " + mode + " " + std::to_string(list_at) +
                                                " " + std::to_string(list.size()),
                                            &answer, buf.fd, buf.size);
        if (e.find("unknown command 'fill-files") != std::string::npos ||
            e.find("'fill-files' is for root") != std::string::npos)
          return false;
        std::istringstream lines(answer);
        std::string line;
        std::getline(lines, line);  // "ok COUNT"
        for (std::size_t k = a; k < b; ++k) {
          if (!e.empty() || !std::getline(lines, line)) {
            each[k] = !e.empty() ? e : mount.dir + ": fill-files: a short answer: " + answer;
          } else if (line.rfind("error: ", 0) == 0) {
            each[k] = mount.dir + ": " + line.substr(7);
          } else if (fetch && o.tagged) {
            each[k] = take_tag(line, mount, tags.data() + js[k] * kTagSize);
          }
          each[k] = changed_during_bcast(files[js[k]]->rel, each[k]);
        }
        a = b;
      }
      return true;
    };
    std::vector<std::string> each;
    if (fill_many(true, own, each)) {
      for (std::size_t k = 0; k < own.size(); ++k) {
        if (each[k].empty())
          tally.fetched += size_of(own[k]);
        else if (mine.empty())
          mine = each[k];
      }
    } else {
      mine = run_on_workers(own.size(), [&](std::size_t k) {
        const std::string e = fill("fetch", own[k], o.tagged);
        if (e.empty()) {
          std::lock_guard lock(tally.mu);
          tally.fetched += size_of(own[k]);
        }
        return e;
      });
    }
    int bad = mine.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, node.leaders);
    if (any && mine.empty()) mine = "another node failed";
    if (!any) {
      std::vector<int> counts(L), displs(L);
      for (std::size_t l = 0; l < L; ++l) {
        counts[l] = static_cast<int>(region[l]);
        displs[l] = static_cast<int>(start[l]);
      }
      MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf.data, counts.data(), displs.data(),
                     MPI_BYTE, node.leaders);
      // Each file's tag is where its fetching leader wrote it, zeros elsewhere.
      if (!tags.empty())
        MPI_Allreduce(MPI_IN_PLACE, tags.data(), static_cast<int>(tags.size()), MPI_UNSIGNED_CHAR,
                      MPI_BOR, node.leaders);
      // A store whose tag is refused: this node fetches the file itself (as in the rounds).
      std::vector<std::size_t> refused;
      std::string why;
      if (fill_many(false, others, each)) {
        for (std::size_t k = 0; k < others.size(); ++k) {
          if (each[k].find(client::FillTag::kRefused) != std::string::npos) {
            refused.push_back(others[k]);
            if (why.empty()) why = each[k];
          } else if (!each[k].empty() && mine.empty()) {
            mine = each[k];
          }
        }
        if (mine.empty() && !refused.empty() && fill_many(true, refused, each)) {
          for (std::size_t k = 0; k < refused.size(); ++k) {
            if (each[k].empty())
              tally.refetch(size_of(refused[k]), why);
            else if (mine.empty())
              mine = each[k];
          }
        }
      } else {
        mine = run_on_workers(others.size(), [&](std::size_t k) {
          const std::size_t j = others[k];
          return store_or_fetch([&] { return fill("store", j, o.tagged); },
                                [&] { return fill("fetch", j, o.tagged); }, size_of(j), tally);
        });
      }
    }
  }
  close_all();
  if (mine == "another node failed") mine = "";
  return agree(node.world, mine);
}

int finish(const std::string& failure, char* error, std::size_t error_size) {
  if (failure.empty()) return 0;
  if (error && error_size > 0) std::snprintf(error, error_size, "%s", failure.c_str());
  return 1;
}

int run(MPI_Comm comm, const char* const* paths, int npaths, const skein_mpi_options* options,
        bool prefetch, char* error, std::size_t error_size) {
  if (std::string problem = mpi_problem(comm); !problem.empty())
    return finish(problem, error, error_size);
  Options o;
  if (options) {
    if (options->chunk_size) o.chunk = options->chunk_size;
    o.verify = options->verify != 0;
    o.quiet = options->quiet != 0;
    o.progress_s = options->progress_s;
    if (options->control_dir) o.control_dir = options->control_dir;
  }
  // The arguments: rank 0's paths (the only ones used) and every rank's options, agreed on, so
  // that no rank goes on while another returns.
  {
    std::string bad;
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0 && (!paths || npaths <= 0)) bad = "no paths";
    for (int i = 0; rank == 0 && bad.empty() && i < npaths; ++i)
      if (!paths[i] || !*paths[i]) bad = "paths[" + std::to_string(i) + "] is not a path";
    if (std::string problem = chunk_size_problem(o.chunk); bad.empty() && !problem.empty())
      bad = "options: chunk_size " + problem;
    if (std::string failure = agree_on_arguments(comm, bad, {o.chunk, o.verify ? 1ull : 0ull});
        !failure.empty())
      return finish(failure, error, error_size);
  }
  Node node;
  std::string failure;
  if (!make_node(comm, node, failure)) return finish(failure, error, error_size);

  // Rank 0 resolves the paths and lists the trees; every rank learns the list.
  std::string mount0;
  std::vector<Entry> entries;
  std::string mine;
  if (node.rank == 0) {
    std::vector<std::string> p(paths, paths + npaths);
    mine = resolve(p, node.mount_override, mount0, entries);
  }
  failure = agree(node.world, mine);
  if (!failure.empty()) return finish(failure, error, error_size);
  bcast_string(node.world, mount0, 0);
  std::vector<std::string> flat;
  for (auto& e : entries) flat.push_back((e.dir ? "d" : "f") + e.rel);
  bcast_strings(node.world, flat, 0);
  // With the sizes rank 0 listed: every rank puts the same files in the same batches.
  std::vector<unsigned long long> sizes(flat.size(), 0);
  for (std::size_t i = 0; i < entries.size(); ++i) sizes[i] = entries[i].size;
  MPI_Bcast(sizes.data(), static_cast<int>(sizes.size()), MPI_UNSIGNED_LONG_LONG, 0, node.world);
  if (node.rank != 0) {
    for (std::size_t i = 0; i < flat.size(); ++i)
      entries.push_back({flat[i].substr(1), flat[i][0] == 'd', sizes[i]});
  }

  Mount mount{node.mount_override.empty() ? mount0 : node.mount_override, o.control_dir};
  while (mount.dir.size() > 1 && mount.dir.back() == '/') mount.dir.pop_back();
  // Every leader's mount must answer, and must be the mount of the same namespace's tree.
  Buffer buf;
  mine.clear();
  if (node.leader) {
    std::string who;
    mine = mount.command("whoami", &who);
    // A mount that does not give this user every command stores only bytes that come with the
    // tag of the mount that fetched them.
    if (mine.empty() && who.find("every command") == std::string::npos) o.tagged = true;
  }
  int tagged = o.tagged ? 1 : 0, any_tagged = 0;
  MPI_Allreduce(&tagged, &any_tagged, 1, MPI_INT, MPI_MAX, node.world);
  o.tagged = any_tagged != 0;
  // Such a mount takes at most 64 MiB a command from those users.
  if (o.tagged) o.chunk = std::min<std::size_t>(o.chunk, kMaxTaggedChunk);
  if (node.leader && mine.empty())
    mine = buf.open(o.chunk * kDepth * static_cast<std::size_t>(node.nodes) + kListArea, mount);
  failure = agree(node.world, mine);
  if (!failure.empty()) return finish(failure, error, error_size);

  const auto start = std::chrono::steady_clock::now();
  // Every leader but rank 0 (which listed the trees) lists their directories through its mount
  // first, so that its opens need not look each name up at the gateway.
  if (node.leader && node.rank != 0) {
    for (const Entry& e : entries)
      if (e.dir) learn_names(mount.dir + e.rel);
  }
  if (prefetch) {
    // Metadata: every node's mount looks up every entry.
    mine.clear();
    if (node.leader) {
      for (auto& e : entries) {
        struct stat st;
        if (::lstat((mount.dir + e.rel).c_str(), &st) != 0) {
          mine = errno_text(mount.dir + e.rel);
          break;
        }
      }
    }
    failure = agree(node.world, mine);
    if (!failure.empty()) return finish(failure, error, error_size);
  }
  Tally tally;
  uint64_t files = 0;
  // Rank 0's progress: the files as it listed them, the bytes every leader has.
  std::optional<ProgressReport> report;
  Tallies done{0, 0, 0};
  Progress progress;
  if (node.rank == 0 && !o.quiet) {
    Tallies total{0, 0, 0};
    for (const Entry& e : entries) {
      if (e.dir) continue;
      total[0] += static_cast<long long>(e.size);
      ++total[1];
    }
    report.emplace(o.progress_s, total);
    progress = [&](uint64_t bytes) {
      Tallies now = done;
      now[0] += static_cast<long long>(bytes);
      report->show(now);
    };
  }
  auto count_done = [&](const Entry& e) {
    ++files;
    if (report) {
      done[0] += static_cast<long long>(e.size);
      ++done[1];
    }
  };
  auto one_file = [&](const Entry& e) {
    std::string f = bcast_file(node, mount, buf, o, e.rel, tally, progress);
    if (!f.empty()) return f;
    count_done(e);
    if (report) report->show(done);
    return std::string();
  };
  // Files of at most one chunk (as listed) in batches of up to kBatchFiles files and half the
  // buffer's bytes (room for files grown since the listing); larger ones one at a time.
  const uint64_t batch_bytes = uint64_t{o.chunk} * kDepth * static_cast<uint64_t>(node.nodes) / 2;
  std::vector<const Entry*> batch;
  uint64_t batched = 0;
  auto flush = [&] {
    if (batch.empty()) return std::string();
    std::vector<const Entry*> later;
    std::string f = bcast_batch(node, mount, buf, o, batch, tally, later);
    for (const Entry* e : batch)
      if (f.empty() && std::find(later.begin(), later.end(), e) == later.end()) count_done(*e);
    if (report) report->show(done);
    batch.clear();
    batched = 0;
    for (const Entry* e : later)
      if (f.empty()) f = one_file(*e);
    return f;
  };
  for (const Entry& e : entries) {
    if (e.dir) continue;
    if (e.size > o.chunk) {
      failure = flush();
      if (failure.empty()) failure = one_file(e);
    } else {
      if (!batch.empty() && (batch.size() == kBatchFiles || batched + e.size > batch_bytes))
        failure = flush();
      batch.push_back(&e);
      batched += e.size;
    }
    if (!failure.empty()) return finish(failure, error, error_size);
  }
  failure = flush();
  if (!failure.empty()) return finish(failure, error, error_size);
  if (report) {
    report->show(done, true);
    report.reset();
  }
  unsigned long long counts[3] = {tally.fetched, tally.again, tally.refetched},
                     total[3] = {0, 0, 0};
  MPI_Reduce(counts, total, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, node.world);
  const std::string refusal = agree(node.world, tally.refusal);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (node.rank == 0 && !o.quiet) {
    std::printf(
        "skein-mpi: %s %llu files, %llu bytes fetched once, into %d nodes' page cache in "
        "%.2f s\n",
        prefetch ? "prefetched" : "broadcast", (unsigned long long)files, total[0], node.nodes,
        secs);
    // Pages a node's kernel let go of before the end (memory pressure, proactive reclaim).
    if (total[1] > 0)
      std::printf("skein-mpi: %llu bytes fetched again that a page cache had let go of\n",
                  total[1]);
    std::fflush(stdout);
    // Each node has the right bytes all the same, but the gateway served some more than once.
    if (total[2] > 0) {
      std::fprintf(stderr,
                   "skein-mpi: warning: %llu bytes fetched again by other nodes, whose mounts "
                   "refused the fetching node's tag; the first: %s\n",
                   total[2], refusal.c_str());
      std::fflush(stderr);
    }
  }
  if (o.verify) {
    for (auto& e : entries) {
      if (e.dir) continue;
      std::string err;
      std::string d = sha256_hex(mount.dir + e.rel, err);
      failure = agree(node.world, err);
      if (!failure.empty()) return finish(failure, error, error_size);
      std::string first = d;
      bcast_string(node.world, first, 0);
      failure = agree(node.world, first == d ? ""
                                             : e.rel + ": this rank reads other bytes (sha256 " +
                                                   d + ", rank 0 " + first + ")");
      if (!failure.empty()) return finish(failure, error, error_size);
      if (node.rank == 0 && !o.quiet) std::printf("sha256 %s %s\n", d.c_str(), e.rel.c_str());
    }
    if (node.rank == 0 && !o.quiet) std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace skein::mpi

extern "C" void skein_mpi_options_init(skein_mpi_options* options) {
  std::memset(options, 0, sizeof *options);
  options->progress_s = -1;
}

extern "C" int skein_mpi_bcast(MPI_Comm comm, const char* const* paths, int npaths,
                               const skein_mpi_options* options, char* error, size_t error_size) {
  return skein::mpi::without_exceptions(comm, [&] {
    return skein::mpi::run(comm, paths, npaths, options, false, error, error_size);
  });
}

extern "C" int skein_mpi_prefetch(MPI_Comm comm, const char* const* paths, int npaths,
                                  const skein_mpi_options* options, char* error,
                                  size_t error_size) {
  return skein::mpi::without_exceptions(
      comm, [&] { return skein::mpi::run(comm, paths, npaths, options, true, error, error_size); });
}
