// gRPC adapters for the Namespace and Data services: each RPC checks its request (namespace,
// token, path), calls NamespaceFs and turns the result into one reply. Errors a filesystem caller
// expects travel as an errno in the reply; gRPC status codes are for the call itself.
#pragma once

#include "coherence/invalidation_broker.hpp"
#include "service/blocking_pool.hpp"
#include "service/namespace_registry.hpp"
#include "skein/shared_bytes.hpp"
#include "skein/v1/fs.grpc.pb.h"

namespace skein {

class NamespaceService final : public skein::v1::Namespace::Service {
 public:
  // With a broker, what is served and changed is reported to it (coherence); without, not.
  explicit NamespaceService(const NamespaceRegistry& registry, InvalidationBroker* broker = nullptr)
      : registry_(registry), broker_(broker) {}

  grpc::Status GetAttr(grpc::ServerContext*, const v1::PathRequest*, v1::AttrReply*) override;
  grpc::Status SetAttr(grpc::ServerContext*, const v1::SetAttrRequest*, v1::AttrReply*) override;
  grpc::Status ReadDir(grpc::ServerContext*, const v1::PathRequest*,
                       grpc::ServerWriter<v1::ReadDirReply>*) override;
  grpc::Status Mkdir(grpc::ServerContext*, const v1::MkdirRequest*, v1::AttrReply*) override;
  grpc::Status Rmdir(grpc::ServerContext*, const v1::PathRequest*, v1::ErrorReply*) override;
  grpc::Status Unlink(grpc::ServerContext*, const v1::PathRequest*, v1::ErrorReply*) override;
  grpc::Status Rename(grpc::ServerContext*, const v1::RenameRequest*, v1::ErrorReply*) override;
  grpc::Status Symlink(grpc::ServerContext*, const v1::SymlinkRequest*, v1::AttrReply*) override;
  grpc::Status Readlink(grpc::ServerContext*, const v1::PathRequest*, v1::ReadlinkReply*) override;
  grpc::Status Link(grpc::ServerContext*, const v1::LinkRequest*, v1::AttrReply*) override;
  grpc::Status StatFs(grpc::ServerContext*, const v1::PathRequest*, v1::StatFsReply*) override;

 private:
  const NamespaceRegistry& registry_;
  InvalidationBroker* broker_;
};

// Read and Write are raw callback methods: their contents are framed by hand (as the mount does,
// proto/wire/bulk_message), so that a Read's reply is sent from the fetched buffer and a Write's
// contents go to the SFTP server from the received slices, neither copied by gRPC or protobuf.
// Their work blocks on SFTP round trips, so it runs on a pool of its own, never on gRPC's threads.
class DataService final
    : public skein::v1::Data::WithRawCallbackMethod_Read<
          skein::v1::Data::WithRawCallbackMethod_Write<skein::v1::Data::Service>> {
 public:
  explicit DataService(const NamespaceRegistry& registry, InvalidationBroker* broker = nullptr)
      : registry_(registry), broker_(broker), pool_(kMaxBlockingThreads) {}

  grpc::Status Open(grpc::ServerContext*, const v1::OpenRequest*, v1::OpenReply*) override;
  grpc::Status Create(grpc::ServerContext*, const v1::OpenRequest*, v1::OpenReply*) override;
  grpc::ServerUnaryReactor* Read(grpc::CallbackServerContext*, const grpc::ByteBuffer*,
                                 grpc::ByteBuffer*) override;
  grpc::ServerUnaryReactor* Write(grpc::CallbackServerContext*, const grpc::ByteBuffer*,
                                  grpc::ByteBuffer*) override;
  grpc::Status Flush(grpc::ServerContext*, const v1::FileRef*, v1::ErrorReply*) override;
  grpc::Status Fsync(grpc::ServerContext*, const v1::FsyncRequest*, v1::ErrorReply*) override;
  grpc::Status Release(grpc::ServerContext*, const v1::FileRef*, v1::ErrorReply*) override;

 private:
  // Reads and writes in progress at once, at most; more wait for a thread. Generous: a server that
  // hangs holds a thread per request to it until the first deadline marks it down, and requests
  // to healthy servers must not queue behind those meanwhile.
  static constexpr std::size_t kMaxBlockingThreads = 256;
  grpc::Status read(grpc::ServerContextBase* ctx, const v1::ReadRequest& req, v1::ReadReply& reply,
                    SharedBytes& data);
  grpc::Status write(grpc::ServerContextBase* ctx, const v1::WriteRequest& req,
                     const SharedBytes& data, v1::WriteReply& reply);

  const NamespaceRegistry& registry_;
  InvalidationBroker* broker_;
  BlockingPool pool_;
};

// Largest Read or Write payload accepted.
inline constexpr uint32_t kMaxIoSize = 1u << 20;

}  // namespace skein
