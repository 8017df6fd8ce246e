// Credentials as the gateway checks them: token digests and sets (rotation), certificate role
// patterns.
#include <gtest/gtest.h>

#include <set>

#include "auth/client_roles.hpp"
#include "auth/token_digest.hpp"

namespace skein {
namespace {

TEST(TokenDigest, MatchesOnlyItsTokenWhateverTheLengthPresented) {
  auto d = TokenDigest::of("s3cret-token");
  EXPECT_TRUE(d.matches("s3cret-token"));
  EXPECT_FALSE(d.matches(""));
  EXPECT_FALSE(d.matches("s3cret-toke"));
  EXPECT_FALSE(d.matches("s3cret-token "));
  EXPECT_FALSE(d.matches("s3cret-tokens3cret-token"));
  EXPECT_FALSE(d.matches(std::string(1 << 16, 'x')));
}

TEST(TokenDigest, KeepsOnlyTheDigestAndRoundTripsItsHex) {
  auto d = TokenDigest::of("abc");
  // SHA-256("abc")
  EXPECT_EQ(d.hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  TokenDigest back;
  ASSERT_TRUE(TokenDigest::from_hex(d.hex(), back));
  EXPECT_TRUE(back.matches("abc"));
  EXPECT_FALSE(TokenDigest::from_hex("xyz", back));
  EXPECT_FALSE(TokenDigest::from_hex(std::string(64, 'g'), back));
}

TEST(TokenDigest, UnmatchableMatchesNothingAndRandomTokensDiffer) {
  auto none = TokenDigest::unmatchable();
  EXPECT_FALSE(none.matches(""));
  EXPECT_FALSE(none.matches("anything"));
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto t = new_random_token();
    EXPECT_EQ(t.size(), 64u);
    EXPECT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    EXPECT_TRUE(seen.insert(t).second);
  }
}

TEST(TokenSet, TakesEveryTokenOfAFileSoThatOneCanBeRotated) {
  auto set = TokenSet::of_all({"old-token", "new-token"});
  EXPECT_EQ(set.size(), 2u);
  EXPECT_TRUE(set.matches("old-token"));
  EXPECT_TRUE(set.matches("new-token"));
  EXPECT_FALSE(set.matches("old-token\nnew-token"));
  EXPECT_FALSE(set.matches(""));
  EXPECT_TRUE(TokenSet::of_all({}).empty());
  EXPECT_FALSE(TokenSet().matches(""));
}

// A job namespace's set grows by a digest per node credential: any of them matches, and nothing
// else does, however many there are.
TEST(TokenSet, AnyOfManyCredentialsMatches) {
  TokenSet set = TokenSet::of("first");
  for (int i = 0; i < 5000; ++i) set.add(TokenDigest::of("node-" + std::to_string(i)));
  EXPECT_EQ(set.size(), 5001u);
  EXPECT_TRUE(set.matches("first"));
  EXPECT_TRUE(set.matches("node-4999"));
  EXPECT_TRUE(set.matches("node-17"));
  EXPECT_FALSE(set.matches("node-5000"));
  EXPECT_FALSE(set.matches(""));
}

TEST(CertificatePattern, IsACommonNameOrASubjectAltNameGlob) {
  auto cn = CertificatePattern::parse("CN=node-*");
  ASSERT_TRUE(cn);
  EXPECT_EQ(cn->field, CertificatePattern::Field::common_name);
  EXPECT_EQ(cn->glob, "node-*");
  EXPECT_EQ(cn->text(), "CN=node-*");
  auto san = CertificatePattern::parse("SAN=*.compute.example.org");
  ASSERT_TRUE(san);
  EXPECT_EQ(san->field, CertificatePattern::Field::subject_alt_name);
  for (const char* bad : {"node-*", "CN=", "OU=hpc", "cn=node", "=x", ""})
    EXPECT_FALSE(CertificatePattern::parse(bad)) << bad;
}

TEST(ClientRoles, WithoutMutualTlsTokensAloneDecide) {
  ClientRoles none;
  EXPECT_FALSE(none.mutual_tls());
}

}  // namespace
}  // namespace skein
