// Staging end to end: trees copied into and out of job namespaces by a real gateway on real sshd
// servers, driven with skeinctl as Slurm's burst buffer drives it, checked byte for byte (and
// mode, time and symlink for each entry) through a FUSE mount of the job's namespace and on the
// storage servers; a copy killed with the gateway goes on where it was; bad requests change
// nothing.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "job_suite.hpp"

namespace skein::test {
namespace {

using namespace std::chrono_literals;

class Staging : public JobSuite {
 protected:
  // A tree under export `server` at `rel`: `small` files of up to 8 KiB in ten directories (one
  // read-only, one file mode 0640, times in the past), a symlink, an empty file and `big` files
  // of `big_mib` MiB of random bytes. Its place in namespace "default".
  std::string make_tree(int server, const std::string& rel, int small, int big, int big_mib) {
    const std::string root = cluster_->export_dir(server) + rel;
    std::string script =
        "set -e; mkdir -p " + q(root) + "; cd " + q(root) + "; " +
        "for d in $(seq 0 9); do mkdir -p d$d; done; " + "i=0; while [ $i -lt " +
        std::to_string(small) + " ]; do " +
        "head -c $(( (i * 7919) % 8192 )) /dev/urandom > d$((i % 10))/f$i; " +
        "i=$((i + 1)); done; " + ": > empty; ln -s d1/f1 link; " +
        "ln -s /etc/hostname absolute-link; chmod 640 d2/f2 2>/dev/null || true; " +
        "find d3 empty -exec touch -h -d '2021-03-04 05:06:07' {} +; ";
    for (int b = 0; b < big; ++b)
      script += "head -c " + std::to_string(big_mib) + "M /dev/urandom > big" + std::to_string(b) +
                "; touch -d '2019-01-01 00:00:00' big" + std::to_string(b) + "; ";
    script += "chmod 555 d9\n";
    const std::string file = cluster_->state() + "/make-tree.sh";
    EXPECT_TRUE(write_file(file, script));
    EXPECT_EQ(run_command("sh " + q(file) + " 2>&1"), 0);
    return "default:/srv" + std::to_string(server) + rel;
  }

  // Every entry below `dir`: its kind, permissions, and the size and whole-second time of a file
  // (or a symlink's target), one line each, sorted: two trees with the same listing have the
  // same names, kinds, modes, times and symlinks. Contents are compared by diff_trees.
  static std::string listing(const std::string& dir) {
    std::string out;
    run_command("cd " + q(dir) +
                    " && find . -mindepth 1 -print0 | sort -z | xargs -0 stat -c "
                    "'%n %F %a %s %Y %N' | awk '$2 == \"directory\" {print $1, $2, $3, $5; next} "
                    "/symbolic link/ {print $1, \"symlink\", $NF; next} {print}'",
                &out);
    return out;
  }
  static bool same_contents(const std::string& a, const std::string& b) {
    std::string out;
    int rc = run_command("diff -r --no-dereference " + q(a) + " " + q(b) + " 2>&1", &out);
    EXPECT_EQ(rc, 0) << out.substr(0, 2000);
    return rc == 0;
  }

  // `skeinctl --json stage ... --wait`: every line one JSON object; the last is returned.
  int stage_wait(const std::string& args, Json& last, std::vector<Json>* lines = nullptr) {
    std::string o;
    int rc = run_command("(" + cluster_->admin_env() +
                             "SKEIN_GATEWAY=" + cluster_->env("SKEIN_GATEWAY") + " " +
                             q(skeinctl()) + " " + args + " --wait 2>/dev/null)",
                         &o);
    std::istringstream in(o);
    std::string line;
    while (std::getline(in, line)) {
      Json j = Json::parse(line, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << "not a JSON line: " << line;
      if (lines) lines->push_back(j);
      last = j;
    }
    return rc;
  }
  Json status(const std::string& id) {
    Json j;
    EXPECT_EQ(ctl_json("stage status " + id, j), 0) << j.dump();
    return j;
  }
  // Waits until stage `id` has ended (neither running nor queued); its status in `end`.
  bool ended(const std::string& id, Json& end, std::chrono::seconds within = 120s) {
    return eventually(
        [&] {
          if (ctl_json("stage status " + id, end) != 0) return false;
          return end["state"] != "running" && end["state"] != "queued";
        },
        within);
  }
  // Starts a stage-out of the job's /data to default:/srv2/NAME and waits until its saved progress
  // satisfies `enough(total, done)`: its id, with `total` and `done` as they were then; "" (and a
  // failure recorded) when it did not start or get there.
  template <class Enough>
  std::string stage_out_under_way(const std::string& name, uint64_t& total, uint64_t& done,
                                  Enough enough) {
    Json started;
    EXPECT_EQ(ctl_json("stage out " + job() + " /data default:/srv2/" + name, started), 0)
        << started.dump();
    if (!started.contains("id")) return "";
    const std::string id = started["id"];
    const bool reached = eventually(
        [&] {
          Json s = status(id);
          total = s.value("bytes_total", uint64_t{0});
          done = s.value("bytes_done", uint64_t{0});
          return total > 0 && enough(total, done);
        },
        60s);
    EXPECT_TRUE(reached) << "stage " << id << " did not get there";
    return reached ? id : "";
  }
  // Three files of 256 MiB in `dir` on a server, and the job's namespace, whose lifetime ends in
  // 2 s (long before a copy of them does): when, in `expires_s`.
  void short_lived_job_and_large_files(const std::string& dir, int64_t& expires_s) {
    ASSERT_EQ(
        run_command("mkdir -p " + q(dir) + " && for i in 0 1 2; do head -c 256M /dev/urandom > " +
                    q(dir) + "/big$i; done"),
        0);
    const Json made =
        create(job(), user(0), "--layout union --backends scratch0 --lifetime 2s", "2G");
    expires_s = made.value("expires_s", int64_t{0});
  }
  // A stage-out of a tree with three large files, its gateway stopped on the way (killed with -9
  // half way, or stopped with SIGTERM early), then started again: the copy goes on with the rest,
  // and the trees are the same.
  // With `old_in_place`, the copies in progress lose their partials while the gateway is down,
  // and an older file of the same size stands at each one's name: the resumed copy starts those
  // files afresh rather than writing the chunks left into the older file.
  void stop_half_way_then_resume(const std::string& name, bool kill, bool old_in_place = false) {
    const std::string src = make_tree(0, "/" + name + "-src", 20, 3, 150);
    create(job(), user(0), "", "2G");
    Json in;
    ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /data", in), 0) << in.dump();
    uint64_t total = 0, done_before = 0;
    // A SIGTERM lets the copies under way end: it comes at the first progress saved, while many
    // chunks still wait, and at once (not through skein-local's script).
    const std::string id =
        stage_out_under_way(name, total, done_before,
                            [&](uint64_t t, uint64_t d) { return kill ? d >= t / 2 : d > 0; });
    ASSERT_FALSE(id.empty());
    ASSERT_LT(done_before, total) << "the copy finished before the stop; the test proves nothing";
    // A wait for the copy (a Slurm stage hook's) goes on through the gateway's absence.
    std::string followed;
    auto following = std::async(std::launch::async, [&] {
      return ctl("--json stage status " + id + " --wait", &followed);
    });
    // A moment for the follower to ask (it asks again through the outage if it asks late); not
    // long: on a fast machine the half left of a killed copy is done within half a second.
    std::this_thread::sleep_for(kill || old_in_place ? 100ms : 500ms);
    if (old_in_place) {
      // Stopped while a large file's copy is under way (its partial there): on a fast machine the
      // three may all be done half a second after the first progress.
      const std::string dir = cluster_->export_dir(2) + "/" + name + "/";
      EXPECT_TRUE(eventually(
          [&] {
            for (int b = 0; b < 3; ++b)
              if (exists(dir + ".big" + std::to_string(b) + ".skein-partial")) return true;
            return false;
          },
          10s))
          << "no large file's copy was seen under way";
    }
    if (kill) {  // nothing is flushed, nothing said goodbye
      ASSERT_EQ(::kill(cluster_->gateway_pid(), SIGKILL), 0);
      ASSERT_TRUE(cluster_->stop_gateway(/*kill=*/true));  // what skein-local knows of it
    } else {
      const pid_t gateway = cluster_->gateway_pid();
      ASSERT_EQ(::kill(gateway, SIGTERM), 0);
      EXPECT_TRUE(eventually([&] { return !process_runs(gateway); }, 15s))
          << "the gateway did not end on SIGTERM";
      ASSERT_TRUE(cluster_->stop_gateway());
    }
    int planted = 0;
    if (old_in_place) {
      for (int b = 0; b < 3; ++b) {
        const std::string dir = cluster_->export_dir(2) + "/" + name + "/";
        const std::string big = "big" + std::to_string(b);
        if (!exists(dir + "." + big + ".skein-partial")) continue;
        ASSERT_EQ(run_command("rm " + q(dir + "." + big + ".skein-partial") + " && head -c 150M " +
                              "/dev/urandom > " + q(dir + big)),
                  0);
        ++planted;
      }
      // EXPECT, not ASSERT: the gateway is started again below for the tests after this one.
      EXPECT_GT(planted, 0) << "no large file was on its way at the stop; the test proves nothing";
    }
    ASSERT_TRUE(cluster_->start_gateway());
    Json end;
    ASSERT_TRUE(ended(id, end)) << end.dump();
    ASSERT_EQ(end["state"], "done") << end.dump();
    EXPECT_EQ(following.get(), 0) << followed;
    EXPECT_NE(followed.find("does not answer"), std::string::npos) << followed;
    Json last;  // the last line of JSON: the copy as it ended
    std::istringstream lines(followed);
    for (std::string line; std::getline(lines, line);)
      if (auto j = Json::parse(line, nullptr, false); j.is_object()) last = j;
    EXPECT_EQ(last.value("state", std::string()), "done")
        << followed.substr(followed.size() > 2000 ? followed.size() - 2000 : 0);
    if (old_in_place) {
      EXPECT_TRUE(same_contents(cluster_->export_dir(0) + "/" + name + "-src",
                                cluster_->export_dir(2) + "/" + name));
      return;
    }
    const uint64_t moved = end["bytes_moved"];
    // The second gateway copied about the rest: not what was reported done before the kill
    // (less what had not been recorded yet: chunks on their way, the last half second).
    EXPECT_LE(moved, total - done_before + done_before * 2 / 3)
        << "moved " << moved << " of " << total << ", " << done_before << " done before";
    EXPECT_GT(moved, 0u);
    EXPECT_TRUE(same_contents(cluster_->export_dir(0) + "/" + name + "-src",
                              cluster_->export_dir(2) + "/" + name));
  }
};

TEST_F(Staging, InAndOutOfAThousandSmallFilesAndTwoLargeOnesIsByteForByte) {
  const std::string src = make_tree(0, "/stage-src", 1000, 2, 256);
  const std::string src_dir = cluster_->export_dir(0) + "/stage-src";
  // A file and one named as its partial would be (small files are made under .NAME.skein-partial
  // and renamed): each arrives with its own bytes.
  ASSERT_TRUE(write_file(src_dir + "/d4/clash", "the file\n"));
  ASSERT_TRUE(write_file(src_dir + "/d4/.clash.skein-partial", "named as its partial\n"));
  create(job(), user(0), "", "2G");
  std::vector<Json> lines;
  Json in;
  ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /inputs --verify", in, &lines), 0)
      << in.dump();
  EXPECT_EQ(in["state"], "done");
  EXPECT_EQ(in["direction"], "in");
  EXPECT_EQ(in["files_total"], 1000u + 10 + 5 + 2) << "files, directories, symlinks";
  EXPECT_EQ(in["files_done"], in["files_total"]);
  EXPECT_EQ(in["bytes_done"], in["bytes_total"]);
  EXPECT_GT(in["bytes_total"].get<uint64_t>(), 512u << 20);
  EXPECT_TRUE(in["failed"].empty()) << in.dump();
  // Progress only goes forward, and no line before the last says done.
  ASSERT_GE(lines.size(), 1u);
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_GE(lines[i]["bytes_done"], lines[i - 1]["bytes_done"]);
    EXPECT_GE(lines[i]["files_done"], lines[i - 1]["files_done"]);
  }
  for (size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_NE(lines[i]["state"], "done");

  const std::string m = mount(job());
  ASSERT_FALSE(m.empty());
  EXPECT_TRUE(same_contents(src_dir, m + "/inputs"));
  EXPECT_EQ(listing(src_dir), listing(m + "/inputs"));
  // Owned by the job's user, as everything in its namespace.
  struct stat st {};
  ASSERT_EQ(::stat((m + "/inputs/d0/f0").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_of(user(0)));

  // The job writes results; they go out to another server, and match what the job saw.
  ASSERT_EQ(::mkdir((m + "/inputs/results").c_str(), 0755), 0);
  ASSERT_TRUE(write_file(m + "/inputs/results/r", "the job's result\n"));
  mounts_.clear();  // the job has ended: its nodes are gone
  Json out;
  ASSERT_EQ(stage_wait("stage out " + job() + " /inputs default:/srv1/results/" + job(), out), 0)
      << out.dump();
  EXPECT_EQ(out["state"], "done");
  const std::string out_dir = cluster_->export_dir(1) + "/results/" + job();
  EXPECT_EQ(read_file(out_dir + "/results/r"), "the job's result\n");
  ASSERT_EQ(run_command("rm -r " + q(out_dir + "/results")), 0);
  EXPECT_TRUE(same_contents(src_dir, out_dir));
  EXPECT_EQ(listing(src_dir), listing(out_dir));
}

TEST_F(Staging, AStageOutKilledHalfWayGoesOnWithTheRestAfterARestart) {
  stop_half_way_then_resume("killed", true);
}

// A copy whose partial was removed while the gateway was down, an older file of the same size at
// its name: resumed, it starts afresh instead of writing the chunks left into the older file and
// calling that done.
TEST_F(Staging, AResumedCopyWhosePartialIsGoneStartsAfreshOverAnOlderFile) {
  stop_half_way_then_resume("lost-partial", true, /*old_in_place=*/true);
}

// Progress is saved every half second: a gateway killed after a large file's copy was put in place
// (renamed over its name, its times set) may have saved only some of its chunks, and not that the
// file is done. Resumed, it finds the file there as the source is and only finishes it; the whole
// file was copied again.
TEST_F(Staging, AFileInPlaceWhoseLastChunksWereNotRecordedIsNotCopiedAgain) {
  const std::string src = make_tree(0, "/placed-src", 4, 3, 150);
  create(job(), user(0), "", "2G");
  Json in;
  ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /data", in), 0) << in.dump();
  Json started;
  ASSERT_EQ(ctl_json("stage out " + job() + " /data default:/srv2/placed", started), 0)
      << started.dump();
  const std::string id = started.value("id", std::string());
  ASSERT_FALSE(id.empty()) << started.dump();
  // The first large file in place with its source's time (2019), then the kill at once.
  const std::string dest = cluster_->export_dir(2) + "/placed/";
  std::string placed;
  struct stat before {};
  for (auto until = std::chrono::steady_clock::now() + 60s;
       placed.empty() && std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(10ms)) {
    for (int b = 0; b < 3 && placed.empty(); ++b) {
      struct stat st {};
      const std::string big = "big" + std::to_string(b);
      if (::stat((dest + big).c_str(), &st) == 0 && st.st_mtime < 1577836800) {  // before 2020
        placed = big;
        before = st;
      }
    }
  }
  ASSERT_FALSE(placed.empty()) << "no large file's copy was put in place";
  ASSERT_EQ(::kill(cluster_->gateway_pid(), SIGKILL), 0);
  ASSERT_TRUE(cluster_->stop_gateway(/*kill=*/true));
  const bool all_there = [&] {
    for (int b = 0; b < 3; ++b)
      if (!exists(dest + "big" + std::to_string(b))) return false;
    return true;
  }();
  ASSERT_FALSE(all_there) << "the copy was done before the kill; the test proves nothing";
  // What the kill may lose of the file's record: that it is done, and all its chunks but one.
  const std::string sql =
      "UPDATE stage_entries SET done = 0 WHERE op_id = '" + id + "' AND path = '" + placed +
      "'; DELETE FROM stage_chunks WHERE op_id = '" + id + "' AND path = '" + placed +
      "' AND chunk > 0; " + "INSERT OR IGNORE INTO stage_chunks VALUES ('" + id + "', '" + placed +
      "', 0);";
  const std::string sql_file = cluster_->state() + "/lose-records.sql";
  std::string out;
  EXPECT_TRUE(write_file(sql_file, sql + "\n"));
  EXPECT_EQ(
      run_command(
          "sqlite3 " + q(cluster_->state() + "/jobs.sqlite") + " < " + q(sql_file) + " 2>&1", &out),
      0)
      << out;
  ASSERT_TRUE(cluster_->start_gateway());  // also for the tests after this one
  Json end;
  ASSERT_TRUE(ended(id, end)) << end.dump();
  ASSERT_EQ(end["state"], "done") << end.dump();
  struct stat after {};
  ASSERT_EQ(::stat((dest + placed).c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << placed << " was copied again (a new file in its place)";
  EXPECT_EQ(after.st_mtime, before.st_mtime);
  EXPECT_TRUE(same_contents(cluster_->export_dir(0) + "/placed-src", dest));
}

// A stopped gateway's workers leave the chunks they have not begun: a large file with chunks
// left out must not be finished (and recorded done) by the worker that copied its last chunk.
TEST_F(Staging, AStageOutStoppedHalfWayGoesOnWithTheRestAfterARestart) {
  stop_half_way_then_resume("stopped", false);
}

TEST_F(Staging, BadRequestsAreRefusedClearlyAndStartNothing) {
  make_tree(0, "/bad-src", 3, 0, 0);
  create(job(), user(0));
  struct Case {
    std::string args, message;
  } cases[] = {
      {"stage in no-such-job default:/srv0/bad-src /x", "no job namespace for job 'no-such-job'"},
      {"stage in " + job() + " /srv0/bad-src /x", "the other side is outside the job's namespace"},
      {"stage in " + job() + " default:/srv0/bad-src default:/x", "plain /path in its namespace"},
      {"stage in " + job() + " nowhere /x", "is not a place"},
      {"stage in " + job() + " nosuchns:/a /x", "no namespace 'nosuchns'"},
      {"stage in " + job() + " backend:nosuch:/a /x", "no backend 'nosuch'"},
      {"stage in " + job() + " backend:scratch0:/ /x", "belongs to job pool 'scratch'"},
      {"stage in " + job() + " default:/srv0/not-there /x", "No such file or directory"},
      {"stage in " + job() + " default:/../etc /x", "may not climb above its root"},
      {"stage in " + job() + " default:/ /x", "not inside one mount"},
      {"stage out " + job() + " /x job-" + job() + ":/y", "the job's own namespace"},
  };
  for (auto& c : cases) {
    std::string out;
    EXPECT_EQ(ctl(c.args, &out), 4) << c.args << ": " << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.args << ": " << out;
  }
  Json list;
  ASSERT_EQ(ctl_json("stage list " + job(), list), 0);
  EXPECT_TRUE(list["operations"].empty()) << list.dump();
}

// The job database failing under a staging call (a full disk, an I/O error; here its table of
// copies renamed away behind the gateway's back) is named in the answer; it was gRPC's bare
// "Unexpected error in RPC handling" (UNKNOWN).
TEST_F(Staging, ACallTheJobDatabaseFailsUnderSaysSo) {
  create(job(), user(0));
  auto rename = [&](const std::string& from, const std::string& to) {
    return run_command(
        "python3 -c \"import sqlite3, sys; c = sqlite3.connect(sys.argv[1], "
        "timeout=10); c.execute('ALTER TABLE " +
        from + " RENAME TO " + to + "'); c.commit()\" " + q(cluster_->env("SKEIN_JOBS_DB")) +
        " 2>&1");
  };
  ASSERT_EQ(rename("stage_ops", "stage_ops_away"), 0);
  for (const std::string& args : {"stage list " + job(), std::string("stage status no-such-op"),
                                  "stage in " + job() + " default:/srv0 /x"}) {
    std::string out;
    EXPECT_EQ(ctl(args, &out), 4) << args << ": " << out;
    EXPECT_NE(out.find("the job database: "), std::string::npos) << args << ": " << out;
    EXPECT_NE(out.find("stage_ops"), std::string::npos) << args << ": " << out;
  }
  ASSERT_EQ(rename("stage_ops_away", "stage_ops"), 0);
  Json list;
  ASSERT_EQ(ctl_json("stage list " + job(), list), 0) << list.dump();
  EXPECT_TRUE(list["operations"].empty()) << list.dump();
}

// Names in Latin-1 (any bytes but '/' and NUL) are copied like any other, both ways, and where
// one is named in an answer, skeinctl --json still prints JSON (the bytes that are not UTF-8
// shown as U+FFFD); it ended in std::terminate.
TEST_F(Staging, NamesThatAreNotUtf8AreCopiedAndNamedInValidJson) {
  const std::string src = cluster_->export_dir(0) + "/latin1-src";
  ASSERT_EQ(run_command("mkdir -p " + q(src + "/d\xe9") + " && echo one > " + q(src + "/caf\xe9") +
                        " && echo two > " + q(src + "/d\xe9/na\xefve")),
            0);
  create(job(), user(0));
  Json in, out;
  ASSERT_EQ(stage_wait("stage in " + job() + " default:/srv0/latin1-src /in", in), 0) << in.dump();
  ASSERT_EQ(stage_wait("stage out " + job() + " /in default:/srv0/latin1-out", out), 0)
      << out.dump();
  EXPECT_TRUE(same_contents(src, cluster_->export_dir(0) + "/latin1-out"));
  Json missing;
  EXPECT_EQ(
      ctl_json("stage in " + job() + " " + q("default:/srv0/latin1-src/gone\xe9") + " /x", missing),
      4);
  ASSERT_FALSE(missing.is_discarded()) << "not JSON";
  EXPECT_NE(missing["error"]["message"].get<std::string>().find("gone\xef\xbf\xbd"),
            std::string::npos)
      << missing.dump();
}

// Two copies into one place would mix their bytes, and a copy out of a place being written would
// read files half written: a stage whose places overlap one under way stays queued until it has
// ended, whatever names the places (a namespace's path or a backend's), and the same request
// again (a Slurm hook run a second time) is the copy under way.
TEST_F(Staging, OverlappingCopiesRunInTurnAndTheSameRequestJoins) {
  // The first copy must still run when the states are asked, after six calls of skeinctl (each
  // a commit to the gateway's database, which may wait seconds in a busy minute): 900 MiB.
  const std::string src = make_tree(0, "/busy-src", 10, 3, 300);
  const std::string other = make_tree(0, "/busy-other", 10, 0, 0);
  // The stage-out's destination named as the backend's: one place on the server all the same.
  ASSERT_EQ(run_command("mkdir -p " + q(cluster_->export_dir(1) + "/busy-out")), 0);
  create(job(), user(0), "", "3G");
  // The gateway's database shares this machine's disk with the copy's 900 MiB, and its commits
  // (fsync) may wait seconds for them, past skeinctl's 5 s (exit code 3): asked again then. A
  // start asked again is the same request, so it is the copy the first one began.
  auto asked = [&](const std::string& args) {
    Json j;
    int rc = 3;
    for (int i = 0; i < 4 && rc == 3; ++i) rc = ctl_json(args, j);
    EXPECT_EQ(rc, 0) << args << ": " << j.dump();
    return j;
  };
  auto start = [&](const std::string& args) { return asked(args).value("id", std::string()); };
  auto state = [&](const std::string& id) {
    return asked("stage status " + id).value("state", std::string());
  };
  const std::string first = start("stage in " + job() + " " + src + " /data");
  const std::string into = start("stage in " + job() + " " + other + " /data/sub");
  const std::string out = start("stage out " + job() + " /data default:/srv1/busy-out");
  const std::string elsewhere = start("stage in " + job() + " " + other + " /elsewhere");
  const std::string read_back = start("stage in " + job() + " backend:srv1:/busy-out /read-back");
  EXPECT_EQ(start("stage in " + job() + " " + src + " /data"), first)
      << "the same request started a second copy";
  ASSERT_EQ(state(first), "running")
      << "the first copy ended before the checks: they prove nothing";
  EXPECT_EQ(state(into), "queued");
  EXPECT_EQ(state(out), "queued") << "a copy out of a tree being written started";
  EXPECT_NE(state(elsewhere), "queued") << "a copy to another place waited";
  EXPECT_EQ(state(read_back), "queued") << "a copy out of a tree being written, named otherwise, "
                                           "started";
  // Then each in turn, the stage-out last: it copies whole files.
  for (const std::string& id : {first, into, out, elsewhere, read_back}) {
    Json end;
    ASSERT_TRUE(ended(id, end)) << end.dump();
    EXPECT_EQ(end["state"], "done") << end.dump();
  }
  const std::string copied = cluster_->export_dir(1) + "/busy-out";
  for (int b = 0; b < 3; ++b) {
    const std::string big = "/big" + std::to_string(b);
    EXPECT_EQ(run_command("cmp -s " + q(cluster_->export_dir(0) + "/busy-src" + big) + " " +
                          q(copied + big)),
              0)
        << big;
  }
  EXPECT_TRUE(exists(copied + "/sub/d1")) << "the stage-out ran before the copy into /data/sub";
  EXPECT_GE(asked("stage status " + read_back).value("bytes_done", uint64_t{0}), 900ull << 20)
      << "the copy of the stage-out's destination ran before the stage-out";
  Json list = asked("stage list " + job());
  EXPECT_EQ(list["operations"].size(), 5u) << list.dump();
}

// A source file rewritten in place while its chunks are copied (bytes copied already change)
// fails, never reported done with bytes of two versions under the walk's mtime; a rerun copies
// it. Beside it, a file with a name as long as a name may be, whose partial's name is cut.
TEST_F(Staging, AFileRewrittenWhileItIsCopiedFailsAndTheRerunCopiesIt) {
  const std::string dir = cluster_->export_dir(0) + "/rewritten";
  const std::string long_name(250, 'l');
  ASSERT_EQ(run_command("mkdir -p " + q(dir) + " && head -c 400M /dev/urandom > " +
                        q(dir + "/big") + " && echo small > " + q(dir + "/" + long_name)),
            0);
  create(job(), user(0), "", "2G");
  Json started;
  ASSERT_EQ(ctl_json("stage in " + job() + " default:/srv0/rewritten /data", started), 0)
      << started.dump();
  const std::string id = started.value("id", std::string());
  uint64_t total = 0, done = 0;
  ASSERT_TRUE(eventually(
      [&] {
        Json s = status(id);
        total = s.value("bytes_total", uint64_t{0});
        done = s.value("bytes_done", uint64_t{0});
        return s["state"] != "running" || (total > 0 && done > 0);
      },
      60s));
  ASSERT_LT(done, total) << "the copy finished before the rewrite; the test proves nothing";
  // Its first MiB (copied by now) rewritten, the same size; the mtime set apart from the walk's
  // by more than the second that SFTP keeps.
  ASSERT_EQ(run_command("dd if=/dev/urandom of=" + q(dir + "/big") +
                        " bs=1M count=1 conv=notrunc status=none && touch -m -d '+1 hour' " +
                        q(dir + "/big")),
            0);
  Json end;
  ASSERT_TRUE(ended(id, end)) << end.dump();
  EXPECT_EQ(end["state"], "failed") << end.dump();
  ASSERT_EQ(end["failed"].size(), 1u) << end.dump();
  EXPECT_NE(end["failed"][0].get<std::string>().find("big: changed while it was copied"),
            std::string::npos)
      << end.dump();
  Json again;
  ASSERT_EQ(stage_wait("stage in " + job() + " default:/srv0/rewritten /data", again), 0)
      << again.dump();
  EXPECT_EQ(again["state"], "done") << again.dump();
  EXPECT_TRUE(again["failed"].empty()) << again.dump();
}

// A source that is one file (or one symlink) is one entry of one: its progress never shows more
// entries done than there are.
TEST_F(Staging, ASourceThatIsOneFileCountsOneEntry) {
  const std::string dir = cluster_->export_dir(0) + "/one-file";
  ASSERT_EQ(run_command("mkdir -p " + q(dir) + " && head -c 100000 /dev/urandom > " +
                        q(dir + "/f") + " && ln -sf f " + q(dir + "/l")),
            0);
  create(job(), user(0), "", "64M");
  for (const std::string name : {"f", "l"}) {
    Json end;
    ASSERT_EQ(
        stage_wait("stage in " + job() + " default:/srv0/one-file/" + name + " /" + name, end), 0)
        << end.dump();
    EXPECT_EQ(end["state"], "done") << end.dump();
    EXPECT_EQ(end["files_total"], 1u) << end.dump();
    EXPECT_EQ(end["files_done"], 1u) << end.dump();
  }
}

TEST_F(Staging, ACancelStopsTheCopyAndAQuotaTooSmallFailsBeforeCopying) {
  const std::string src = make_tree(0, "/cancel-src", 10, 2, 100);
  create(job(1), user(0), "", "2G");
  Json started;
  ASSERT_EQ(ctl_json("stage in " + job(1) + " " + src + " /c", started), 0);
  Json cancelled;
  ASSERT_EQ(ctl_json("stage cancel " + started["id"].get<std::string>(), cancelled), 0);
  EXPECT_EQ(cancelled["state"], "cancelled") << cancelled.dump();
  std::this_thread::sleep_for(1s);
  Json later = status(started["id"]);
  EXPECT_EQ(later["state"], "cancelled");
  EXPECT_EQ(later["bytes_done"], cancelled["bytes_done"]) << "it went on after the cancel";

  create(job(2), user(0), "", "100M");
  Json failed;
  EXPECT_EQ(stage_wait("stage in " + job(2) + " " + src + " /q", failed), 5);
  EXPECT_EQ(failed["state"], "failed");
  EXPECT_NE(failed["error"].get<std::string>().find("quota"), std::string::npos) << failed.dump();
  Json usage;
  ASSERT_EQ(ctl_json("ns usage " + job(2), usage), 0);
  EXPECT_EQ(usage["bytes_used"], 0u) << "a copy that cannot fit must not start";
}

// A stage-in of small files made again over itself (the rerun a failure asks for) replaces them
// in place and takes no more room: a namespace more than half full of it is staged again. The
// check before copying counted the whole source against what was free.
TEST_F(Staging, AStageInAgainFitsInANamespaceMoreThanHalfFullOfIt) {
  const std::string src = make_tree(0, "/again-src", 600, 0, 0);  // about 2.4 MB
  create(job(), user(0), "", "4M");
  Json first, second;
  ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /again", first), 0) << first.dump();
  Json before;
  ASSERT_EQ(ctl_json("ns usage " + job(), before), 0);
  ASSERT_GT(before["bytes_used"].get<uint64_t>(), 2u << 20) << before.dump();
  EXPECT_EQ(stage_wait("stage in " + job() + " " + src + " /again", second), 0) << second.dump();
  EXPECT_EQ(second["state"], "done") << second.dump();
  Json after;
  ASSERT_EQ(ctl_json("ns usage " + job(), after), 0);
  EXPECT_EQ(after["bytes_used"], before["bytes_used"]) << after.dump();
  // Somewhere else in the same namespace it does not fit, and says what it lacks.
  Json elsewhere;
  EXPECT_EQ(stage_wait("stage in " + job() + " " + src + " /elsewhere", elsewhere), 5);
  EXPECT_NE(elsewhere["error"].get<std::string>().find("are not in the destination yet"),
            std::string::npos)
      << elsewhere.dump();
}

TEST_F(Staging, DestroyWithAStageOutCopiesFirstAndThenRemovesTheNamespace) {
  const std::string src = make_tree(0, "/destroy-src", 50, 1, 20);
  create(job(), user(0));
  struct stat before {
  }, after{};
  ASSERT_EQ(::stat(server_dir(job(), 0).c_str(), &before), 0);
  Json in;
  ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /", in), 0) << in.dump();
  ASSERT_EQ(::stat(server_dir(job(), 0).c_str(), &after), 0);
  EXPECT_EQ(after.st_mode, before.st_mode) << "the namespace's root took the source's mode";
  Json out;
  ASSERT_EQ(stage_wait("ns destroy " + job() + " --stage-out / default:/srv1/kept", out), 0)
      << out.dump();
  EXPECT_EQ(out["state"], "done");
  EXPECT_TRUE(
      same_contents(cluster_->export_dir(0) + "/destroy-src", cluster_->export_dir(1) + "/kept"));
  std::string text;
  EXPECT_TRUE(eventually([&] { return ctl("ns usage " + job(), &text) == 4; }))
      << "the namespace is still there: " << text;
  EXPECT_TRUE(eventually([&] {
    for (int i = 0; i < 3; ++i)
      if (exists(server_dir(job(), i))) return false;
    return true;
  }));
}

// A destroy stops the job's copies before its files go, which takes as long as the slowest copy
// needs to stop (one waiting on a hung server: up to the call's deadline). A copy asked for
// meanwhile is refused at once: it would write into a namespace about to go, after the stop.
TEST_F(Staging, ACopyAskedForWhileTheNamespaceIsDestroyedIsRefused) {
  const std::string src = make_tree(0, "/dying-src", 4, 0, 1);
  create(job(), user(0), "--layout union --backends scratch0", "2G");
  Json in;
  ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /data", in), 0) << in.dump();
  // Server 2 (none of the namespace's) hangs; a stage-out to it begins, and waits on it.
  ASSERT_TRUE(cluster_->freeze_server(2));
  LocalCluster::ThawOnExit thaw(*cluster_, 2);
  Json started;
  ASSERT_EQ(ctl_json("stage out " + job() + " /data default:/srv2/dying-out", started), 0)
      << started.dump();
  const std::string id = started.value("id", std::string());
  std::this_thread::sleep_for(500ms);
  std::string destroyed;
  auto destroying =
      std::async(std::launch::async, [&] { return ctl("ns destroy " + job(), &destroyed); });
  std::this_thread::sleep_for(1s);  // the destroy is waiting for the copy to stop
  ASSERT_EQ(destroying.wait_for(0s), std::future_status::timeout)
      << "the destroy did not wait for the hung copy; the test proves nothing: " << destroyed
      << status(id).dump();
  std::string refused;
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_NE(ctl("stage in " + job() + " " + src + " /again", &refused), 0) << refused;
  EXPECT_NE(refused.find("is being destroyed"), std::string::npos) << refused;
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 5s) << "the refusal waited";
  EXPECT_TRUE(cluster_->thaw_server(2));
  EXPECT_EQ(destroying.get(), 0) << destroyed;
  Json end;
  ASSERT_TRUE(ended(id, end)) << end.dump();
  EXPECT_EQ(end["state"], "cancelled") << end.dump();
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 0)); }, 30s))
      << "the destroyed namespace's tree is still there";
  std::string text;
  EXPECT_EQ(ctl("ns usage " + job(), &text), 4) << text;
}

// A stage-out over the results of an earlier one: each file's earlier version keeps its name,
// whole, until the new copy is whole; a cancel half way leaves every large file one or the other,
// never a mix. A rerun then completes the copy.
TEST_F(Staging, AStageOutOverEarlierResultsKeepsEachFileWholeUntilItsCopyIs) {
  const std::string src = make_tree(0, "/over-src", 20, 3, 150);
  const std::string src_dir = cluster_->export_dir(0) + "/over-src",
                    dst_dir = cluster_->export_dir(2) + "/over";
  create(job(), user(0), "", "2G");
  Json in;
  ASSERT_EQ(stage_wait("stage in " + job() + " " + src + " /data", in), 0) << in.dump();
  // The earlier results: the large files with other bytes.
  ASSERT_EQ(run_command("mkdir -p " + q(dst_dir) + " && for b in big0 big1 big2; do head -c 150M " +
                        "/dev/urandom > " + q(dst_dir) + "/$b; done"),
            0);
  auto digest = [](const std::string& f) {
    std::string out;
    run_command("sha256sum < " + q(f), &out);
    return out;
  };
  std::map<std::string, std::string> earlier, wanted;
  for (const char* b : {"big0", "big1", "big2"}) {
    earlier[b] = digest(dst_dir + "/" + b);
    wanted[b] = digest(src_dir + "/" + b);
  }
  uint64_t total = 0, done_before = 0;
  // Early: a cancel lets the copies under way end.
  const std::string id =
      stage_out_under_way("over", total, done_before, [](uint64_t, uint64_t d) { return d > 0; });
  ASSERT_FALSE(id.empty());
  Json cancelled;
  ASSERT_EQ(ctl_json("stage cancel " + id, cancelled), 0) << cancelled.dump();
  Json end;
  ASSERT_TRUE(ended(id, end, 60s)) << end.dump();
  ASSERT_EQ(end["state"], "cancelled")
      << "the copy ended before the cancel; the test proves nothing";
  int whole_new = 0;
  for (const char* b : {"big0", "big1", "big2"}) {
    const std::string now = digest(dst_dir + "/" + b);
    EXPECT_TRUE(now == earlier[b] || now == wanted[b]) << b << " is neither version";
    whole_new += now == wanted[b];
  }
  EXPECT_LT(whole_new, 3) << "the cancel came after every large file was copied";
  Json again;
  ASSERT_EQ(stage_wait("stage out " + job() + " /data default:/srv2/over", again), 0)
      << again.dump();
  EXPECT_EQ(again["state"], "done") << again.dump();
  EXPECT_TRUE(same_contents(src_dir, dst_dir));
}

// A namespace whose lifetime ends while its results are being staged out is kept until the copy
// ends, then destroyed: the copy is whole.
TEST_F(Staging, ANamespaceExpiringDuringItsStageOutIsKeptUntilTheCopyEnds) {
  const std::string src = cluster_->export_dir(0) + "/expiry-src";
  int64_t expires_s = 0;
  ASSERT_NO_FATAL_FAILURE(short_lived_job_and_large_files(src, expires_s));
  // The job's results, linked into its directory on the server (at once, behind the gateway).
  ASSERT_EQ(run_command("cp -al " + q(src) + " " + q(server_dir(job(), 0) + "/results")), 0);
  Json started;
  ASSERT_EQ(ctl_json("stage out " + job() + " /results default:/srv1/expiry", started), 0)
      << started.dump();
  const std::string id = started["id"];
  Json end;
  ASSERT_TRUE(ended(id, end)) << end.dump();
  ASSERT_GT(end.value("finished_s", int64_t{0}), expires_s)
      << "the copy ended before the namespace expired; the test proves nothing: " << end.dump();
  EXPECT_EQ(end["state"], "done") << end.dump();
  EXPECT_TRUE(same_contents(src, cluster_->export_dir(1) + "/expiry"));
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 0)); }, 15s))
      << "the namespace was not destroyed after its stage-out";
}

// A namespace whose lifetime ends while a stage-in copies into it: the copy is cancelled before
// its files go (as at an admin's destroy), and the namespace's tree is removed; before, the copy
// went on writing into the tree being removed.
TEST_F(Staging, ANamespaceExpiringDuringAStageInStopsTheCopyBeforeItsFilesGo) {
  int64_t expires_s = 0;
  ASSERT_NO_FATAL_FAILURE(
      short_lived_job_and_large_files(cluster_->export_dir(0) + "/expiry-in-src", expires_s));
  Json started;
  ASSERT_EQ(ctl_json("stage in " + job() + " default:/srv0/expiry-in-src /inputs", started), 0)
      << started.dump();
  const std::string id = started["id"];
  Json end;
  ASSERT_TRUE(ended(id, end)) << end.dump();
  ASSERT_GE(end.value("finished_s", int64_t{0}), expires_s)
      << "the copy ended before the namespace expired; the test proves nothing: " << end.dump();
  EXPECT_EQ(end["state"], "cancelled") << end.dump();
  EXPECT_TRUE(eventually([&] { return !exists(server_dir(job(), 0)); }, 30s))
      << "the expired namespace's tree is still there";
}

// Staging where the storage servers' account is not root (skein-local --ssh-user), as on a site
// whose servers give skein an account of its own: the servers' permission checks apply to every
// file the gateway makes. A copy keeps a read-only directory's mode (the tree's d9 is chmod 555),
// so a second run into the same place finds it closed to its own account.
class StagingByAnAccountNotRoot : public Staging {
 protected:
  static void SetUpTestSuite() {
    // Not locked ('*': no password, but sshd lets it log in with the cluster's key).
    if (uid_of(kAccount) == static_cast<uid_t>(-1))
      run_command(std::string("useradd -M -s /bin/sh -p '*' ") + kAccount);
    ssh_user_ = kAccount;
    Staging::SetUpTestSuite();
    ssh_user_.clear();
  }
  static void TearDownTestSuite() {
    Staging::TearDownTestSuite();
    run_command(std::string("userdel ") + kAccount + " 2>/dev/null");
  }
  static constexpr const char* kAccount = "skstoreacct";
  // make_tree's tree, given to the servers' account (as its files are on such a site).
  std::string make_own_tree(int server, const std::string& rel, int small, int big, int big_mib) {
    std::string place = make_tree(server, rel, small, big, big_mib);
    EXPECT_EQ(run_command("chown -R " + std::string(kAccount) + ": " +
                          q(cluster_->export_dir(server) + rel)),
              0);
    return place;
  }
};

TEST_F(StagingByAnAccountNotRoot, CopiesRunAgainWriteIntoTheReadOnlyDirectoriesTheyMade) {
  const std::string src = make_own_tree(0, "/ro-src", 40, 1, 9);
  const std::string src_dir = cluster_->export_dir(0) + "/ro-src";
  const std::string out_dir = cluster_->export_dir(1) + "/ro-out";
  struct stat st {};
  ASSERT_EQ(::stat(src_dir.c_str(), &st), 0);
  ASSERT_EQ(st.st_uid, uid_of(kAccount)) << "the tree is not the servers' account's";
  create(job(), user(0), "", "1G");
  // Into the job and out of it, twice each: the second run of each finds d9 read-only (mode 555,
  // as the first left it) and writes its files again (each through its partial, renamed over).
  for (int run = 0; run < 2; ++run) {
    Json in;
    EXPECT_EQ(stage_wait("stage in " + job() + " " + src + " /data", in), 0) << in.dump();
    EXPECT_EQ(in["state"], "done") << "run " << run << ": " << in.dump();
    Json out;
    EXPECT_EQ(stage_wait("stage out " + job() + " /data default:/srv1/ro-out", out), 0)
        << out.dump();
    EXPECT_EQ(out["state"], "done") << "run " << run << ": " << out.dump();
    EXPECT_EQ(out["files_done"], out["files_total"]) << out.dump();
  }
  EXPECT_TRUE(same_contents(src_dir, out_dir));
  EXPECT_EQ(listing(src_dir), listing(out_dir)) << "modes (d9's 555 too), times or symlinks";
  ASSERT_EQ(::stat((out_dir + "/d9").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0555u);
  EXPECT_EQ(st.st_uid, uid_of(kAccount)) << "made by another account than the servers'";
}

}  // namespace
}  // namespace skein::test
