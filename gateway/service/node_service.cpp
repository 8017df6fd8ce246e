// Node service adapter; see node_service.hpp.
#include "service/node_service.hpp"

#include "gateway.hpp"
#include "jobs/sqlite.hpp"

namespace skein {

grpc::Status NodeService::JobMountCredential(grpc::ServerContext* ctx,
                                             const v1::JobMountCredentialRequest* req,
                                             v1::JobMountCredentialReply* reply) {
  using grpc::StatusCode;
  if (!roles_.mutual_tls())
    return {StatusCode::PERMISSION_DENIED,
            "node credentials need mutual TLS (client_ca_file in the gateway's [gateway.tls]): "
            "without it, give the mount the token that CreateJobNamespace returned"};
  if (!roles_.allows(*ctx, ClientRole::node)) {
    refusals_.note(ctx->peer(), ClientRoles::common_name(*ctx));
    return {StatusCode::PERMISSION_DENIED,
            "a job's mount credential is given only to a node certificate (node_clients)"};
  }
  if (!jobs_)
    return {StatusCode::FAILED_PRECONDITION,
            "this gateway makes no job namespaces: its configuration has no [jobs] section"};
  try {
    auto c = jobs_->issue_node_credential(req->job_id(), ClientRoles::common_name(*ctx));
    reply->set_ns(c.ns);
    reply->set_credential(c.token);
    reply->set_uid(c.uid);
    reply->set_gid(c.gid);
  } catch (const AdminError& e) {
    return {StatusCode::NOT_FOUND, e.what()};
  } catch (const sqlite::StoreError& e) {
    // A full disk or an I/O error at the gateway, not the node's fault: UNAVAILABLE, which the
    // Slurm prolog takes for the gateway's trouble (the job is held, the node not drained).
    return {StatusCode::UNAVAILABLE, std::string("the job database: ") + e.what()};
  }
  return grpc::Status::OK;
}

}  // namespace skein
