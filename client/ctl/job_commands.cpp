// skeinctl's job namespace commands; see job_commands.hpp.
#include "job_commands.hpp"

#include <ctime>
#include <iostream>

#include "skein/progress.hpp"
#include "skein/size.hpp"
#include "table.hpp"

namespace skein::ctl {
namespace {

std::string layout_kind(const v1::JobLayout& l) {
  return l.kind() == v1::JobLayout::UNION ? "union" : "striped";
}

Json job_json(const v1::JobNamespaceInfo& n) {
  Json labels = Json::object();
  for (auto& [k, v] : n.labels()) labels[k] = v;
  Json backends = Json::array();
  for (auto& b : n.backends()) backends.push_back(b);
  Json pending = Json::array();
  for (auto& p : n.pending_removals()) pending.push_back(p);
  return {{"namespace", n.name()},
          {"job_id", n.job_id()},
          {"uid", n.uid()},
          {"gid", n.gid()},
          {"layout",
           {{"kind", layout_kind(n.layout())},
            {"stripe_size", n.layout().stripe_size()},
            {"width", n.layout().width()},
            {"pool", n.layout().pool()}}},
          {"layout_description", n.layout_description()},
          {"backends", backends},
          {"quota_bytes", n.quota_bytes()},
          {"quota_inodes", n.quota_inodes()},
          {"bytes_used", n.bytes_used()},
          {"inodes_used", n.inodes_used()},
          {"created_s", n.created_s()},
          {"expires_s", n.expires_s()},
          {"labels", labels},
          {"pending_removals", pending}};
}

std::string percent(uint64_t used, uint64_t limit) {
  if (!limit) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%",
                100.0 * static_cast<double>(used) / static_cast<double>(limit));
  return buf;
}

std::string when(int64_t s) {
  std::time_t t = static_cast<std::time_t>(s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

}  // namespace

v1::CreateJobNamespaceRequest create_request(const CreateJobArgs& a) {
  v1::CreateJobNamespaceRequest req;
  if (a.job_id.empty()) throw UsageError("ns create: give the job id");
  req.set_job_id(a.job_id);
  if (!a.uid_given || !a.gid_given)
    throw UsageError("ns create: give the owner with --uid and --gid");
  req.set_uid(a.uid);
  req.set_gid(a.gid);
  auto quota = parse_size(a.quota_bytes);
  if (!quota) throw UsageError("--quota-bytes '" + a.quota_bytes + "' is not a size (e.g. 100G)");
  req.set_quota_bytes(*quota);
  req.set_quota_inodes(a.quota_inodes);
  auto* l = req.mutable_layout();
  if (a.layout == "striped")
    l->set_kind(v1::JobLayout::STRIPED);
  else if (a.layout == "union")
    l->set_kind(v1::JobLayout::UNION);
  else
    throw UsageError("--layout must be striped or union, not '" + a.layout + "'");
  l->set_pool(a.pool);
  for (auto& b : a.backends) l->add_backends(b);
  l->set_width(a.width);
  if (!a.stripe_size.empty()) {
    auto s = parse_size(a.stripe_size);
    if (!s) throw UsageError("--stripe-size '" + a.stripe_size + "' is not a size (e.g. 4M)");
    l->set_stripe_size(*s);
  }
  if (!a.lifetime.empty()) {
    auto d = parse_duration(a.lifetime);
    if (!d || d->count() <= 0)
      throw UsageError("--lifetime '" + a.lifetime + "' is not a duration (e.g. 90m, 24h, 7d)");
    req.set_lifetime_s(static_cast<uint64_t>(d->count()));
  }
  for (auto& kv : a.labels) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UsageError("--label '" + kv + "' must be KEY=VALUE");
    (*req.mutable_labels())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return req;
}

int ns_create(AdminSession& s, const Output& out, const CreateJobArgs& args) {
  auto req = create_request(args);
  v1::CreateJobNamespaceReply reply;
  auto st =
      s.call(&v1::Admin::Stub::CreateJobNamespace, req, &reply, AdminSession::kChangeDeadline);
  if (!st.ok()) return failed(s, out, st);
  const auto& n = reply.namespace_();
  if (out.json) {
    Json j = job_json(n);
    j["created"] = reply.created();
    j["credential"] = reply.credential();
    print_json(j);
    return kExitOk;
  }
  std::cout << (reply.created() ? "made" : "already there:") << " namespace " << n.name()
            << " for job " << n.job_id() << " (owner " << n.uid() << ":" << n.gid() << ", "
            << n.layout_description() << ", quota "
            << size_text(static_cast<double>(n.quota_bytes())) << " / " << n.quota_inodes()
            << " inodes, until " << when(n.expires_s()) << ")\n";
  // The credential goes to whoever asked, once: print it only where it is asked for.
  if (!reply.credential().empty())
    std::cout << "credential (shown once; the gateway keeps its digest only): "
              << reply.credential() << "\n";
  return kExitOk;
}

int ns_destroy(AdminSession& s, const Output& out, const std::string& job_id, uint32_t wait_ms) {
  v1::DestroyJobNamespaceRequest req;
  req.set_job_id(job_id);
  req.set_wait_ms(wait_ms);
  v1::DestroyJobNamespaceReply reply;
  auto st = s.call(&v1::Admin::Stub::DestroyJobNamespace, req, &reply,
                   std::chrono::milliseconds(wait_ms ? wait_ms : 30000) + AdminSession::kDeadline);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    Json pending = Json::array();
    for (auto& p : reply.removal_pending()) pending.push_back(p);
    print_json({{"job_id", job_id},
                {"namespace", "job-" + job_id},
                {"existed", reply.existed()},
                {"removal_pending", pending}});
    return kExitOk;
  }
  if (!reply.existed())
    std::cout << "job " << job_id << " has no namespace (nothing to destroy)\n";
  else
    std::cout << "destroyed namespace job-" << job_id << "\n";
  for (auto& p : reply.removal_pending())
    std::cout << "still to remove (retried while its backend is down): " << p << "\n";
  return kExitOk;
}

int ns_list(AdminSession& s, const Output& out) {
  v1::ListNamespacesReply reply;
  auto st = s.call(&v1::Admin::Stub::ListNamespaces, v1::ListNamespacesRequest(), &reply);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    Json list = Json::array();
    for (auto& n : reply.namespaces())
      if (n.has_job()) list.push_back(job_json(n.job()));
    print_json({{"job_namespaces", list}});
    return kExitOk;
  }
  Table t({{"NAMESPACE"},
           {"OWNER"},
           {"LAYOUT"},
           {"USED", true},
           {"QUOTA", true},
           {"INODES", true},
           {"EXPIRES"}});
  bool any = false;
  for (auto& n : reply.namespaces()) {
    if (!n.has_job()) continue;
    any = true;
    auto& j = n.job();
    t.add_row({j.name(), std::to_string(j.uid()) + ":" + std::to_string(j.gid()),
               j.layout_description(),
               size_text(static_cast<double>(j.bytes_used())) + " (" +
                   percent(j.bytes_used(), j.quota_bytes()) + ")",
               size_text(static_cast<double>(j.quota_bytes())),
               std::to_string(j.inodes_used()) + "/" + std::to_string(j.quota_inodes()),
               when(j.expires_s())});
  }
  if (!any) {
    std::cout << "(no job namespaces)\n";
    return kExitOk;
  }
  t.print(std::cout);
  return kExitOk;
}

namespace {

// A namespace's usage and expiry, as `ns usage` shows them.
int print_usage(const Output& out, const v1::JobNamespaceInfo& n) {
  if (out.json) {
    print_json(job_json(n));
    return kExitOk;
  }
  Table t({});
  t.add_row({"namespace", n.name()});
  t.add_row({"bytes", size_text(static_cast<double>(n.bytes_used())) + " of " +
                          size_text(static_cast<double>(n.quota_bytes())) + " (" +
                          percent(n.bytes_used(), n.quota_bytes()) + ")"});
  t.add_row({"inodes", std::to_string(n.inodes_used()) + " of " + std::to_string(n.quota_inodes()) +
                           " (" + percent(n.inodes_used(), n.quota_inodes()) + ")"});
  t.add_row({"expires", when(n.expires_s())});
  t.print(std::cout);
  return kExitOk;
}

}  // namespace

int ns_usage(AdminSession& s, const Output& out, const std::string& job_id) {
  v1::NamespaceUsageRequest req;
  req.set_job_id(job_id);
  v1::NamespaceUsageReply reply;
  auto st = s.call(&v1::Admin::Stub::NamespaceUsage, req, &reply);
  if (!st.ok()) return failed(s, out, st);
  return print_usage(out, reply.namespace_());
}

int ns_renew(AdminSession& s, const Output& out, const std::string& job_id,
             const std::string& lifetime) {
  auto d = parse_duration(lifetime);
  if (!d || d->count() <= 0)
    throw UsageError("--lifetime '" + lifetime + "' is not a duration (e.g. 90m, 24h, 7d)");
  v1::RenewJobNamespaceRequest req;
  req.set_job_id(job_id);
  req.set_lifetime_s(d->count());
  v1::NamespaceUsageReply reply;
  auto st = s.call(&v1::Admin::Stub::RenewJobNamespace, req, &reply);
  if (!st.ok()) return failed(s, out, st);
  return print_usage(out, reply.namespace_());
}

}  // namespace skein::ctl
