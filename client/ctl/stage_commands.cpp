// skeinctl's staging commands; see stage_commands.hpp.
#include "stage_commands.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <thread>

#include "skein/progress.hpp"
#include "table.hpp"

namespace skein::ctl {
namespace {

const char* state_text(v1::StageOperation::State s) {
  switch (s) {
    case v1::StageOperation::QUEUED:
      return "queued";
    case v1::StageOperation::RUNNING:
      return "running";
    case v1::StageOperation::DONE:
      return "done";
    case v1::StageOperation::FAILED:
      return "failed";
    case v1::StageOperation::CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

bool ended(const v1::StageOperation& op) {
  return op.state() == v1::StageOperation::DONE || op.state() == v1::StageOperation::FAILED ||
         op.state() == v1::StageOperation::CANCELLED;
}

void print_line(const v1::StageOperation& op) {
  std::cout << op.id() << ": " << state_text(op.state()) << ", "
            << size_text(static_cast<double>(op.bytes_done())) << " of "
            << size_text(static_cast<double>(op.bytes_total())) << ", " << op.files_done() << " of "
            << op.files_total() << " entries";
  if (op.state() == v1::StageOperation::RUNNING)
    std::cout << ", " << size_text(op.bytes_per_s()) << "/s";
  std::cout << "\n";
  if (!op.error().empty()) std::cout << "  error: " << op.error() << "\n";
  for (auto& f : op.failed()) std::cout << "  failed: " << f << "\n";
}

void print_bar(const v1::StageOperation& op) {
  const double frac =
      fraction_done(static_cast<double>(op.bytes_done()), static_cast<double>(op.bytes_total()),
                    static_cast<double>(op.files_done()), static_cast<double>(op.files_total()));
  std::fprintf(stdout, "\r%s  %s / %s  %llu / %llu entries  %s/s   ", progress_bar(frac).c_str(),
               size_text(static_cast<double>(op.bytes_done())).c_str(),
               size_text(static_cast<double>(op.bytes_total())).c_str(),
               static_cast<unsigned long long>(op.files_done()),
               static_cast<unsigned long long>(op.files_total()),
               size_text(op.bytes_per_s()).c_str());
  std::fflush(stdout);
}

// How long a wait goes on asking a gateway that does not answer: a copy goes on through a
// gateway's restart (and a busy minute may delay an answer past the deadline), and the wait of a
// Slurm stage hook for an hour's copy must not end at the first call that found it away.
constexpr std::chrono::minutes kFollowOutage{10};

// StageStatus of `id` into `op`, asked again every second while the gateway does not answer, for
// up to kFollowOutage, with a note on stderr (after a newline when a bar is on the line).
grpc::Status status_through_outages(AdminSession& s, const std::string& id, v1::StageOperation& op,
                                    bool bar) {
  v1::StageOperationRequest req;
  req.set_id(id);
  std::optional<std::chrono::steady_clock::time_point> away_since;
  for (;;) {
    auto st = s.call(&v1::Admin::Stub::StageStatus, req, &op);
    const auto now = std::chrono::steady_clock::now();
    if (st.ok() || exit_code_of(st) != kExitConnection ||
        (away_since && now - *away_since >= kFollowOutage)) {
      if (st.ok() && away_since) std::cerr << "skeinctl: the gateway answers again\n";
      return st;
    }
    if (!away_since) {
      away_since = now;
      if (bar) std::cout << "\n";
      std::cerr << "skeinctl: the gateway at " << s.address() << " does not answer ("
                << st.error_message() << "); asking again for " << kFollowOutage.count()
                << " min: the copy goes on meanwhile\n";
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Follows `op` to its end: a bar on a terminal (without --json), JSON lines otherwise; the last
// line is the operation as it ended.
int follow(AdminSession& s, const Output& out, v1::StageOperation op) {
  const bool bar = !out.json && isatty(STDOUT_FILENO);
  for (;;) {
    if (bar)
      print_bar(op);
    else
      std::cout << json_text(stage_json(op)) << std::endl;  // one object a line
    if (ended(op)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    v1::StageOperation next;
    auto st = status_through_outages(s, op.id(), next, bar);
    if (!st.ok()) {
      if (bar) std::cout << "\n";
      return failed(s, out, st);
    }
    op = next;
  }
  if (bar) {
    std::cout << "\n";
    print_line(op);
  }
  return op.state() == v1::StageOperation::DONE ? kExitOk : kExitStageFailed;
}

v1::StageRequest request_of(bool in, const StageArgs& a) {
  if (a.job_id.empty()) throw UsageError("stage: give the job id");
  v1::StageRequest req;
  req.set_job_id(a.job_id);
  req.set_direction(in ? v1::StageRequest::IN : v1::StageRequest::OUT);
  req.set_source(a.source);
  req.set_destination(a.destination);
  req.set_verify(a.verify);
  return req;
}

}  // namespace

Json stage_json(const v1::StageOperation& op) {
  Json failed = Json::array();
  for (auto& f : op.failed()) failed.push_back(f);
  return {{"id", op.id()},
          {"job_id", op.request().job_id()},
          {"direction", op.request().direction() == v1::StageRequest::OUT ? "out" : "in"},
          {"source", op.request().source()},
          {"destination", op.request().destination()},
          {"verify", op.request().verify()},
          {"state", state_text(op.state())},
          {"bytes_done", op.bytes_done()},
          {"bytes_total", op.bytes_total()},
          {"files_done", op.files_done()},
          {"files_total", op.files_total()},
          {"bytes_per_s", op.bytes_per_s()},
          {"bytes_moved", op.bytes_moved()},
          {"error", op.error()},
          {"failed", failed},
          {"started_s", op.started_s()},
          {"updated_s", op.updated_s()},
          {"finished_s", op.finished_s()}};
}

int stage_start(AdminSession& s, const Output& out, bool in, const StageArgs& args) {
  auto req = request_of(in, args);
  v1::StageOperation op;
  auto st = s.call(&v1::Admin::Stub::StartStage, req, &op, AdminSession::kChangeDeadline);
  if (!st.ok()) return failed(s, out, st);
  if (args.wait) return follow(s, out, op);
  if (out.json)
    print_json(stage_json(op));
  else
    std::cout << "started " << op.id() << " (skeinctl stage status " << op.id() << " --wait)\n";
  return kExitOk;
}

int stage_status(AdminSession& s, const Output& out, const std::string& id, bool wait) {
  v1::StageOperation op;
  if (wait) {  // its first answer too may have to wait for a gateway restarting
    auto st = status_through_outages(s, id, op, false);
    if (!st.ok()) return failed(s, out, st);
    return follow(s, out, op);
  }
  v1::StageOperationRequest req;
  req.set_id(id);
  auto st = s.call(&v1::Admin::Stub::StageStatus, req, &op);
  if (!st.ok()) return failed(s, out, st);
  if (out.json)
    print_json(stage_json(op));
  else
    print_line(op);
  return kExitOk;
}

int stage_cancel(AdminSession& s, const Output& out, const std::string& id) {
  v1::StageOperationRequest req;
  req.set_id(id);
  v1::StageOperation op;
  auto st = s.call(&v1::Admin::Stub::CancelStage, req, &op, std::chrono::seconds(40));
  if (!st.ok()) return failed(s, out, st);
  if (out.json)
    print_json(stage_json(op));
  else
    print_line(op);
  return kExitOk;
}

int stage_list(AdminSession& s, const Output& out, const std::string& job_id) {
  v1::ListStagesRequest req;
  req.set_job_id(job_id);
  v1::ListStagesReply reply;
  auto st = s.call(&v1::Admin::Stub::ListStages, req, &reply);
  if (!st.ok()) return failed(s, out, st);
  if (out.json) {
    Json list = Json::array();
    for (auto& op : reply.operations()) list.push_back(stage_json(op));
    print_json({{"operations", list}});
    return kExitOk;
  }
  if (reply.operations().empty()) {
    std::cout << "(no staging operations)\n";
    return kExitOk;
  }
  Table t({{"ID"}, {"JOB"}, {"DIR"}, {"FROM"}, {"TO"}, {"STATE"}, {"DONE", true}});
  for (auto& op : reply.operations())
    t.add_row({op.id(), op.request().job_id(),
               op.request().direction() == v1::StageRequest::OUT ? "out" : "in",
               op.request().source(), op.request().destination(), state_text(op.state()),
               size_text(static_cast<double>(op.bytes_done())) + " / " +
                   size_text(static_cast<double>(op.bytes_total()))});
  t.print(std::cout);
  return kExitOk;
}

int ns_destroy_after_stage_out(AdminSession& s, const Output& out, const StageArgs& args) {
  v1::DestroyJobNamespaceRequest req;
  req.set_job_id(args.job_id);
  *req.mutable_stage_out() = request_of(false, args);
  v1::DestroyJobNamespaceReply reply;
  auto st =
      s.call(&v1::Admin::Stub::DestroyJobNamespace, req, &reply, AdminSession::kChangeDeadline);
  if (!st.ok()) return failed(s, out, st);
  if (args.wait) return follow(s, out, reply.stage_out());
  if (out.json)
    print_json(stage_json(reply.stage_out()));
  else
    std::cout << "started " << reply.stage_out().id() << "; namespace job-" << args.job_id
              << " is destroyed once it is done (skeinctl stage status " << reply.stage_out().id()
              << " --wait)\n";
  return kExitOk;
}

}  // namespace skein::ctl
