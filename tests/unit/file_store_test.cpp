// The control socket's store-files command without FUSE: a fake gateway's WriteFiles, a real
// sealed memfd as the caller's buffer. What it asks the gateway to make, in calls within the
// gateway's limits, what it refuses, the permission check on the caller's behalf, and what the
// mount is told to drop.
#include "file_store.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "control_answer.hpp"
#include "wire/limits.hpp"

namespace skein::client {
namespace {

struct Wanted {
  std::string path, partial_name, data;
  uint32_t mode = 0644;
  int64_t mtime_ns = 1600000000LL * 1000000000LL;
};

// A sealed memfd holding the command's list, then the files' contents.
struct StoreMemfd {
  int fd = -1;
  std::size_t list_length = 0;
  explicit StoreMemfd(const std::vector<Wanted>& files, const std::string& raw_list = "") {
    fd = ::memfd_create("store-files-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    std::string list = raw_list, data;
    for (const Wanted& w : files) {
      std::ostringstream head;
      head << std::oct << w.mode << std::dec << " " << w.mtime_ns << " " << w.data.size() << " ";
      list += head.str() + w.path + std::string(1, '\0') + w.partial_name + std::string(1, '\0');
      data += w.data;
    }
    list_length = list.size();
    const std::string all = list + data;
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(all.size() + 4096)), 0);
    EXPECT_EQ(::pwrite(fd, all.data(), all.size(), 0), static_cast<ssize_t>(all.size()));
    EXPECT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
  }
  ~StoreMemfd() { ::close(fd); }
};

FileAttr dir_attr(uint32_t mode, uint32_t uid = 0, uint32_t gid = 0) {
  FileAttr a;
  a.mode = S_IFDIR | mode;
  a.uid = uid;
  a.gid = gid;
  return a;
}

// The gateway's calls as they came, the files it made, and what the mount was told to drop.
struct FakeMount {
  std::map<std::string, FileAttr> dirs;  // default: 0755, root's
  std::vector<std::vector<GatewayClient::NewFile>> calls;
  std::map<std::string, std::string> made_files;  // path -> "partial|mode|mtime|data"
  std::map<std::string, int> fail;                // path -> errno the gateway answers
  std::vector<std::string> dropped;
  int call_error = 0;
  CallerBuffers buffers;

  FileStoreContext context() {
    return {[this](const std::string& dir) -> std::optional<FileAttr> {
              auto it = dirs.find(dir);
              return it != dirs.end() ? it->second : dir_attr(0755);
            },
            [this](const std::vector<GatewayClient::NewFile>& files)
                -> Result<std::vector<GatewayClient::FileWritten>> {
              calls.push_back(files);
              if (call_error)
                return Result<std::vector<GatewayClient::FileWritten>>::failure(call_error);
              std::vector<GatewayClient::FileWritten> out;
              for (const auto& f : files) {
                GatewayClient::FileWritten w;
                if (auto it = fail.find(f.path); it != fail.end()) {
                  w.error = it->second;
                } else {
                  made_files[f.path] = f.partial + "|" + std::to_string(f.mode) + "|" +
                                       std::to_string(f.mtime_ns) + "|" + std::string(f.data);
                }
                out.push_back(w);
              }
              return out;
            },
            [this](const std::string& path) { dropped.push_back(path); }, buffers};
  }
};

// Each file's errno in the answer, after "ok N" (which must say `n`); -1 where there is none.
std::vector<int> errors_of(const std::string& answer, std::size_t n) {
  return answer_lines<int>(answer, n, [](std::istream& in, int& e) {
    e = -1;
    in >> e;
  });
}

const ControlPeer kRoot{1, 0, 0, true};
const ControlPeer kUser{1, 1000, 1000, false, std::vector<gid_t>{}};

std::string run(FakeMount& mount, const StoreMemfd& buf, const ControlPeer& peer = kRoot) {
  return store_files(mount.context(), std::to_string(buf.list_length), buf.fd, peer);
}

TEST(FileStoreTest, MakesEachFileUnderItsPartialWithItsModeAndTimesAndDropsTheName) {
  FakeMount mount;
  StoreMemfd buf({{"/a", ".a.part", "first file", 0640},
                  {"/d/e/b", ".b.part", "", 04755, 1234567890123456789LL},
                  {"/d/odd name\n", ".odd.part", std::string(3000, 'c'), 0600}});
  auto errors = errors_of(run(mount, buf), 3);
  EXPECT_EQ(errors, (std::vector<int>{0, 0, 0}));
  ASSERT_EQ(mount.calls.size(), 1u);
  EXPECT_EQ(mount.made_files["/a"], "/.a.part|416|1600000000000000000|first file");
  EXPECT_EQ(mount.made_files["/d/e/b"], "/d/e/.b.part|2541|1234567890123456789|");
  EXPECT_EQ(mount.made_files["/d/odd name\n"],
            "/d/.odd.part|384|1600000000000000000|" + std::string(3000, 'c'));
  EXPECT_EQ(mount.dropped, (std::vector<std::string>{"/a", "/d/e/b", "/d/odd name\n"}));
}

TEST(FileStoreTest, KeepsEachGatewayCallWithinItsLimits) {
  FakeMount mount;
  std::vector<Wanted> files;
  for (int i = 0; i < 300; ++i) files.push_back({"/f" + std::to_string(i), ".p", "x"});
  // Then four files of 300 KiB: at most 1 MiB of contents a call.
  for (int i = 0; i < 4; ++i)
    files.push_back({"/big" + std::to_string(i), ".p", std::string(300u << 10, 'b')});
  StoreMemfd buf(files);
  auto errors = errors_of(run(mount, buf), files.size());
  EXPECT_EQ(errors, std::vector<int>(files.size(), 0));
  ASSERT_GE(mount.calls.size(), 3u);
  std::size_t total = 0;
  for (const auto& call : mount.calls) {
    EXPECT_LE(call.size(), static_cast<std::size_t>(wire::kMaxWriteFiles));
    uint64_t bytes = 0;
    for (const auto& f : call) bytes += f.data.size();
    EXPECT_LE(bytes, wire::kMaxIoSize);
    total += call.size();
  }
  EXPECT_EQ(total, files.size());
  EXPECT_EQ(mount.made_files.size(), files.size());
}

// A file the gateway reports failed may have replaced its name all the same (its rename made,
// the answer lost): what the kernel cached of the name is dropped with the others'.
TEST(FileStoreTest, AFileTheGatewayFailsIsDroppedLikeTheOthers) {
  FakeMount mount;
  mount.fail["/b"] = ENOSPC;
  StoreMemfd buf({{"/a", ".a.p", "a"}, {"/b", ".b.p", "b"}, {"/c", ".c.p", "c"}});
  EXPECT_EQ(errors_of(run(mount, buf), 3), (std::vector<int>{0, ENOSPC, 0}));
  EXPECT_EQ(mount.dropped, (std::vector<std::string>{"/a", "/b", "/c"}));
  // A call that fails as a whole (a gateway without WriteFiles, a call cut off by its deadline,
  // which may have made any of them): the command fails, so the caller copies these files
  // another way, and what was cached of each name is dropped.
  FakeMount cut_off;
  cut_off.call_error = EIO;
  const std::string answer = run(cut_off, buf);
  EXPECT_EQ(answer.rfind("error: store-files: the gateway's WriteFiles: ", 0), 0u) << answer;
  EXPECT_EQ(cut_off.dropped, (std::vector<std::string>{"/a", "/b", "/c"}));
}

TEST(FileStoreTest, AnotherUserMakesFilesOnlyWhereItMayWriteAndWithoutSetIdBits) {
  FakeMount mount;
  mount.dirs["/ro"] = dir_attr(0755);                // root's, not writable by others
  mount.dirs["/mine"] = dir_attr(0700, 1000, 1000);  // the caller's
  mount.dirs["/group"] = dir_attr(0770, 0, 1000);    // its group's
  mount.dirs["/closed"] = dir_attr(0700);            // not searchable by the caller
  mount.dirs["/closed/open"] = dir_attr(0777);
  mount.dirs["/tmp"] = dir_attr(01777);          // sticky, root's
  mount.dirs["/mytmp"] = dir_attr(01777, 1000);  // sticky, the caller's
  StoreMemfd buf({{"/ro/f", ".f.p", "1"},
                  {"/mine/f", ".f.p", "2"},
                  {"/group/f", ".f.p", "3"},
                  {"/closed/open/f", ".f.p", "4"},
                  {"/tmp/f", ".f.p", "5"},
                  {"/mytmp/f", ".f.p", "6"},
                  {"/mine/setuid", ".s.p", "7", 04755}});
  EXPECT_EQ(errors_of(run(mount, buf, kUser), 7),
            (std::vector<int>{EACCES, 0, 0, EACCES, EPERM, 0, EPERM}));
  EXPECT_EQ(mount.made_files.size(), 3u);
  EXPECT_EQ(mount.made_files.count("/ro/f"), 0u);
  EXPECT_EQ(mount.made_files.count("/closed/open/f"), 0u);
  EXPECT_EQ(mount.dropped, (std::vector<std::string>{"/mine/f", "/group/f", "/mytmp/f"}));
  // Root may do all of it.
  FakeMount as_root;
  as_root.dirs = mount.dirs;
  EXPECT_EQ(errors_of(run(as_root, buf), 7), std::vector<int>(7, 0));
}

TEST(FileStoreTest, RefusesMalformedListsWithTheReason) {
  FakeMount mount;
  auto answer_for = [&](const std::string& raw) {
    StoreMemfd buf({}, raw);
    return run(mount, buf);
  };
  const std::string nul(1, '\0');
  EXPECT_NE(answer_for("644 0 1 /a" + nul + ".a.p").find("does not end with a NUL"),
            std::string::npos);
  EXPECT_NE(answer_for("644 0 /a" + nul + ".a.p" + nul).find("MODE MTIME_NS LENGTH PATH"),
            std::string::npos);
  EXPECT_NE(answer_for("644 0 0 a" + nul + ".a.p" + nul).find("must be absolute"),
            std::string::npos);
  EXPECT_NE(answer_for("644 0 0 /a" + nul + "sub/.a.p" + nul).find("without '/'"),
            std::string::npos);
  EXPECT_NE(answer_for("644 0 0 /a" + nul + "a" + nul).find("its own name"), std::string::npos);
  EXPECT_NE(answer_for("17777 0 0 /a" + nul + ".a.p" + nul).find("permission bits"),
            std::string::npos);
  // Contents past the buffer's end: the mapping is refused, nothing is read past it.
  EXPECT_EQ(answer_for("644 0 99999 /a" + nul + ".a.p" + nul).rfind("error: ", 0), 0u);
  // Lengths whose sum wraps around 2^64 (to 0, or to less than the buffer holds): refused as
  // over the limit, before anything is mapped or read (the sum once passed the check, and the
  // second file's bytes were read from an address past the buffer, or from none).
  for (const uint64_t small : {uint64_t{10}, uint64_t{1} << 20}) {
    const std::string huge = std::to_string(UINT64_MAX - 4);  // with `small`: small - 5
    const std::string list = "644 0 " + huge + " /a" + nul + ".a.p" + nul + "644 0 " +
                             std::to_string(small) + " /b" + nul + ".b.p" + nul;
    EXPECT_NE(answer_for(list).find("the list and contents are over"), std::string::npos) << small;
  }
  // More buffer than another user's command may name.
  {
    StoreMemfd buf({});
    const std::string answer =
        store_files(mount.context(), std::to_string(65u << 20), buf.fd, kUser);
    EXPECT_NE(answer.find("LIST_LENGTH over 67108864"), std::string::npos) << answer;
  }
  EXPECT_EQ(store_files(mount.context(), "x", -1, kRoot).rfind("error: store-files: usage", 0), 0u);
  EXPECT_EQ(store_files(mount.context(), "0", -1, kRoot), "ok 0\n");
  EXPECT_TRUE(mount.calls.empty());
}

}  // namespace
}  // namespace skein::client
