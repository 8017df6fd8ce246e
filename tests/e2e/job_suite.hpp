// A suite of tests of job namespaces: a cluster of three storage servers with a [jobs] pool, two
// unprivileged users of the test's own (made for the suite and removed after it), skeinctl with
// the cluster's admin credentials, and mounts of job namespaces as a node's prolog makes them.
#pragma once

#include <pwd.h>
#include <sys/stat.h>

#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {

using Json = nlohmann::json;

inline std::string q(const std::string& s) { return "'" + s + "'"; }

inline uid_t uid_of(const std::string& user) {
  auto* pw = getpwnam(user.c_str());
  return pw ? pw->pw_uid : static_cast<uid_t>(-1);
}

class JobSuite : public ClusterSuite<3, 0> {
 protected:
  // Two unprivileged users of the suite's own, named after it (suites that run at once do not
  // share them), made for it and removed after it.
  static void SetUpTestSuite() {
    std::string base = "sk";
    for (char c : std::string(::testing::UnitTest::GetInstance()->current_test_suite()->name()))
      if (std::isalnum(static_cast<unsigned char>(c)) && base.size() < 24)
        base += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    users_ = {base + "1", base + "2"};
    for (auto& u : users_)
      if (uid_of(u) == static_cast<uid_t>(-1)) run_command("useradd -M -s /bin/sh " + u);
    ClusterSuite::SetUpTestSuite();
  }
  static void TearDownTestSuite() {
    ClusterSuite::TearDownTestSuite();
    for (auto& u : users_) run_command("userdel " + u + " 2>/dev/null");
  }
  static const std::string& user(int i) { return users_.at(static_cast<size_t>(i)); }
  static inline std::vector<std::string> users_;
  void SetUp() override {
    ClusterSuite::SetUp();
    for (auto& u : users_) ASSERT_NE(uid_of(u), static_cast<uid_t>(-1)) << "cannot make user " << u;
    name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override {
    mounts_.clear();
    for (auto& id : made_) ctl("ns destroy " + id);
  }

  static std::string skeinctl() { return build_dir() + "/client/skeinctl"; }
  // `skeinctl ARGS` with the cluster's admin credentials; stdout and stderr in `out`.
  int ctl(const std::string& args, std::string* out = nullptr) {
    std::string o;
    int rc = run_command(cluster_->admin_env() + "SKEIN_GATEWAY=" + cluster_->env("SKEIN_GATEWAY") +
                             " " + q(skeinctl()) + " " + args + " 2>&1",
                         &o);
    if (out) *out = o;
    return rc;
  }
  // `skeinctl --json ARGS`: its exit status, and its standard output parsed (run_command adds a
  // 2>&1 at the end, hence the subshell: skeinctl says a failure on stderr too).
  int ctl_json(const std::string& args, Json& j) {
    std::string o;
    int rc = run_command("(" + cluster_->admin_env() +
                             "SKEIN_GATEWAY=" + cluster_->env("SKEIN_GATEWAY") + " " +
                             q(skeinctl()) + " --json " + args + " 2>/dev/null)",
                         &o);
    j = Json::parse(o, nullptr, false);
    return rc;
  }
  // A job id of this test's own (made `n`).
  std::string job(int n = 1) { return name_ + "-" + std::to_string(n); }
  // The skeinctl arguments that create job `id`'s namespace, owned by `user`.
  static std::string create_args(const std::string& id, const std::string& user,
                                 const std::string& extra = "", const std::string& quota = "64M") {
    return "ns create " + id + " --uid " + std::to_string(uid_of(user)) + " --gid " +
           std::to_string(uid_of(user)) + " --quota-bytes " + quota + " " + extra;
  }
  // Creates job `id`'s namespace, owned by `user`; the create's JSON.
  Json create(const std::string& id, const std::string& user, const std::string& extra = "",
              const std::string& quota = "64M") {
    Json j;
    int rc = ctl_json(create_args(id, user, extra, quota), j);
    EXPECT_EQ(rc, 0) << j.dump();
    made_.push_back(id);
    return j;
  }
  // Mounts job `id`'s namespace as a compute node's prolog would: the node certificate, no token.
  std::string mount(const std::string& id, std::string* error = nullptr) {
    std::string mp = cluster_->state() + "/" + id + "-mnt", e;
    auto m = FuseMount::start(cluster_->env("SKEIN_GATEWAY"), mp, "default", e,
                              "--job " + id + " -o allow_other --ca-file " +
                                  q(cluster_->env("SKEIN_CA_FILE")) + " --cert-file " +
                                  q(cluster_->env("SKEIN_NODE_CERT")) + " --key-file " +
                                  q(cluster_->env("SKEIN_NODE_KEY")));
    if (error) *error = e;
    if (!m) {
      EXPECT_TRUE(error) << "mount of " << id << " failed: " << e;
      return "";
    }
    mounts_.push_back(std::move(m));
    return mp;
  }
  // A shell command as `user`; its exit status.
  static int as(const std::string& user, const std::string& cmd, std::string* out = nullptr) {
    return run_command("runuser -u " + user + " -- sh -c " + q(cmd) + " 2>&1", out);
  }
  // Job `id`'s directory on server i.
  std::string server_dir(const std::string& id, int i) {
    return cluster_->list("SKEIN_SCRATCH_DIRS").at(static_cast<size_t>(i)) + "/job-" + id;
  }
  static bool exists(const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0;
  }

  std::string name_;
  std::vector<std::string> made_;
  std::vector<std::unique_ptr<FuseMount>> mounts_;
};

}  // namespace skein::test
