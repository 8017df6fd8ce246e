// A backend's subtree view (SftpBackend::subtree, what a job's namespace will use for its
// directory on each backend) against a real sshd of a skein-local cluster: files made through
// the view land in its directory on the server; it uses the backend's connections and counts as
// its traffic; its path operations hold the server's PathGuard; and a symlink at the view's root,
// above it, or swapped in for its directory afterwards is never followed out of the export.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "backend/backend_file.hpp"
#include "backend/path_guard.hpp"
#include "backend/sftp_backend.hpp"
#include "config/gateway_config.hpp"
#include "fs_test_support.hpp"

namespace skein::test {
namespace {

SharedBytes bytes(const std::string& s) {
  auto keep = std::make_shared<std::string>(s);
  return SharedBytes({std::string_view(*keep)}, keep);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

class BackendSubtree : public ClusterSuite<1, 0> {
 protected:
  void SetUp() override {
    ClusterSuite::SetUp();
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    // The cluster's own backend srv0, as its gateway has it, but a Backend of this process's.
    auto cfg = load_gateway_config(cluster_->env("SKEIN_CONFIG"));
    for (auto& b : cfg.backends)
      if (b.name == "srv0") backend_ = std::make_shared<SftpBackend>(b);
    ASSERT_TRUE(backend_) << "no backend srv0 in " << cluster_->env("SKEIN_CONFIG");
    ASSERT_EQ(::mkdir(server("").c_str(), 0755), 0) << strerror(errno);
    ::mkdir(outside().c_str(), 0755);
    write_file(outside() + "/secret", "the storage server's own file\n");
  }
  // This test's directory on the server, and paths in it.
  std::string server(const std::string& rel) const {
    return cluster_->export_dir(0) + "/" + name_ + (rel.empty() ? "" : "/" + rel);
  }
  std::string outside() const { return cluster_->state() + "/outside-" + name_; }
  std::shared_ptr<Backend> view(const std::string& rel) {
    auto v = backend_->subtree("/" + name_ + rel);
    EXPECT_TRUE(v) << strerror(v.error());
    return v ? *v : nullptr;
  }

  std::string name_;
  std::shared_ptr<SftpBackend> backend_;
};

TEST_F(BackendSubtree, FilesMadeThroughAViewLandInItsDirectory) {
  ASSERT_EQ(::mkdir(server("job").c_str(), 0700), 0);
  auto job = view("/job");
  ASSERT_TRUE(job);
  auto root = job->lstat("/");
  ASSERT_TRUE(root) << strerror(root.error());
  EXPECT_TRUE(S_ISDIR(root->permissions));
  EXPECT_EQ(root->permissions & 07777, 0700u);
  ASSERT_TRUE(job->mkdir("/d", 0755));
  auto f = job->open("/d/f", O_RDWR | O_CREAT | O_EXCL, 0640);
  ASSERT_TRUE(f) << strerror(f.error());
  ASSERT_TRUE((*f)->write(0, bytes("through the view")));
  ASSERT_TRUE((*f)->close());
  EXPECT_EQ(read_file(server("job/d/f")), "through the view");
  ASSERT_TRUE(job->rename("/d/f", "/g", 0));
  EXPECT_TRUE(exists(server("job/g")));
  auto names = job->list_dir("/");
  ASSERT_TRUE(names) << strerror(names.error());
  std::set<std::string> listed;
  for (auto& e : *names) listed.insert(e.filename);
  EXPECT_EQ(listed, (std::set<std::string>{"d", "g"}));
  ASSERT_TRUE(job->symlink("g", "/l"));
  EXPECT_EQ(*job->readlink("/l"), "g");
  EXPECT_TRUE(job->statvfs("/"));
  ASSERT_TRUE(job->unlink("/l"));
  ASSERT_TRUE(job->unlink("/g"));
  ASSERT_TRUE(job->rmdir("/d"));
  EXPECT_EQ(list_names(server("job")), (std::set<std::string>{".", ".."}));
}

TEST_F(BackendSubtree, AViewUsesTheBackendsConnectionsAndCountsAsItsTraffic) {
  ASSERT_EQ(::mkdir(server("job").c_str(), 0755), 0);
  ASSERT_TRUE(backend_->lstat("/"));
  const size_t pool = backend_->live_connections();
  ASSERT_GE(pool, 1u);
  const auto before = backend_->counters();
  auto jobs = std::vector<std::shared_ptr<Backend>>();
  for (int i = 0; i < 50; ++i) jobs.push_back(view("/job"));  // a view is cheap: no connection
  for (auto& j : jobs) ASSERT_TRUE(j->lstat("/"));
  auto f = jobs[0]->open("/data", O_RDWR | O_CREAT, 0644);
  ASSERT_TRUE(f);
  ASSERT_TRUE((*f)->write(0, bytes(std::string(1000, 'x'))));
  ASSERT_EQ((*f)->read(0, 1000)->size(), 1000u);
  ASSERT_TRUE((*f)->close());
  EXPECT_LE(backend_->live_connections(), static_cast<size_t>(backend_->config().connections));
  const auto after = backend_->counters();
  EXPECT_GE(after.ops - before.ops, 50u);
  EXPECT_EQ(after.bytes_written - before.bytes_written, 1000u);
  EXPECT_EQ(after.bytes_read - before.bytes_read, 1000u);
}

TEST_F(BackendSubtree, AViewsPathOperationsHoldTheServersPathGuard) {
  ASSERT_EQ(::mkdir(server("job").c_str(), 0755), 0);
  auto job = view("/job");
  ASSERT_TRUE(job->lstat("/"));
  const auto& ep = backend_->config().endpoint;
  auto guard = PathGuard::of(ep.host, ep.port);
  std::atomic<bool> done{false};
  std::thread looker;
  {
    // As a rename on any backend of this server holds it: the view's lookup must wait.
    auto hold = guard->hold(PathGuard::Mode::exclusive);
    looker = std::thread([&] {
      (void)job->lstat("/");
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(done) << "the view's lstat went ahead under another's exclusive hold";
  }
  looker.join();
  EXPECT_TRUE(done);
}

TEST_F(BackendSubtree, ASymlinkAtOrAboveAViewsRootIsNeverFollowed) {
  ASSERT_EQ(::symlink(outside().c_str(), server("linked").c_str()), 0);
  ASSERT_EQ(::mkdir(server("dir").c_str(), 0755), 0);
  ASSERT_EQ(::symlink(outside().c_str(), server("dir/inner").c_str()), 0);
  for (auto rel : {"/linked", "/linked/below", "/dir/inner"}) {
    auto v = view(rel);
    ASSERT_TRUE(v);
    EXPECT_EQ(v->lstat("/secret").error(), ELOOP) << rel;
    EXPECT_EQ(v->open("/secret", O_RDONLY, 0).error(), ELOOP) << rel;
    EXPECT_EQ(v->list_dir("/").error(), ELOOP) << rel;
    EXPECT_EQ(v->mkdir("/made", 0755).error(), ELOOP) << rel;
    EXPECT_EQ(v->open("/new", O_WRONLY | O_CREAT, 0644).error(), ELOOP) << rel;
  }
  EXPECT_EQ(list_names(outside()), (std::set<std::string>{".", "..", "secret"}))
      << "nothing made outside";
  auto root = view("/linked");
  auto a = root->lstat("/");
  ASSERT_TRUE(a) << "the view's root itself is shown, as a symlink";
  EXPECT_TRUE(S_ISLNK(a->permissions));
}

TEST_F(BackendSubtree, ADirectorySwappedForASymlinkUnderAViewIsSeen) {
  ASSERT_EQ(::mkdir(server("job").c_str(), 0755), 0);
  write_file(server("job/f"), "inside\n");
  auto job = view("/job");
  ASSERT_TRUE(job->lstat("/f")) << "verified: the view's directory is a real one";
  // On the storage server, behind the gateway's back: the job's directory becomes a symlink.
  ASSERT_EQ(::rename(server("job").c_str(), server("job.old").c_str()), 0);
  ASSERT_EQ(::symlink(outside().c_str(), server("job").c_str()), 0);
  // The server's watcher reports it to the backend; the view shares what the backend verified.
  backend_->changed_on_server("/" + name_ + "/job", /*replaced=*/true);
  EXPECT_EQ(job->lstat("/secret").error(), ELOOP);
  EXPECT_EQ(job->open("/secret", O_RDONLY, 0).error(), ELOOP);
}

}  // namespace
}  // namespace skein::test
