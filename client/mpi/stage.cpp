// skein_mpi_stage: a parallel tree copy (stage-in, stage-out); see skein/mpi.h and docs/mpi.md.
#include "stage.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "collective.hpp"
#include "control_socket.hpp"
#include "mount_control.hpp"
#include "progress_report.hpp"
#include "skein/mpi.h"
#include "skein/partial_name.hpp"

namespace fs = std::filesystem;

namespace skein::mpi {
namespace {

constexpr const char* kChunks = ".chunks";  // a large file's record: its partial's name and this
// Files up to this size are fetched several at a time (fetch-files), up to kUnitFiles in one
// command; a buffer holds a unit's paths (each at most PATH_MAX) and its files at the largest
// one's size each. Part of a small file's cost is its command's (the counter, the control socket,
// the gateway call), so larger units copy faster, up to 128 files (docs/benchmarks.md, "Small
// files of a stage-in several to a gateway call").
constexpr uint64_t kFetchMaxFile = 256u << 10;
constexpr std::size_t kUnitFiles = 128;
constexpr std::size_t kFetchBuffer = kUnitFiles * (kFetchMaxFile + PATH_MAX);
// Files up to kFetchMaxFile are likewise written to a skein mount several at a time
// (store-files): a buffer holds a unit's list (each entry two names of at most PATH_MAX and its
// numbers) and the files' contents.
constexpr std::size_t kStoreEntry = 2 * PATH_MAX + 64;
constexpr std::size_t kStoreBuffer = kUnitFiles * (kFetchMaxFile + kStoreEntry);
// A large file's chunk is read by the mount (`fill read`) this much at a time, into the same
// buffer: whole windows of the mount's eight 1 MiB reads in flight.
constexpr uint64_t kReadRange = 8u << 20;
static_assert(kReadRange <= kFetchBuffer);

struct Item {
  char type = 'f';  // f, d, l
  uint32_t mode = 0;
  int64_t mtime_ns = 0;
  uint64_t size = 0;
  std::string rel;     // "" for the root itself, else "/a/b"
  std::string target;  // symlinks
};

// An item as one string: its numbers, then the lengths of its names, then the names themselves
// (a name may hold any byte but NUL, a separator of its own included).
std::string pack(const Item& i) {
  return std::string(1, i.type) + " " + std::to_string(i.mode) + " " + std::to_string(i.mtime_ns) +
         " " + std::to_string(i.size) + " " + std::to_string(i.rel.size()) + " " +
         std::to_string(i.target.size()) + " " + i.rel + i.target;
}

// The inverse of pack(), for every item on every rank, so read with from_chars: 0.03 µs an item
// here against 0.4–0.6 µs with an istringstream each.
Item unpack(const std::string& s) {
  Item i;
  i.type = s[0];
  const char* at = s.data() + 2;
  const char* const end = s.data() + s.size();
  auto number = [&](auto& n) { at = std::from_chars(at, end, n).ptr + 1; };  // and its space
  std::size_t rel_size = 0, target_size = 0;
  number(i.mode);
  number(i.mtime_ns);
  number(i.size);
  number(rel_size);
  number(target_size);
  const std::size_t names = static_cast<std::size_t>(at - s.data());
  i.rel = s.substr(names, rel_size);
  i.target = s.substr(names + rel_size, target_size);
  return i;
}

// The whole seconds of a time in ns, rounded down as a timespec's tv_sec is: -1.5 s is -2 s and
// 500 ms (truncated, -1 s and -500 ms, it would be no valid timespec and never equal a stat's).
int64_t seconds_of(int64_t ns) {
  constexpr int64_t kSecond = 1000000000LL;
  return ns / kSecond - (ns % kSecond < 0 ? 1 : 0);
}

timespec to_ts(int64_t ns) {
  const int64_t s = seconds_of(ns);
  return timespec{static_cast<time_t>(s), static_cast<long>(ns - s * 1000000000LL)};
}

Item item_of(const struct stat& st, std::string rel) {
  return Item{S_ISDIR(st.st_mode)   ? 'd'
              : S_ISLNK(st.st_mode) ? 'l'
                                    : 'f',
              static_cast<uint32_t>(st.st_mode & 07777),
              mtime_ns_of(st),
              S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0,
              std::move(rel),
              ""};
}

// Whether the absolute, normal `path` is `dir` or lies below it.
bool at_or_below(const std::string& path, const std::string& dir) {
  return path == dir || dir == "/" || path.rfind(dir + "/", 0) == 0;
}

// Makes the directory `path` of DST for the copy to write in: made 0700 (the source's mode comes
// at the end), or, where an earlier run left it, given back its owner's rwx until then (a source
// directory of mode 0555 made it read-only, and a rerun must still put files in it). A symlink
// at the name (the source had one there before) is replaced: the copy never writes through one,
// out of DST. `root` (DST itself, named by the caller) may be a symlink to a directory. "" or the
// failure.
std::string make_dir(const std::string& path, bool root = false) {
  if (::mkdir(path.c_str(), 0700) == 0) return "";
  if (errno != EEXIST) return errno_text(path);
  struct stat st;
  if ((root ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st)) != 0) return errno_text(path);
  if (S_ISLNK(st.st_mode)) {
    if (::unlink(path.c_str()) != 0 || ::mkdir(path.c_str(), 0700) != 0) return errno_text(path);
    return "";
  }
  if (!S_ISDIR(st.st_mode)) return path + " exists and is not a directory";
  if ((st.st_mode & S_IRWXU) != S_IRWXU && ::chmod(path.c_str(), (st.st_mode & 07777) | S_IRWXU))
    return errno_text(path);
  return "";
}

// Lists SRC/REL (a directory): appends its entries to `found` (devices, sockets and fifos are not
// copied) and its subdirectories to `subdirs`, and makes DST/REL/SUB for each. What cannot be
// listed (the directory, an entry, a symlink's target) or made in DST goes to `failed`, and the
// rest of the tree is copied all the same; a directory that failed is not gone into.
void list_dir(const std::string& src, const std::string& dst, const std::string& rel,
              std::vector<Item>& found, std::vector<std::string>& subdirs,
              std::vector<std::string>& failed) {
  const std::string dir = src + rel;
  const std::string shown = rel.empty() ? "/" : rel;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    failed.push_back(shown + ": " + errno_text("list " + dir));
    return;
  }
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (!e) {
      if (errno != 0) failed.push_back(shown + ": " + errno_text("list " + dir));
      break;
    }
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string child = rel + "/" + name;
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
      failed.push_back(child + ": " + errno_text(src + child));
      continue;
    }
    if (!S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISREG(st.st_mode)) continue;
    Item i = item_of(st, child);
    if (i.type == 'l') {
      std::error_code ec;
      i.target = fs::read_symlink(src + child, ec).string();
      if (ec) {
        failed.push_back(child + ": " + src + child + ": " + ec.message());
        continue;
      }
    } else if (i.type == 'd') {
      if (std::string err = make_dir(dst + child); !err.empty()) {
        failed.push_back(child + ": " + err);
        continue;
      }
      subdirs.push_back(child);
    }
    found.push_back(std::move(i));
  }
  ::closedir(d);
}

// Where a file's copy is made before it is whole: DST/.NAME.skein-partial beside it, with a large
// file's chunk record in DST/.NAME.skein-partial.chunks. Where the tree being copied holds a file
// of either name itself, which the copy would overwrite, .NAME.skein-partial.N (and its .chunks)
// for the first N it holds neither of: the same in every run of the same tree, so that a rerun
// finds what an earlier one left.
class PartialNames {
 public:
  PartialNames(std::string dst, const std::vector<Item>& items) : dst_(std::move(dst)) {
    for (const Item& i : items) tree_.insert(i.rel);
  }
  std::string part(const std::string& rel) const {
    const fs::path p(dst_ + rel);
    const std::string base = (p.parent_path() / partial_name_of(p.filename().string())).string();
    for (int n = 0;; ++n) {
      std::string c = n ? base + "." + std::to_string(n) : base;
      if (rel.empty() || c.size() <= dst_.size()) return c;  // the root itself: nothing beside it
      const std::string below = c.substr(dst_.size());
      if (!tree_.count(below) && !tree_.count(below + kChunks)) return c;
    }
  }
  std::string record(const std::string& rel) const { return part(rel) + kChunks; }
  std::string name(const std::string& rel) const { return fs::path(part(rel)).filename(); }

 private:
  std::string dst_;
  std::unordered_set<std::string> tree_;  // the items' paths below SRC (and DST)
};

// Same version: size, and mtime to the second (a mount's servers may keep seconds only).
bool complete(const std::string& path, const Item& i) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == i.size &&
         st.st_mtim.tv_sec == seconds_of(i.mtime_ns) && (st.st_mode & 07777) == i.mode;
}

// Makes `path` a new, empty regular file for writing (mode `mode`, as far as the umask lets it).
// Whatever is found at the name is removed first: a partial an earlier run left, perhaps
// read-only, or a symlink the source tree once had at that name and the copy brought to DST,
// which an open of the name would write through, out of DST. The descriptor, or -1 with `error`;
// `replaced` (if given) says whether something was found at the name.
int create_new(const std::string& path, mode_t mode, std::string& error, bool* replaced = nullptr) {
  const bool removed = ::unlink(path.c_str()) == 0;
  if (replaced) *replaced = removed;
  if (!removed && errno != ENOENT) {
    error = errno_text(path);
    return -1;
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) error = errno_text(path);
  return fd;
}

// The whole of a regular file that open_regular opens (a large file's chunk record); false with
// `error` set when it cannot be read.
bool read_whole(const std::string& path, std::string& body, std::string& error) {
  body.clear();
  const int fd = open_regular(path, O_RDONLY, error);
  if (fd < 0) return false;
  char b[4096];
  for (;;) {
    const ssize_t r = ::read(fd, b, sizeof b);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) error = errno_text(path);
    if (r <= 0) break;
    body.append(b, std::size_t(r));
  }
  ::close(fd);
  return error.empty();
}

// Writes all `n` bytes of `data` to `out` at `off`; "" or the failure ("write WHAT: ...").
std::string write_at(int out, const char* data, uint64_t n, uint64_t off, const std::string& what) {
  for (uint64_t w = 0; w < n;) {
    const ssize_t k = ::pwrite(out, data + w, std::size_t(n - w), static_cast<off_t>(off + w));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return errno_text("write " + what);
    w += static_cast<uint64_t>(k);
  }
  return "";
}

// Copies [off, off+len) of `in` to `out`; "" or the failure.
std::string copy_range(int in, int out, uint64_t off, uint64_t len, std::string& buf,
                       const std::string& what) {
  buf.resize(1 << 20);
  while (len > 0) {
    const std::size_t n = std::size_t(std::min<uint64_t>(buf.size(), len));
    ssize_t r = ::pread(in, buf.data(), n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_text("read " + what);
    if (r == 0) return what + " changed (shorter than when listed)";
    if (std::string e = write_at(out, buf.data(), static_cast<uint64_t>(r), off, what); !e.empty())
      return e;
    off += static_cast<uint64_t>(r);
    len -= static_cast<uint64_t>(r);
  }
  return "";
}

// A shared counter on rank 0 of `comm`, for handing out work, and tallies of the work done
// there (bytes, files, chunks), which every rank adds to and rank 0 reads for its progress.
class Counter {
 public:
  static constexpr int kTallies = std::tuple_size_v<Tallies>;
  explicit Counter(MPI_Comm comm) {
    MPI_Win_allocate((1 + kTallies) * sizeof(long long), sizeof(long long), MPI_INFO_NULL, comm,
                     &base_, &win_);
    std::fill(base_, base_ + 1 + kTallies, 0LL);
    MPI_Barrier(comm);
    MPI_Win_lock_all(0, win_);
  }
  ~Counter() {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  long long next() {
    long long one = 1, got = 0;
    MPI_Fetch_and_op(&one, &got, MPI_LONG_LONG, 0, 0, MPI_SUM, win_);
    MPI_Win_flush(0, win_);
    return got;
  }
  void add(const Tallies& done) {
    MPI_Accumulate(done.data(), kTallies, MPI_LONG_LONG, 0, 1, kTallies, MPI_LONG_LONG, MPI_SUM,
                   win_);
    MPI_Win_flush(0, win_);
  }
  Tallies tallies() {
    Tallies got{};
    MPI_Get_accumulate(nullptr, 0, MPI_LONG_LONG, got.data(), kTallies, MPI_LONG_LONG, 0, 1,
                       kTallies, MPI_LONG_LONG, MPI_NO_OP, win_);
    MPI_Win_flush(0, win_);
    return got;
  }

 private:
  long long* base_ = nullptr;
  MPI_Win win_;
};

// The first line of DST/.NAME.skein-partial.chunks: the source's version and the chunk size the
// record is for (a rerun resumes only from a record of the same).
std::string record_header(const Item& i, uint64_t chunk) {
  return std::to_string(i.size) + " " + std::to_string(i.mtime_ns) + " " + std::to_string(chunk) +
         "\n";
}

// A piece of work: a chunk of a large file, or a few whole small files (one claim of the shared
// counter for several files: on a busy node each claim costs an MPI round trip).
struct Unit {
  std::vector<std::size_t> items;  // one for a chunk
  uint64_t chunk = 0;              // for chunked files; whole files: 0
  bool whole = true;
};

// Files of a unit of whole files: enough that the counter is not claimed per file, few enough
// that every rank gets several units to balance with (at most kUnitFiles files or 16 MiB).
std::size_t files_per_unit(std::size_t files, int ranks) {
  return std::clamp<std::size_t>(files / (static_cast<std::size_t>(ranks) * 8), 1, kUnitFiles);
}

// `bytes` random bytes, in hex.
std::string random_hex(std::size_t bytes) {
  std::random_device rd;
  constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xffu;
    out += kDigits[v >> 4];
    out += kDigits[v & 15u];
  }
  return out;
}

}  // namespace

int stage(MPI_Comm comm, const std::string& src_arg, const std::string& dst_arg, uint64_t chunk,
          bool verify, const std::string& control_dir, double progress_s, std::string& summary,
          std::string& failures) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::string src = fs::absolute(src_arg).lexically_normal().string();
  std::string dst = fs::absolute(dst_arg).lexically_normal().string();
  while (src.size() > 1 && src.back() == '/') src.pop_back();
  while (dst.size() > 1 && dst.back() == '/') dst.pop_back();
  // SRC named by a symlink is the directory it leads to, as `rsync SRC/ DST` takes it: the tree
  // is listed and its mount found there. (One that leads nowhere is said below.)
  if (struct stat st; ::lstat(src.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::error_code ec;
    if (auto to = fs::canonical(src, ec); !ec) src = to.string();
  }
  // On one machine that simulates several nodes (SKEIN_MPI_NODE_MAP, docs/mpi.md), a rank copies
  // through its node's mount: SRC or DST below a skein mount is taken to the same place below it.
  Node node;
  {
    std::string error;
    if (!make_node(comm, node, error)) {
      failures = error + "\n";
      return 1;
    }
    std::string mount = node.mount_override;
    while (mount.size() > 1 && mount.back() == '/') mount.pop_back();
    for (std::string* p : {&src, &dst}) {
      const std::string on = mount.empty() ? "" : skein_mount_of(*p);
      if (!on.empty()) *p = mount + p->substr(on.size());
    }
  }
  // The copy's collective calls and windows on the node's duplicate of the caller's
  // communicator, apart from whatever the application does on it.
  comm = node.world;
  const auto start = std::chrono::steady_clock::now();

  // The tree's list goes to every rank in one message, which MPI bounds at 2 GiB.
  auto too_many = [&] {
    failures = src +
               ": too many entries to copy at once (their list is over 2 GiB); copy its "
               "subdirectories one by one\n";
    return 1;
  };

  // Rank 0 checks SRC and DST and makes DST.
  std::string mine;  // this rank's failure
  // Every rank's failure agreed on: true on every rank, with `failures` set, when any failed.
  auto failed_somewhere = [&] {
    const std::string failure = agree(comm, mine);
    if (failure.empty()) return false;
    failures = failure + "\n";
    return true;
  };
  std::vector<Item> found;          // what this rank listed (rank 0: SRC itself first)
  std::vector<std::string> failed;  // "PATH: reason", what this rank could not list or copy
  if (rank == 0) {
    struct stat st;
    // DST and SRC also compared where their existing parts lead: through a symlink DST may be
    // inside SRC.
    std::error_code ec, ec2;
    const std::string real_dst = fs::weakly_canonical(dst, ec).string();
    const std::string real_src = fs::weakly_canonical(src, ec2).string();
    const std::string parent = fs::path(dst).parent_path().string();
    struct stat parent_st;
    if (::stat(src.c_str(), &st) != 0)
      mine = errno_text(src);
    else if (!S_ISDIR(st.st_mode))
      mine = src + " is not a directory";
    else if (at_or_below(dst, src) || (!ec && !ec2 && at_or_below(real_dst, real_src)))
      mine = "DST " + dst + " is inside SRC " + src;
    else if (::stat(parent.c_str(), &parent_st) != 0)
      mine = "cannot make DST " + dst + ": " + errno_text(parent);
    else if (auto made = make_dir(dst, /*root=*/true); !made.empty())
      mine = made;
    else
      found.push_back(item_of(st, ""));
  }
  // A control directory named on the command line must hold each node's mount's socket, as
  // bcast's must: the copy would otherwise go the plain way without a word.
  if (!control_dir.empty())
    for (const std::string* p : {&src, &dst})
      if (const std::string on = skein_mount_of(*p); mine.empty() && !on.empty())
        mine = Mount{on, control_dir}.command("whoami");
  // DST must be one directory for every rank: ranks on other nodes write into it, and a DST of
  // each node's own (a node-local $TMPDIR) would get a part of the tree on each node, and the run
  // would say it copied the whole. Rank 0 leaves a file of a random name in DST; every rank must
  // find it there.
  std::string token = rank == 0 ? random_hex(16) : std::string(32, '\0');  // rank 0's, below
  auto probe = [&] { return dst + "/.skein-mpi-same-dir-" + token; };
  if (rank == 0 && mine.empty()) {
    const int fd =
        ::open(probe().c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) mine = errno_text("cannot make a file in DST " + dst);
    if (fd >= 0) ::close(fd);
  }
  if (failed_somewhere()) {
    if (rank == 0) ::unlink(probe().c_str());
    return 1;
  }
  MPI_Bcast(token.data(), static_cast<int>(token.size()), MPI_CHAR, 0, comm);
  if (struct stat st; rank != 0 && ::lstat(probe().c_str(), &st) != 0)
    mine = "DST " + dst + " is not the same directory on every rank (rank " + std::to_string(rank) +
           " does not see the file rank 0 made there: a directory of each node's own?); "
           "stage into a directory every node shares, or run a stage on each node alone";
  const bool not_shared = failed_somewhere();
  if (rank == 0) ::unlink(probe().c_str());
  if (not_shared) return 1;

  // Every rank lists directories, one level of the tree at a time: the directories of a level
  // are handed out by a shared counter, and the subdirectories found make the next level. The
  // lister of a directory makes its subdirectories in DST.
  for (std::vector<std::string> level{""}; !level.empty();) {
    std::vector<std::string> next;
    {
      Counter counter(comm);
      for (long long k; (k = counter.next()) < (long long)level.size();)
        list_dir(src, dst, level[std::size_t(k)], found, next, failed);
    }
    if (!allgather_strings(comm, next, level)) return too_many();
  }

  // Every rank gets every item, in rank order; this rank's own start at `first`.
  std::vector<std::string> packed;
  for (auto& i : found) packed.push_back(pack(i));
  std::vector<Item> items;
  if (!allgather_strings(comm, packed, packed)) return too_many();
  for (auto& p : packed) items.push_back(unpack(p));
  packed.clear();
  const PartialNames partials(dst, items);
  long long own = static_cast<long long>(found.size()), before = 0;
  MPI_Exscan(&own, &before, 1, MPI_LONG_LONG, MPI_SUM, comm);
  const std::size_t first = rank == 0 ? 0 : std::size_t(before);
  found.clear();

  // Every rank makes the symlinks it listed and finds which of its files are done, which are
  // copied whole, and which in chunks.
  std::vector<std::string> chunk_units, whole_own;  // "c ITEM CHUNK"; item numbers
  uint64_t skipped[2] = {0, 0};                     // files, bytes
  unsigned long long links_made = 0;  // counted with the files finished, as a rerun counts them
  for (std::size_t k = first; k < first + std::size_t(own); ++k) {
    const Item& i = items[k];
    const std::string d = dst + i.rel;
    if (i.type == 'd') continue;
    if (i.type == 'l') {
      std::error_code ec;
      if (fs::is_symlink(fs::symlink_status(d, ec)) && fs::read_symlink(d, ec) == i.target) {
        ++skipped[0];
      } else {
        fs::remove(d, ec);
        if (::symlink(i.target.c_str(), d.c_str()) != 0) {
          failed.push_back(i.rel + ": " + errno_text(d));
          continue;
        }
        ++links_made;
      }
      timespec t[2] = {to_ts(i.mtime_ns), to_ts(i.mtime_ns)};
      ::utimensat(AT_FDCWD, d.c_str(), t, AT_SYMLINK_NOFOLLOW);
    } else if (complete(d, i)) {
      ++skipped[0];
      skipped[1] += i.size;
    } else if (i.size <= chunk) {
      whole_own.push_back(std::to_string(k));
    } else {
      // A large file: chunks written in place into DST/.NAME.skein-partial, each recorded in
      // DST/.NAME.skein-partial.chunks (a header naming the source's version, then one byte
      // per chunk) once written; a rerun copies the chunks not recorded.
      const uint64_t n = (i.size + chunk - 1) / chunk;
      const std::string part = partials.part(i.rel);
      const std::string rec = partials.record(i.rel);
      const std::string header = record_header(i, chunk);
      std::string old, unread;
      read_whole(rec, old, unread);  // none, or one that cannot be read: the file starts afresh
      struct stat pst;
      const bool resume = old.size() == header.size() + n && old.rfind(header, 0) == 0 &&
                          ::lstat(part.c_str(), &pst) == 0 && S_ISREG(pst.st_mode) &&
                          static_cast<uint64_t>(pst.st_size) == i.size;
      if (!resume) {
        // The old record goes before the copy is made anew: a new copy (all zeros) beside an old
        // record with its chunks marked done, as a run killed between the two would leave them,
        // would be taken by the next run for a finished file.
        std::string err;
        if (::unlink(rec.c_str()) != 0 && errno != ENOENT) err = errno_text(rec);
        if (err.empty()) {
          const int pf = create_new(part, 0600, err);
          if (pf >= 0 && ::ftruncate(pf, static_cast<off_t>(i.size)) != 0) err = errno_text(part);
          if (pf >= 0 && ::close(pf) != 0 && err.empty()) err = errno_text(part);
        }
        old = header + std::string(n, '0');
        if (err.empty()) {
          const int rf = create_new(rec, 0600, err);
          if (rf >= 0) err = write_at(rf, old.data(), old.size(), 0, rec);
          // On a skein mount a write's error may come at close.
          if (rf >= 0 && ::close(rf) != 0 && err.empty()) err = errno_text(rec);
        }
        if (!err.empty()) {
          // Failed, with no chunk of it copied; the rest of the tree is copied all the same.
          // Without a record rank 0 does not finish it.
          ::unlink(rec.c_str());
          failed.push_back(i.rel + ": " + err);
          continue;
        }
      }
      for (uint64_t c = 0; c < n; ++c) {
        if (old[header.size() + c] == '1') {
          skipped[1] += std::min<uint64_t>(chunk, i.size - c * chunk);
        } else {
          chunk_units.push_back("c " + std::to_string(k) + " " + std::to_string(c));
        }
      }
    }
  }
  uint64_t skipped_total[2] = {0, 0};
  MPI_Reduce(skipped, skipped_total, 2, MPI_UINT64_T, MPI_SUM, 0, comm);
  const uint64_t skipped_files = skipped_total[0], skipped_bytes = skipped_total[1];

  // The pieces, the same on every rank: the chunks, then the whole files a few to a piece.
  std::vector<std::string> units_packed;
  std::vector<std::size_t> whole_files;
  if (!allgather_strings(comm, chunk_units, units_packed) ||
      !allgather_strings(comm, whole_own, whole_own))
    return too_many();
  for (auto& w : whole_own) whole_files.push_back(std::stoull(w));
  const std::size_t per_unit = files_per_unit(whole_files.size(), size);
  for (std::size_t at = 0; at < whole_files.size();) {
    std::string unit = "w";
    uint64_t bytes = 0;
    for (std::size_t n = 0;
         at < whole_files.size() && n < per_unit && (n == 0 || bytes < (16u << 20)); ++n) {
      unit += " " + std::to_string(whole_files[at]);
      bytes += items[whole_files[at++]].size;
    }
    units_packed.push_back(std::move(unit));
  }
  std::vector<Unit> units;
  for (auto& u : units_packed) {
    std::istringstream in(u);
    char kind = 'w';
    in >> kind;
    Unit unit;
    unit.whole = kind == 'w';
    if (unit.whole) {
      for (std::size_t k; in >> k;) unit.items.push_back(k);
    } else {
      std::size_t k = 0;
      in >> k >> unit.chunk;
      unit.items.push_back(k);
    }
    units.push_back(std::move(unit));
  }

  test_hold(rank);  // the tree listed and the pieces made, none copied yet

  // Every rank takes units off the shared counter until none are left.
  unsigned long long moved = 0, files_done = 0, fetched_files = 0, stored_files = 0,
                     read_past_cache = 0;
  {
    Counter counter(comm);
    std::string buf;
    unsigned long long tallied[2] = {0, 0};  // moved and files_done as last added to the tallies
    std::optional<ProgressReport> report;
    if (rank == 0) {
      uint64_t bytes = 0, files = 0, chunks = 0;
      for (const Unit& unit : units) {
        if (!unit.whole) {
          const uint64_t size = items[unit.items[0]].size;
          bytes += std::min<uint64_t>(chunk, size - unit.chunk * chunk);
          ++chunks;
          continue;
        }
        for (std::size_t k : unit.items) bytes += items[k].size;
        files += unit.items.size();
      }
      report.emplace(progress_s,
                     Tallies{static_cast<long long>(bytes), static_cast<long long>(files),
                             static_cast<long long>(chunks)});
    }
    // A source file read the plain way, checked once its bytes are copied: rewritten since the
    // listing (another size or mtime), the copy may mix two versions, and is not done.
    auto still_as_listed = [](int in, const Item& i) -> std::string {
      struct stat now;
      if (::fstat(in, &now) != 0) return errno_text("stat " + i.rel);
      if (static_cast<uint64_t>(now.st_size) != i.size || mtime_ns_of(now) != i.mtime_ns)
        return "changed while it was copied (size or mtime not as listed); run again";
      return "";
    };
    // One whole file: copied to DST/.NAME.skein-partial, renamed once complete. Its bytes come
    // from `data` when given (fetched already, i.size of them), else from the source.
    auto copy_whole = [&](const Item& i, const char* data = nullptr) {
      const std::string s = src + i.rel, d = dst + i.rel;
      std::string err;
      int in = -1;
      if (!data) {
        in = open_regular(s, O_RDONLY, err);
        if (in < 0) return err;
      }
      const std::string part = partials.part(i.rel);
      // Made with its permissions, as far as the umask lets them (and writable by its owner
      // meanwhile), so that most files need no chmod: the mode is looked at once the times are
      // set, whose answer brings it (on a skein mount: no call of its own), and changed only
      // where it differs: a umask, set-id bits (which a write may clear).
      bool replaced = false;
      const int out = create_new(part, (i.mode & 0777) | S_IWUSR, err, &replaced);
      // A partial found there may be a chunked copy that a run with a smaller chunk size left,
      // whose record this copy would leave behind in DST.
      if (replaced) ::unlink(partials.record(i.rel).c_str());
      if (err.empty())
        err = data ? write_at(out, data, i.size, 0, part)
                   : copy_range(in, out, 0, i.size, buf, i.rel);
      if (err.empty() && in >= 0) err = still_as_listed(in, i);
      timespec t[2] = {to_ts(i.mtime_ns), to_ts(i.mtime_ns)};
      struct stat st;
      if (err.empty() && (::futimens(out, t) != 0 || ::fstat(out, &st) != 0 ||
                          ((st.st_mode & 07777) != i.mode && ::fchmod(out, i.mode) != 0)))
        err = errno_text(part);
      if (out >= 0 && ::close(out) != 0 && err.empty()) err = errno_text(part);
      if (err.empty() && ::rename(part.c_str(), d.c_str()) != 0) err = errno_text(d);
      if (err.empty()) {
        moved += i.size;
        ++files_done;
      } else if (out >= 0) {
        ::unlink(part.c_str());
      }
      if (in >= 0) ::close(in);
      return err;
    };
    // Small files on a skein mount: a unit's files in one `fetch-files` command to the mount (one
    // gateway call for all of them) instead of a FUSE open, read and release and a gateway call
    // each. A file the command does not give as it was listed (changed, unreadable, gone) is
    // copied the plain way, which reports what is wrong with it; a mount that cannot run the
    // command (an older skein-mount) gets plain copies from then on.
    const Mount mount{skein_mount_of(src), control_dir};
    Buffer fetch_buf;
    // Whether the buffer serves mount commands (fetch-files, fill read). Any command that fails
    // ends that for the rest of the run: one given up on (its answer late) may still be writing
    // into the buffer, over what a later command put there.
    bool fetching = !mount.dir.empty() && fetch_buf.open(kFetchBuffer, mount).empty();
    // Directories this rank has listed through the mount (see fetch_whole).
    std::set<std::string> listed;
    // Copies the unit's files it fetched; returns those left for plain copies. The mount reads
    // only names it has looked up: where another node's rank listed a directory, this node's
    // mount answers its files ENOENT, and the rank lists the directory through it and asks again
    // (once: `may_list`).
    std::function<std::vector<std::size_t>(const std::vector<std::size_t>&, bool)> fetch_whole =
        [&](const std::vector<std::size_t>& unit_items, bool may_list) {
          std::vector<std::size_t> rest, asked, unknown;
          std::string list;
          uint64_t max_bytes = 1;
          for (std::size_t k : unit_items) {
            const Item& i = items[k];
            if (!fetching || i.size > kFetchMaxFile) {
              rest.push_back(k);
              continue;
            }
            list += namespace_path(src + i.rel, mount.dir);
            list.push_back('\0');
            asked.push_back(k);
            max_bytes = std::max<uint64_t>(max_bytes, i.size);
          }
          if (asked.empty()) return rest;
          std::string answer, failure = "more than the buffer holds";
          if (list.size() + asked.size() * max_bytes <= fetch_buf.size) {
            std::memcpy(fetch_buf.data, list.data(), list.size());
            failure = mount.command(
                "fetch-files " + std::to_string(max_bytes) + " " + std::to_string(list.size()),
                &answer, fetch_buf.fd, fetch_buf.size);
            if (!failure.empty()) fetching = false;
          }
          if (!failure.empty()) {
            rest.insert(rest.end(), asked.begin(), asked.end());
            return rest;
          }
          std::istringstream in(answer);
          std::string ok;
          std::size_t n = 0;
          in >> ok >> n;
          for (std::size_t a = 0; a < asked.size(); ++a) {
            const Item& i = items[asked[a]];
            int error = -1;
            uint64_t offset = 0, length = 0;
            uint32_t mode = 0;
            int64_t mtime_ns = 0;
            if (ok == "ok" && n == asked.size())
              in >> error >> offset >> length >> mode >> mtime_ns;
            // As listed: the same size, mtime (to the second) and permissions.
            if (in && error == ENOENT && may_list) {
              unknown.push_back(asked[a]);
              continue;
            }
            if (!in || error != 0 || length != i.size || offset + length > fetch_buf.size ||
                seconds_of(mtime_ns) != seconds_of(i.mtime_ns) || (mode & 07777) != i.mode) {
              rest.push_back(asked[a]);
              continue;
            }
            std::string err = copy_whole(i, fetch_buf.data + offset);
            if (err.empty()) {
              ++fetched_files;
            } else {
              failed.push_back(i.rel + ": " + err);
            }
          }
          if (!unknown.empty()) {
            for (std::size_t k : unknown) {
              const std::string dir = src + items[k].rel.substr(0, items[k].rel.rfind('/'));
              if (listed.insert(dir).second) learn_names(dir);
            }
            const std::vector<std::size_t> left = fetch_whole(unknown, false);
            rest.insert(rest.end(), left.begin(), left.end());
          }
          return rest;
        };
    // Small files to a skein mount: a unit's files in one `store-files` command to the mount (one
    // gateway call for all of them, which makes each under its partial name, with its mode and
    // mtime, and renames it into place) instead of a FUSE create, times, close and rename, each a
    // gateway call. Each file is read from its source into the buffer first. One that does not
    // read as it was listed, or that the mount does not make (it may not, or the gateway failed
    // it), is left for the plain way, which reports what is wrong; a mount that cannot run the
    // command (an older skein-mount, or a gateway without WriteFiles) gets plain copies from then
    // on.
    const Mount dst_mount{skein_mount_of(dst), control_dir};
    Buffer store_buf;
    bool storing = !dst_mount.dir.empty() && store_buf.open(kStoreBuffer, dst_mount).empty();
    auto store_whole = [&](const std::vector<std::size_t>& unit_items) {
      std::vector<std::size_t> rest, asked;
      std::string list, contents;
      for (std::size_t k : unit_items) {
        const Item& i = items[k];
        if (!storing || i.size > kFetchMaxFile ||
            list.size() + kStoreEntry + contents.size() + i.size > store_buf.size) {
          rest.push_back(k);
          continue;
        }
        // Read as listed: the same size and mtime, and nothing more at its end.
        const std::string s = src + i.rel;
        std::string not_regular;  // the plain copy says what is wrong
        struct stat st;
        const int in = open_regular(s, O_RDONLY, not_regular, &st);
        bool as_listed =
            in >= 0 && static_cast<uint64_t>(st.st_size) == i.size && mtime_ns_of(st) == i.mtime_ns;
        const std::size_t from = contents.size();
        contents.resize(from + i.size + 1);
        for (uint64_t got = 0; as_listed;) {
          const ssize_t r = ::read(in, contents.data() + from + got, i.size + 1 - got);
          if (r < 0 && errno == EINTR) continue;
          if (r <= 0) {
            as_listed = r == 0 && got == i.size;
            break;
          }
          got += static_cast<uint64_t>(r);
          if (got > i.size) as_listed = false;
        }
        // Rewritten in place while it was read (the same size): the bytes may mix two versions.
        if (as_listed) as_listed = still_as_listed(in, i).empty();
        if (in >= 0) ::close(in);
        contents.resize(as_listed ? from + i.size : from);
        if (!as_listed) {
          rest.push_back(k);
          continue;
        }
        const std::string path = namespace_path(dst + i.rel, dst_mount.dir);
        char head[64];
        std::snprintf(head, sizeof head, "%o %lld %llu ", i.mode, (long long)i.mtime_ns,
                      (unsigned long long)i.size);
        list += head + path;
        list.push_back('\0');
        list += partials.name(i.rel);
        list.push_back('\0');
        asked.push_back(k);
      }
      if (asked.empty()) return rest;
      std::memcpy(store_buf.data, list.data(), list.size());
      std::memcpy(store_buf.data + list.size(), contents.data(), contents.size());
      std::string answer;
      const std::string failure = dst_mount.command("store-files " + std::to_string(list.size()),
                                                    &answer, store_buf.fd, contents.size());
      std::istringstream in(answer);
      std::string ok;
      std::size_t n = 0;
      if (failure.empty()) in >> ok >> n;
      if (!failure.empty() || ok != "ok" || n != asked.size()) {
        storing = false;
        rest.insert(rest.end(), asked.begin(), asked.end());
        return rest;
      }
      for (std::size_t k : asked) {
        int error = -1;
        if (!(in >> error) || error != 0) {
          rest.push_back(k);
          continue;
        }
        moved += items[k].size;
        ++files_done;
        ++stored_files;
      }
      return rest;
    };
    // A range of a large file on a skein mount, read by the mount from the gateway straight into
    // the buffer (`fill read`, kReadRange at a time) and written to `out` from there: no
    // FUSE reads, and no copy in the mount's page cache of bytes this rank reads once. `in` is
    // the file open through the mount (the command reads only a file held open there, at the
    // version that open saw). Returns the bytes copied; `err` is set only for a write failure,
    // and what is not copied is left for the plain way, which reports what is wrong.
    auto read_range = [&](const Item& i, int in, int out, uint64_t off, uint64_t len,
                          std::string& err) -> uint64_t {
      struct stat st;
      if (!fetching || ::fstat(in, &st) != 0 || static_cast<uint64_t>(st.st_size) != i.size)
        return 0;
      const std::string path = namespace_path(src + i.rel, mount.dir);
      uint64_t done = 0;
      while (done < len) {
        const uint64_t n = std::min<uint64_t>(kReadRange, len - done);
        std::string e =
            mount.command(fill_command("read", mtime_ns_of(st), i.size, off + done, n, 0, path),
                          nullptr, fetch_buf.fd, n);
        if (!e.empty()) {
          // A mount that cannot or will not (an older skein-mount, a socket this user may not
          // use), or did not answer in time, gets plain copies from now on.
          fetching = false;
          break;
        }
        err = write_at(out, fetch_buf.data, n, off + done, i.rel);
        if (!err.empty()) return done;
        done += n;
      }
      return done;
    };
    // One chunk of a large file: written in place into DST/.NAME.skein-partial, then recorded.
    auto copy_chunk = [&](const Item& i, uint64_t c) {
      const std::string s = src + i.rel;
      std::string err;
      const int in = open_regular(s, O_RDONLY, err);
      if (in < 0) return err;
      const std::string part = partials.part(i.rel);
      const std::string rec = partials.record(i.rel);
      const uint64_t off = c * chunk;
      const uint64_t len = std::min<uint64_t>(chunk, i.size - off);
      const int out = open_regular(part, O_WRONLY, err);
      uint64_t read = 0;
      if (err.empty()) read = read_range(i, in, out, off, len, err);
      if (err.empty()) err = copy_range(in, out, off + read, len - read, buf, i.rel);
      if (err.empty()) err = still_as_listed(in, i);
      if (err.empty() && ::fdatasync(out) != 0) err = errno_text(part);
      if (out >= 0) ::close(out);
      if (err.empty()) {
        const std::string header = record_header(i, chunk);
        const int r = open_regular(rec, O_WRONLY, err);
        if (r >= 0 && ::pwrite(r, "1", 1, static_cast<off_t>(header.size() + c)) != 1)
          err = errno_text(rec);
        // On a skein mount a write's error may come at close.
        if (r >= 0 && ::close(r) != 0 && err.empty()) err = errno_text(rec);
      }
      if (err.empty()) {
        moved += len;
        read_past_cache += read;
      }
      ::close(in);
      return err;
    };
    for (long long u; (u = counter.next()) < (long long)units.size();) {
      const Unit& unit = units[std::size_t(u)];
      const std::vector<std::size_t> plain =
          unit.whole ? store_whole(fetch_whole(unit.items, true)) : unit.items;
      for (std::size_t k : plain) {
        std::string err = unit.whole ? copy_whole(items[k]) : copy_chunk(items[k], unit.chunk);
        if (!err.empty()) failed.push_back(items[k].rel + ": " + err);
      }
      // What this piece copied, to the tallies (a chunk counts once it is recorded).
      counter.add({static_cast<long long>(moved - tallied[0]),
                   static_cast<long long>(files_done - tallied[1]),
                   !unit.whole && moved > tallied[0] ? 1LL : 0LL});
      tallied[0] = moved;
      tallied[1] = files_done;
      if (report && report->due()) report->show(counter.tallies());
    }
    // Every rank done: rank 0 goes on reporting meanwhile; the others wait without spinning (the
    // CPUs are the ranks' still copying).
    MPI_Request all_done;
    MPI_Ibarrier(comm, &all_done);
    if (report) {
      for (int done = 0;;) {
        MPI_Test(&all_done, &done, MPI_STATUS_IGNORE);
        if (done) break;
        if (report->due()) report->show(counter.tallies());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      report->show(counter.tallies(), true);
      report.reset();
    } else {
      wait_quietly(all_done);
    }
  }

  // Rank 0 finishes the large files whose every chunk is recorded, and the directories.
  if (rank == 0) {
    for (auto& i : items) {
      if (i.type != 'f' || i.size <= chunk) continue;
      const std::string part = partials.part(i.rel);
      const std::string rec = partials.record(i.rel);
      // No record: complete before this run, or its rank could not start it and said why.
      if (struct stat st; ::lstat(rec.c_str(), &st) != 0 && errno == ENOENT) continue;
      std::string body, unread;
      const bool have_record = read_whole(rec, body, unread);
      const std::string d = dst + i.rel;
      if (complete(d, i)) {
        // Complete before this run (counted as skipped): a run that renamed it into place and
        // ended before it removed the record, or a copy made otherwise. What is left goes.
        ::unlink(rec.c_str());
        ::unlink(part.c_str());
        continue;
      }
      // Every chunk was to be copied in this run: the record must be this run's, whole, with
      // every chunk marked done. A chunk not marked failed (its rank said why). Never done in
      // silence, nor with a record that is not as this run made it.
      const std::string header = record_header(i, chunk);
      const std::size_t n = std::size_t((i.size + chunk - 1) / chunk);
      std::string why;
      if (!have_record)
        why = "its record cannot be read: " + unread;
      else if (body.size() != header.size() + n || body.compare(0, header.size(), header) != 0)
        why = "its record " + rec + " is damaged, or not of this version of the file";
      else if (body.find_first_not_of('1', header.size()) != std::string::npos)
        why = "a chunk of it was not copied";
      if (!why.empty()) {
        failed.push_back(i.rel + ": not finished: " + why);
        continue;
      }
      // Its mode and times set through a descriptor of the copy itself, never through a symlink
      // at its name.
      std::string err;
      struct stat st;
      const int pf = open_regular(part, O_RDONLY, err, &st);
      timespec t[2] = {to_ts(i.mtime_ns), to_ts(i.mtime_ns)};
      if (pf >= 0 && static_cast<uint64_t>(st.st_size) != i.size)
        err = part + " is not as long as the source";
      else if (pf >= 0 && (::fchmod(pf, i.mode) != 0 || ::futimens(pf, t) != 0))
        err = errno_text(part);
      if (pf >= 0 && ::close(pf) != 0 && err.empty()) err = errno_text(part);
      if (err.empty() && ::rename(part.c_str(), d.c_str()) != 0) err = errno_text(d);
      if (!err.empty()) {
        failed.push_back(i.rel + ": finishing: " + err);
        continue;
      }
      ::unlink(rec.c_str());
      ++files_done;
    }
    // Deepest first: a directory's mode may take away the search permission its subdirectories
    // need.
    std::vector<const Item*> dirs;
    for (auto& i : items)
      if (i.type == 'd') dirs.push_back(&i);
    auto depth = [](const Item* i) { return std::count(i->rel.begin(), i->rel.end(), '/'); };
    std::stable_sort(dirs.begin(), dirs.end(),
                     [&](const Item* a, const Item* b) { return depth(a) > depth(b); });
    for (const Item* i : dirs) {
      const std::string d = dst + i->rel;
      timespec t[2] = {to_ts(i->mtime_ns), to_ts(i->mtime_ns)};
      if (::chmod(d.c_str(), i->mode) != 0 || ::utimensat(AT_FDCWD, d.c_str(), t, 0) != 0)
        failed.push_back((i->rel.empty() ? "/" : i->rel) + ": " + errno_text(d));
    }
  }
  MPI_Barrier(comm);

  unsigned long long verified = 0;  // files whose copy's SHA-256 is the source's
  if (verify) {
    Counter counter(comm);
    std::vector<std::size_t> files;
    for (std::size_t k = 0; k < items.size(); ++k)
      if (items[k].type == 'f') files.push_back(k);
    for (long long u; (u = counter.next()) < (long long)files.size();) {
      const Item& i = items[files[std::size_t(u)]];
      std::string e1, e2;
      std::string a = sha256_hex(src + i.rel, e1), b = sha256_hex(dst + i.rel, e2);
      if (!e1.empty() || !e2.empty())
        failed.push_back(i.rel + ": verify: " + (e1.empty() ? e2 : e1));
      else if (a != b)
        failed.push_back(i.rel + ": verify: the copy differs from the source (sha256)");
      else
        ++verified;
    }
  }

  // Failures and totals to rank 0. A failure is a line (a newline in a name written "\n"); a
  // rank sends at most `room` bytes of them, so that the sum over the ranks stays within what an
  // int counts, and says how many more it had.
  const std::size_t room = std::max<std::size_t>(4096, (std::size_t{1} << 30) / std::size_t(size));
  std::string local;
  std::size_t left_out = 0;
  for (const auto& f : failed) {
    const std::string line = client::ControlSocket::one_line(f);
    if (local.size() + line.size() > room) {
      ++left_out;
      continue;
    }
    local += line;
  }
  if (left_out > 0)
    local += "(and " + std::to_string(left_out) + " more failures on rank " + std::to_string(rank) +
             ")\n";
  int len = static_cast<int>(local.size());
  std::vector<int> lens(static_cast<std::size_t>(size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, comm);
  std::vector<int> displs(static_cast<std::size_t>(size), 0);
  int total_len = 0;
  for (int r = 0; r < size; ++r) {
    displs[std::size_t(r)] = total_len;
    total_len += lens[std::size_t(r)];
  }
  std::string all(std::size_t(rank == 0 ? total_len : 0), '\0');
  MPI_Gatherv(local.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              comm);
  unsigned long long sums[6] = {moved,         files_done + links_made,
                                fetched_files, read_past_cache,
                                stored_files,  verified},
                     totals[6] = {0, 0, 0, 0, 0, 0};
  MPI_Reduce(sums, totals, 6, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, comm);
  int bad = failed.empty() ? 0 : 1, any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, comm);
  if (rank == 0) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char counts[384];
    std::snprintf(counts, sizeof counts,
                  "copied %llu bytes (%llu of them read past the mount's page cache), finished "
                  "%llu files (%llu of them fetched several at a time, %llu stored several at a "
                  "time); skipped %llu complete files and %llu bytes; %.2f s on %d ranks",
                  totals[0], totals[3], totals[1], totals[2], totals[4],
                  (unsigned long long)skipped_files, (unsigned long long)skipped_bytes, secs, size);
    summary = "skein-mpi: " + src + " -> " + dst + ": " + counts;
    if (verify) summary += "; the SHA-256 of " + std::to_string(totals[5]) + " files verified";
    // By path, each once: the chunks of a file that failed may fail with the same words.
    std::vector<std::string> lines;
    std::istringstream in(all);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) lines.push_back(std::move(line));
    std::sort(lines.begin(), lines.end());
    lines.erase(std::unique(lines.begin(), lines.end()), lines.end());
    failures.clear();
    for (auto& line : lines) failures += line + "\n";
  }
  return any ? 1 : 0;
}

}  // namespace skein::mpi

namespace {

// `failures` (one per line) into `error` for the C API: as many whole lines as fit in `size`
// bytes, and then a line saying how many more there were; no newline at the end. Where not even
// the first line fits with that count, as much of the first line as fits.
void put_failures(std::string failures, char* error, std::size_t size) {
  if (!error || size == 0) return;
  while (!failures.empty() && failures.back() == '\n') failures.pop_back();
  if (failures.size() < size) {
    std::memcpy(error, failures.c_str(), failures.size() + 1);
    return;
  }
  std::vector<std::string> lines;
  std::istringstream in(failures);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string kept;
  std::size_t n = 0;
  for (; n < lines.size(); ++n) {
    const std::string more = "... and " + std::to_string(lines.size() - n - 1) + " more";
    if (kept.size() + lines[n].size() + 1 + more.size() >= size) break;
    kept += lines[n] + "\n";
  }
  if (n == 0) {
    kept = lines.empty() ? failures : lines[0];
  } else {
    kept += "... and " + std::to_string(lines.size() - n) + " more";
  }
  if (kept.size() >= size) kept.resize(size - 1);
  std::memcpy(error, kept.c_str(), kept.size() + 1);
}

int stage_copy(MPI_Comm comm, const char* src, const char* dst, const skein_mpi_options* options,
               char* error, std::size_t error_size) {
  skein_mpi_options o;
  skein_mpi_options_init(&o);
  if (options) o = *options;
  const uint64_t chunk = o.chunk_size ? o.chunk_size : skein::mpi::kDefaultStageChunk;
  std::string problem = skein::mpi::mpi_problem(comm);
  if (problem.empty()) {  // every rank's arguments, agreed on: no rank goes on alone
    std::string bad;
    if (!src || !*src || !dst || !*dst) bad = "src and dst must be paths";
    if (std::string e = skein::mpi::chunk_size_problem(chunk); bad.empty() && !e.empty())
      bad = "options: chunk_size " + e;
    problem = skein::mpi::agree_on_arguments(comm, bad, {chunk, o.verify ? 1ull : 0ull});
  }
  if (!problem.empty()) {
    put_failures(problem, error, error_size);
    return 1;
  }
  std::string summary, failures;
  const int rc =
      skein::mpi::stage(comm, src, dst, chunk, o.verify != 0, o.control_dir ? o.control_dir : "",
                        o.quiet ? 0 : o.progress_s, summary, failures);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (rank == 0 && !o.quiet && !summary.empty()) {
    std::printf("%s\n", summary.c_str());
    std::fflush(stdout);
  }
  if (rc == 0) return 0;
  skein::mpi::bcast_string(comm, failures, 0);  // rank 0 holds the list of a copy's failures
  put_failures(failures, error, error_size);
  return rc;
}

}  // namespace

extern "C" int skein_mpi_stage_in(MPI_Comm comm, const char* src, const char* dst,
                                  const skein_mpi_options* options, char* error,
                                  size_t error_size) {
  return skein::mpi::without_exceptions(
      comm, [&] { return stage_copy(comm, src, dst, options, error, error_size); });
}

extern "C" int skein_mpi_stage_out(MPI_Comm comm, const char* src, const char* dst,
                                   const skein_mpi_options* options, char* error,
                                   size_t error_size) {
  return skein::mpi::without_exceptions(
      comm, [&] { return stage_copy(comm, src, dst, options, error, error_size); });
}
