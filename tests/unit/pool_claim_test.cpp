// The claim at the root of a pool's backend (jobs/pool_claim.hpp) on an in-memory backend: made
// where there is none, never over another database's, never half written, and nothing written
// while the backend cannot be asked.
#include "jobs/pool_claim.hpp"

#include <gtest/gtest.h>

#include "fake_backend.hpp"

namespace skein {
namespace {

using test::FakeBackend;
using Kind = PoolClaim::Kind;

const std::string kOurs = "0123456789abcdef0123456789abcdef";
const std::string kTheirs = "fedcba9876543210fedcba9876543210";

std::string text_of(const std::string& identity) {
  return pool_claim_text(identity, "/var/lib/skein/jobs.sqlite", "gw1", 1796688000);
}

TEST(PoolClaim, TheTextNamesItsIdentityAndSaysWhatItIs) {
  const std::string text = text_of(kOurs);
  EXPECT_EQ(pool_claim_identity(text), kOurs);
  EXPECT_NE(text.find("database = \"/var/lib/skein/jobs.sqlite\""), std::string::npos) << text;
  EXPECT_NE(text.find("host = \"gw1\""), std::string::npos) << text;
  EXPECT_NE(text.find("claimed = \"2026-12-08T00:00:00Z\""), std::string::npos) << text;
  EXPECT_NE(text.find("# skein:"), std::string::npos) << text;
  // Only an `identity = "..."` line counts; the comments above it do not.
  EXPECT_EQ(pool_claim_identity("# identity = \"" + kTheirs + "\"\n"), std::nullopt);
  EXPECT_EQ(pool_claim_identity("identity = \"\"\n"), std::nullopt);
  EXPECT_EQ(pool_claim_identity("identity = \"" + kTheirs), std::nullopt);
  EXPECT_EQ(pool_claim_identity("x = 1\nidentity = \"" + kTheirs + "\"\n"), kTheirs);
  EXPECT_EQ(pool_claim_identity(""), std::nullopt);
}

TEST(PoolClaim, ABackendWithoutOneIsClaimedOnceAndThenKnownAsOurs) {
  auto b = FakeBackend::make("scratch0");
  b->put_dir("/job-7");
  auto first = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(first.kind, Kind::made) << first.detail;
  EXPECT_EQ(b->contents(kPoolClaimPath), text_of(kOurs));
  EXPECT_EQ(b->names("/"), (std::vector<std::string>{".skein-pool", "job-7"}))
      << "the claim's first name was left, or the job directory touched";
  EXPECT_EQ(claim_pool_backend(*b, kOurs, text_of(kOurs)).kind, Kind::ours);
}

TEST(PoolClaim, AnotherDatabasesClaimIsNeverReplaced) {
  auto b = FakeBackend::make("scratch0");
  b->put_file(kPoolClaimPath, text_of(kTheirs));
  auto claim = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(claim.kind, Kind::foreign);
  EXPECT_EQ(claim.detail, kTheirs);
  EXPECT_EQ(b->contents(kPoolClaimPath), text_of(kTheirs));
  // One that names no database (written by hand, emptied) is no claim of ours either.
  b->put_file(kPoolClaimPath, "");
  claim = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(claim.kind, Kind::foreign);
  EXPECT_EQ(claim.detail, "");
  EXPECT_EQ(b->contents(kPoolClaimPath), "");
  EXPECT_EQ(b->names("/"), (std::vector<std::string>{".skein-pool"}));
}

TEST(PoolClaim, OfTwoGatewaysClaimingAtOnceTheFirstKeepsIt) {
  auto b = FakeBackend::make("scratch0");
  // The other gateway's claim lands between this one's look and its rename into place.
  b->on_next("rename", [&] { b->put_file(kPoolClaimPath, text_of(kTheirs)); });
  auto claim = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(claim.kind, Kind::foreign) << claim.detail;
  EXPECT_EQ(claim.detail, kTheirs);
  EXPECT_EQ(b->contents(kPoolClaimPath), text_of(kTheirs));
  EXPECT_EQ(b->names("/"), (std::vector<std::string>{".skein-pool"})) << "our first name was left";
}

TEST(PoolClaim, NothingIsWrittenWhileTheBackendCannotBeAskedOrWritten) {
  auto b = FakeBackend::make("scratch0");
  b->set_down(true);
  auto claim = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(claim.kind, Kind::failed);
  EXPECT_NE(claim.detail.find(".skein-pool"), std::string::npos) << claim.detail;
  b->set_down(false);
  b->fail("write", "", ENOSPC);
  claim = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(claim.kind, Kind::failed);
  EXPECT_NE(claim.detail.find("No space left"), std::string::npos) << claim.detail;
  EXPECT_TRUE(b->names("/").empty()) << "a half-written claim was left";
  b->clear_failures();
  b->fail("open", std::string(kPoolClaimPath), EACCES);  // a claim that cannot be read
  claim = claim_pool_backend(*b, kOurs, text_of(kOurs));
  EXPECT_EQ(claim.kind, Kind::failed);
  EXPECT_NE(claim.detail.find("Permission denied"), std::string::npos) << claim.detail;
  b->clear_failures();
  EXPECT_EQ(claim_pool_backend(*b, kOurs, text_of(kOurs)).kind, Kind::made);
}

}  // namespace
}  // namespace skein
