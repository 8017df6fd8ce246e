// SftpBackend's subtree views, without a server: where a view's paths lead on the server, what a
// view is named, which paths it refuses, and that it shares the backend's connection pool (one
// server found down is down for both, their traffic is counted once) and draining state. The
// views against a real sshd, confinement included, are e2e.backend_subtree.
#include "backend/sftp_backend.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

#include "fake_backend.hpp"

namespace skein {
namespace {

BackendConfig config_on_port_1(const std::string& root) {
  BackendConfig cfg;
  cfg.name = "srv0";
  cfg.endpoint.host = "127.0.0.1";
  cfg.endpoint.port = 1;  // nothing listens there
  cfg.endpoint.user = "nobody";
  cfg.endpoint.timeout = std::chrono::milliseconds(2000);
  cfg.root = root;
  cfg.connections = 2;
  return cfg;
}

std::shared_ptr<SftpBackend> view_of(SftpBackend& b, std::string_view rel) {
  auto v = b.subtree(rel);
  EXPECT_TRUE(v) << rel;
  return v ? std::dynamic_pointer_cast<SftpBackend>(*v) : nullptr;
}

TEST(SftpBackendSubtree, AViewsPathsLeadBelowItsDirectory) {
  auto b = std::make_shared<SftpBackend>(config_on_port_1("/export/"));
  EXPECT_EQ(b->remote_path("/"), "/export/");
  EXPECT_EQ(b->remote_path("/a"), "/export/a");
  auto job = view_of(*b, "/jobs/42");
  ASSERT_TRUE(job);
  EXPECT_EQ(job->name(), "srv0:/jobs/42");
  EXPECT_EQ(job->remote_path("/"), "/export/jobs/42");
  EXPECT_EQ(job->remote_path("/a/b"), "/export/jobs/42/a/b");
  auto nested = view_of(*job, "/scratch");
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->name(), "srv0:/jobs/42/scratch");
  EXPECT_EQ(nested->remote_path("/f"), "/export/jobs/42/scratch/f");
  EXPECT_EQ(nested->config().root, "/export/") << "the export's configuration, shared";
}

TEST(SftpBackendSubtree, OnlyANormalisedPathBelowTheRootMakesAView) {
  auto b = std::make_shared<SftpBackend>(config_on_port_1("/export"));
  for (const char* bad : {"", "jobs", "/jobs/", "/a/../b", "/a/./b", "//a", "/.."})
    EXPECT_EQ(b->subtree(bad).error(), EINVAL) << bad;
  auto same = b->subtree("/");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->get(), b.get()) << "the root's view is the backend itself";
}

TEST(SftpBackendSubtree, AViewSharesTheBackendsPoolAndItsState) {
  auto b = std::make_shared<SftpBackend>(config_on_port_1("/export"));
  auto job = view_of(*b, "/jobs/7");
  ASSERT_TRUE(job);
  EXPECT_EQ(b->live_connections(), 0u) << "making a view opens no connection";
  b->set_draining(true);
  EXPECT_TRUE(job->draining());
  EXPECT_FALSE(job->accepts_new_files());
  b->set_draining(false);

  // The server's path guard is the view's: directories verified there need no new look.
  auto guard = PathGuard::of("127.0.0.1", 1);
  guard->mark_verified("/export/jobs");
  guard->mark_verified("/export/jobs/7");
  ASSERT_TRUE(b->up());
  const auto before = b->counters().ops;
  EXPECT_EQ(job->lstat("/f").error(), EIO) << "the server cannot be reached";
  EXPECT_FALSE(b->up()) << "the view found the server down: so is the backend";
  EXPECT_FALSE(job->up());
  EXPECT_EQ(b->lstat("/f").error(), EIO) << "at once, while it is down";
  EXPECT_GT(b->counters().ops, before) << "the view's requests count as the backend's";
  EXPECT_EQ(job->counters().ops, b->counters().ops);
}

TEST(FakeBackendSubtree, AFakesViewSharesItsTreeAsAnSftpViewSharesItsServer) {
  // The layouts' tests use fakes; their views behave as SftpBackend's do.
  auto b = test::FakeBackend::make("f");
  b->put_dir("/jobs/1");
  auto v = b->subtree("/jobs/1");
  ASSERT_TRUE(v);
  EXPECT_EQ((*v)->name(), "f:/jobs/1");
  ASSERT_TRUE((*v)->mkdir("/d", 0755));
  EXPECT_TRUE(b->has("/jobs/1/d"));
  b->put_symlink("/jobs/2", "/elsewhere");
  auto linked = b->subtree("/jobs/2");
  ASSERT_TRUE(linked);
  EXPECT_EQ((*linked)->lstat("/x").error(), ELOOP) << "a symlink at the view's root";
  b->set_down(true);
  EXPECT_FALSE((*v)->up());
}

}  // namespace
}  // namespace skein
