// The control socket's fetch-files command without FUSE: a fake gateway's ReadFiles, a real
// sealed memfd as the caller's buffer. What it writes where, what it refuses, and the permission
// check on the caller's behalf.
#include "file_fetch.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "control_answer.hpp"

namespace skein::client {
namespace {

// A memfd of `size` bytes holding `paths` (each ending with a NUL byte) at its start, sealed
// against shrinking (`seal`) as the command requires.
struct CallerMemfd {
  int fd = -1;
  std::size_t list_length = 0;
  CallerMemfd(const std::vector<std::string>& paths, std::size_t size, bool seal = true) {
    fd = ::memfd_create("fetch-files-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    std::string list;
    for (const auto& p : paths) list += p + std::string(1, '\0');
    list_length = list.size();
    EXPECT_EQ(::pwrite(fd, list.data(), list.size(), 0), static_cast<ssize_t>(list.size()));
    if (seal) {
      EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    }
  }
  ~CallerMemfd() { ::close(fd); }
  std::string bytes(uint64_t offset, uint64_t length) const {
    std::string out(length, '\0');
    EXPECT_EQ(::pread(fd, out.data(), length, static_cast<off_t>(offset)),
              static_cast<ssize_t>(length));
    return out;
  }
};

FileAttr file_attr(uint32_t mode, uint32_t uid, uint32_t gid, uint64_t size) {
  FileAttr a;
  a.mode = mode;
  a.uid = uid;
  a.gid = gid;
  a.size = size;
  a.mtime_ns = 1700000000LL * 1000000000LL;
  return a;
}

// The gateway's files, the paths the mount knows, and the calls made. Directories are open to
// everyone (040755, root's) unless `dirs` says otherwise; those in `unknown_dirs` have no
// attributes to be had.
struct FakeMount {
  std::map<std::string, GatewayClient::WholeFile> files;
  std::map<std::string, FileAttr> dirs;
  std::set<std::string> unknown_dirs;
  std::vector<std::string> dirs_asked;
  std::set<std::string> known;
  std::vector<std::vector<std::string>> calls;
  std::vector<bool> attrs_asked;  // attrs_of_files, per call
  int call_error = 0;
  CallerBuffers buffers;

  void add(const std::string& path, const std::string& data, uint32_t mode = 0100644,
           uint32_t uid = 0, uint32_t gid = 0) {
    files[path] = {0, file_attr(mode, uid, gid, data.size()), data, true};
    known.insert(path);
  }
  FileFetchContext context() {
    return {[this](const std::string& p) { return known.count(p) > 0; },
            [this](const std::string& dir) -> std::optional<FileAttr> {
              dirs_asked.push_back(dir);
              if (unknown_dirs.count(dir)) return std::nullopt;
              auto it = dirs.find(dir);
              return it != dirs.end() ? it->second : file_attr(040755, 0, 0, 4096);
            },
            [this](const std::vector<std::string>& paths, uint32_t max_bytes,
                   bool attrs_of_files) -> Result<std::vector<GatewayClient::WholeFile>> {
              calls.push_back(paths);
              attrs_asked.push_back(attrs_of_files);
              if (call_error)
                return Result<std::vector<GatewayClient::WholeFile>>::failure(call_error);
              std::vector<GatewayClient::WholeFile> out;
              for (const auto& p : paths) {
                auto it = files.find(p);
                GatewayClient::WholeFile f;
                if (it == files.end())
                  f.error = ENOENT;
                else if (it->second.data.size() > max_bytes)
                  f.error = EFBIG;
                else
                  f = it->second;
                f.attr_of_file = f.attr_of_file && attrs_of_files;
                out.push_back(f);
              }
              return out;
            },
            buffers};
  }
};

struct Line {
  int error = -1;
  uint64_t offset = 0, length = 0;
  uint32_t mode = 0;
  int64_t mtime_ns = 0;
};

// The answer's lines, after "ok N" (which must say `n`).
std::vector<Line> lines_of(const std::string& answer, std::size_t n) {
  return answer_lines<Line>(answer, n, [](std::istream& in, Line& l) {
    in >> l.error >> l.offset >> l.length >> l.mode >> l.mtime_ns;
  });
}

const ControlPeer kRoot{1, 0, 0, true};  // root is always privileged

TEST(FileFetchTest, WritesEachFileAfterTheListAndSaysWhere) {
  FakeMount mount;
  mount.add("/a", "first file");
  mount.add("/d/b", "");
  mount.add("/d/c", std::string(3000, 'c'));
  CallerMemfd buf({"/a", "/d/b", "/d/c"}, 64 << 10);
  const std::string answer =
      fetch_files(mount.context(), "4096 " + std::to_string(buf.list_length), buf.fd, kRoot);
  auto lines = lines_of(answer, 3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].error, 0);
  EXPECT_EQ(lines[0].offset, buf.list_length);
  EXPECT_EQ(buf.bytes(lines[0].offset, lines[0].length), "first file");
  EXPECT_EQ(lines[0].mode, 0100644u);
  EXPECT_EQ(lines[0].mtime_ns, 1700000000LL * 1000000000LL);
  EXPECT_EQ(lines[1].error, 0);
  EXPECT_EQ(lines[1].length, 0u);
  EXPECT_EQ(lines[2].error, 0);
  EXPECT_EQ(buf.bytes(lines[2].offset, lines[2].length), std::string(3000, 'c'));
  EXPECT_GE(lines[2].offset, lines[0].offset + lines[0].length);
  ASSERT_EQ(mount.calls.size(), 1u) << "one gateway call for the three files";
}

TEST(FileFetchTest, AnswersEachFileOnItsOwnAndAsksNothingOfPathsTheMountDoesNotKnow) {
  FakeMount mount;
  mount.add("/ok", "fine");
  mount.add("/big", std::string(5000, 'x'));
  mount.files["/unknown"] = {0, file_attr(0100644, 0, 0, 4), "data"};  // never looked up here
  mount.known.insert("/gone");  // known, but no longer on the gateway
  CallerMemfd buf({"/ok", "/big", "/unknown", "/gone"}, 64 << 10);
  auto lines = lines_of(
      fetch_files(mount.context(), "4096 " + std::to_string(buf.list_length), buf.fd, kRoot), 4);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].error, 0);
  EXPECT_EQ(lines[1].error, EFBIG);
  EXPECT_EQ(lines[2].error, ENOENT);
  EXPECT_EQ(lines[3].error, ENOENT);
  ASSERT_EQ(mount.calls.size(), 1u);
  EXPECT_EQ(mount.calls[0], (std::vector<std::string>{"/ok", "/big", "/gone"}));
}

TEST(FileFetchTest, ReadsForACallerOnlyWhatItsPermissionsAllow) {
  FakeMount mount;
  mount.add("/mine", "owner may read", 0100400, 1000, 1000);
  mount.add("/mine-no-read", "owner may not", 0100044, 1000, 1000);  // owner bits win
  mount.add("/group", "group may read", 0100040, 0, 2000);
  mount.add("/others", "others may read", 0100004, 0, 4242);
  mount.add("/closed", "nobody but root", 0100600, 0, 0);
  const std::vector<std::string> paths{"/mine", "/mine-no-read", "/group", "/others", "/closed"};
  CallerMemfd buf(paths, 64 << 10);
  const std::string args = "4096 " + std::to_string(buf.list_length);
  // This process, as a user 1000 of group 1000 (its supplementary groups are its own, root's at
  // most: not 2000 nor 4242).
  auto lines = lines_of(fetch_files(mount.context(), args, buf.fd, {::getpid(), 1000, 1000}), 5);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].error, 0);
  EXPECT_EQ(lines[1].error, EACCES);
  EXPECT_EQ(lines[2].error, EACCES);
  EXPECT_EQ(lines[3].error, 0);
  EXPECT_EQ(lines[4].error, EACCES);
  // Its primary group 2000: the group's file too.
  lines = lines_of(fetch_files(mount.context(), args, buf.fd, {::getpid(), 1000, 2000}), 5);
  EXPECT_EQ(lines[2].error, 0);
  // Root reads all of them.
  lines = lines_of(fetch_files(mount.context(), args, buf.fd, kRoot), 5);
  for (const auto& l : lines) EXPECT_EQ(l.error, 0);
  // The gateway was asked for the attributes of the files read for the user, not for root.
  EXPECT_EQ(mount.attrs_asked, (std::vector<bool>{true, true, false}));
}

// A gateway that answers a look at each path, not the attributes of the file it read, cannot
// tell whether another file was renamed in between: other callers are refused, with a reason.
TEST(FileFetchTest, AGatewayThatDoesNotAnswerTheFilesOwnAttributesServesOnlyRoot) {
  FakeMount mount;
  mount.add("/others", "others may read", 0100644, 0, 0);
  mount.files["/others"].attr_of_file = false;
  CallerMemfd buf({"/others"}, 64 << 10);
  const std::string args = "4096 " + std::to_string(buf.list_length);
  EXPECT_EQ(fetch_files(mount.context(), args, buf.fd, {::getpid(), 1000, 1000}),
            "error: fetch-files: the gateway does not answer the attributes of the files it read "
            "(an older gateway), by which callers other than root and the mount's user are judged; "
            "upgrade it\n");
  auto lines = lines_of(fetch_files(mount.context(), args, buf.fd, kRoot), 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].error, 0);
  EXPECT_EQ(lines[0].length, 15u);
}

// As the kernel would judge a walk down to the file: a directory the caller may not search hides
// every file below it, whatever the file's own mode; the check asks each directory once.
TEST(FileFetchTest, ADirectoryTheCallerMayNotSearchHidesTheFilesBelowIt) {
  FakeMount mount;
  mount.dirs["/home/a"] = file_attr(040700, 1001, 1001, 4096);      // a's alone
  mount.dirs["/home/a/pub"] = file_attr(040755, 1001, 1001, 4096);  // open, but below a's
  mount.dirs["/home/b"] = file_attr(040711, 1002, 1002, 4096);      // searchable by all
  mount.dirs["/team"] = file_attr(040750, 0, 3000, 4096);           // group 3000's
  mount.dirs["/file-not-dir"] = file_attr(0100755, 0, 0, 1);        // not a directory
  mount.unknown_dirs.insert("/lost");
  mount.add("/home/a/secret", "a's", 0100644, 1001, 1001);
  mount.add("/home/a/pub/open", "below a's", 0100644, 1001, 1001);
  mount.add("/home/b/open", "b's", 0100644, 1002, 1002);
  mount.add("/team/doc", "team's", 0100644, 0, 3000);
  mount.add("/file-not-dir/x", "?", 0100644, 0, 0);
  mount.add("/lost/x", "?", 0100644, 0, 0);
  mount.add("/top", "at the root", 0100644, 0, 0);
  const std::vector<std::string> paths{"/home/a/secret", "/home/a/pub/open", "/home/b/open",
                                       "/team/doc",      "/file-not-dir/x",  "/lost/x",
                                       "/top",           "/home/a/secret"};
  CallerMemfd buf(paths, 64 << 10);
  const std::string args = "4096 " + std::to_string(buf.list_length);
  auto lines = lines_of(fetch_files(mount.context(), args, buf.fd, {::getpid(), 1002, 1002}), 8);
  ASSERT_EQ(lines.size(), 8u);
  EXPECT_EQ(lines[0].error, EACCES);
  EXPECT_EQ(lines[1].error, EACCES);
  EXPECT_EQ(lines[2].error, 0);
  EXPECT_EQ(buf.bytes(lines[2].offset, lines[2].length), "b's");
  EXPECT_EQ(lines[3].error, EACCES);
  EXPECT_EQ(lines[4].error, EACCES);
  EXPECT_EQ(lines[5].error, EACCES);
  EXPECT_EQ(lines[6].error, 0);
  EXPECT_EQ(lines[7].error, EACCES);
  EXPECT_EQ(std::count(mount.dirs_asked.begin(), mount.dirs_asked.end(), "/home/a"), 1)
      << "each directory is asked once a command";
  // The group's member, and the directory's owner.
  lines = lines_of(fetch_files(mount.context(), args, buf.fd, {::getpid(), 1002, 3000}), 8);
  EXPECT_EQ(lines[3].error, 0);
  lines = lines_of(fetch_files(mount.context(), args, buf.fd, {::getpid(), 1001, 1001}), 8);
  EXPECT_EQ(lines[0].error, 0);
  EXPECT_EQ(lines[1].error, 0);
  // Root is not asked about directories at all.
  mount.dirs_asked.clear();
  lines = lines_of(fetch_files(mount.context(), args, buf.fd, kRoot), 8);
  EXPECT_EQ(lines[0].error, 0);
  EXPECT_EQ(lines[5].error, 0);
  EXPECT_TRUE(mount.dirs_asked.empty());
}

TEST(FileFetchTest, ASupplementaryGroupCountsAsTheFilesGroup) {
  FileAttr a = file_attr(0100040, 0, 3000, 1);
  EXPECT_FALSE(may_read(a, 1000, 1000, {}));
  EXPECT_TRUE(may_read(a, 1000, 1000, {5, 3000}));
  EXPECT_TRUE(may_read(a, 0, 0, {}));
}

TEST(FileFetchTest, RefusesBadCommandsAndBuffers) {
  FakeMount mount;
  mount.add("/a", "x");
  CallerMemfd buf({"/a"}, 8192);
  const std::string len = std::to_string(buf.list_length);
  auto refused = [&](const std::string& args, int fd, const std::string& what) {
    const std::string answer = fetch_files(mount.context(), args, fd, kRoot);
    EXPECT_EQ(answer.rfind("error: ", 0), 0u) << args << ": " << answer;
    EXPECT_NE(answer.find(what), std::string::npos) << args << ": " << answer;
  };
  refused("", buf.fd, "usage");
  refused("4096", buf.fd, "usage");
  refused("4096 " + len + " extra", buf.fd, "usage");
  refused("0 " + len, buf.fd, "MAX_BYTES");
  refused("2097152 " + len, buf.fd, "MAX_BYTES");
  refused("4096 " + len, -1, "no buffer");
  refused("65536 " + len, buf.fd, "beyond the buffer");  // 1 file x 64 KiB does not fit in 8 KiB
  refused("4096 99999", buf.fd, "beyond the buffer");
  refused("4096 " + std::to_string(buf.list_length - 1), buf.fd, "NUL");
  CallerMemfd unsealed({"/a"}, 8192, false);
  refused("4096 " + len, unsealed.fd, "sealed");
  CallerMemfd relative({"a"}, 8192);
  refused("4096 " + len, relative.fd, "absolute");
  EXPECT_TRUE(mount.calls.empty()) << "a refused command asked the gateway";
  // A failing gateway call fails the command.
  mount.call_error = EIO;
  refused("4096 " + len, buf.fd, "ReadFiles");
}

}  // namespace
}  // namespace skein::client
