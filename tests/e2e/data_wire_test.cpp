// The Data service's Read and Write as any gRPC client may send them, against a real gateway and
// sshd. The gateway frames and parses their contents by hand (proto/wire/bulk_message) and sends
// a Write's contents to the server in the pieces its socket reads gave: 1 MiB writes, with a hole
// between them, reach the server whole and in order, in the plain and in the striped layout; the
// replies parse with the generated code; malformed and out-of-range requests get a clear gRPC
// error, and nothing is written. A Write of many extents (random writes gathered) lands each one
// where it was asked.
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <condition_variable>
#include <mutex>
#include <optional>

#include "fs_test_support.hpp"
#include "grpc_test_support.hpp"
#include "skein/v1/fs.grpc.pb.h"
#include "wire/bulk_message.hpp"

namespace skein::test {
namespace {

namespace pb = ::skein::v1;

class DataWire : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    cluster_ = LocalCluster::start("data-wire", {.servers = 3, .mounts = 0}, error);
    if (!cluster_) setup_error_ = "cluster: " + error;
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
    std::string error;
    channel_ = wire::secure_channel(cluster_->env("SKEIN_GATEWAY"), cluster_tls(*cluster_), error);
    ASSERT_TRUE(channel_) << error;
    stub_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  // One unary call through the generic stub; the reply's bytes in `reply`.
  grpc::Status call(const char* method, const grpc::ByteBuffer& request, grpc::ByteBuffer& reply) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx.AddMetadata("x-skein-token", read_token(cluster_->token_file()));
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    stub_->UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
      std::lock_guard lock(mu);
      status = std::move(s);
      done = true;
      cv.notify_all();
    });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }

  // `bytes` as a message cut into slices of the given sizes, round robin.
  static grpc::ByteBuffer sliced(const std::string& bytes, std::vector<size_t> sizes) {
    std::vector<grpc::Slice> slices;
    size_t k = 0;
    for (size_t at = 0; at < bytes.size(); k = (k + 1) % sizes.size()) {
      size_t n = std::min(sizes[k], bytes.size() - at);
      slices.emplace_back(bytes.data() + at, n);
      at += n;
    }
    return grpc::ByteBuffer(slices.data(), slices.size());
  }

  static pb::FileRef ref(const std::string& path, int flags) {
    pb::FileRef f;
    f.set_ns("default");
    f.set_path(path);
    f.set_handle(0xfeed0000 + std::hash<std::string>()(path) % 1000);  // unknown: opened by path
    f.set_flags(static_cast<uint32_t>(flags));
    return f;
  }

  // Creates PATH (O_RDWR | O_CREAT | O_TRUNC) at the gateway; its handle, or 0 on failure.
  uint64_t create(const std::string& path) {
    pb::OpenRequest open;
    open.set_ns("default");
    open.set_path(path);
    open.set_flags(O_RDWR | O_CREAT | O_TRUNC);
    open.set_mode(0644);
    grpc::ByteBuffer req, reply;
    bool own;
    pb::OpenReply opened;
    if (!grpc::SerializationTraits<pb::OpenRequest>::Serialize(open, &req, &own).ok() ||
        !call("/skein.v1.Data/Create", req, reply).ok() ||
        !grpc::SerializationTraits<pb::OpenReply>::Deserialize(&reply, &opened).ok() ||
        opened.error() != 0)
      return 0;
    return opened.handle();
  }

  // A Write, sent as `sliced` cuts it (by default whole); its reply, or nullopt when the call
  // fails.
  std::optional<pb::WriteReply> write_call(const pb::WriteRequest& w,
                                           std::vector<size_t> slices = {}) {
    const std::string bytes = w.SerializeAsString();
    grpc::ByteBuffer wrote;
    pb::WriteReply written;
    if (!call("/skein.v1.Data/Write",
              sliced(bytes, slices.empty() ? std::vector{bytes.size()} : slices), wrote)
             .ok() ||
        !grpc::SerializationTraits<pb::WriteReply>::Deserialize(&wrote, &written).ok())
      return std::nullopt;
    return written;
  }

  // PATH's first `size` bytes read back through the gateway, 1 MiB a Read (the standard decoding
  // of the hand-framed reply); "<error ...>" when a Read fails.
  std::string read_back(const std::string& path, uint64_t handle, uint64_t size) {
    std::string back;
    for (uint64_t off = 0; off < size; off += 1 << 20) {
      pb::ReadRequest r;
      *r.mutable_file() = ref(path, O_RDWR);
      r.mutable_file()->set_handle(handle);
      r.set_offset(off);
      r.set_size(1 << 20);
      grpc::ByteBuffer rq, got;
      bool own;
      pb::ReadReply rr;
      if (!grpc::SerializationTraits<pb::ReadRequest>::Serialize(r, &rq, &own).ok() ||
          !call("/skein.v1.Data/Read", rq, got).ok() ||
          !grpc::SerializationTraits<pb::ReadReply>::Deserialize(&got, &rr).ok() || rr.error() != 0)
        return "<error reading at " + std::to_string(off) + ">";
      back += rr.data();
    }
    return back;
  }

  static std::string pattern(size_t n, int seed) {
    std::string s(n, '\0');
    for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u >> 13) + seed);
    return s;
  }

  static inline std::unique_ptr<LocalCluster> cluster_;
  static inline std::string setup_error_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<grpc::GenericStub> stub_;
};

TEST_F(DataWire, WriteInManySlicesArrivesWholeAndReadsBack) {
  for (const char* where : {"srv0", "striped"}) {
    SCOPED_TRACE(where);
    const std::string path = std::string("/") + where + "/wire-" + where;
    // The file exists (a Write names an open file; the gateway re-opens it by path).
    const uint64_t handle = create(path);
    ASSERT_NE(handle, 0u);

    // Two writes of 1 MiB, at 0 and past a hole, each cut into odd slices; the standard encoding.
    const std::string a = pattern(1 << 20, 1), b = pattern(1 << 20, 2);
    for (auto [offset, data] : {std::pair<uint64_t, const std::string*>{0, &a},
                                std::pair<uint64_t, const std::string*>{3u << 20, &b}}) {
      pb::WriteRequest w;
      *w.mutable_file() = ref(path, O_RDWR);
      w.mutable_file()->set_handle(handle);
      w.set_offset(offset);
      w.set_data(*data);
      auto written = write_call(w, {1, 7, 65536, 333, 4096});
      ASSERT_TRUE(written);
      EXPECT_EQ(written->error(), 0);
      EXPECT_EQ(written->written(), data->size());
    }

    const std::string want = a + std::string(2u << 20, '\0') + b;
    EXPECT_TRUE(read_back(path, handle, 4u << 20) == want) << "read back differs";
    if (std::string(where) == "srv0") {
      EXPECT_TRUE(read_file(cluster_->export_dir(0) + "/wire-srv0") == want)
          << "server file differs";
    }
  }
}

// Random writes the mount gathers into one call (WriteRequest.more) go to the server in groups
// sent without waiting for each write: every extent lands where it was asked, in both layouts,
// and the reply counts them all. A write the server refuses fails the call with its errno.
TEST_F(DataWire, AWriteOfManyExtentsLandsEachWhereItWasAsked) {
  for (const char* where : {"srv0", "striped"}) {
    SCOPED_TRACE(where);
    const std::string path = std::string("/") + where + "/extents-" + where;
    const uint64_t handle = create(path);
    ASSERT_NE(handle, 0u);

    // 60 extents of 1 byte to 70 KiB, none overlapping, in a shuffled order of offsets over
    // 8 MiB: several groups, extents larger than a group, and stripes of every backend.
    std::string want(8u << 20, '\0');
    pb::WriteRequest w;
    *w.mutable_file() = ref(path, O_RDWR);
    w.mutable_file()->set_handle(handle);
    uint64_t total = 0;
    for (int k = 0; k < 60; ++k) {
      const uint64_t slot = (static_cast<uint64_t>(k) * 37) % 60;  // 37 is prime to 60
      const uint64_t offset = slot * (128u << 10) + static_cast<uint64_t>(k % 5) * 1000;
      const size_t size = k % 7 == 0 ? 1 : k % 11 == 0 ? (70u << 10) : 4096;
      const std::string data = pattern(size, k);
      want.replace(offset, size, data);
      total += size;
      if (k == 0) {
        w.set_offset(offset);
        w.set_data(data);
      } else {
        auto* e = w.add_more();
        e->set_offset(offset);
        e->set_data(data);
      }
    }
    want.resize(want.find_last_not_of('\0') + 1);
    auto written = write_call(w);
    ASSERT_TRUE(written);
    EXPECT_EQ(written->error(), 0);
    EXPECT_EQ(written->written(), total);

    const std::string back = read_back(path, handle, want.size());
    EXPECT_EQ(back.size(), want.size());
    EXPECT_TRUE(back == want) << "read back differs";
    if (std::string(where) == "srv0") {
      EXPECT_TRUE(read_file(cluster_->export_dir(0) + "/extents-srv0") == want)
          << "server file differs";
    }
  }

  // A few small extents (run in the thread that received the call), and an extent larger than
  // one SFTP WRITE carries (cut into several within its group).
  for (const bool large : {false, true}) {
    SCOPED_TRACE(large ? "an extent of 600 KiB" : "ten extents of 3 KiB");
    const std::string path = std::string("/srv0/extents-") + (large ? "large" : "few");
    const uint64_t handle = create(path);
    ASSERT_NE(handle, 0u);
    std::string want;
    pb::WriteRequest w;
    *w.mutable_file() = ref(path, O_RDWR);
    w.mutable_file()->set_handle(handle);
    w.set_offset(0);
    w.set_data(pattern(100, 1));
    want = pattern(100, 1);
    for (int k = 9; k >= 1; --k) {  // backwards
      const std::string data = pattern(large && k == 5 ? (600u << 10) : 3000, k + 1);
      const uint64_t offset = static_cast<uint64_t>(k) * (700u << 10);
      if (want.size() < offset + data.size()) want.resize(offset + data.size(), '\0');
      want.replace(offset, data.size(), data);
      auto* e = w.add_more();
      e->set_offset(offset);
      e->set_data(data);
    }
    auto written = write_call(w);
    ASSERT_TRUE(written);
    EXPECT_EQ(written->error(), 0);
    EXPECT_TRUE(read_back(path, handle, want.size()) == want) << "read back differs";
    EXPECT_TRUE(read_file(cluster_->export_dir(0) + path.substr(5)) == want)
        << "server file differs";
  }

  // More extents than a call may carry: refused, nothing written.
  {
    pb::WriteRequest w;
    *w.mutable_file() = ref("/srv0/extents-few", O_RDWR);
    w.set_offset(0);
    w.set_data("Z");
    for (int k = 1; k < 300; ++k) {
      auto* e = w.add_more();
      e->set_offset(static_cast<uint64_t>(k) * 2);
      e->set_data("Z");
    }
    grpc::ByteBuffer req, reply;
    bool own;
    ASSERT_TRUE(grpc::SerializationTraits<pb::WriteRequest>::Serialize(w, &req, &own).ok());
    grpc::Status st = call("/skein.v1.Data/Write", req, reply);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("extents"), std::string::npos) << st.error_message();
    EXPECT_NE(read_file(cluster_->export_dir(0) + "/extents-few").substr(0, 1), "Z");
  }

  // The server refuses writes to a file it opened for reading: the call fails with an errno, and
  // the file is as it was.
  const std::string ro = cluster_->export_dir(0) + "/extents-read-only";
  ASSERT_TRUE(write_file(ro, "as it was"));
  pb::WriteRequest w;
  *w.mutable_file() = ref("/srv0/extents-read-only", O_RDONLY);
  w.set_offset(0);
  w.set_data("XX");
  for (int k = 1; k < 20; ++k) {
    auto* e = w.add_more();
    e->set_offset(static_cast<uint64_t>(k) * 4096);
    e->set_data(pattern(4096, k));
  }
  auto written = write_call(w);
  ASSERT_TRUE(written);
  EXPECT_NE(written->error(), 0);
  EXPECT_EQ(read_file(ro), "as it was");
}

TEST_F(DataWire, MalformedOrOversizedRequestsGetAClearError) {
  grpc::ByteBuffer reply;
  // A data field whose length runs past the message.
  std::string bad = "\x1a\xff\xff\x03" + std::string(10, 'x');
  auto s = call("/skein.v1.Data/Write", sliced(bad, {3}), reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("malformed WriteRequest"), std::string::npos)
      << s.error_message();
  s = call("/skein.v1.Data/Read", sliced("\x0a\xff", {1}), reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("malformed ReadRequest"), std::string::npos)
      << s.error_message();

  // Over the 1 MiB limit, and in a namespace that does not exist.
  pb::ReadRequest r;
  *r.mutable_file() = ref("/srv0/x", O_RDONLY);
  r.set_size((1 << 20) + 1);
  s = call("/skein.v1.Data/Read", sliced(r.SerializeAsString(), {100}), reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("over 1 MiB"), std::string::npos) << s.error_message();
  pb::WriteRequest w;
  *w.mutable_file() = ref("/srv0/big-write", O_WRONLY);
  w.set_data(std::string((1 << 20) + 1, 'y'));
  s = call("/skein.v1.Data/Write", sliced(w.SerializeAsString(), {65536}), reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("over 1 MiB"), std::string::npos) << s.error_message();
  w.mutable_file()->set_ns("no-such-namespace");
  w.set_data("z");
  s = call("/skein.v1.Data/Write", sliced(w.SerializeAsString(), {5}), reply);
  // An unknown namespace looks like a wrong token: no caller learns which namespaces exist.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  struct stat st;
  EXPECT_NE(::stat((cluster_->export_dir(0) + "/big-write").c_str(), &st), 0);
}

}  // namespace
}  // namespace skein::test
