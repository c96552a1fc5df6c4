#include "worker/pipeline/handle_table.h"

#include <fmt/format.h>

#include <chrono>
#include <set>

namespace byteps::worker::pipeline {

namespace {
std::chrono::steady_clock::time_point After(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}
}  // namespace

HandleId HandleTable::Add(std::shared_ptr<Operation> op) {
  std::lock_guard<std::mutex> lock(mu_);
  op->id = next_++;
  op->remaining = op->parts.size();
  op->part_done.assign(op->parts.size(), false);
  ++running_;
  handles_[op->id] = op;
  return op->id;
}

bool HandleTable::PartDone(Operation& op, size_t part, const Status& status,
                           const std::function<void(const Operation&)>& on_complete) {
  std::lock_guard<std::mutex> lock(mu_);
  if (op.done || op.part_done[part]) return false;
  op.part_done[part] = true;
  if (!status.ok() && op.status.ok()) {
    op.status = status.WithContext(fmt::format("push_pull of tensor '{}'", op.request.name));
  }
  if (--op.remaining > 0) return false;
  if (op.status.ok()) {
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - op.submitted_at).count();
    latency_->Observe(took);
    slowest_->Offer(took, op.request.name);
  } else {
    metrics::Global()
        .AddCounter("byteps_worker_errors_total", "push_pulls that failed, by error code",
                    metrics::Label("code", StatusCodeName(op.status.code())))
        ->Add();
  }
  if (on_complete) on_complete(op);
  op.done = true;
  --running_;
  cv_.notify_all();
  return true;
}

StatusOr<bool> HandleTable::Poll(HandleId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(id);
  if (it == handles_.end()) return InvalidArgument(fmt::format("unknown handle {}", id));
  if (!it->second->done) return false;
  if (!it->second->status.ok()) return it->second->status;
  return true;
}

Status HandleTable::Wait(HandleId id, double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = handles_.find(id);
  if (it == handles_.end()) return InvalidArgument(fmt::format("unknown handle {}", id));
  std::shared_ptr<Operation> op = it->second;
  if (!cv_.wait_until(lock, After(timeout_s), [&] { return op->done; })) {
    return DeadlineExceeded(fmt::format("push_pull of tensor '{}' did not complete within {:.1f} s "
                                        "(BYTEPS_TIMEOUT): {}",
                                        op->request.name, timeout_s, Outstanding(*op)));
  }
  return op->status;
}

std::string HandleTable::Outstanding(const Operation& op) {
  std::set<int> servers;
  for (size_t i = 0; i < op.parts.size(); ++i)
    if (!op.part_done[i]) servers.insert(op.parts[i].server);
  std::string s;
  for (int sv : servers) s += (s.empty() ? "" : ", ") + std::to_string(sv);
  return fmt::format("{} partition(s) outstanding on server(s) {}", op.remaining, s);
}

void HandleTable::Release(HandleId id) {
  std::lock_guard<std::mutex> lock(mu_);
  handles_.erase(id);
}

bool HandleTable::WaitIdle(double timeout_s) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, After(timeout_s), [&] { return running_ == 0; });
}

size_t HandleTable::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

}  // namespace byteps::worker::pipeline
