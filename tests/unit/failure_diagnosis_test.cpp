// The errno behind SFTP's generic failure, judged by what the tree shows right after: each
// operation's refusals as a POSIX caller expects them, looked at through an in-memory backend.
#include "backend/failure_diagnosis.hpp"

#include <gtest/gtest.h>

#include <cerrno>

#include "fake_backend.hpp"

namespace skein {
namespace {

using test::FakeBackend;

struct Tree {
  Tree() : b(FakeBackend::make("b")) {
    b->put_dir("/empty");
    b->put_dir("/full");
    b->put_file("/full/x", "x");
    b->put_file("/file", "data");
  }
  int diagnose(FailedOp op, std::string_view rel, std::string_view other = {}) {
    return diagnose_failure(*b, op, rel, other);
  }
  std::shared_ptr<FakeBackend> b;
};

TEST(FailureDiagnosis, MakingANameThatExistsIsEexist) {
  Tree t;
  EXPECT_EQ(t.diagnose(FailedOp::mkdir, "/file"), EEXIST);
  EXPECT_EQ(t.diagnose(FailedOp::symlink, "/empty"), EEXIST);
  EXPECT_EQ(t.diagnose(FailedOp::link, "/file", "/other"), EEXIST);
}

TEST(FailureDiagnosis, AHardLinkOfADirectoryIsEperm) {
  Tree t;
  EXPECT_EQ(t.diagnose(FailedOp::link, "/new", "/empty"), EPERM);
  EXPECT_EQ(t.diagnose(FailedOp::link, "/new", "/file"), EIO) << "nothing explains it";
}

TEST(FailureDiagnosis, RmdirSaysWhatIsInTheWay) {
  Tree t;
  EXPECT_EQ(t.diagnose(FailedOp::rmdir, "/missing"), ENOENT);
  EXPECT_EQ(t.diagnose(FailedOp::rmdir, "/file"), ENOTDIR);
  EXPECT_EQ(t.diagnose(FailedOp::rmdir, "/full"), ENOTEMPTY);
  EXPECT_EQ(t.diagnose(FailedOp::rmdir, "/empty"), EIO);
}

TEST(FailureDiagnosis, UnlinkOrOpenOfADirectoryIsEisdir) {
  Tree t;
  EXPECT_EQ(t.diagnose(FailedOp::unlink, "/empty"), EISDIR);
  EXPECT_EQ(t.diagnose(FailedOp::open, "/full"), EISDIR);
  EXPECT_EQ(t.diagnose(FailedOp::unlink, "/file"), EIO);
}

TEST(FailureDiagnosis, RenameComparesTheSourceWithTheTarget) {
  Tree t;
  EXPECT_EQ(t.diagnose(FailedOp::rename, "/empty", "/file"), ENOTDIR);
  EXPECT_EQ(t.diagnose(FailedOp::rename, "/file", "/empty"), EISDIR);
  EXPECT_EQ(t.diagnose(FailedOp::rename, "/empty", "/full"), ENOTEMPTY);
  EXPECT_EQ(t.diagnose(FailedOp::rename, "/full", "/full/x/below"), EINVAL)
      << "a directory cannot move below itself";
  EXPECT_EQ(t.diagnose(FailedOp::rename, "/full", "/fuller"), EIO) << "a name that only starts so";
}

TEST(FailureDiagnosis, AFullFileSystemIsEnospc) {
  Tree t;
  EXPECT_EQ(t.diagnose(FailedOp::write, "/file"), EIO);
  EXPECT_EQ(t.diagnose(FailedOp::mkdir, "/new"), EIO);
  t.b->set_full(true);
  EXPECT_EQ(t.diagnose(FailedOp::write, "/file"), ENOSPC);
  EXPECT_EQ(t.diagnose(FailedOp::mkdir, "/new"), ENOSPC);
  EXPECT_EQ(t.diagnose(FailedOp::open, "/new"), ENOSPC);
  EXPECT_EQ(t.diagnose(FailedOp::unlink, "/file"), EIO) << "removing needs no space";
}

TEST(FailureDiagnosis, AServerThatCannotBeAskedLeavesEio) {
  Tree t;
  t.b->set_down(true);
  for (auto op : {FailedOp::mkdir, FailedOp::rename, FailedOp::write, FailedOp::open})
    EXPECT_EQ(t.diagnose(op, "/full", "/empty"), EIO) << static_cast<int>(op);
}

}  // namespace
}  // namespace skein
