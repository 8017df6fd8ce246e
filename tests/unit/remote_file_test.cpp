// RemoteFile against OpenSSH's real sftp-server, started where the openssh transport starts `ssh`
// (a script of that name first in PATH runs sftp-server on the pipe instead): what a close does
// to the calls still under way with the file's handles.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend_file.hpp"
#include "backend/sftp_backend.hpp"
#include "namespace/layout.hpp"
#include "temp_key_dir.hpp"

namespace skein {
namespace {

constexpr const char* kSftpServer = "/usr/lib/openssh/sftp-server";

// PATH with `dir` first, for as long as it lives.
class PathFirst {
 public:
  explicit PathFirst(const std::string& dir) : old_(getenv("PATH") ? getenv("PATH") : "") {
    setenv("PATH", (dir + ":" + old_).c_str(), 1);
  }
  ~PathFirst() { setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

// How many processes hold `path` open.
int holders_of(const std::string& path) {
  int n = 0;
  for (auto& proc : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = proc.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;  // self, ...
    std::error_code ec;
    for (auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", ec)) {
      std::error_code rc;
      if (std::filesystem::read_symlink(fd.path(), rc) == path) ++n;
    }
  }
  return n;
}

class RemoteFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kSftpServer, X_OK) != 0) {
      if (getenv("CI")) FAIL() << kSftpServer << " is missing (openssh-sftp-server)";
      GTEST_SKIP() << kSftpServer << " is missing";
    }
    root_ = dir_.dir + "/export";
    std::filesystem::create_directory(root_);
    const std::string ssh = dir_.dir + "/ssh";
    std::ofstream(ssh) << "#!/bin/sh\nexec " << kSftpServer << "\n";
    std::filesystem::permissions(ssh, std::filesystem::perms::owner_all);
    path_ = std::make_unique<PathFirst>(dir_.dir);
    BackendConfig cfg;
    cfg.name = "srv0";
    cfg.endpoint.host = "127.0.0.1";
    cfg.endpoint.user = "nobody";
    cfg.endpoint.transport = sftp::SshTransport::openssh;
    cfg.root = root_;
    cfg.connections = 1;  // a close and the calls under way share the one connection
    backend_ = std::make_shared<SftpBackend>(cfg);
  }
  void TearDown() override {
    backend_.reset();
    path_.reset();
  }

  test::TempKeyDir dir_{"skein-remote-file"};
  std::string root_;
  std::unique_ptr<PathFirst> path_;
  std::shared_ptr<SftpBackend> backend_;
};

// A release while a write is still being sent (a mount that gave up waiting for it and closed the
// file): the write goes on with its handle to its end, and the handle is closed after it. Closed
// at once, the rest of the write would fail, or, with the handle's string given to the next OPEN,
// land in another file.
TEST_F(RemoteFileTest, ACloseWhileAWriteIsUnderWayClosesTheHandleAfterIt) {
  auto f = backend_->open("/f", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_TRUE(f) << strerror(f.error());
  // Many small extents: a round trip for every four of them, so the write lasts a while.
  constexpr size_t kExtents = 4000, kSize = 8192;
  auto data = std::make_shared<std::string>();
  data->reserve(kExtents * kSize);
  for (size_t i = 0; i < kExtents * kSize; ++i) data->push_back(static_cast<char>('a' + i % 23));
  std::vector<OpenFile::Extent> extents;
  for (size_t i = 0; i < kExtents; ++i)
    extents.push_back(
        {i * kSize, SharedBytes({std::string_view(*data).substr(i * kSize, kSize)}, data)});
  std::atomic<bool> done{false};
  Result<uint32_t> written = Result<uint32_t>::failure(EIO);
  std::thread writer([&] {
    written = (*f)->write_extents(extents);
    done = true;
  });
  const std::string path = root_ + "/f";
  struct stat st {};
  while (!done && (::stat(path.c_str(), &st) != 0 || st.st_size < 4 * static_cast<off_t>(kSize)))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  ASSERT_FALSE(done) << "the write ended before the close could come during it";
  EXPECT_TRUE((*f)->close());
  writer.join();
  ASSERT_TRUE(written) << strerror(written.error());
  EXPECT_EQ(*written, kExtents * kSize);
  std::string got;
  {
    std::ifstream in(path, std::ios::binary);
    got.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_TRUE(got == *data) << "the file holds " << got.size() << " bytes";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (holders_of(path) > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(holders_of(path), 0) << "the handle was left open";
}

}  // namespace
}  // namespace skein
