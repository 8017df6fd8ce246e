// gRPC adapters for the Namespace and Data services: each RPC checks its request (namespace,
// token, path), calls NamespaceFs and turns the result into one reply. Errors a filesystem caller
// expects travel as an errno in the reply; gRPC status codes are for the call itself.
#pragma once

#include "coherence/invalidation_broker.hpp"
#include "service/call_placement.hpp"
#include "service/namespace_registry.hpp"
#include "skein/shared_bytes.hpp"
#include "skein/v1/fs.grpc.pb.h"

namespace skein {

// The unary calls are callback handlers whose work runs where CallPlacement puts it: most in the
// gRPC thread that received them, saving a hand-off to another thread per call. ReadDir streams
// its batches from a thread of gRPC's synchronous server.
using NamespaceCallbacks = v1::Namespace::WithCallbackMethod_GetAttr<
    v1::Namespace::WithCallbackMethod_SetAttr<v1::Namespace::WithCallbackMethod_Mkdir<
        v1::Namespace::WithCallbackMethod_Rmdir<v1::Namespace::WithCallbackMethod_Unlink<
            v1::Namespace::WithCallbackMethod_Rename<v1::Namespace::WithCallbackMethod_Symlink<
                v1::Namespace::WithCallbackMethod_Readlink<v1::Namespace::WithCallbackMethod_Link<
                    v1::Namespace::WithCallbackMethod_StatFs<v1::Namespace::Service>>>>>>>>>>;

class NamespaceService final : public NamespaceCallbacks {
 public:
  // With a broker, what is served and changed is reported to it (coherence); without, not.
  NamespaceService(const NamespaceRegistry& registry, CallPlacement& placement,
                   InvalidationBroker* broker = nullptr)
      : registry_(registry), placement_(placement), broker_(broker) {}

  using Ctx = grpc::CallbackServerContext;
  grpc::ServerUnaryReactor* GetAttr(Ctx* c, const v1::PathRequest* q, v1::AttrReply* r) override {
    return placement_.serve(c, true, [=, this] { return get_attr(c, q, r); });
  }
  grpc::ServerUnaryReactor* SetAttr(Ctx* c, const v1::SetAttrRequest* q,
                                    v1::AttrReply* r) override {
    return placement_.serve(c, true, [=, this] { return set_attr(c, q, r); });
  }
  grpc::Status ReadDir(grpc::ServerContext*, const v1::PathRequest*,
                       grpc::ServerWriter<v1::ReadDirReply>*) override;
  grpc::ServerUnaryReactor* Mkdir(Ctx* c, const v1::MkdirRequest* q, v1::AttrReply* r) override {
    return placement_.serve(c, true, [=, this] { return mkdir(c, q, r); });
  }
  grpc::ServerUnaryReactor* Rmdir(Ctx* c, const v1::PathRequest* q, v1::ErrorReply* r) override {
    return placement_.serve(c, true, [=, this] { return rmdir(c, q, r); });
  }
  grpc::ServerUnaryReactor* Unlink(Ctx* c, const v1::PathRequest* q, v1::ErrorReply* r) override {
    return placement_.serve(c, true, [=, this] { return unlink(c, q, r); });
  }
  grpc::ServerUnaryReactor* Rename(Ctx* c, const v1::RenameRequest* q, v1::ErrorReply* r) override {
    return placement_.serve(c, true, [=, this] { return rename(c, q, r); });
  }
  grpc::ServerUnaryReactor* Symlink(Ctx* c, const v1::SymlinkRequest* q,
                                    v1::AttrReply* r) override {
    return placement_.serve(c, true, [=, this] { return symlink(c, q, r); });
  }
  grpc::ServerUnaryReactor* Readlink(Ctx* c, const v1::PathRequest* q,
                                     v1::ReadlinkReply* r) override {
    return placement_.serve(c, true, [=, this] { return readlink(c, q, r); });
  }
  grpc::ServerUnaryReactor* Link(Ctx* c, const v1::LinkRequest* q, v1::AttrReply* r) override {
    return placement_.serve(c, true, [=, this] { return link(c, q, r); });
  }
  grpc::ServerUnaryReactor* StatFs(Ctx* c, const v1::PathRequest* q, v1::StatFsReply* r) override {
    return placement_.serve(c, true, [=, this] { return statfs(c, q, r); });
  }

 private:
  using Base = grpc::ServerContextBase;
  grpc::Status get_attr(Base*, const v1::PathRequest*, v1::AttrReply*);
  grpc::Status set_attr(Base*, const v1::SetAttrRequest*, v1::AttrReply*);
  grpc::Status mkdir(Base*, const v1::MkdirRequest*, v1::AttrReply*);
  grpc::Status rmdir(Base*, const v1::PathRequest*, v1::ErrorReply*);
  grpc::Status unlink(Base*, const v1::PathRequest*, v1::ErrorReply*);
  grpc::Status rename(Base*, const v1::RenameRequest*, v1::ErrorReply*);
  grpc::Status symlink(Base*, const v1::SymlinkRequest*, v1::AttrReply*);
  grpc::Status readlink(Base*, const v1::PathRequest*, v1::ReadlinkReply*);
  grpc::Status link(Base*, const v1::LinkRequest*, v1::AttrReply*);
  grpc::Status statfs(Base*, const v1::PathRequest*, v1::StatFsReply*);

  const NamespaceRegistry& registry_;
  CallPlacement& placement_;
  InvalidationBroker* broker_;
};

// Read and Write are raw callback methods: their contents are framed by hand (as the mount does,
// proto/wire/bulk_message), so that a Read's reply is sent from the fetched buffer and a Write's
// contents go to the SFTP server from the received slices, neither copied by gRPC or protobuf.
// Every call's work runs where CallPlacement puts it; large reads and writes, writes of several
// extents, ReadFiles and WriteFiles, and fsync, which may wait for a disk, always on the pool.
using DataCallbacks = v1::Data::WithRawCallbackMethod_Read<v1::Data::WithRawCallbackMethod_Write<
    v1::Data::WithCallbackMethod_Open<v1::Data::WithCallbackMethod_Create<
        v1::Data::WithCallbackMethod_Flush<v1::Data::WithCallbackMethod_Fsync<
            v1::Data::WithCallbackMethod_Release<v1::Data::WithCallbackMethod_ReadFiles<
                v1::Data::WithCallbackMethod_WriteFiles<v1::Data::Service>>>>>>>>>;

class DataService final : public DataCallbacks {
 public:
  DataService(const NamespaceRegistry& registry, CallPlacement& placement,
              InvalidationBroker* broker = nullptr)
      : registry_(registry), placement_(placement), broker_(broker) {}

  using Ctx = grpc::CallbackServerContext;
  grpc::ServerUnaryReactor* Open(Ctx* c, const v1::OpenRequest* q, v1::OpenReply* r) override {
    return placement_.serve(c, true, [=, this] { return open(c, q, r); });
  }
  grpc::ServerUnaryReactor* Create(Ctx* c, const v1::OpenRequest* q, v1::OpenReply* r) override {
    return placement_.serve(c, true, [=, this] { return create(c, q, r); });
  }
  grpc::ServerUnaryReactor* Read(Ctx*, const grpc::ByteBuffer*, grpc::ByteBuffer*) override;
  grpc::ServerUnaryReactor* Write(Ctx*, const grpc::ByteBuffer*, grpc::ByteBuffer*) override;
  grpc::ServerUnaryReactor* Flush(Ctx* c, const v1::FileRef* q, v1::ErrorReply* r) override {
    return placement_.serve(c, true, [=, this] { return flush(c, q, r); });
  }
  grpc::ServerUnaryReactor* Fsync(Ctx* c, const v1::FsyncRequest* q, v1::ErrorReply* r) override {
    return placement_.serve(c, false, [=, this] { return fsync(c, q, r); });
  }
  grpc::ServerUnaryReactor* Release(Ctx* c, const v1::FileRef* q, v1::ErrorReply* r) override {
    return placement_.serve(c, true, [=, this] { return release(c, q, r); });
  }
  grpc::ServerUnaryReactor* ReadFiles(Ctx* c, const v1::ReadFilesRequest* q,
                                      v1::ReadFilesReply* r) override {
    return placement_.serve(c, false, [=, this] { return read_files(c, q, r); });
  }
  grpc::ServerUnaryReactor* WriteFiles(Ctx* c, const v1::WriteFilesRequest* q,
                                       v1::WriteFilesReply* r) override {
    return placement_.serve(c, false, [=, this] { return write_files(c, q, r); });
  }

  // Reads and single writes up to this size may run in the receiving thread; larger ones are bulk
  // transfers, spread over several SFTP connections, and always go to the pool.
  static constexpr uint64_t kInlineIoBytes = 64u << 10;
  static constexpr int kInlineExtents = 16;  // writes gathered in one call (WriteRequest.more)

 private:
  using Base = grpc::ServerContextBase;
  grpc::Status open(Base*, const v1::OpenRequest*, v1::OpenReply*);
  grpc::Status create(Base*, const v1::OpenRequest*, v1::OpenReply*);
  grpc::Status flush(Base*, const v1::FileRef*, v1::ErrorReply*);
  grpc::Status fsync(Base*, const v1::FsyncRequest*, v1::ErrorReply*);
  grpc::Status release(Base*, const v1::FileRef*, v1::ErrorReply*);
  grpc::Status read_files(Base*, const v1::ReadFilesRequest*, v1::ReadFilesReply*);
  grpc::Status write_files(Base*, const v1::WriteFilesRequest*, v1::WriteFilesReply*);
  // `one_read`: set to a file opened for this read alone (ReadRequest.whole_file), which the
  // caller closes after replying.
  grpc::Status read(Base* ctx, const v1::ReadRequest& req, v1::ReadReply& reply, SharedBytes& data,
                    std::shared_ptr<OpenFile>& one_read);
  grpc::Status write(Base* ctx, const v1::WriteRequest& req, const SharedBytes& data,
                     v1::WriteReply& reply);

  const NamespaceRegistry& registry_;
  CallPlacement& placement_;
  InvalidationBroker* broker_;
};

// The Data service's limits are wire::kMaxIoSize, wire::kMaxReadFiles and wire::kMaxWriteFiles
// (wire/limits.hpp). A ReadFiles call's files go to the namespace in slices of up to
// kReadFilesSlice (a backend sends a slice's requests together, on one connection), and up to
// kReadFilesAtOnce slices are read at once.
inline constexpr int kReadFilesSlice = 32;
inline constexpr int kReadFilesAtOnce = 8;
// A WriteFiles call's files likewise go in slices of up to kWriteFilesSlice, up to
// kWriteFilesAtOnce slices at once.
inline constexpr int kWriteFilesSlice = 32;
inline constexpr int kWriteFilesAtOnce = 8;

}  // namespace skein
