// Engine: what a worker tells about itself: its metrics endpoint, its timeline (the dispatcher's
// observer) and the stall report (diagnostics/stall_report.h), on a deadline and on kill -USR1.
#include <fmt/format.h>

#include "cluster/cluster_config.h"
#include "common/logging.h"
#include "common/report_file.h"
#include "common/report_signal.h"
#include "worker/diagnostics/stall_report.h"
#include "worker/engine.h"
#include "worker/pipeline/dispatch_loop.h"
#include "worker/pipeline/handle_table.h"
#include "worker/trace/trace_recorder.h"

namespace byteps::worker {
namespace {
constexpr double kSnapshotTimeoutS = 1;
constexpr auto kReuseWithin = std::chrono::seconds(1);  // many waits time out at once: one report
}  // namespace

Status Engine::StartObservers() {
  // First: a metrics port in use stops this worker before it joins anything.
  auto metrics = cluster::StartMetrics(config_, "worker");
  if (!metrics.ok()) return metrics.status();
  metrics_endpoint_ = std::move(metrics.value());
  if (!config_.trace_on) return Status::Ok();
  // Before anything starts: an unwritable BYTEPS_TRACE_DIR stops this worker now, not half-traced.
  trace::TraceOptions to;
  to.dir = config_.trace_dir;
  to.rank = rank_;
  to.local_rank = config_.local_rank;
  to.start_step = config_.trace_start_step;
  to.end_step = config_.trace_end_step;
  auto recorder = trace::TraceRecorder::Create(to);
  if (!recorder.ok()) return recorder.status();
  recorder_ = std::move(recorder.value());
  return Status::Ok();
}

void Engine::Observe(pipeline::DispatchLoop& loop) {
  if (!recorder_) return;
  recorder_->SetRank(rank_);
  loop.AddObserver(recorder_.get());
}

void Engine::StartReports() {
  report_signal_ = report_signal::Add([this] {
    const std::string path = StallReport("asked for with kill -USR1");
    if (!path.empty()) BYTEPS_LOG(Warning, "stall report (kill -USR1) written to {}", path);
  });
}

void Engine::StopReports() {
  if (report_signal_ != 0) report_signal::Remove(std::exchange(report_signal_, 0));
}

std::string Engine::StallReport(const std::string& reason) {
  std::lock_guard<std::mutex> lock(report_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!last_report_path_.empty() && now - last_report_at_ < kReuseWithin) return last_report_path_;
  pipeline::InFlight in_flight;
  std::string note;
  if (auto snap = loop_->Snapshot(kSnapshotTimeoutS); snap.ok()) {
    in_flight = std::move(snap.value());
  } else {
    note = fmt::format("note: {}\n", snap.status().message());
  }
  const std::string text =
      diagnostics::FormatStallReport(in_flight, fmt::format("worker {} (rank {})", host_rank_, rank_), reason) + note;
  auto path = report_file::Write(report_file::Folder(config_.trace_on, config_.trace_dir, config_.tmp_dir),
                                 fmt::format("worker{}", rank_), text);
  if (!path.ok()) {
    BYTEPS_LOG(Warning, "{}", path.status().message());
    return "";
  }
  last_report_at_ = now;
  last_report_path_ = path.value();
  return last_report_path_;
}

Status Engine::Wait(HandleId h, double timeout_s) {
  Status st = handles_->Wait(h, timeout_s < 0 ? config_.op_timeout_s : timeout_s);
  // The job's deadline only: a caller's own timeout (synchronize(h, 0.1) in a polling loop) is no
  // stall, and a report per poll would cost a snapshot and a file each time.
  if (st.code() != StatusCode::kDeadlineExceeded || timeout_s >= 0) return st;
  const std::string path = StallReport(st.message());
  if (path.empty()) return st;
  return DeadlineExceeded(fmt::format("{}; what this worker held then: {}", st.message(), path));
}

}  // namespace byteps::worker
