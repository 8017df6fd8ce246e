// Job namespaces end to end: made, mounted, owned, bounded and removed through skeinctl and the
// Admin API of a real gateway, on real sshd servers, with real FUSE mounts fetching their
// credentials with the node certificate; unprivileged users made by the test work in their own
// namespace and cannot enter another's; a direct gRPC client cannot cross namespaces either.
#include <grpcpp/grpcpp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "grpc_test_support.hpp"
#include "job_suite.hpp"
#include "skein/v1/admin.grpc.pb.h"
#include "skein/v1/fs.grpc.pb.h"
#include "skein/v1/node.grpc.pb.h"

namespace skein::test {
namespace {

using namespace std::chrono_literals;
namespace pb = ::skein::v1;

class JobNamespaces : public JobSuite {
 protected:
  // Makes the job's namespace and destroys it while server 1 is down, which leaves its removal
  // there pending; server 1 stays down.
  void destroy_with_server_1_down() {
    create(job(), user(0));
    ASSERT_TRUE(cluster_->stop_server(1));
    Json d;
    ASSERT_EQ(ctl_json("ns destroy " + job() + " --wait-ms 3000", d), 0);
    ASSERT_EQ(d["removal_pending"], Json::array({"scratch1:/job-" + job()})) << d.dump();
  }
};

TEST_F(JobNamespaces, CreateIsDurableIdempotentAndMakesADirectoryOnEveryBackend) {
  Json j = create(job(), user(0), "--label partition=debug --lifetime 2h");
  EXPECT_EQ(j["namespace"], "job-" + job());
  EXPECT_EQ(j["created"], true);
  EXPECT_EQ(j["credential"].get<std::string>().size(), 64u);
  EXPECT_EQ(j["backends"].size(), 3u);
  EXPECT_EQ(j["labels"]["partition"], "debug");
  EXPECT_NEAR(static_cast<double>(j["expires_s"].get<int64_t>() - j["created_s"].get<int64_t>()),
              7200, 2);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(exists(server_dir(job(), i))) << i;
  // Again: the same namespace, not a new one, and a fresh credential.
  Json again;
  ASSERT_EQ(ctl_json("ns create " + job() + " --uid " + std::to_string(uid_of(user(0))) +
                         " --gid " + std::to_string(uid_of(user(0))) + " --quota-bytes 64M",
                     again),
            0);
  EXPECT_EQ(again["created"], false);
  EXPECT_NE(again["credential"], j["credential"]);
  // Other settings for the same job: refused, nothing changed.
  std::string out;
  EXPECT_EQ(ctl("ns create " + job() + " --uid 4242 --gid 4242 --quota-bytes 64M", &out), 4);
  EXPECT_NE(out.find("with other settings"), std::string::npos) << out;
  // Durable: in the SQLite file the moment the call returned.
  std::string rows;
  run_command("sqlite3 " + q(cluster_->env("SKEIN_JOBS_DB")) +
                  " \"SELECT job_id, uid, quota_bytes FROM job_namespaces WHERE job_id = '" +
                  job() + "'\"",
              &rows);
  EXPECT_EQ(rows, job() + "|" + std::to_string(uid_of(user(0))) + "|67108864\n");
  Json list;
  ASSERT_EQ(ctl_json("ns list", list), 0);
  bool listed = false;
  for (auto& n : list["job_namespaces"]) listed |= n["job_id"] == job();
  EXPECT_TRUE(listed) << list.dump();
}

// The backends of the [jobs] pool alone are not watched: job namespaces reach them through views
// whose changes on a server no report of theirs would name, and a watch of every job's tree would
// cost inotify watches and a report of every file the jobs and their stagings make. The static
// namespace's backends, on the same servers, are.
TEST_F(JobNamespaces, ThePoolsBackendsAreNotWatched) {
  create(job(), user(0));
  const std::string log_path = cluster_->state() + "/gateway.log";
  ASSERT_TRUE(eventually([&] {
    return read_file(log_path).find("backend srv0: watching") != std::string::npos;
  })) << "the static namespace's backend srv0 is not watched";
  const std::string log = read_file(log_path);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(log.find("backend scratch" + std::to_string(i) + ": watching"), std::string::npos)
        << "the pool's backend scratch" << i << " is watched";
  std::string watchers;
  run_command("pgrep -af 'inotifywait -m' || true", &watchers);
  EXPECT_NE(watchers.find(cluster_->export_dir(0)), std::string::npos) << watchers;
  for (const std::string& dir : cluster_->list("SKEIN_SCRATCH_DIRS"))
    EXPECT_EQ(watchers.find(dir), std::string::npos) << dir << " is watched:\n" << watchers;
}

TEST_F(JobNamespaces, BadInputIsRefusedClearlyAndChangesNothing) {
  const std::string uid = std::to_string(uid_of(user(0)));
  struct Case {
    std::string args, message;
  };
  std::vector<Case> cases = {
      {"ns create " + job() + " --uid " + uid + " --gid " + uid + " --quota-bytes 0",
       "quota_bytes must be more than 0"},
      {"ns create " + job() + " --uid " + uid + " --gid " + uid + " --quota-bytes 1G --width 4",
       "width 4 is more than the 3 backends of pool 'scratch'"},
      {"ns create " + job() + " --uid " + uid + " --gid " + uid +
           " --quota-bytes 1G --backends scratch0,nosuch",
       "unknown backend 'nosuch'"},
      {"ns create " + job() + " --uid " + uid + " --gid " + uid +
           " --quota-bytes 1G --backends srv0",
       "backend 'srv0' is in no [[jobs.pool]]"},
      {"ns create " + job() + " --uid 0 --gid 0 --quota-bytes 1G",
       "uid 0 (root) may not own a job namespace"},
      {"ns create a/b --uid " + uid + " --gid " + uid + " --quota-bytes 1G",
       "job id 'a/b' may hold only letters, digits"},
      {"ns create " + job() + " --uid " + uid + " --gid " + uid + " --quota-bytes 1G --pool nope",
       "no pool 'nope' (pools: scratch)"},
  };
  for (auto& c : cases) {
    std::string out;
    EXPECT_EQ(ctl(c.args, &out), 4) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << "\n" << out;
  }
  std::string out;
  EXPECT_EQ(
      ctl("ns create " + job() + " --uid " + uid + " --gid " + uid + " --quota-bytes lots", &out),
      2)
      << out;
  Json list;
  ASSERT_EQ(ctl_json("ns list", list), 0);
  for (auto& n : list["job_namespaces"]) EXPECT_NE(n["job_id"], job());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(exists(server_dir(job(), i)));
}

TEST_F(JobNamespaces, EveryFileShowsTheJobsOwnerAndOnlyTheOwnerGetsIn) {
  create(job(1), user(0));
  create(job(2), user(1));
  const std::string a = mount(job(1)), b = mount(job(2));
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  struct stat st {};
  ASSERT_EQ(::stat(a.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_of(user(0)));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  std::string out;
  // The owner works in it, as itself.
  EXPECT_EQ(
      as(user(0), "mkdir " + a + "/d && echo hello > " + a + "/d/f && cat " + a + "/d/f", &out), 0)
      << out;
  EXPECT_EQ(out, "hello\n");
  ASSERT_EQ(::stat((a + "/d/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_of(user(0)));
  EXPECT_EQ(st.st_gid, uid_of(user(0)));
  // The other user's job cannot enter it, nor it the other's.
  EXPECT_NE(as(user(1), "ls " + a, &out), 0);
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
  EXPECT_NE(as(user(0), "cat " + b, &out), 0);
  // A chown to anybody else is refused by the gateway, root's included.
  EXPECT_EQ(SKEIN_ERRNO_OF(::chown((a + "/d/f").c_str(), uid_of(user(1)), -1)), EPERM);
  EXPECT_EQ(::chown((a + "/d/f").c_str(), uid_of(user(0)), uid_of(user(0))), 0)
      << "a chown to the owner itself is fine";
}

TEST_F(JobNamespaces, NamespacesCannotSeeEachOtherThroughGrpcEither) {
  Json ja = create(job(1), user(0));
  Json jb = create(job(2), user(1));
  std::string error;
  auto channel =
      wire::secure_channel(cluster_->env("SKEIN_GATEWAY"), cluster_tls(*cluster_), error);
  auto stub = pb::Namespace::NewStub(channel);
  auto getattr = [&](const std::string& ns, const std::string& token, const std::string& path) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 10s);
    ctx.AddMetadata("x-skein-token", token);
    pb::PathRequest req;
    req.set_ns(ns);
    req.set_path(path);
    pb::AttrReply reply;
    auto st = stub->GetAttr(&ctx, req, &reply);
    return st.ok() ? (reply.error() ? "errno " + std::to_string(reply.error()) : std::string("ok"))
                   : "status " + std::to_string(static_cast<int>(st.error_code()));
  };
  const std::string ta = ja["credential"], tb = jb["credential"];
  EXPECT_EQ(getattr("job-" + job(1), ta, "/"), "ok");
  // Swapped credentials, and path tricks: nothing of the other namespace.
  EXPECT_EQ(getattr("job-" + job(2), ta, "/"), "status 16");  // UNAUTHENTICATED
  EXPECT_EQ(getattr("job-" + job(1), tb, "/"), "status 16");
  EXPECT_EQ(getattr("job-" + job(1), ta, "/../job-" + job(2)), "status 3");  // INVALID_ARGUMENT
  EXPECT_EQ(getattr("job-" + job(1), ta, "/job-" + job(2)), "errno 2");      // only its own tree
  // A mount given the other job's token is refused and leaves no mount.
  const std::string token = cluster_->state() + "/" + name_ + ".token";
  std::ofstream(token) << tb << "\n";
  ::chmod(token.c_str(), 0600);
  std::string e;
  auto m = FuseMount::start(cluster_->env("SKEIN_GATEWAY"), cluster_->state() + "/wrong-mnt",
                            "job-" + job(1), e, cluster_->mount_credentials(token));
  EXPECT_FALSE(m) << "mounted with another job's credential";
  // A node credential needs a node certificate; a fetched one grants its job only.
  auto node = pb::Node::NewStub(channel);
  grpc::ClientContext ctx;
  pb::JobMountCredentialRequest req;
  req.set_job_id(job(2));
  pb::JobMountCredentialReply reply;
  ASSERT_TRUE(node->JobMountCredential(&ctx, req, &reply).ok());
  EXPECT_EQ(reply.ns(), "job-" + job(2));
  EXPECT_EQ(getattr("job-" + job(2), reply.credential(), "/"), "ok");
  EXPECT_EQ(getattr("job-" + job(1), reply.credential(), "/"), "status 16");
}

TEST_F(JobNamespaces, TheByteQuotaStopsADdInTheMiddleAndAnRmGivesTheSpaceBack) {
  create(job(), user(0), "", "8M");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  std::string out;
  int rc = run_command(
      "dd if=/dev/urandom of=" + q(cluster_->state() + "/" + name_ + ".src") +
          " bs=1M count=20 status=none && dd if=" + q(cluster_->state() + "/" + name_ + ".src") +
          " of=" + q(m + "/big") + " bs=1M 2>&1",
      &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("Disk quota exceeded"), std::string::npos) << out;
  struct stat st {};
  ASSERT_EQ(::stat((m + "/big").c_str(), &st), 0);
  EXPECT_LE(static_cast<uint64_t>(st.st_size), 8u << 20);
  EXPECT_GE(static_cast<uint64_t>(st.st_size), 6u << 20) << "it stopped well before the quota";
  // What was written before is intact, byte for byte.
  EXPECT_EQ(run_command("cmp -n " + std::to_string(st.st_size) + " " + q(m + "/big") + " " +
                        q(cluster_->state() + "/" + name_ + ".src")),
            0);
  Json u;
  ASSERT_EQ(ctl_json("ns usage " + job(), u), 0);
  EXPECT_EQ(u["bytes_used"], static_cast<uint64_t>(st.st_size));
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs(m.c_str(), &vfs), 0);
  EXPECT_EQ(static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize, 8u << 20)
      << "df shows the quota as the size";
  // rm gives it back at once, and writing works again.
  ASSERT_EQ(::unlink((m + "/big").c_str()), 0);
  ASSERT_EQ(ctl_json("ns usage " + job(), u), 0);
  EXPECT_EQ(u["bytes_used"], 0u);
  EXPECT_TRUE(write_file(m + "/again", std::string(4 << 20, 'x')));
  // A truncate gives back what it cuts.
  ASSERT_EQ(::truncate((m + "/again").c_str(), 1 << 20), 0);
  ASSERT_EQ(ctl_json("ns usage " + job(), u), 0);
  EXPECT_EQ(u["bytes_used"], 1u << 20);
}

// A hard link is no way around the byte quota: a file with two names counts twice, whichever
// name it grows through, and removing one name gives one copy back.
TEST_F(JobNamespaces, AHardLinkCountsAsACopyWhicheverNameTheFileGrowsThrough) {
  create(job(), user(0), "", "8M");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  std::string out;
  ASSERT_EQ(as(user(0),
               ": > " + m + "/a && ln " + m + "/a " + m + "/b && head -c 3M /dev/zero >> " + m +
                   "/a && rm " + m + "/b",
               &out),
            0)
      << out;
  Json u;
  ASSERT_EQ(ctl_json("ns usage " + job(), u), 0);
  EXPECT_EQ(u["bytes_used"], 3u << 20) << "the file's bytes are still there, at a";
  // With a second name again (3 MiB more), 2 MiB more through either name count 4: past the
  // quota, refused.
  EXPECT_NE(as(user(0), "ln " + m + "/a " + m + "/c && head -c 2M /dev/zero >> " + m + "/a", &out),
            0)
      << out;
  EXPECT_NE(out.find("Disk quota exceeded"), std::string::npos) << out;
}

TEST_F(JobNamespaces, TheInodeQuotaStopsCreates) {
  create(job(), user(0), "--quota-inodes 5");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  ASSERT_EQ(::mkdir((m + "/d").c_str(), 0755), 0);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(write_file(m + "/d/f" + std::to_string(i), "x")) << i;
  EXPECT_EQ(
      SKEIN_ERRNO_OF(::open((m + "/d/one-too-many").c_str(), O_CREAT | O_WRONLY | O_EXCL, 0644)),
      EDQUOT);
  // Created as echo creates (asynchronously): the error comes with the write, or at close.
  EXPECT_EQ(create_write_close_errno(m + "/d/echoed", "x"), EDQUOT);
  struct stat st;
  EXPECT_NE(::stat((m + "/d/echoed").c_str(), &st), 0) << "a refused create left a file";
  EXPECT_EQ(SKEIN_ERRNO_OF(::mkdir((m + "/e").c_str(), 0755)), EDQUOT);
  ASSERT_EQ(::unlink((m + "/d/f0").c_str()), 0);
  EXPECT_TRUE(write_file(m + "/d/now-it-fits", "x"));
}

// An asynchronous create that the gateway makes and whose first write the quota then refuses:
// the application gets EDQUOT, and the gateway's handle of the file made goes with the close.
TEST_F(JobNamespaces, ACreateWhoseWriteIsRefusedLeavesNoHandleAtTheGateway) {
  create(job(), user(0), "", "1M");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  ASSERT_TRUE(write_file(m + "/full", std::string(1 << 20, 'x')));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(create_write_close_errno(m + "/over" + std::to_string(i), "more"), EDQUOT) << i;
  long held = -1;
  EXPECT_TRUE(eventually([&] {
    held = skeinctl_number(*cluster_, "namespaces", "job-" + job(), "open_files");
    return held == 0;
  })) << held
      << " handles held by the gateway after every file was closed";
}

// A write past the quota fails after the mount acknowledged it. A close of the open file by
// another process that shares it (a child's close, as at its exec) reports the error, and the
// fsync of the process that wrote still gets it; before, the child's close took it, and the
// writer's fsync and close both returned 0.
TEST_F(JobNamespaces, AWriteErrorTakenByAnotherProcesssCloseStillComesBackAtFsync) {
  create(job(), user(0), "", "1M");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  const int fd = ::open((m + "/f").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // One write(2) of 3 MiB: the kernel sends it as three writes of 1 MiB, the second and third
  // past the quota; it returns the count of those before a failed one, if any failed at once.
  const std::string data(3 << 20, 'q');
  const ssize_t n = ::write(fd, data.data(), data.size());
  EXPECT_TRUE(n > 0 || errno == EDQUOT) << std::strerror(errno);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(fd);  // a FLUSH of the shared open file, whose answer no one reads
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(SKEIN_ERRNO_OF(::fsync(fd)), EDQUOT) << "the write's error was lost";
  EXPECT_EQ(::close(fd), 0) << "reported once to the fsync";
}

// A write past the quota through one descriptor fails after the mount acknowledged it; an fsync
// of another descriptor of the file, opened read-only before the failure (as `sync FILE` opens
// it), reports it once, as Linux does for NFS and local file systems; and the writer's own fsync
// still gets it.
TEST_F(JobNamespaces, AWriteErrorComesBackAtTheFsyncOfAnotherDescriptorOfTheFile) {
  create(job(), user(0), "", "1M");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  const int fd = ::open((m + "/f").c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const int reader = ::open((m + "/f").c_str(), O_RDONLY);
  ASSERT_GE(reader, 0) << std::strerror(errno);
  const std::string data(3 << 20, 'q');
  const ssize_t n = ::write(fd, data.data(), data.size());
  EXPECT_TRUE(n > 0 || errno == EDQUOT) << std::strerror(errno);
  EXPECT_EQ(SKEIN_ERRNO_OF(::fsync(reader)), EDQUOT) << "the file's write error was not reported";
  EXPECT_EQ(::fsync(reader), 0) << "reported once to each descriptor";
  const int later = ::open((m + "/f").c_str(), O_RDONLY);  // opened after the error
  ASSERT_GE(later, 0) << std::strerror(errno);
  EXPECT_EQ(::fsync(later), 0) << "an error from before the open reported to it";
  EXPECT_EQ(SKEIN_ERRNO_OF(::fsync(fd)), EDQUOT) << "the writer's fsync lost its error";
  EXPECT_EQ(::close(later), 0);
  EXPECT_EQ(::close(reader), 0);
  EXPECT_EQ(::close(fd), 0);
}

TEST_F(JobNamespaces, DestroyWhileMountedGivesEstaleAtOnceAndRemovesEveryPart) {
  create(job(), user(0));
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  ASSERT_TRUE(write_file(m + "/f", std::string(3 << 20, 'y')));  // parts on every backend
  std::string out;
  ASSERT_EQ(ctl("ns destroy " + job(), &out), 0) << out;
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(exists(server_dir(job(), i))) << "part left on " << i;
  auto t0 = std::chrono::steady_clock::now();
  int err = 0;
  ASSERT_TRUE(eventually(
      [&] {
        struct stat st {};
        err = SKEIN_ERRNO_OF(::stat((m + "/f").c_str(), &st));
        return err == ESTALE || err == ENOENT;
      },
      5s))
      << "errno " << err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s) << "the destroyed namespace hung";
  EXPECT_EQ(SKEIN_ERRNO_OF(::open((m + "/new").c_str(), O_CREAT | O_WRONLY, 0644)) != 0, true);
  Json d;
  ASSERT_EQ(ctl_json("ns destroy " + job(), d), 0) << "destroy is idempotent";
  EXPECT_EQ(d["existed"], false);
}

TEST_F(JobNamespaces, ANamespaceExpiresAndIsReaped) {
  create(job(), user(0), "--lifetime 3s");
  ASSERT_TRUE(exists(server_dir(job(), 0)));
  EXPECT_TRUE(eventually(
      [&] {
        Json list;
        ctl_json("ns list", list);
        for (auto& n : list["job_namespaces"])
          if (n["job_id"] == job()) return false;
        return true;
      },
      15s));
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 0)); }, 5s));
  std::string log;
  run_command("grep -c 'job-" + job() + " expired' " + q(cluster_->state() + "/gateway.log"), &log);
  EXPECT_EQ(log, "1\n");
}

// A mount of a namespace whose lifetime is over means its job runs on (a Slurm job whose time
// limit was raised after its namespace was made): it is kept until no mount has it, but never
// past max_lifetime from when it was made.
TEST_F(JobNamespaces, ANamespaceThatExpiresWhileMountedIsKeptUntilItsLastMountGoes) {
  auto listed = [&](const std::string& id) {
    Json list;
    ctl_json("ns list", list);
    for (auto& n : list["job_namespaces"])
      if (n["job_id"] == id) return true;
    return false;
  };
  const std::string log = cluster_->state() + "/gateway.log";
  create(job(), user(0), "--lifetime 2s");
  const std::string mp = mount(job());
  ASSERT_FALSE(mp.empty());
  ASSERT_EQ(as(user(0), "echo still-running > " + q(mp + "/results")), 0);
  std::this_thread::sleep_for(5s);  // past its lifetime, and the expiry checks of each second
  EXPECT_TRUE(listed(job())) << "destroyed while mounted";
  std::string out;
  EXPECT_EQ(as(user(0), "cat " + q(mp + "/results"), &out), 0) << out;
  EXPECT_EQ(out, "still-running\n");
  EXPECT_EQ(read_file(server_dir(job(), 0) + "/results").empty() &&
                read_file(server_dir(job(), 1) + "/results").empty() &&
                read_file(server_dir(job(), 2) + "/results").empty(),
            false)
      << "its file is gone from the servers";
  run_command("grep -c 'job-" + job() + " expired while mounted' " + q(log), &out);
  EXPECT_EQ(out, "1\n") << "said more than once, or not at all";
  mounts_.clear();  // the job ended: unmounted
  EXPECT_TRUE(eventually([&] { return !listed(job()); }, 15s)) << "kept after its last mount went";
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 0)); }, 5s));

  // The bound: with max_lifetime 6 s, a namespace still mounted goes 6 s after it was made.
  const std::string config = cluster_->state() + "/gateway.toml";
  const std::string original = read_file(config);
  std::string shorter = original;
  shorter.replace(shorter.find("default_lifetime = \"24h\""), 24,
                  "default_lifetime = \"2s\"\nmax_lifetime = \"6s\"");
  auto restart = [&] { return cluster_->stop_gateway() && cluster_->start_gateway(); };
  struct Restore {
    std::function<void()> fn;
    ~Restore() { fn(); }
  } restore{[&] {
    mounts_.clear();
    write_file(config, original);
    restart();
  }};
  ASSERT_TRUE(write_file(config, shorter));
  ASSERT_TRUE(restart());
  create(job(2), user(0), "--lifetime 2s");
  const auto made = std::chrono::steady_clock::now();
  ASSERT_FALSE(mount(job(2)).empty());
  EXPECT_TRUE(eventually([&] { return !listed(job(2)); }, 15s)) << "kept past max_lifetime";
  const auto after = std::chrono::steady_clock::now() - made;
  EXPECT_GE(after, 5s) << "destroyed before max_lifetime although mounted";
}

// `ns renew` moves a namespace's expiry later (a job that runs or waits longer than its lifetime
// foresaw): never earlier, never past max_lifetime from when it was made, kept across a restart.
TEST_F(JobNamespaces, ARenewalMovesTheExpiryLaterOnlyAndUpToMaxLifetime) {
  create(job(), user(0), "--lifetime 1h");
  auto expiry = [&](Json& n) {
    return ctl_json("ns usage " + job(), n) == 0 ? n["expires_s"].get<int64_t>() : int64_t{0};
  };
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  Json n;
  const int64_t first = expiry(n);
  const int64_t created = n["created_s"].get<int64_t>();
  ASSERT_NEAR(static_cast<double>(first - created), 3600.0, 5.0) << n.dump();
  Json r;
  ASSERT_EQ(ctl_json("ns renew " + job() + " --lifetime 2h", r), 0) << r.dump();
  const int64_t renewed = r["expires_s"].get<int64_t>();
  EXPECT_NEAR(static_cast<double>(renewed - now()), 7200.0, 60.0) << r.dump();
  EXPECT_EQ(expiry(n), renewed);
  // Never earlier: a shorter renewal leaves it.
  ASSERT_EQ(ctl_json("ns renew " + job() + " --lifetime 10m", r), 0) << r.dump();
  EXPECT_EQ(r["expires_s"].get<int64_t>(), renewed);
  // Never past max_lifetime (30 days here) from when it was made.
  ASSERT_EQ(ctl_json("ns renew " + job() + " --lifetime 400d", r), 0) << r.dump();
  EXPECT_EQ(r["expires_s"].get<int64_t>(), created + 30 * 86400) << r.dump();
  // Kept across a restart.
  ASSERT_TRUE(cluster_->stop_gateway() && cluster_->start_gateway());
  EXPECT_EQ(expiry(n), created + 30 * 86400) << n.dump();
  // Bad input changes nothing, and says what is wrong.
  std::string out;
  EXPECT_NE(ctl("ns renew " + job() + "-none --lifetime 1h", &out), 0);
  EXPECT_NE(out.find("no job namespace for job '" + job() + "-none'"), std::string::npos) << out;
  for (const char* bad : {"0s", "soon", "-5m"}) {
    EXPECT_EQ(ctl("ns renew " + job() + " --lifetime " + bad, &out), 2) << bad << ": " << out;
    EXPECT_NE(out.find("is not a duration"), std::string::npos) << bad << ": " << out;
  }
  EXPECT_NE(ctl("ns renew " + job(), &out), 0) << "no --lifetime: " << out;
  // Straight to the gateway: only an admin certificate with the admin token renews.
  const std::string admin_token = read_token(cluster_->env("SKEIN_ADMIN_TOKEN_FILE"));
  auto renew = [&](bool admin_cert, const std::string& token, int64_t lifetime_s) {
    std::string error;
    auto channel = wire::secure_channel(cluster_->env("SKEIN_GATEWAY"),
                                        cluster_tls(*cluster_, admin_cert), error);
    auto stub = pb::Admin::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("x-skein-admin-token", token);
    pb::RenewJobNamespaceRequest req;
    req.set_job_id(job());
    req.set_lifetime_s(lifetime_s);
    pb::NamespaceUsageReply reply;
    return stub->RenewJobNamespace(&ctx, req, &reply);
  };
  EXPECT_EQ(renew(false, admin_token, 3600).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(renew(true, "", 3600).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  auto st = renew(true, admin_token, 0);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("more than 0 s"), std::string::npos) << st.error_message();
  EXPECT_TRUE(renew(true, admin_token, INT64_MAX).ok()) << "no overflow, the cap";
  EXPECT_EQ(expiry(n), created + 30 * 86400) << n.dump();
}

TEST_F(JobNamespaces, ARemovalOnABackendThatIsDownIsDoneWhenItIsBack) {
  ASSERT_NO_FATAL_FAILURE(destroy_with_server_1_down());
  EXPECT_FALSE(exists(server_dir(job(), 0)));
  EXPECT_TRUE(exists(server_dir(job(), 1)));
  ASSERT_TRUE(cluster_->start_server(1));
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 1)); }, 30s))
      << "the pending removal was forgotten";
}

// A requeued Slurm job keeps its id: its namespace is made again while the removal of the old
// one's directory on a server that was down is still pending. The new namespace's directories
// are its own; the removal's retry must not take them.
TEST_F(JobNamespaces, MadeAgainWhileItsOldRemovalIsPending) {
  ASSERT_NO_FATAL_FAILURE(destroy_with_server_1_down());
  ASSERT_TRUE(cluster_->start_server(1));
  // Made again as soon as the gateway takes the server back: before the removal's next retry
  // (every 5 s), as a rule.
  Json made;
  ASSERT_TRUE(eventually([&] { return ctl_json(create_args(job(), user(0)), made) == 0; }, 30s))
      << made.dump();
  Json shown;
  ASSERT_EQ(ctl_json("ns usage " + job(), shown), 0) << shown.dump();
  EXPECT_EQ(shown["pending_removals"], Json::array()) << shown.dump();
  // Past two retries: both directories are still there, and the namespace works.
  std::this_thread::sleep_for(12s);
  EXPECT_TRUE(exists(server_dir(job(), 0)));
  EXPECT_TRUE(exists(server_dir(job(), 1))) << "the old namespace's removal took the new one's";
  const std::string mp = mount(job());
  ASSERT_FALSE(mp.empty());
  std::string out;
  EXPECT_EQ(
      as(user(0), "for i in 1 2 3 4 5 6; do echo $i > " + q(mp) + "/f$i || exit 1; done", &out), 0)
      << out;
}

// A create that waits for a hung server holds up that create only: another job's calls are
// answered meanwhile (its directories are made without the lock every job's calls take).
TEST_F(JobNamespaces, ACreateWaitingForAHungServerHoldsUpNoOtherJob) {
  create(job(), user(0));
  const std::string other = job() + "-other";
  ASSERT_TRUE(cluster_->freeze_server(1));
  LocalCluster::ThawOnExit thaw(*cluster_, 1);
  std::thread maker([&] { (void)ctl(create_args(other, user(0))); });
  std::this_thread::sleep_for(1s);  // the create is waiting for server 1 now
  const auto start = std::chrono::steady_clock::now();
  Json u;
  EXPECT_EQ(ctl_json("ns usage " + job(), u), 0) << u.dump();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s)
      << "another job's call waited for the create";
  EXPECT_TRUE(cluster_->thaw_server(1));
  maker.join();
  // The server back, the other job's namespace is made (or was, once the server answered).
  Json made;
  EXPECT_TRUE(eventually([&] { return ctl_json(create_args(other, user(0)), made) == 0; }, 60s))
      << made.dump();
}

// The kernel makes up a fresh mount's first root attributes (mode 040000, the mounter's): only
// a GETATTR's reply gives the real ones, and it drops a reply that an invalidation of the root
// overtook, such as the first Watch subscription's drop of the cache a few milliseconds after
// the mount returns. The job's user, who is not root, would then find the root unsearchable,
// and its first write would fail with EACCES.
TEST_F(JobNamespaces, TheJobsUserWritesAsSoonAsTheMountReturns) {
  create(job(), user(0));
  for (int i = 0; i < 6; ++i) {
    const std::string mp = mount(job());
    ASSERT_FALSE(mp.empty());
    const std::string f = q(mp + "/f" + std::to_string(i));
    std::string out;
    EXPECT_EQ(as(user(0), "echo " + std::to_string(i) + " > " + f + " && cat " + f, &out), 0)
        << "mount " << i << ": " << out;
    mounts_.pop_back();  // unmounted
  }
}

// What the saved usage lacks (a gateway killed before its next save; here, files put into the
// namespace's directory on the server while the gateway was down) is found by the walk at the
// next start.
TEST_F(JobNamespaces, TheUsageIsCountedAgainAtTheStart) {
  create(job(), user(0), "--layout union --backends scratch0");
  ASSERT_TRUE(cluster_->stop_gateway());
  ASSERT_TRUE(write_file(server_dir(job(), 0) + "/behind-its-back", std::string(5 << 20, 'b')));
  ASSERT_EQ(::mkdir((server_dir(job(), 0) + "/d").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(server_dir(job(), 0) + "/d/also", std::string(1000, 'c')));
  ASSERT_TRUE(cluster_->start_gateway());
  Json u;
  EXPECT_TRUE(eventually(
      [&] {
        return ctl_json("ns usage " + job(), u) == 0 && u["bytes_used"] == (5u << 20) + 1000 &&
               u["inodes_used"] == 3u;
      },
      20s))
      << u.dump();
}

TEST_F(JobNamespaces, NamespacesCredentialsAndUsageSurviveAKillOfTheGateway) {
  create(job(), user(0));
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  ASSERT_TRUE(write_file(m + "/f", std::string(3 << 20, 'z')));
  std::this_thread::sleep_for(3s);  // usage is saved every 2 s; the recount fixes it otherwise
  ASSERT_TRUE(cluster_->stop_gateway(/*kill=*/true));
  // Written while the gateway is down: the mount fails, nothing hangs.
  ASSERT_TRUE(cluster_->start_gateway());
  Json u;
  ASSERT_TRUE(eventually([&] { return ctl_json("ns usage " + job(), u) == 0; }));
  EXPECT_EQ(u["bytes_used"], 3u << 20);
  EXPECT_EQ(u["inodes_used"], 1u);
  // The mount's credential is still good: it goes on without a remount.
  EXPECT_TRUE(eventually([&] { return read_file(m + "/f") == std::string(3 << 20, 'z'); }, 20s));
  EXPECT_TRUE(write_file(m + "/after", "x"));
}

// The usage saved in the database is counted again from the backends after a start; a namespace
// that cannot be walked then (a server down) is counted once it can be. Before, the first try was
// the only one, and the saved usage stood for good.
TEST_F(JobNamespaces, UsageIsRecountedOnceAServerDownAtTheStartIsBack) {
  create(job(), user(0), "--layout union --backends scratch0 scratch1");
  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  ASSERT_TRUE(write_file(m + "/f", std::string(3 << 20, 'z')));
  std::this_thread::sleep_for(3s);  // saved (every 2 s)
  ASSERT_TRUE(cluster_->stop_gateway(/*kill=*/true));
  // Written on a server behind the gateway's back while it was down: not in the saved usage.
  ASSERT_TRUE(write_file(server_dir(job(), 1) + "/behind", std::string(1 << 20, 'b')));
  ASSERT_TRUE(cluster_->stop_server(1));
  ASSERT_TRUE(cluster_->start_gateway());
  Json u;
  ASSERT_TRUE(eventually([&] { return ctl_json("ns usage " + job(), u) == 0; }));
  EXPECT_EQ(u["bytes_used"], 3u << 20) << "the saved usage, until the server is back";
  ASSERT_TRUE(cluster_->start_server(1));
  EXPECT_TRUE(eventually(
      [&] { return ctl_json("ns usage " + job(), u) == 0 && u["bytes_used"] == 4u << 20; }, 60s))
      << u.dump();
  EXPECT_EQ(u["inodes_used"], 2u);
}

// A namespace of the database that the gateway cannot serve at start (here: one of its backends is
// gone from the configuration) keeps its files, never reaped as an orphan; a create of its job is
// refused with why, and a destroy removes it. A job namespace may not take the place of a
// namespace of the configuration that has its name.
TEST_F(JobNamespaces, ANamespaceThatCannotBeServedKeepsItsFilesUntilItIsDestroyed) {
  const std::string kept = "cannot-serve", taken = "name-taken", clash = "clash";
  create(kept, user(0), "--layout union --backends scratch0 scratch1");
  create(clash, user(0));  // the configuration below gets a namespace of its name
  const std::string file = server_dir(kept, 0) + "/results";
  ASSERT_TRUE(write_file(file, "precious"));
  const std::string clash_file = server_dir(clash, 0) + "/results";
  ASSERT_TRUE(write_file(clash_file, "precious too"));
  const std::string config = cluster_->state() + "/gateway.toml";
  const std::string original = read_file(config);
  std::string changed = original;
  const size_t token_at = changed.find("token_file = ");
  ASSERT_NE(token_at, std::string::npos);
  const std::string token_line = changed.substr(token_at, changed.find('\n', token_at) - token_at);
  changed.replace(changed.find("[jobs]\n"), 7,
                  "[[namespace]]\nname = \"job-" + taken + "\"\n" + token_line +
                      "\n[[namespace.mount]]\npath = \"/srv0\"\nbackends = [\"srv0\"]\n\n"
                      "[[namespace]]\nname = \"job-" +
                      clash + "\"\n" + token_line +
                      "\n[[namespace.mount]]\npath = \"/srv0\"\nbackends = [\"srv0\"]\n\n"
                      "[jobs]\norphan_grace = \"2s\"\n");
  ASSERT_TRUE(cluster_->stop_gateway());
  ASSERT_TRUE(write_file(config, changed));
  ASSERT_EQ(run_command("python3 -c 'import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
                        "c.execute(\"update job_namespaces set backends=? where name=?\", "
                        "(\"scratch0,gone\", sys.argv[2])); c.commit()' " +
                        q(cluster_->env("SKEIN_JOBS_DB")) + " " + q("job-" + kept)),
            0);
  ASSERT_TRUE(cluster_->start_gateway());
  std::string out;
  EXPECT_NE(ctl(create_args(kept, user(0), "--layout union --backends scratch0 scratch1"), &out),
            0);
  EXPECT_NE(out.find("cannot serve"), std::string::npos) << out;
  EXPECT_NE(ctl(create_args(taken, user(0)), &out), 0);
  EXPECT_NE(out.find("in the gateway's configuration"), std::string::npos) << out;
  // The job namespace made before the configuration took its name is not served in its place.
  EXPECT_NE(read_file(cluster_->state() + "/gateway.log")
                .find("cannot serve job-" + clash + ": a namespace named"),
            std::string::npos);
  EXPECT_NE(ctl("ns usage " + clash, &out), 0) << out;
  std::this_thread::sleep_for(5s);  // past the orphans' grace, twice
  EXPECT_EQ(read_file(file), "precious") << "the namespace's files were reaped or replaced";
  EXPECT_EQ(read_file(clash_file), "precious too") << "reaped or replaced";
  ASSERT_EQ(ctl("ns destroy " + kept, &out), 0) << out;
  EXPECT_FALSE(exists(server_dir(kept, 0))) << "the destroy left its directory";
  ASSERT_TRUE(write_file(config, original));
  ASSERT_TRUE(cluster_->stop_gateway() && cluster_->start_gateway());
  EXPECT_NE(ctl("ns usage " + kept, &out), 0) << "the destroyed namespace came back: " << out;
}

TEST_F(JobNamespaces, ADirectoryNoNamespaceClaimsIsReapedAfterTheGracePeriod) {
  create(job(), user(0));  // a namespace that is claimed stays
  // The gateway again, with a grace of 3 s.
  const std::string config = cluster_->state() + "/gateway.toml";
  const std::string log = cluster_->state() + "/gateway.log";
  const std::string original = read_file(config);
  std::string shorter = original;
  shorter.replace(shorter.find("[jobs]\n"), 7, "[jobs]\norphan_grace = \"3s\"\n");
  ASSERT_TRUE(write_file(config, shorter));
  auto restart = [&] { return cluster_->stop_gateway() && cluster_->start_gateway(); };
  ASSERT_TRUE(restart());
  // Then a job directory the database does not know (a store restored from an old backup, a
  // gateway that lost its database), on two servers, with a file in it.
  const size_t log_before = read_file(log).size();
  const std::string orphan = "job-" + job() + "-orphan";
  for (int i = 0; i < 2; ++i) {
    const std::string d =
        cluster_->list("SKEIN_SCRATCH_DIRS").at(static_cast<size_t>(i)) + "/" + orphan;
    ASSERT_EQ(run_command("mkdir -p " + q(d + "/sub") + " && echo x > " + q(d + "/sub/f")), 0);
  }
  const std::string dir0 = cluster_->list("SKEIN_SCRATCH_DIRS").at(0) + "/" + orphan;
  // Reported, and kept for the grace period...
  EXPECT_TRUE(eventually([&] {
    std::string text = read_file(log);
    return text.size() > log_before && text.find(orphan, log_before) != std::string::npos;
  })) << "the orphan was not reported";
  std::this_thread::sleep_for(1s);
  EXPECT_TRUE(exists(dir0)) << "reaped before its grace was over";
  // ...then removed on every server; the claimed namespace is untouched.
  EXPECT_TRUE(eventually(
      [&] {
        for (int i = 0; i < 2; ++i)
          if (exists(cluster_->list("SKEIN_SCRATCH_DIRS").at(static_cast<size_t>(i)) + "/" +
                     orphan))
            return false;
        return true;
      },
      20s));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(exists(server_dir(job(), i))) << i;
  ASSERT_TRUE(write_file(config, original));
  ASSERT_TRUE(restart());
}

// Each backend of the pool names, in its root's `.skein-pool`, the job database whose job
// directories it holds. A gateway with another database (a second gateway pointed at this pool,
// a database lost and made anew: here the same gateway started on a new database) makes no job
// directory there and reaps none, where it used to take the first database's directories for
// orphans; removing the file hands the backend over.
TEST_F(JobNamespaces, AGatewayWithAnotherDatabaseLeavesThePoolsJobDirectoriesAlone) {
  create(job(), user(0));
  const std::string file = server_dir(job(), 0) + "/results";
  ASSERT_TRUE(write_file(file, "precious"));
  const auto scratch = cluster_->list("SKEIN_SCRATCH_DIRS");
  auto identity_of = [&](const std::string& db) {
    std::string out;
    run_command(
        "python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1])"
        ".execute(\"select id from identity\").fetchone()[0])' " +
            q(db),
        &out);
    return out.substr(0, out.find('\n'));
  };
  const std::string first = identity_of(cluster_->env("SKEIN_JOBS_DB"));
  ASSERT_EQ(first.size(), 32u) << first;
  for (auto& dir : scratch)
    EXPECT_NE(read_file(dir + "/.skein-pool").find("identity = \"" + first + "\""),
              std::string::npos)
        << dir << " does not name the gateway's database";
  // skeinctl says whose each pool backend is.
  auto claim_of = [&](const std::string& backend) {
    Json list;
    ctl_json("backends list", list);
    for (auto& b : list["backends"])
      if (b["name"] == backend) return b;
    return Json();
  };
  Json b0 = claim_of("scratch0");
  EXPECT_EQ(b0["job_pool"], "scratch") << b0.dump();
  EXPECT_EQ(b0["pool_claim_ours"], true) << b0.dump();
  EXPECT_EQ(claim_of("srv0")["job_pool"], "") << "a backend of no pool";
  // The gateway again, on a database of its own and with an orphans' grace of 2 s.
  const std::string config = cluster_->state() + "/gateway.toml";
  const std::string log = cluster_->state() + "/gateway.log";
  const std::string original = read_file(config);
  const std::string other_db = cluster_->state() + "/other-jobs.sqlite";
  std::string changed = original;
  const size_t db_at = changed.find("database = ", changed.find("[jobs]\n"));
  ASSERT_NE(db_at, std::string::npos);
  changed.replace(db_at, changed.find('\n', db_at) - db_at,
                  "database = \"" + other_db + "\"\norphan_grace = \"2s\"");
  auto restart = [&] { return cluster_->stop_gateway() && cluster_->start_gateway(); };
  struct Restore {  // the first database and claims again, however the test ends
    std::function<void()> fn;
    ~Restore() { fn(); }
  } restore{[&] {
    write_file(config, original);
    for (auto& dir : scratch)
      if (read_file(dir + "/.skein-pool").find(first) == std::string::npos)
        ::unlink((dir + "/.skein-pool").c_str());
    restart();
    ::unlink(other_db.c_str());
  }};
  ASSERT_TRUE(write_file(config, changed));
  const size_t log_before = read_file(log).size();
  ASSERT_TRUE(restart());
  const std::string second = identity_of(other_db);
  ASSERT_EQ(second.size(), 32u) << second;
  EXPECT_NE(second, first);
  // Said at the start, and to a create, with what to do.
  EXPECT_TRUE(eventually([&] {
    return read_file(log).find("names another gateway's job database (" + first, log_before) !=
           std::string::npos;
  })) << read_file(log).substr(log_before);
  b0 = claim_of("scratch0");
  EXPECT_EQ(b0["pool_claim_ours"], false) << b0.dump();
  EXPECT_EQ(b0["pool_claim_foreign"], true) << b0.dump();
  EXPECT_NE(
      b0["pool_claim"].get<std::string>().find("names another gateway's job database (" + first),
      std::string::npos)
      << b0.dump();
  std::string out;
  ctl("backends list", &out);
  EXPECT_NE(out.find("jobs pool scratch (another job database's: not used)"), std::string::npos)
      << out;
  EXPECT_NE(ctl(create_args(job(), user(0)), &out), 0) << out;
  EXPECT_NE(out.find("two gateways must not share a pool's backends"), std::string::npos) << out;
  EXPECT_NE(ctl(create_args(job(2), user(0)), &out), 0) << out;
  EXPECT_NE(out.find("names another gateway's job database"), std::string::npos) << out;
  // Past the grace twice: the first database's directories are kept, its claims unchanged.
  std::this_thread::sleep_for(5s);
  EXPECT_EQ(read_file(file), "precious") << "a directory of the other database was reaped";
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(exists(server_dir(job(), i))) << i;
  for (auto& dir : scratch)
    EXPECT_NE(read_file(dir + "/.skein-pool").find(first), std::string::npos) << dir;
  EXPECT_EQ(read_file(log).find("orphan", log_before), std::string::npos)
      << read_file(log).substr(log_before);
  // A claim that names no database (emptied by hand) is not used either, and shown so.
  ASSERT_TRUE(write_file(scratch.at(0) + "/.skein-pool", ""));
  EXPECT_TRUE(eventually([&] {
    b0 = claim_of("scratch0");
    return b0["pool_claim"].get<std::string>().find("names no job database") != std::string::npos;
  })) << b0.dump();
  EXPECT_EQ(b0["pool_claim_foreign"], true) << b0.dump();
  ctl("backends list", &out);
  EXPECT_NE(out.find("jobs pool scratch (another job database's: not used)"), std::string::npos)
      << out;
  // The claims removed by hand: the backends are this database's, and what it does not know
  // is an orphan.
  for (auto& dir : scratch) ASSERT_EQ(::unlink((dir + "/.skein-pool").c_str()), 0) << dir;
  EXPECT_EQ(ctl(create_args(job(2), user(0)), &out), 0) << out;
  for (auto& dir : scratch)
    EXPECT_NE(read_file(dir + "/.skein-pool").find(second), std::string::npos) << dir;
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 0)); }, 20s))
      << "the directory no namespace of this database claims was not reaped";
  EXPECT_TRUE(exists(server_dir(job(2), 0)));
  EXPECT_EQ(ctl("ns destroy " + job(2), &out), 0) << out;
}

}  // namespace
}  // namespace skein::test
