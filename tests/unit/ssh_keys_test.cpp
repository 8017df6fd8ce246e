// Host key checks against known_hosts (patterns, ports, hashed names, revoked and changed keys)
// and the identities the transport signs with (every key type and file format ssh-keygen makes),
// with keys and files made by OpenSSH's own ssh-keygen.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ssh/keys.hpp"
#include "ssh/known_hosts.hpp"
#include "ssh/wire.hpp"

namespace skein::ssh {
namespace {

class KeyDir {
 public:
  KeyDir() {
    std::string tmpl = "/tmp/skein-ssh-keys-XXXXXX";
    dir_ = mkdtemp(tmpl.data());
  }
  ~KeyDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  // Makes a key with ssh-keygen; returns the private key's path ("" if ssh-keygen failed).
  std::string make(const std::string& name, const std::string& args) {
    const std::string path = dir_ + "/" + name;
    const std::string cmd =
        "ssh-keygen -q -N '' -C test " + args + " -f " + path + " >/dev/null 2>&1";
    return system(cmd.c_str()) == 0 ? path : "";
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The key blob of a .pub file ("type base64 comment").
std::string pub_blob(const std::string& path) {
  std::istringstream in(read_file(path));
  std::string type, b64;
  in >> type >> b64;
  bool ok = false;
  return base64_decode(b64, ok);
}

struct KeyKind {
  const char* name;
  const char* args;
};

class IdentityTest : public ::testing::TestWithParam<KeyKind> {};

TEST_P(IdentityTest, LoadsSignsAndVerifiesWithThePublicKeyOnRecord) {
  KeyDir keys;
  const std::string path = keys.make("id", GetParam().args);
  ASSERT_FALSE(path.empty()) << "ssh-keygen " << GetParam().args;
  std::string error;
  auto id = PrivateKey::load(path, error);
  ASSERT_TRUE(id) << error;
  const std::string blob = pub_blob(path + ".pub");
  EXPECT_EQ(id->public_blob(), blob);

  auto pub = PublicKey::parse(blob, error);
  ASSERT_TRUE(pub) << error;
  const std::string data = "the exchange hash, or a user-auth request";
  const std::string sig = id->sign(data);
  ASSERT_FALSE(sig.empty());
  EXPECT_TRUE(pub->verify(id->algorithm(), sig, data));
  EXPECT_FALSE(pub->verify(id->algorithm(), sig, data + "!"));
  // A signature blob naming another algorithm than the negotiated one is refused.
  EXPECT_FALSE(pub->verify("ssh-dss", sig, data));
}

INSTANTIATE_TEST_SUITE_P(EveryKeyTypeAndFormat, IdentityTest,
                         ::testing::Values(KeyKind{"ed25519", "-t ed25519"},
                                           KeyKind{"ecdsa256", "-t ecdsa -b 256"},
                                           KeyKind{"ecdsa384", "-t ecdsa -b 384"},
                                           KeyKind{"ecdsa521", "-t ecdsa -b 521"},
                                           KeyKind{"rsa", "-t rsa -b 2048"},
                                           KeyKind{"rsa_pem", "-t rsa -b 2048 -m PEM"},
                                           KeyKind{"ecdsa_pem", "-t ecdsa -b 256 -m PEM"},
                                           KeyKind{"ecdsa_pkcs8", "-t ecdsa -b 384 -m PKCS8"},
                                           KeyKind{"rsa_pkcs8", "-t rsa -b 3072 -m PKCS8"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Identity, APassphraseProtectedKeyIsRefusedWithAClearMessage) {
  KeyDir keys;
  for (const char* format : {"", "-m PEM"}) {
    const std::string path = keys.dir() + "/locked";
    std::filesystem::remove(path);
    std::filesystem::remove(path + ".pub");
    const std::string cmd = std::string("ssh-keygen -q -t ecdsa -N secret ") + format + " -f " +
                            path + " >/dev/null 2>&1";
    ASSERT_EQ(system(cmd.c_str()), 0);
    std::string error;
    EXPECT_FALSE(PrivateKey::load(path, error));
    EXPECT_NE(error.find("passphrase"), std::string::npos) << error;
    EXPECT_NE(error.find(path), std::string::npos) << error;
  }
}

TEST(Identity, AFileThatIsNoKeySaysSo) {
  std::string error;
  EXPECT_FALSE(PrivateKey::parse("hello", error));
  EXPECT_NE(error.find("not a private key"), std::string::npos) << error;
  EXPECT_FALSE(PrivateKey::load("/nonexistent/key", error));
  EXPECT_NE(error.find("cannot read identity file /nonexistent/key"), std::string::npos);
  EXPECT_FALSE(PrivateKey::parse(
      "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", error));
}

TEST(HostKey, MalformedAndUnknownKeyBlobsAreRefused) {
  std::string error;
  EXPECT_FALSE(PublicKey::parse(Writer().str("ssh-dss").str("x").take(), error));
  EXPECT_NE(error.find("unsupported"), std::string::npos);
  EXPECT_FALSE(PublicKey::parse(Writer().str("ssh-ed25519").str("short").take(), error));
  EXPECT_FALSE(PublicKey::parse(
      Writer().str("ecdsa-sha2-nistp256").str("nistp256").str("not a point").take(), error));
  EXPECT_FALSE(PublicKey::parse("", error));
}

class KnownHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ed = keys.make("ed", "-t ed25519");
    ed2 = keys.make("ed2", "-t ed25519");
    ec = keys.make("ec", "-t ecdsa");
    ASSERT_FALSE(ed.empty() || ed2.empty() || ec.empty());
  }
  std::string line(const std::string& hosts, const std::string& key) {
    return hosts + " " + read_file(key + ".pub");
  }
  std::string blob(const std::string& key) { return pub_blob(key + ".pub"); }
  KeyDir keys;
  std::string ed, ed2, ec;
};

TEST_F(KnownHostsTest, MatchesHostsAndPortsAsOpenSshWritesThem) {
  auto kh = KnownHosts::parse(line("[127.0.0.1]:2222", ed) + line("server.example.org", ec));
  using V = KnownHosts::Verdict;
  EXPECT_EQ(kh.check("127.0.0.1", 2222, "ssh-ed25519", blob(ed)), V::ok);
  EXPECT_EQ(kh.check("127.0.0.1", 22, "ssh-ed25519", blob(ed)), V::unknown);  // another port
  EXPECT_EQ(kh.check("127.0.0.1", 2223, "ssh-ed25519", blob(ed)), V::unknown);
  EXPECT_EQ(kh.check("SERVER.example.org", 22, "ecdsa-sha2-nistp256", blob(ec)), V::ok);
  EXPECT_EQ(kh.check("127.0.0.1", 2222, "ssh-ed25519", blob(ed2)), V::changed);
  EXPECT_EQ(kh.check("127.0.0.1", 2222, "ecdsa-sha2-nistp256", blob(ec)), V::other);
}

TEST_F(KnownHostsTest, WildcardsAndNegationsWorkLikeOpenSsh) {
  auto kh = KnownHosts::parse(line("!bad.example.org,*.example.org,[10.0.0.?]:22??", ed));
  using V = KnownHosts::Verdict;
  EXPECT_EQ(kh.check("a.example.org", 22, "ssh-ed25519", blob(ed)), V::ok);
  EXPECT_EQ(kh.check("bad.example.org", 22, "ssh-ed25519", blob(ed)), V::unknown);
  EXPECT_EQ(kh.check("example.org", 22, "ssh-ed25519", blob(ed)), V::unknown);
  EXPECT_EQ(kh.check("10.0.0.7", 2201, "ssh-ed25519", blob(ed)), V::ok);
  EXPECT_EQ(kh.check("10.0.0.17", 2201, "ssh-ed25519", blob(ed)), V::unknown);
}

TEST_F(KnownHostsTest, HashedNamesFromSshKeygenMatch) {
  const std::string path = keys.dir() + "/known_hosts";
  std::ofstream(path) << line("[127.0.0.1]:2222", ed) << line("other.example.org", ec);
  ASSERT_EQ(system(("ssh-keygen -q -H -f " + path + " >/dev/null 2>&1").c_str()), 0);
  ASSERT_NE(read_file(path).find("|1|"), std::string::npos);
  auto kh = KnownHosts::load(path);
  using V = KnownHosts::Verdict;
  EXPECT_EQ(kh.check("127.0.0.1", 2222, "ssh-ed25519", blob(ed)), V::ok);
  EXPECT_EQ(kh.check("127.0.0.1", 2222, "ssh-ed25519", blob(ed2)), V::changed);
  EXPECT_EQ(kh.check("127.0.0.2", 2222, "ssh-ed25519", blob(ed)), V::unknown);
  EXPECT_EQ(kh.check("other.example.org", 22, "ecdsa-sha2-nistp256", blob(ec)), V::ok);
  // ssh hashes names in lower case: so is the host looked up.
  EXPECT_EQ(kh.check("Other.Example.ORG", 22, "ecdsa-sha2-nistp256", blob(ec)), V::ok);
}

TEST_F(KnownHostsTest, RevokedKeysAreRefusedWhateverElseMatches) {
  auto kh = KnownHosts::parse(line("*", ed) + "@revoked * " + read_file(ed + ".pub"));
  EXPECT_EQ(kh.check("any", 22, "ssh-ed25519", blob(ed)), KnownHosts::Verdict::revoked);
}

TEST_F(KnownHostsTest, CommentsMalformedLinesAndCertificateAuthoritiesAreSkipped) {
  auto kh = KnownHosts::parse("# a comment\n\nbroken line\nhost ssh-ed25519 !!!notbase64\n" +
                              std::string("@cert-authority * ") + read_file(ec + ".pub") +
                              line("host", ed));
  EXPECT_EQ(kh.check("host", 22, "ssh-ed25519", blob(ed)), KnownHosts::Verdict::ok);
  EXPECT_EQ(kh.check("host", 22, "ecdsa-sha2-nistp256", blob(ec)), KnownHosts::Verdict::other);
}

TEST_F(KnownHostsTest, AMissingFileKnowsNothing) {
  auto kh = KnownHosts::load(keys.dir() + "/nonexistent");
  EXPECT_EQ(kh.check("host", 22, "ssh-ed25519", blob(ed)), KnownHosts::Verdict::not_found);
}

TEST_F(KnownHostsTest, KeyTypesOnRecordComeInFileOrder) {
  auto kh = KnownHosts::parse(line("h", ec) + line("x", ed) + line("h", ed) + line("h", ed2));
  EXPECT_EQ(kh.key_types("h", 22),
            (std::vector<std::string>{"ecdsa-sha2-nistp256", "ssh-ed25519"}));
  EXPECT_TRUE(kh.key_types("nobody", 22).empty());
}

}  // namespace
}  // namespace skein::ssh
