// Interest sets and the invalidation broker, without a network: fake streams record what the
// broker sends, and acknowledge (or not) as each test needs.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "auth/token_digest.hpp"
#include "coherence/interest_set.hpp"
#include "coherence/invalidation_broker.hpp"
#include "coherence/invalidation_rules.hpp"
#include "coherence/revalidator.hpp"
#include "coherence/watch_service.hpp"
#include "fake_backend.hpp"
#include "namespace/create_policy.hpp"
#include "namespace/union_layout.hpp"
#include "service/call_placement.hpp"
#include "service/fs_services.hpp"
#include "skein/v1/fs.grpc.pb.h"
#include "skein/v1/watch.grpc.pb.h"

namespace skein {
namespace {

using Kind = v1::Invalidation;

TEST(InterestSet, RecordsWhoCachesWhat) {
  InterestSet s(10);
  s.note("/a", 1, std::nullopt);
  s.note("/a", 2, std::nullopt);
  s.note("/a", 1, std::nullopt);
  s.note("/b", 2, std::nullopt);
  EXPECT_EQ(s.sessions_of("/a"), (std::vector<SessionId>{1, 2}));
  EXPECT_EQ(s.sessions_of("/b"), (std::vector<SessionId>{2}));
  EXPECT_TRUE(s.sessions_of("/c").empty());
  s.forget_session(2);
  EXPECT_EQ(s.sessions_of("/a"), (std::vector<SessionId>{1}));
  EXPECT_EQ(s.size(), 1u) << "a path nobody caches is dropped";
}

TEST(InterestSet, EvictsLeastRecentlyNotedAndReportsWhoHadIt) {
  InterestSet s(2);
  s.note("/old", 7, std::nullopt);
  s.note("/mid", 8, std::nullopt);
  s.note("/old", 7, std::nullopt);  // touched: now /mid is the oldest
  auto evicted = s.note("/new", 9, std::nullopt);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].path, "/mid");
  EXPECT_EQ(evicted[0].sessions, (std::vector<SessionId>{8}));
  EXPECT_EQ(s.size(), 2u);
}

TEST(InterestSet, NoticesWhenAPathChangedBehindTheGatewaysBack) {
  InterestSet s(10);
  sftp::Attrs a;
  a.size = 1;
  a.mtime = 100;
  bool changed = true;
  s.note("/f", 1, SeenAttrs::of(a), &changed);
  EXPECT_FALSE(changed) << "first sight is no change";
  s.note("/f", 2, SeenAttrs::of(a), &changed);
  EXPECT_FALSE(changed);
  a.size = 2;
  s.note("/f", 2, SeenAttrs::of(a), &changed);
  EXPECT_TRUE(changed);
  s.clear_seen("/f");
  a.size = 3;
  s.note("/f", 2, SeenAttrs::of(a), &changed);
  EXPECT_FALSE(changed) << "after the gateway's own change, the next sight is the new baseline";
}

TEST(InterestSet, BatchesRotateThroughEveryPath) {
  InterestSet s(100);
  for (int i = 0; i < 5; ++i) s.note("/p" + std::to_string(i), 1, std::nullopt);
  std::set<std::string> seen;
  for (int round = 0; round < 3; ++round)
    for (auto& [p, _] : s.next_batch(2)) seen.insert(p);
  EXPECT_EQ(seen.size(), 5u);
}

// Paths noted again while the rounds go on (a mount that keeps using what revalidation just
// looked at) move to the front of the LRU list; the rounds still reach every path in turn.
TEST(InterestSet, BatchesReachEveryPathWhateverIsNotedMeanwhile) {
  InterestSet s(10);
  for (const char* p : {"/a", "/b", "/c"}) s.note(p, 1, std::nullopt);
  std::vector<std::string> walked;
  for (int round = 0; round < 3; ++round)
    for (auto& [p, _] : s.next_batch(1)) {
      walked.push_back(p);
      s.note(p, 1, std::nullopt);
    }
  EXPECT_EQ(std::set<std::string>(walked.begin(), walked.end()),
            (std::set<std::string>{"/a", "/b", "/c"}));
  // And a path taken out at the cursor does not send the walk back to the start.
  InterestSet t(10);
  for (const char* p : {"/a", "/b", "/c", "/d"}) t.note(p, 1, std::nullopt);
  ASSERT_EQ(t.next_batch(2).back().first, "/b");
  t.forget_session(1);
  for (const char* p : {"/a", "/b", "/c", "/d"}) t.note(p, 2, std::nullopt);
  EXPECT_EQ(t.next_batch(1).front().first, "/c");
}

TEST(InterestSet, ARenamerKeepsWhatItCachedUnderTheNewNames) {
  InterestSet s(100);
  sftp::Attrs a;
  a.size = 5;
  s.note("/d", 1, std::nullopt);
  s.note("/d/f", 1, SeenAttrs::of(a));
  s.note("/d/sub/g", 1, std::nullopt);
  s.note("/d/sub/g", 2, std::nullopt);
  s.note("/d2/h", 1, std::nullopt);     // a sibling whose name begins the same: not moved
  s.note("/d/other", 2, std::nullopt);  // cached by another mount only: not moved for 1
  EXPECT_TRUE(s.follow_rename("/d", "/e/x", 1).empty());
  EXPECT_EQ(s.sessions_of("/e/x"), (std::vector<SessionId>{1}));
  EXPECT_EQ(s.sessions_of("/e/x/f"), (std::vector<SessionId>{1}));
  EXPECT_EQ(s.sessions_of("/e/x/sub/g"), (std::vector<SessionId>{1}));
  EXPECT_TRUE(s.sessions_of("/e/x2/h").empty());
  EXPECT_TRUE(s.sessions_of("/e/x/other").empty());
  EXPECT_EQ(s.seen_of("/e/x/f"), SeenAttrs::of(a)) << "what was seen moves with the name";
  EXPECT_EQ(s.sessions_of("/d/f"), (std::vector<SessionId>{1})) << "the old names stay noted";
  // A file renamed over one another mount caches: both count there, and what was seen of the
  // replaced file is not overwritten (the rename's own invalidation clears it).
  sftp::Attrs b;
  b.size = 9;
  s.note("/t", 2, SeenAttrs::of(b));
  s.follow_rename("/d/f", "/t", 1);
  EXPECT_EQ(s.sessions_of("/t"), (std::vector<SessionId>{2, 1}));
  EXPECT_EQ(s.seen_of("/t"), SeenAttrs::of(b));
  // Into its own subdirectory (the server refuses it): the walk ends.
  s.follow_rename("/e", "/e/in", 1);
  EXPECT_EQ(s.sessions_of("/e/in/x/f"), (std::vector<SessionId>{1}));
  // Past the limit, the least recently noted paths go and are reported.
  InterestSet small(3);
  small.note("/old", 3, std::nullopt);
  small.note("/a/1", 1, std::nullopt);
  small.note("/a/2", 1, std::nullopt);
  auto evicted = small.follow_rename("/a", "/b", 1);
  ASSERT_EQ(evicted.size(), 2u);
  EXPECT_EQ(evicted[0].path, "/old");
  EXPECT_EQ(small.size(), 3u);
}

// A stream that records events and acknowledges them after `delay` (or never).
class FakeStream : public InvalidationBroker::Stream {
 public:
  FakeStream(InvalidationBroker& b, bool answers) : broker(b), answers(answers) {}
  void send(const v1::WatchEvent& e) override {
    events.push_back(e);
    if (answers) {
      // Acknowledge from another thread, as a real mount would.
      pending.emplace_back([this, seq = e.seq()] { broker.acked(id, seq); });
    }
  }
  void end(const std::string& why) override { ended = why; }
  void join() {
    for (auto& t : pending) t.join();
    pending.clear();
  }
  // How many invalidations of `path` it was sent, once its acknowledgements are in.
  size_t told_of(const std::string& path) {
    join();
    size_t n = 0;
    for (auto& e : events)
      for (auto& i : e.invalidations()) n += i.path() == path;
    return n;
  }
  ~FakeStream() override { join(); }
  InvalidationBroker& broker;
  bool answers;
  SessionId id = 0;
  std::vector<v1::WatchEvent> events;
  std::vector<std::thread> pending;
  std::string ended;
};

// `services` served on a loopback port (plaintext), and a channel to them; shut down when it goes.
struct LoopbackServer {
  explicit LoopbackServer(std::initializer_list<grpc::Service*> services) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    for (grpc::Service* s : services) builder.RegisterService(s);
    server = builder.BuildAndStart();
    if (server)
      channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                    grpc::InsecureChannelCredentials());
  }
  ~LoopbackServer() {
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;
};

// A call of the mount `mount` (the token every test namespace takes).
void as_mount(grpc::ClientContext& ctx, const std::string& mount) {
  ctx.AddMetadata("x-skein-token", "secret");
  ctx.AddMetadata("x-skein-mount", mount);
}

TEST(InvalidationBroker, TellsOtherInterestedMountsButNotTheOrigin) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true), c(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  c.id = broker.attach("ns", "C", &c);
  broker.served("ns", "A", "/d/f", std::nullopt, true);
  broker.served("ns", "B", "/d/f", std::nullopt, true);
  broker.served("ns", "C", "/other", std::nullopt, true);
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/d/f")}, "A");
  b.join();
  EXPECT_TRUE(a.events.empty()) << "the origin already knows";
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_EQ(b.events[0].invalidations(0).path(), "/d/f");
  EXPECT_TRUE(c.events.empty()) << "C caches nothing there";
  broker.detach(a.id);
  broker.detach(b.id);
  broker.detach(c.id);
}

// A mount whose stream ended and that did not subscribe again is handed out once as gone, when
// its stream has been gone long enough (OrphanReaper); one that came back, or whose stream was
// replaced by its own new subscription, is not.
TEST(InvalidationBroker, AMountWhoseStreamIsGoneIsHandedOutOnce) {
  using Clock = std::chrono::steady_clock;
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true), b2(broker, true), c(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  c.id = broker.attach("other", "C", &c);
  broker.detach(a.id);                    // A is gone
  broker.detach(b.id);                    // B's stream broke...
  b2.id = broker.attach("ns", "B", &b2);  // ...and B subscribed again
  EXPECT_TRUE(broker.take_gone(Clock::now() - std::chrono::hours(1)).empty()) << "not long enough";
  using Gone = std::vector<InvalidationBroker::MountKey>;
  EXPECT_EQ(broker.take_gone(Clock::now() + std::chrono::seconds(1)), (Gone{{"ns", "A"}}));
  EXPECT_TRUE(broker.take_gone(Clock::now() + std::chrono::seconds(1)).empty()) << "once";
  // A stream ended by the gateway (its namespace went away) counts as gone too.
  broker.end_namespace("other", "namespace removed");
  broker.detach(c.id);
  EXPECT_EQ(broker.take_gone(Clock::now() + std::chrono::seconds(1)), (Gone{{"other", "C"}}));
  broker.detach(b2.id);
}

// What keeps an expired job namespace (JobNamespaces::expire): the mounts of it subscribed now,
// of that namespace only; one subscribed again counts once.
TEST(InvalidationBroker, CountsTheMountsOfANamespaceThatHaveAStream) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true), b2(broker, true), c(broker, true);
  EXPECT_EQ(broker.mounts("job-1"), 0u);
  a.id = broker.attach("job-1", "A", &a);
  b.id = broker.attach("job-1", "B", &b);
  c.id = broker.attach("job-10", "C", &c);  // a namespace whose name starts with the other's
  EXPECT_EQ(broker.mounts("job-1"), 2u);
  EXPECT_EQ(broker.mounts("job-10"), 1u);
  EXPECT_EQ(broker.mounts("job"), 0u);
  b2.id = broker.attach("job-1", "B", &b2);  // B again: replaces its first stream
  EXPECT_EQ(broker.mounts("job-1"), 2u);
  broker.detach(a.id);
  EXPECT_EQ(broker.mounts("job-1"), 1u);
  broker.end_namespace("job-1", "destroyed");
  EXPECT_EQ(broker.mounts("job-1"), 0u);
  EXPECT_EQ(broker.mounts("job-10"), 1u);
  broker.detach(b.id);
  broker.detach(b2.id);
  broker.detach(c.id);
}

// A version the gateway served that differs from what it served before is told to the others,
// and then is the version known: a revalidation that finds yet another version on the server
// tells the mounts (before, telling the others forgot what was served, and the revalidation
// took the next version for the one known).
TEST(InvalidationBroker, AVersionFoundChangedWhenServedIsWhatTheNextRevalidationComparesWith) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  SeenAttrs v1{true, 0100644, 0, 0, 1000, 10}, v2 = v1, v3 = v1;
  v2.size = 20;
  v3.size = 30;
  broker.served("ns", "A", "/f", v1, false);
  broker.served("ns", "B", "/f", v2, false);  // changed on the server: A is told
  EXPECT_TRUE(broker.revalidated("ns", "/f", v2, v3)) << "a change past v2 went unnoticed";
  broker.detach(a.id);
  broker.detach(b.id);
}

// A rename (a TREE invalidation of its source) goes to the mounts that cache the path, anything
// below it or its directory, and waits for their acknowledgements only: a mount that caches
// nothing there, stalled, neither hears of it nor holds it up for a lease (before, every mount of
// the namespace did, and one slow node stalled every rename).
TEST(InvalidationBroker, ARenameWaitsOnlyForTheMountsThatCacheWhatItMoves) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, false);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);  // never acknowledges
  broker.served("ns", "A", "/d/sub/x", std::nullopt, true);
  broker.served("ns", "B", "/e/y", std::nullopt, true);
  const auto start = std::chrono::steady_clock::now();
  broker.changed("ns", {InvalidationBroker::item(Kind::TREE, "/d")}, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000))
      << "waited for a mount that caches nothing below /d";
  a.join();
  ASSERT_EQ(a.events.size(), 1u) << "A caches /d/sub/x";
  EXPECT_TRUE(b.events.empty());
  EXPECT_TRUE(b.ended.empty()) << "B kept its lease";
  broker.detach(a.id);
  broker.detach(b.id);
}

// A namespace that ended (a job's, destroyed) leaves no interest set behind once its mounts'
// streams detach: one a day for every destroyed job, each handed to every revalidation round.
TEST(InvalidationBroker, AnEndedNamespaceLeavesNoInterestSetBehind) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream m(broker, true), n(broker, true);
  m.id = broker.attach("job-1", "M", &m);
  n.id = broker.attach("job-1", "N", &n);
  broker.served("job-1", "M", "/f", std::nullopt, false);
  broker.end_namespace("job-1", "namespace destroyed");
  broker.detach(m.id);
  broker.set_seen("job-1", "/f", SeenAttrs{});
  EXPECT_TRUE(broker.next_batch("job-1", 10).empty());
  broker.detach(n.id);
  const auto left = broker.namespaces();
  EXPECT_EQ(std::count(left.begin(), left.end(), "job-1"), 0) << "an empty set made anew";
}

// Mounts are told apart by namespace and id: a client of another namespace that subscribes with
// a mount's id (mount ids are no secret: they name the control sockets) neither ends that
// mount's stream nor stands in for it, and hears nothing of the namespace.
TEST(InvalidationBroker, AnotherNamespacesSubscriptionWithAMountsIdIsAnotherMount) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream m(broker, true), intruder(broker, false), other(broker, true);
  m.id = broker.attach("ns", "M", &m);
  other.id = broker.attach("ns", "O", &other);
  intruder.id = broker.attach("elsewhere", "M", &intruder);
  EXPECT_TRUE(m.ended.empty()) << "the mount's stream was ended: " << m.ended;
  EXPECT_TRUE(broker.subscribed("ns", "M"));
  EXPECT_TRUE(broker.subscribed("elsewhere", "M"));
  // M's calls count M of "ns", not the intruder, among those that cache the path.
  broker.served("ns", "M", "/f", std::nullopt, true);
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/f")}, "O");
  m.join();
  EXPECT_EQ(m.events.size(), 1u);
  EXPECT_TRUE(intruder.events.empty()) << "an intruder heard of another namespace's path";
  // A change the intruder claims as M's in its own namespace is not taken for M's in "ns".
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/f")}, "M");
  EXPECT_TRUE(intruder.events.empty());
  broker.detach(intruder.id);
  EXPECT_TRUE(broker.subscribed("ns", "M")) << "the intruder's leaving took M with it";
  broker.detach(m.id);
  broker.detach(other.id);
}

// The welcome says whether the namespace's servers are watched, and each stream hears when
// that changes, once per change, before anything else of its namespace.
TEST(InvalidationBroker, StreamsAreToldWhetherTheServersAreWatched) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  std::map<std::string, bool> watched{{"ns", false}, {"other", true}};
  broker.set_servers_watched([&](const std::string& ns) { return watched[ns]; });
  FakeStream a(broker, false), b(broker, false);
  v1::WatchEvent welcome;
  welcome.set_lease_ms(2000);
  a.id = broker.attach("ns", "A", &a, &welcome);
  b.id = broker.attach("other", "B", &b, &welcome);
  ASSERT_EQ(a.events.size(), 1u);
  EXPECT_EQ(a.events[0].seq(), 0u);
  EXPECT_EQ(a.events[0].lease_ms(), 2000u);
  EXPECT_FALSE(a.events[0].servers_watched());
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_TRUE(b.events[0].servers_watched());
  broker.servers_watched_changed();  // nothing changed
  EXPECT_EQ(a.events.size(), 1u);
  EXPECT_EQ(b.events.size(), 1u);
  watched["ns"] = true;
  broker.servers_watched_changed();
  ASSERT_EQ(a.events.size(), 2u);
  EXPECT_EQ(a.events[1].seq(), 0u) << "nothing to acknowledge";
  EXPECT_TRUE(a.events[1].servers_watched());
  EXPECT_EQ(b.events.size(), 1u);
  watched["other"] = false;
  broker.servers_watched_changed();
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_FALSE(b.events[1].servers_watched());
  broker.detach(a.id);
  broker.detach(b.id);
}

// Brokers whose echo window a test can wait out.
const InvalidationBroker::Options kShortEchoWindow{.lease = std::chrono::milliseconds(2000),
                                                   .interest_limit = 100,
                                                   .echo_window = std::chrono::milliseconds(300)};

TEST(InvalidationBroker, TheWatchersEchoOfAChangeSkipsTheMountThatMadeItForAWhile) {
  InvalidationBroker broker(kShortEchoWindow);
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  broker.served("ns", "A", "/d/f", std::nullopt, true);
  broker.served("ns", "B", "/d/f", std::nullopt, true);
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/d/f")}, "A");
  b.join();
  ASSERT_EQ(b.events.size(), 1u);
  const std::vector<v1::Invalidation> report{InvalidationBroker::item(Kind::INODE, "/d/f"),
                                             InvalidationBroker::item(Kind::INODE, "/d/g")};
  // The server's watcher reports /d/f (A's own change) and /d/g (made by someone else).
  broker.served("ns", "A", "/d/g", std::nullopt, true);
  broker.changed_elsewhere("ns", report, /*maybe_echo=*/true);
  ASSERT_EQ(a.events.size(), 1u) << "A still hears of /d/g";
  ASSERT_EQ(a.events[0].invalidations_size(), 1);
  EXPECT_EQ(a.events[0].invalidations(0).path(), "/d/g");
  ASSERT_EQ(b.events.size(), 2u) << "B did not make the change: it hears of it again";
  // Not from the watcher (revalidation found it): everyone hears of everything.
  broker.changed_elsewhere("ns", report);
  ASSERT_EQ(a.events.size(), 2u);
  EXPECT_EQ(a.events[1].invalidations_size(), 2);
  // After the window, a report of /d/f is news to A too.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  broker.changed_elsewhere("ns", report, /*maybe_echo=*/true);
  ASSERT_EQ(a.events.size(), 3u);
  EXPECT_EQ(a.events[2].invalidations_size(), 2);
  broker.detach(a.id);
  broker.detach(b.id);
}

// A report taken for A's own change may also be a change made on the server within the echo
// window: once the window has passed, the path is checked against the version A was served last
// (after its write), and A hears of it only if the server shows another.
TEST(InvalidationBroker, AReportTakenForAnEchoIsCheckedAfterTheWindow) {
  InvalidationBroker broker(kShortEchoWindow);
  FakeStream a(broker, true);
  a.id = broker.attach("ns", "A", &a);
  const SeenAttrs written{true, 0100644, 0, 0, 100, 5}, rewritten{true, 0100644, 0, 0, 100, 9};
  for (const std::string f : {"/echo", "/raced", "/unknown"}) {
    broker.changed("ns", {InvalidationBroker::item(Kind::INODE, f)}, "A");
    // A's write reply brought the file's attributes: A holds that version (not for /unknown).
    broker.served("ns", "A", f, f == "/unknown" ? std::optional<SeenAttrs>() : written, true);
  }
  const std::vector<v1::Invalidation> report{InvalidationBroker::item(Kind::INODE, "/echo"),
                                             InvalidationBroker::item(Kind::INODE, "/raced"),
                                             InvalidationBroker::item(Kind::INODE, "/unknown")};
  broker.changed_elsewhere("ns", report, /*maybe_echo=*/true);
  broker.changed_elsewhere("ns", {report[1]}, /*maybe_echo=*/true);  // the server's own change
  EXPECT_TRUE(a.events.empty()) << "within the window, A takes both for its own";
  EXPECT_TRUE(broker.due_echo_checks().empty()) << "not before the window has passed";
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto due = broker.due_echo_checks(1);  // a round's worth at a time
  ASSERT_EQ(due.size(), 1u);
  for (auto& c : broker.due_echo_checks()) due.push_back(c);
  std::map<std::string, std::optional<SeenAttrs>> held;
  for (auto& c : due) held[c.path] = c.seen;
  EXPECT_EQ(held.size(), 2u) << "/unknown: no version to compare";
  EXPECT_EQ(held["/echo"], written) << "what A was served before the report";
  EXPECT_EQ(held["/raced"], written) << "what A was served before the first report";
  EXPECT_TRUE(broker.due_echo_checks().empty()) << "handed out once";
  // The revalidator reads the server and hands it to revalidated(), as for any path.
  EXPECT_FALSE(broker.revalidated("ns", "/echo", held["/echo"], written));
  EXPECT_TRUE(a.events.empty());
  EXPECT_TRUE(broker.revalidated("ns", "/raced", held["/raced"], rewritten));
  ASSERT_EQ(a.events.size(), 1u);
  EXPECT_EQ(a.events[0].invalidations(0).path(), "/raced");
  broker.detach(a.id);
}

// A mount that read a file right after another mount's change (told of the change, then served
// the new version) still hears of the watcher's report of it, though it is most likely the
// change's echo: the server may have replaced the file within the window (a rename over it, as
// rsync does), and a file of the same size and mtime second is not told apart by the echo
// check's attributes (e2e
// DataPath.AFileReplacedOnTheServerJustAfterTheGatewayPutItThereIsReadAsOpened). Only the writer,
// which knows its own change, is spared it.
TEST(InvalidationBroker, AMountServedAChangeRightAfterItStillHearsOfTheReport) {
  InvalidationBroker broker(kShortEchoWindow);
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  const SeenAttrs old_version{true, 0100644, 0, 0, 100, 5}, written{true, 0100644, 0, 0, 101, 9};
  broker.served("ns", "B", "/f", old_version, true);
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/f")}, "A");
  broker.served("ns", "A", "/f", written, true);  // the write's reply
  broker.served("ns", "B", "/f", written, true);  // B reads the file again
  b.join();
  ASSERT_EQ(b.events.size(), 1u) << "B hears of the change";
  broker.changed_elsewhere("ns", {InvalidationBroker::item(Kind::INODE, "/f")},
                           /*maybe_echo=*/true);
  EXPECT_TRUE(a.events.empty()) << "A made the change";
  ASSERT_EQ(b.events.size(), 2u) << "B hears of the report";
  EXPECT_EQ(b.events[1].invalidations(0).path(), "/f");
  broker.detach(a.id);
  broker.detach(b.id);
}

// A revalidation round (the safety net's, or one of a server not watched) that reads a path
// between the echo window's end and the path's echo check compares the server with the version
// the mount that wrote it holds. It once found the path forgotten (the report had cleared it) and
// took the server's state, a change made there within the window included, for the known one;
// the echo check after it then compared that with itself, and the mount kept its own version.
TEST(InvalidationBroker, ARoundBeforeTheEchoCheckComparesWithTheWritersVersion) {
  InvalidationBroker broker(kShortEchoWindow);
  FakeStream a(broker, true);
  a.id = broker.attach("ns", "A", &a);
  const SeenAttrs written{true, 0100644, 0, 0, 100, 18}, rewritten{true, 0100644, 0, 0, 100, 32};
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/raced")}, "A");
  broker.served("ns", "A", "/raced", written, true);
  // The watcher's report of A's write and of the server's change made right after it.
  broker.changed_elsewhere("ns", {InvalidationBroker::item(Kind::INODE, "/raced")},
                           /*maybe_echo=*/true);
  EXPECT_TRUE(a.events.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  // The round reads the path first, as a revalidator does (next_batch, then revalidated()).
  std::optional<SeenAttrs> before;
  bool listed = false;
  for (auto& [path, seen] : broker.next_batch("ns", 100))
    if (path == "/raced") listed = true, before = seen;
  ASSERT_TRUE(listed);
  EXPECT_EQ(before, written) << "the version A holds, not forgotten";
  EXPECT_TRUE(broker.revalidated("ns", "/raced", before, rewritten));
  ASSERT_EQ(a.events.size(), 1u) << "A hears of the server's change";
  // The echo check that follows finds the server as now known: nothing more to tell.
  auto due = broker.due_echo_checks();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_FALSE(broker.revalidated("ns", "/raced", due[0].seen, rewritten));
  EXPECT_EQ(a.events.size(), 1u);
  broker.detach(a.id);
}

TEST(InvalidationBroker, RevalidationInvalidatesOnlyWhatChangedBehindTheGatewaysBack) {
  InvalidationBroker broker(kShortEchoWindow);
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  const SeenAttrs s1{true, 0100644, 0, 0, 100, 5}, s2{true, 0100644, 0, 0, 101, 6},
      s3{true, 0100644, 0, 0, 102, 7};
  broker.served("ns", "A", "/f", s1, true);
  broker.served("ns", "B", "/f", s1, true);
  // Unchanged: nothing to say.
  EXPECT_FALSE(broker.revalidated("ns", "/f", s1, s1));
  // Changed on the server: both mounts hear of it, and the new state is the new baseline.
  EXPECT_TRUE(broker.revalidated("ns", "/f", s1, s2));
  EXPECT_EQ(a.events.size(), 1u);
  EXPECT_EQ(b.events.size(), 1u);
  EXPECT_FALSE(broker.revalidated("ns", "/f", s2, s2));
  // Served anew while revalidation was reading: the newer record wins, nobody is told.
  broker.served("ns", "A", "/f", s3, true);
  EXPECT_FALSE(broker.revalidated("ns", "/f", s2, s1));
  // Changed through the gateway a moment ago: revalidation keeps out of it for the echo window.
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/f")}, "A");
  b.join();
  const size_t a_before = a.events.size(), b_before = b.events.size();
  EXPECT_TRUE(broker.recently_changed("ns", "/f"));
  EXPECT_FALSE(broker.revalidated("ns", "/f", std::nullopt, s1));
  EXPECT_EQ(a.events.size(), a_before);
  EXPECT_EQ(b.events.size(), b_before);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_FALSE(broker.recently_changed("ns", "/f"));
  broker.detach(a.id);
  broker.detach(b.id);
}

// A write in a directory (INODE of a file) leaves what was seen of the directory alone: a name
// made in it on the server meanwhile is still found changed by the next revalidation of the
// directory, and the mounts that listed it are told. Before, the write made the directory's
// next state the baseline, and no one heard of the new name.
TEST(InvalidationBroker, AWriteInADirectoryKeepsWhatWasSeenOfTheDirectory) {
  InvalidationBroker broker(kShortEchoWindow);
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  const SeenAttrs listed{true, 040755, 0, 0, 100, 4096}, grown{true, 040755, 0, 0, 101, 4096};
  broker.served("ns", "B", "/d", listed, false);  // B listed /d
  broker.served("ns", "A", "/d/f", std::nullopt, true);
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/d/f")}, "A");
  b.join();
  const size_t b_before = b.events.size();
  EXPECT_TRUE(broker.revalidated("ns", "/d", listed, grown))
      << "the new name on the server went unnoticed";
  EXPECT_EQ(b.events.size(), b_before + 1);
  broker.detach(a.id);
  broker.detach(b.id);
}

TEST(InvalidationBroker, EntryChangeReachesMountsThatListedTheParent) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  broker.served("ns", "B", "/dir", std::nullopt, false);  // B listed /dir
  broker.changed("ns", {InvalidationBroker::item(Kind::ENTRY, "/dir/new")}, "A");
  b.join();
  EXPECT_EQ(b.events.size(), 1u);
  broker.detach(a.id);
  broker.detach(b.id);
}

// A lookup of an absent name in /d takes back the interest in /d it added; but a listing of /d
// served to the same mount meanwhile (which noted /d and found the mount already counted) must
// keep it: the mount caches that listing. Taken back, no change in /d reached the mount again.
TEST(InvalidationBroker, AFailedLookupKeepsTheInterestOfAListingServedMeanwhile) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  auto lookup = broker.will_serve("ns", "A", "/d/absent", /*entry=*/true);
  broker.served("ns", "A", "/d", std::nullopt, false);  // the listing of /d, meanwhile
  broker.not_served(lookup);
  broker.changed("ns", {InvalidationBroker::item(Kind::ENTRY, "/d/new")}, "B");
  a.join();
  EXPECT_EQ(a.events.size(), 1u) << "the mount that listed /d was not told of a new name in it";
  // Without the listing, the failed lookup leaves nothing behind.
  auto alone = broker.will_serve("ns", "A", "/e/absent", /*entry=*/true);
  broker.not_served(alone);
  broker.changed("ns", {InvalidationBroker::item(Kind::ENTRY, "/e/new")}, "B");
  a.join();
  EXPECT_EQ(a.events.size(), 1u) << "a lookup that found nothing left interest in /e";
  broker.detach(a.id);
  broker.detach(b.id);
}

TEST(InvalidationBroker, SilentMountLosesItsLeaseWithinTheTimeoutAndOthersGoOn) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(200), .interest_limit = 100});
  FakeStream good(broker, true), silent(broker, false);
  good.id = broker.attach("ns", "good", &good);
  silent.id = broker.attach("ns", "silent", &silent);
  broker.served("ns", "good", "/f", std::nullopt, false);
  broker.served("ns", "silent", "/f", std::nullopt, false);
  auto start = std::chrono::steady_clock::now();
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/f")}, "");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(1000));
  EXPECT_GE(took, std::chrono::milliseconds(150));
  EXPECT_FALSE(silent.ended.empty()) << "the silent mount's stream is ended";
  EXPECT_TRUE(good.ended.empty());
  // Once revoked, it is no longer waited for.
  start = std::chrono::steady_clock::now();
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/f")}, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  good.join();
  broker.detach(good.id);
  broker.detach(silent.id);
}

TEST(InvalidationBroker, EvictedInterestIsInvalidatedNotForgotten) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 2});
  FakeStream a(broker, true);
  a.id = broker.attach("ns", "A", &a);
  broker.served("ns", "A", "/1", std::nullopt, false);
  broker.served("ns", "A", "/2", std::nullopt, false);
  broker.served("ns", "A", "/3", std::nullopt, false);
  a.join();
  ASSERT_EQ(a.events.size(), 1u);
  EXPECT_EQ(a.events[0].invalidations(0).kind(), Kind::TREE);
  EXPECT_EQ(a.events[0].invalidations(0).path(), "/1");
  broker.detach(a.id);
}

// A mount whose interest in a path went to the set's limit is sent TREE for it, and is no longer
// among those that cache it; until it acknowledges that TREE, it may still answer the path from
// its cache, so a change through the gateway at, above or below the path waits for it as for an
// interested mount (and one that never answers loses its lease). Changes elsewhere, and changes
// once it acknowledged, do not wait.
TEST(InvalidationBroker, AChangeWaitsForTheMountsThatHaveNotYetDroppedWhatTheSetEvicted) {
  using namespace std::chrono_literals;
  InvalidationBroker broker({.lease = 300ms, .interest_limit = 2});
  FakeStream silent(broker, false), a(broker, true), b(broker, true);
  silent.id = broker.attach("ns", "silent", &silent);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("other", "B", &b);
  broker.served("ns", "silent", "/d/f", std::nullopt, false);
  broker.served("ns", "A", "/x", std::nullopt, false);
  broker.served("ns", "A", "/y", std::nullopt, false);  // the limit: /d/f goes
  ASSERT_EQ(silent.events.size(), 1u);
  EXPECT_EQ(silent.events[0].invalidations(0).kind(), Kind::TREE);
  const auto took = [&](const std::string& ns, const std::string& path) {
    const auto start = std::chrono::steady_clock::now();
    broker.changed(ns, {InvalidationBroker::item(Kind::INODE, path)}, "");
    return std::chrono::steady_clock::now() - start;
  };
  EXPECT_LT(took("ns", "/e"), 150ms) << "a change of an unrelated path waited";
  EXPECT_LT(took("other", "/d/f"), 150ms) << "a change in another namespace waited";
  EXPECT_TRUE(silent.ended.empty());
  EXPECT_GE(took("ns", "/d"), 250ms) << "a change above the evicted path did not wait";
  EXPECT_FALSE(silent.ended.empty()) << "the mount that never dropped it kept its lease";
  // A mount that acknowledged the TREE is not waited for.
  broker.served("ns", "A", "/p/q", std::nullopt, false);  // /x goes
  broker.served("ns", "A", "/z", std::nullopt, false);    // /y goes
  broker.served("ns", "A", "/w", std::nullopt, false);    // /p/q goes
  a.join();                                               // its acknowledgements are in
  ASSERT_EQ(a.told_of("/p/q"), 1u);
  EXPECT_LT(took("ns", "/p/q/r"), 150ms) << "A acknowledged already";
  EXPECT_TRUE(a.ended.empty());
  a.join();
  b.join();
  broker.detach(silent.id);
  broker.detach(a.id);
  broker.detach(b.id);
}

// A mount that renames a directory keeps its cache of what is below under the new names; a
// change another mount makes there right after the rename must reach it.
TEST(InvalidationBroker, AChangeBelowARenamedDirectoryReachesTheMountThatRenamedIt) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  broker.served("ns", "A", "/d/sub/f", std::nullopt, true);
  broker.renaming("ns", "A", "/d", "/e");
  broker.changed("ns", invalidations_for(Change::rename, "/d", "/e"), "A");
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/e/sub/f")}, "B");
  a.join();
  ASSERT_EQ(a.events.size(), 1u);
  EXPECT_EQ(a.events[0].invalidations(0).path(), "/e/sub/f");
  // Without the rename's notice, nobody would have told A (the rename's own TREE item goes to
  // the others).
  broker.served("ns", "A", "/p/f", std::nullopt, true);
  broker.changed("ns", invalidations_for(Change::rename, "/p", "/q"), "A");
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/q/f")}, "B");
  a.join();
  EXPECT_EQ(a.events.size(), 1u);
  broker.renaming("ns", "nobody", "/x", "/y");  // an unsubscribed mount: nothing to follow
  broker.detach(a.id);
  broker.detach(b.id);
}

TEST(InvalidationBroker, UnsubscribedMountsAreNotTracked) {
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 2});
  broker.served("ns", "nobody", "/x", std::nullopt, false);
  auto start = std::chrono::steady_clock::now();
  broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/x")}, "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
}

// Namespace "ns" (token "secret"): a union of `backend` alone at its root.
std::shared_ptr<NamespaceFs> one_backend_namespace(std::shared_ptr<Backend> backend) {
  return std::make_shared<NamespaceFs>(
      "ns", TokenSet::of("secret"),
      std::make_shared<const MountTable>(std::vector<Mount>{
          {"/", std::make_shared<UnionLayout>(
                    std::vector<Branch>{{std::move(backend), BranchMode::read_write}},
                    make_create_policy("ff"))}}));
}

// While the servers are watched, revalidation is a rare safety net: one round in
// kWatchedRounds re-reads what mounts cache; without watchers, every round does.
TEST(Revalidator, RoundsSkipNamespacesWhoseServersAreWatched) {
  auto backend = test::FakeBackend::make("srv0");
  backend->put_file("f", "x");
  NamespaceRegistry registry;
  registry.add(one_backend_namespace(backend));
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  bool watched = true;
  broker.set_servers_watched([&](const std::string&) { return watched; });
  FakeStream a(broker, true);
  a.id = broker.attach("ns", "A", &a);
  broker.served("ns", "A", "/f", std::nullopt, true);
  Revalidator revalidator(broker, registry, std::chrono::hours(1), 100);  // rounds run by hand
  auto lstats = [&] { return backend->calls("lstat"); };
  size_t before = lstats();
  revalidator.round();  // the safety net's round
  EXPECT_GT(lstats(), before);
  before = lstats();
  for (uint64_t i = 1; i < Revalidator::kWatchedRounds; ++i) revalidator.round();
  EXPECT_EQ(lstats(), before) << "watched: nothing re-read between safety-net rounds";
  revalidator.round();
  EXPECT_GT(lstats(), before);
  watched = false;
  before = lstats();
  revalidator.round();
  EXPECT_GT(lstats(), before) << "unwatched: every round";
  broker.detach(a.id);
}

// The revalidator checks the reports taken for a mount's own changes, once the echo window has
// passed, many paths at a time: a path the server shows as the mount was served it says nothing,
// a path changed on the server meanwhile is invalidated, a path gone is too, and each path is
// read once.
TEST(Revalidator, EchoChecksFindWhatTheServerChangedMeanwhile) {
  auto backend = test::FakeBackend::make("srv0");
  NamespaceRegistry registry;
  auto ns = one_backend_namespace(backend);
  registry.add(ns);
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000),
                             .interest_limit = 1000,
                             .echo_window = std::chrono::milliseconds(300)});
  broker.set_servers_watched([](const std::string&) { return true; });
  FakeStream a(broker, true);
  a.id = broker.attach("ns", "A", &a);
  constexpr size_t kFiles = 150;  // more than a call's worth of paths
  std::vector<v1::Invalidation> report;
  for (size_t i = 0; i < kFiles; ++i) {
    const std::string f = "/f" + std::to_string(i);
    backend->put_file(f, "written by A");
    broker.changed("ns", {InvalidationBroker::item(Kind::INODE, f)}, "A");
    broker.served("ns", "A", f, SeenAttrs::of(*ns->getattr(f)), true);
    report.push_back(InvalidationBroker::item(Kind::INODE, f));
  }
  broker.changed_elsewhere("ns", report, /*maybe_echo=*/true);
  ASSERT_TRUE(a.events.empty()) << "within the window, A takes the reports for its own";
  backend->put_file("/f7", "rewritten on the server, longer");
  backend->put_file("/f140", "rewritten on the server, longer");
  ASSERT_TRUE(backend->unlink("/f99"));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  Revalidator revalidator(broker, registry, std::chrono::hours(1), 1000);  // rounds run by hand
  revalidator.round();  // the echo checks (and, the first round, the safety net)
  const size_t lstats = backend->calls("lstat");
  std::set<std::string> told;
  for (auto& e : a.events)
    for (auto& i : e.invalidations()) told.insert(i.path());
  EXPECT_EQ(told, (std::set<std::string>{"/f7", "/f140", "/f99"}));
  revalidator.round();
  EXPECT_EQ(backend->calls("lstat"), lstats) << "each report checked once";
  broker.detach(a.id);
}

// A Watch stream whose write fails (the mount goes away while invalidations are on their way to
// it) is ended and leaves the broker: its call is finished, so gRPC lets go of it and a shutdown
// does not wait for it. Over TCP on loopback, so that the stream's writes wait for a reader.
TEST(WatchService, AStreamWhoseWriteFailsEndsAndLeavesTheBroker) {
  // On the heap: a stream that never ends would keep the server from shutting down, so a failing
  // run leaves them all behind rather than hang.
  struct Rig {
    NamespaceRegistry registry;
    InvalidationBroker broker{{.lease = std::chrono::milliseconds(2000), .interest_limit = 100000}};
    WatchService service{broker, registry};
    std::unique_ptr<grpc::Server> server;
  };
  auto* rig = new Rig;
  auto& [registry, broker, service, server] = *rig;
  registry.add(one_backend_namespace(test::FakeBackend::make("srv0")));
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  server = builder.BuildAndStart();
  ASSERT_TRUE(server);
  auto stub = v1::Watch::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-skein-token", "secret");
  auto stream = stub->Stream(&ctx);
  v1::WatchRequest sub;
  sub.mutable_subscribe()->set_ns("ns");
  sub.mutable_subscribe()->set_mount_id("M");
  ASSERT_TRUE(stream->Write(sub));
  v1::WatchEvent welcome;
  ASSERT_TRUE(stream->Read(&welcome));
  ASSERT_EQ(broker.session_count(), 1u);
  ASSERT_EQ(service.open_streams(), 1u);
  // Far more than the transport buffers while the mount reads nothing: writes stay in flight.
  const std::string long_name(4000, 'x');
  for (int i = 0; i < 5000; ++i) {
    const std::string path = "/" + std::to_string(i) + long_name;
    broker.served("ns", "M", path, std::nullopt, false);
    broker.changed_elsewhere("ns", {InvalidationBroker::item(Kind::INODE, path)});
  }
  ctx.TryCancel();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((service.open_streams() > 0 || broker.session_count() > 0) &&
         std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(broker.session_count(), 0u);
  ASSERT_EQ(service.open_streams(), 0u) << "the stream's call was never finished";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  delete rig;
}

// A renew is answered only on a stream that subscribed, with the namespace's credential: a
// process that reaches the gateway's port without it learns nothing from it, and its stream ends
// at the refused subscription with no event before.
TEST(WatchService, ARenewIsAnsweredOnlyOnASubscribedStream) {
  NamespaceRegistry registry;
  registry.add(one_backend_namespace(test::FakeBackend::make("srv0")));
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  WatchService service(broker, registry);
  LoopbackServer serving({&service});
  ASSERT_TRUE(serving.server);
  auto stub = v1::Watch::NewStub(serving.channel);
  auto renew_then_subscribe = [&](const std::string& token, v1::WatchEvent* first) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-skein-token", token);
    ctx.AddMetadata("x-skein-mount", "M");
    auto stream = stub->Stream(&ctx);
    v1::WatchRequest renew;
    renew.set_renew(7);
    EXPECT_TRUE(stream->Write(renew));
    v1::WatchRequest sub;
    sub.mutable_subscribe()->set_ns("ns");
    sub.mutable_subscribe()->set_mount_id("M");
    EXPECT_TRUE(stream->Write(sub));
    const bool got = stream->Read(first);
    ctx.TryCancel();
    while (stream->Read(first)) {
    }
    (void)stream->Finish();
    return got;
  };
  v1::WatchEvent first;
  EXPECT_FALSE(renew_then_subscribe("wrong", &first))
      << "answered a renew without a session: renewed " << first.renewed();
  // With the credential, the welcome comes first (the renew before it went unanswered too), and
  // it says that renews are answered.
  ASSERT_TRUE(renew_then_subscribe("secret", &first));
  EXPECT_EQ(first.renewed(), 0u);
  EXPECT_TRUE(first.renews());
}

// A GetAttr or an Open counts its mount among those that cache the path before it reads the
// server: a change another mount makes while the read is on its way is announced to the caller,
// whose mount then does not keep the reply. A lookup of an absent name leaves no interest behind.
TEST(NamespaceService, AMountIsToldOfAChangeMadeWhileItsReadWasOnItsWay) {
  auto backend = test::FakeBackend::make("srv0");
  backend->put_file("/d/f", "old");
  backend->put_file("/h/g", "old");
  backend->put_dir("/e");
  NamespaceRegistry registry;
  registry.add(one_backend_namespace(backend));
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  CallPlacement placement(4, 2);
  NamespaceService names(registry, placement, &broker);
  DataService data(registry, placement, &broker);
  LoopbackServer serving({&names, &data});
  ASSERT_TRUE(serving.server);
  auto ns_stub = v1::Namespace::NewStub(serving.channel);
  auto data_stub = v1::Data::NewStub(serving.channel);
  // B writes the file while A's GetAttr reads it from the server.
  auto b_writes = [&] {
    broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/d/f")}, "B");
  };
  {
    backend->on_next("lstat", b_writes);
    grpc::ClientContext ctx;
    as_mount(ctx, "A");
    v1::PathRequest q;
    q.set_ns("ns");
    q.set_path("/d/f");
    v1::AttrReply r;
    ASSERT_TRUE(ns_stub->GetAttr(&ctx, q, &r).ok());
    ASSERT_EQ(r.error(), 0);
    EXPECT_EQ(a.told_of("/d/f"), 1u) << "A's GetAttr may have read the file before B's write";
  }
  {
    backend->on_next("open", [&] {
      broker.changed("ns", {InvalidationBroker::item(Kind::INODE, "/h/g")}, "B");
    });
    grpc::ClientContext ctx;
    as_mount(ctx, "A");
    v1::OpenRequest q;
    q.set_ns("ns");
    q.set_path("/h/g");
    q.set_flags(O_RDONLY);
    v1::OpenReply r;
    ASSERT_TRUE(data_stub->Open(&ctx, q, &r).ok());
    ASSERT_EQ(r.error(), 0);
    EXPECT_EQ(a.told_of("/h/g"), 1u) << "A's Open may have read the file before B's write";
  }
  {
    // An absent name in a directory A caches nothing of: nothing stays noted for A.
    grpc::ClientContext ctx;
    as_mount(ctx, "A");
    v1::PathRequest q;
    q.set_ns("ns");
    q.set_path("/e/absent");
    v1::AttrReply r;
    ASSERT_TRUE(ns_stub->GetAttr(&ctx, q, &r).ok());
    ASSERT_EQ(r.error(), ENOENT);
    const size_t before = a.events.size();
    broker.changed("ns", {InvalidationBroker::item(Kind::ENTRY, "/e/absent")}, "B");
    a.join();
    EXPECT_EQ(a.events.size(), before) << "a failed lookup left A counted for /e/absent or /e";
  }
  {
    // B's write fails on the server, which may have taken part of it: A hears of it all the
    // same. (A caches /d/f since its GetAttr above.)
    backend->fail("write", "", EIO);
    grpc::ClientContext ctx;
    as_mount(ctx, "B");
    v1::WriteRequest q;
    q.mutable_file()->set_ns("ns");
    q.mutable_file()->set_path("/d/f");
    q.mutable_file()->set_flags(O_WRONLY);
    q.set_offset(0);
    q.set_data("new");
    v1::WriteReply r;
    const size_t before = a.told_of("/d/f");
    ASSERT_TRUE(data_stub->Write(&ctx, q, &r).ok());
    EXPECT_EQ(r.error(), EIO);
    EXPECT_EQ(a.told_of("/d/f"), before + 1) << "a failed write was not announced";
    backend->clear_failures();
  }
  broker.detach(a.id);
  broker.detach(b.id);
}

// A listing gives the caller's kernel its subdirectories' attributes (readdirplus), kept without
// a lookup: a name made or removed in one of them reaches the lister, whose kernel would
// otherwise show the subdirectory's old mtime and link count for as long as it caches them.
TEST(NamespaceService, AListingCountsItsCallerAmongThoseThatCacheItsSubdirectories) {
  auto backend = test::FakeBackend::make("srv0");
  backend->put_dir("/p/d");
  backend->put_dir("/p/e");
  backend->put_file("/p/f", "file");
  NamespaceRegistry registry;
  registry.add(one_backend_namespace(backend));
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  std::atomic<bool> watched{true};
  broker.set_servers_watched([&](const std::string&) { return watched.load(); });
  FakeStream a(broker, true);
  a.id = broker.attach("ns", "A", &a);
  CallPlacement placement(4, 2);
  NamespaceService names(registry, placement, &broker);
  LoopbackServer serving({&names});
  ASSERT_TRUE(serving.server);
  auto stub = v1::Namespace::NewStub(serving.channel);
  auto list_as = [&](const std::string& mount) {
    grpc::ClientContext ctx;
    as_mount(ctx, mount);
    v1::PathRequest q;
    q.set_ns("ns");
    q.set_path("/p");
    auto reader = stub->ReadDir(&ctx, q);
    v1::ReadDirReply batch;
    size_t entries = 0;
    while (reader->Read(&batch)) entries += batch.entries_size();
    EXPECT_TRUE(reader->Finish().ok());
    EXPECT_EQ(entries, 3u);
  };
  list_as("A");
  // Another mount makes a name in /p/d, and one in a directory A did not list.
  broker.changed("ns", invalidations_for(Change::create, "/p/d/new"), "B");
  EXPECT_EQ(a.told_of("/p/d/new"), 2u) << "the name and the file, for /p/d's attributes";
  broker.changed("ns", invalidations_for(Change::mkdir, "/q/sub"), "B");
  EXPECT_EQ(a.told_of("/q/sub"), 0u);
  // While the servers are watched, a file of the listing gives no interest of its own (its
  // directory's covers the changes told, and the watcher reports the server's); the
  // subdirectories' attributes are known as listed: revalidation compares with them.
  auto noted = [&](const std::string& mount_path) {
    std::optional<std::optional<SeenAttrs>> found;
    for (auto& [path, seen] : broker.next_batch("ns", 100))
      if (path == mount_path) found = seen;
    return found;
  };
  ASSERT_TRUE(noted("/p/e").has_value());
  EXPECT_TRUE(noted("/p/e")->has_value()) << "/p/e noted with the attributes the listing read";
  EXPECT_FALSE(noted("/p/f").has_value());
  // Not watched: the files are noted too, for revalidation to look at.
  watched = false;
  FakeStream c(broker, true);
  c.id = broker.attach("ns", "C", &c);
  list_as("C");
  ASSERT_TRUE(noted("/p/f").has_value());
  EXPECT_EQ(**noted("/p/f"), SeenAttrs::of(*backend->lstat("/p/f")));
  broker.detach(a.id);
  broker.detach(c.id);
}

// A file of a WriteFiles call that fails may have replaced its name all the same (its RENAME
// made, the answer lost with the connection): the other mounts that cache the name hear of it, as
// of a failed write.
TEST(DataService, AWriteFilesFileThatFailsIsAnnouncedAllTheSame) {
  auto backend = test::FakeBackend::make("srv0");
  backend->put_file("/d/f", "old");
  NamespaceRegistry registry;
  registry.add(one_backend_namespace(backend));
  InvalidationBroker broker({.lease = std::chrono::milliseconds(2000), .interest_limit = 100});
  FakeStream a(broker, true), b(broker, true);
  a.id = broker.attach("ns", "A", &a);
  b.id = broker.attach("ns", "B", &b);
  broker.served("ns", "A", "/d/f", std::nullopt, true);
  CallPlacement placement(4, 2);
  DataService data(registry, placement, &broker);
  LoopbackServer serving({&data});
  ASSERT_TRUE(serving.server);
  auto stub = v1::Data::NewStub(serving.channel);
  auto write_files_as_b = [&](const std::string& data_bytes) {
    grpc::ClientContext ctx;
    as_mount(ctx, "B");
    v1::WriteFilesRequest q;
    q.set_ns("ns");
    auto* f = q.add_files();
    f->set_path("/d/f");
    f->set_partial("/d/.f.partial");
    f->set_data(data_bytes);
    f->set_mode(0644);
    v1::WriteFilesReply r;
    EXPECT_TRUE(stub->WriteFiles(&ctx, q, &r).ok());
    return r.files_size() == 1 ? r.files(0).error() : -1;
  };
  backend->fail("rename", "", EIO);
  EXPECT_EQ(write_files_as_b("new"), EIO);
  EXPECT_EQ(a.told_of("/d/f"), 2u) << "the name and the file, as for a file made";
  backend->clear_failures();
  EXPECT_EQ(write_files_as_b("newer"), 0);
  EXPECT_EQ(a.told_of("/d/f"), 4u);
  EXPECT_EQ(*backend->contents("/d/f"), "newer");
  broker.detach(a.id);
  broker.detach(b.id);
}

}  // namespace
}  // namespace skein
