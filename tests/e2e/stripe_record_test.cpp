// Stripe records end to end: a striped namespace over three real sshd servers records its layout
// on each of them, and a gateway started with a configuration that no longer fits the files
// (another stripe size, the backends reordered, one fewer, one replaced by an empty server)
// refuses to serve them with EIO and says why, in its log and to skeinctl, changing nothing on
// the servers; the right configuration serves the same bytes again. Files striped before records
// existed are adopted.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "fs_test_support.hpp"

namespace skein::test {
namespace {

constexpr size_t kFileSize = (5 << 20) + 123;  // five and a bit 1 MiB stripes: every backend

class StripeRecords : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = LocalCluster::start("stripe-record", {.servers = 3, .mounts = 0}, error);
    if (!cluster_) return fail("cluster: " + error);
    for (int i = 0; i < 3; ++i) ::mkdir(root(i).c_str(), 0755);
    ::mkdir(spare_root().c_str(), 0755);
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  static void fail(const std::string& why) { setup_error_ = why; }
  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }
  void TearDown() override { stop(); }

  // Server i's directory that the test's backends use as their root; server 2's spare one stands
  // for an empty server put in another's place.
  static std::string root(int i) { return cluster_->export_dir(i) + "/sr"; }
  static std::string spare_root() { return cluster_->export_dir(2) + "/spare"; }
  static std::string record_path(const std::string& root) { return root + "/.skein-stripes"; }

  // A gateway whose namespace "s" stripes with `stripe` over `backends` (names from b0, b1, b2,
  // spare), and a mount of it.
  bool start(const std::string& stripe, const std::string& backends, std::string& error) {
    stop();
    auto ports = cluster_->list("SKEIN_SSH_PORTS");
    const std::string address = "127.0.0.1:" + std::to_string(free_port());
    address_ = address;
    std::string t = "[gateway]\nlisten = \"" + address +
                    "\"\ntimeout_ms = 5000\nadmin_token_file = \"" +
                    cluster_->env("SKEIN_ADMIN_TOKEN_FILE") + "\"\n" + cluster_->gateway_tls_toml();
    auto backend = [&](const std::string& name, int server, const std::string& dir) {
      t += "[[backend]]\nname = \"" + name +
           "\"\nhost = \"127.0.0.1\"\nport = " + ports.at(static_cast<size_t>(server)) +
           "\nuser = \"" + cluster_->env("SKEIN_SSH_USER") + "\"\nidentity_file = \"" +
           cluster_->env("SKEIN_SSH_KEY") + "\"\nknown_hosts = \"" +
           cluster_->env("SKEIN_KNOWN_HOSTS") + "\"\nroot = \"" + dir + "\"\nconnections = 2\n";
    };
    for (int i = 0; i < 3; ++i) backend("b" + std::to_string(i), i, root(i));
    backend("spare", 2, spare_root());
    t += "[[namespace]]\nname = \"s\"\ntoken_file = \"" + cluster_->token_file() +
         "\"\n[[namespace.mount]]\npath = \"/\"\nlayout = "
         "\"striped\"\nstripe_size = \"" +
         stripe + "\"\nbackends = [" + backends + "]\n";
    const std::string config = cluster_->state() + "/stripe-record.toml";
    std::ofstream(config) << t;
    log_ = cluster_->state() + "/stripe-record-gateway-" + std::to_string(++starts_) + ".log";
    gateway_ = GatewayProcess::start(config, address, log_, error);
    if (!gateway_) return false;
    mount_ = FuseMount::start(address, cluster_->state() + "/stripe-record-mnt", "s", error,
                              cluster_->mount_credentials());
    return static_cast<bool>(mount_);
  }
  void stop() {
    mount_.reset();
    gateway_.reset();
  }
  std::string m(const std::string& rel) const { return mount_->path() + "/" + rel; }
  // `skeinctl COMMAND` against the running gateway: what an admin sees.
  std::string skeinctl(const std::string& command) const {
    std::string out;
    run_command(cluster_->admin_env() + build_dir() + "/client/skeinctl --gateway " + address_ +
                    " " + command + " 2>&1",
                &out);
    return out;
  }
  std::string namespaces_list() const { return skeinctl("namespaces list"); }

  // Every file below the servers' roots (parts and records), with its contents.
  static std::map<std::string, std::string> on_servers() {
    std::map<std::string, std::string> out;
    for (const std::string& dir : {root(0), root(1), root(2), spare_root()}) {
      DIR* d = opendir(dir.c_str());
      if (!d) continue;
      while (auto* e = readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") out[dir + "/" + n] = read_file(dir + "/" + n);
      }
      closedir(d);
    }
    return out;
  }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::string setup_error_;
  static inline int starts_ = 0;
  std::unique_ptr<GatewayProcess> gateway_;
  std::unique_ptr<FuseMount> mount_;
  std::string log_;
  std::string address_;
};

const char* const kThree = "\"b0\", \"b1\", \"b2\"";

TEST_F(StripeRecords, EachBackendRecordsItsPartAndTheRecordIsHidden) {
  std::string error;
  ASSERT_TRUE(start("1M", kThree, error)) << error;
  const std::string data = random_bytes(kFileSize, 1);
  ASSERT_TRUE(write_file(m("hidden"), data));
  EXPECT_EQ(read_file(m("hidden")), data);
  std::string layout;
  for (int i = 0; i < 3; ++i) {
    std::string text = read_file(record_path(root(i)));
    EXPECT_NE(text.find("part = " + std::to_string(i)), std::string::npos) << text;
    EXPECT_NE(text.find("stripe_size = 1048576"), std::string::npos) << text;
    EXPECT_NE(text.find("width = 3"), std::string::npos) << text;
    auto at = text.find("layout = ");
    ASSERT_NE(at, std::string::npos) << text;
    std::string id = text.substr(at, text.find('\n', at) - at);
    if (i == 0) layout = id;
    EXPECT_EQ(id, layout) << "one layout id on every backend";
  }
  EXPECT_EQ(list_names(mount_->path()).count(".skein-stripes"), 0u);
  struct stat st;
  EXPECT_EQ(SKEIN_ERRNO_OF(::stat(m(".skein-stripes").c_str(), &st)), ENOENT);
  EXPECT_EQ(SKEIN_ERRNO_OF(::open(m(".skein-stripes").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644)),
            EACCES);
  EXPECT_EQ(create_write_close_errno(m(".skein-stripes"), "x"), EACCES) << "created as echo does";
  EXPECT_EQ(SKEIN_ERRNO_OF(::rename(m("hidden").c_str(), m(".skein-stripes").c_str())), EACCES);
  EXPECT_EQ(SKEIN_ERRNO_OF(::unlink(m(".skein-stripes").c_str())), ENOENT);
  EXPECT_EQ(::unlink(m("hidden").c_str()), 0);
}

TEST_F(StripeRecords, AConfigurationThatNoLongerFitsIsRefusedAndChangesNothing) {
  std::string error;
  ASSERT_TRUE(start("1M", kThree, error)) << error;
  const std::string data = random_bytes(kFileSize, 2);
  ASSERT_TRUE(write_file(m("kept"), data));
  stop();
  const auto before = on_servers();
  ASSERT_GE(before.size(), 6u);  // three parts, three records

  struct Wrong {
    const char* what;
    const char* stripe;
    const char* backends;
    const char* in_log;
  };
  const Wrong wrongs[] = {
      {"another stripe size", "2M", kThree, "the configuration says 2 MiB stripes"},
      {"backends reordered", "1M", "\"b1\", \"b0\", \"b2\"", "the configuration puts it at"},
      {"one backend fewer", "1M", "\"b0\", \"b1\"", "the configuration stripes over 2 backends"},
      {"a server replaced by an empty one", "1M", "\"b0\", \"b1\", \"spare\"",
       "spare holds no part of layout"},
  };
  for (const Wrong& w : wrongs) {
    SCOPED_TRACE(w.what);
    ASSERT_TRUE(start(w.stripe, w.backends, error)) << error;
    // An admin sees the refusal before any file is touched (the mount's start aside).
    std::string listed;
    for (int i = 0; i < 50 && listed.find(" refused: ") == std::string::npos; ++i) {
      if (i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      listed = namespaces_list();
    }
    EXPECT_NE(listed.find(" refused: "), std::string::npos) << listed;
    EXPECT_NE(listed.find(w.in_log), std::string::npos) << listed;
    std::string health = skeinctl("health");
    EXPECT_NE(health.find("degraded"), std::string::npos) << health;
    EXPECT_NE(health.find("s:/: refused: "), std::string::npos) << health;
    EXPECT_EQ(SKEIN_ERRNO_OF(::open(m("kept").c_str(), O_RDONLY)), EIO);
    EXPECT_EQ(SKEIN_ERRNO_OF(::open(m("kept").c_str(), O_WRONLY)), EIO);
    EXPECT_EQ(SKEIN_ERRNO_OF(::open(m("new").c_str(), O_WRONLY | O_CREAT, 0644)), EIO);
    EXPECT_EQ(SKEIN_ERRNO_OF(::unlink(m("kept").c_str())), EIO);
    EXPECT_EQ(SKEIN_ERRNO_OF(::mkdir(m("d").c_str(), 0755)), EIO);
    stop();
    std::string log = read_file(log_);
    EXPECT_NE(log.find(w.in_log), std::string::npos) << log;
    EXPECT_NE(log.find("answers EIO until the configuration matches"), std::string::npos) << log;
    EXPECT_TRUE(on_servers() == before) << "the servers' files changed";
  }

  ASSERT_TRUE(start("1M", kThree, error)) << error;
  EXPECT_EQ(read_file(m("kept")), data);
  EXPECT_EQ(namespaces_list().find("refused"), std::string::npos) << namespaces_list();
  std::string health = skeinctl("health");
  EXPECT_NE(health.find("status      ok"), std::string::npos) << health;
  EXPECT_EQ(::unlink(m("kept").c_str()), 0);
}

TEST_F(StripeRecords, FilesStripedBeforeRecordsExistedAreAdopted) {
  std::string error;
  ASSERT_TRUE(start("1M", kThree, error)) << error;
  const std::string data = random_bytes(kFileSize, 3);
  ASSERT_TRUE(write_file(m("old"), data));
  const std::string first = read_file(record_path(root(0)));
  stop();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(::unlink(record_path(root(i)).c_str()), 0);

  ASSERT_TRUE(start("1M", kThree, error)) << error;
  EXPECT_EQ(read_file(m("old")), data);
  for (int i = 0; i < 3; ++i) {
    struct stat st;
    EXPECT_EQ(::stat(record_path(root(i)).c_str(), &st), 0) << "record " << i << " written again";
  }
  EXPECT_NE(read_file(record_path(root(0))), first) << "a new layout id";
  EXPECT_EQ(::unlink(m("old").c_str()), 0);
}

}  // namespace
}  // namespace skein::test
