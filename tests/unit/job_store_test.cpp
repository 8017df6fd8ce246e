// The job store on a real SQLite file: migrations, records, credentials, usage, pending removals,
// orphans, and what survives closing and opening again.
#include "jobs/job_store.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

namespace skein {
namespace {

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/skein-job-store-XXXXXX";
    dir_ = mkdtemp(tmpl.data());
    path_ = dir_ + "/jobs.sqlite";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  JobRecord record(const std::string& id) {
    JobRecord r;
    r.job_id = id;
    r.name = "job-" + id;
    r.uid = 1000;
    r.gid = 100;
    r.stripe_size = 1 << 20;
    r.pool = "scratch";
    r.backends = {"s0", "s1"};
    r.quota_bytes = 1 << 30;
    r.quota_inodes = 1000;
    r.created_s = 100;
    r.expires_s = 200;
    r.labels = {{"partition", "debug"}, {"user", "alice"}};
    return r;
  }
  std::string dir_, path_;
};

TEST(SchemaMigrations, AreNumberedFromOneInOrderAndOnlyAtLineStarts) {
  auto m = sqlite::migrations(
      "-- a comment naming \"-- migration N\"\n-- migration 1: a\nCREATE TABLE a(x);\n"
      "-- migration 2: b\nCREATE TABLE b(y);\n");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].first, 1);
  EXPECT_EQ(m[0].second, "CREATE TABLE a(x);\n");
  EXPECT_THROW(sqlite::migrations("-- migration 2: b\n"), sqlite::StoreError);
  EXPECT_THROW(sqlite::migrations("-- migration x\n"), sqlite::StoreError);
  EXPECT_GE(sqlite::migrations(kJobSchema).size(), 1u);
}

TEST_F(JobStoreTest, RecordsAndTheirCredentialsSurviveReopening) {
  {
    auto s = JobStore::open(path_);
    s->insert(record("7"), std::string(64, 'a'), "create");
    s->add_credential("job-7", std::string(64, 'b'), "node-1");
    s->insert(record("8"), std::string(64, 'c'), "create");
    s->save_usage({{"job-7", 12345, 6}, {"job-8", 1, 2}});
  }
  auto s = JobStore::open(path_);
  auto jobs = s->jobs();
  ASSERT_EQ(jobs.size(), 2u);
  auto& j = jobs[0].name == "job-7" ? jobs[0] : jobs[1];
  auto& j8 = jobs[0].name == "job-7" ? jobs[1] : jobs[0];
  EXPECT_EQ(j8.bytes_used, 1u);
  EXPECT_EQ(j8.inodes_used, 2u);
  EXPECT_EQ(j.name, "job-7");
  EXPECT_EQ(j.backends, (std::vector<std::string>{"s0", "s1"}));
  EXPECT_EQ(j.labels.at("user"), "alice");
  EXPECT_EQ(j.bytes_used, 12345u);
  EXPECT_EQ(j.inodes_used, 6u);
  EXPECT_EQ(s->credential_digests("job-7").size(), 2u);
  EXPECT_TRUE(s->job("7"));
  EXPECT_FALSE(s->job("9"));
}

TEST_F(JobStoreTest, ADuplicateJobIsRefusedAndLeavesTheFirst) {
  auto s = JobStore::open(path_);
  s->insert(record("7"), std::string(64, 'a'), "create");
  EXPECT_THROW(s->insert(record("7"), std::string(64, 'c'), "create"), sqlite::StoreError);
  EXPECT_EQ(s->credential_digests("job-7"), std::vector<std::string>{std::string(64, 'a')});
}

TEST_F(JobStoreTest, RemovingANamespaceRecordsItsRemovalsInTheSameTransaction) {
  auto s = JobStore::open(path_);
  s->insert(record("7"), std::string(64, 'a'), "create");
  s->remove("job-7",
            {{"s0", "/job-7", "job-7", 300, 0, ""}, {"s1", "/job-7", "job-7", 300, 0, ""}});
  EXPECT_TRUE(s->jobs().empty());
  EXPECT_TRUE(s->credential_digests("job-7").empty()) << "credentials go with the namespace";
  auto p = s->pending_removals();
  ASSERT_EQ(p.size(), 2u);
  s->removal_failed("s1", "/job-7", "backend down");
  s->removal_done("s0", "/job-7");
  s.reset();
  s = JobStore::open(path_);
  p = s->pending_removals();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].backend, "s1");
  EXPECT_EQ(p[0].attempts, 1);
  EXPECT_EQ(p[0].last_error, "backend down");
}

TEST_F(JobStoreTest, AnOrphanKeepsTheTimeItWasFirstSeen) {
  auto s = JobStore::open(path_);
  EXPECT_EQ(s->orphan_seen("s0", "/job-x", 100), 100);
  EXPECT_EQ(s->orphan_seen("s0", "/job-x", 500), 100);
  s->orphan_gone("s0", "/job-x");
  EXPECT_EQ(s->orphan_seen("s0", "/job-x", 900), 900);
}

TEST_F(JobStoreTest, EachDatabaseHasAnIdentityOfItsOwnThatStays) {
  std::string first;
  {
    auto s = JobStore::open(path_);
    first = s->identity();
  }
  EXPECT_EQ(first.size(), 32u);
  EXPECT_EQ(first.find_first_not_of("0123456789abcdef"), std::string::npos) << first;
  EXPECT_EQ(JobStore::open(path_)->identity(), first) << "the identity changed on reopening";
  EXPECT_NE(JobStore::open(dir_ + "/other.sqlite")->identity(), first);
}

TEST_F(JobStoreTest, OneDatabaseServesOneGateway) {
  auto s = JobStore::open(path_);
  try {
    JobStore::open(path_);
    ADD_FAILURE() << "a second store opened the same database";
  } catch (const sqlite::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("is in use by another skein-gateway"), std::string::npos);
  }
  s.reset();
  EXPECT_NO_THROW(JobStore::open(path_));
}

TEST_F(JobStoreTest, ADatabaseOfANewerGatewayIsRefused) {
  JobStore::open(path_).reset();
  {
    auto db =
        sqlite::Database::open(dir_ + "/other.sqlite", "-- migration 1: x\nCREATE TABLE t(x);\n");
    db->exec("PRAGMA user_version=99");
  }
  EXPECT_THROW(
      sqlite::Database::open(dir_ + "/other.sqlite", "-- migration 1: x\nCREATE TABLE t(x);\n"),
      sqlite::StoreError);
}

}  // namespace
}  // namespace skein
