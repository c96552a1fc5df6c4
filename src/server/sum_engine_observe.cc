// SumEngine: what a shard reports about its rounds: the server's metrics (metrics::Global()) and,
// when tracing, each traced round's arrivals and reply times (server_trace.h). Shard thread only,
// but AddMetrics (the constructor).
#include <algorithm>
#include <chrono>
#include <string>

#include "common/metrics.h"
#include "server/sum_engine.h"

namespace byteps::server {

void SumEngine::AddMetrics() {
  metrics::Registry& m = metrics::Global();
  for (int w = 0; w < num_workers_; ++w) {
    const std::string label = metrics::Label("worker", std::to_string(w));
    by_worker_.push_back(
        {m.AddCounter("byteps_server_pushed_bytes_total", "payload bytes of the pushes taken from each worker", label),
         m.AddCounter("byteps_server_replied_bytes_total", "payload bytes of the sums sent to each worker", label),
         m.AddHistogram("byteps_server_arrival_lag_seconds",
                        "per worker: time from a round's first push to this worker's push of it (a straggler's is "
                        "large)",
                        label, metrics::LatencyBounds())});
  }
  rounds_ = m.AddCounter("byteps_server_rounds_total", "rounds completed (a key's sum sent to every worker)");
  summed_bytes_ = m.AddCounter("byteps_server_summed_bytes_total", "bytes of pushes reduced into a round's result");
}

void SumEngine::NoteArrival(KeyState& ks, const PushTask& t) {
  const auto now = std::chrono::steady_clock::now();
  if (ks.pushed == 0) ks.first_push_at = now;
  by_worker_[t.worker].pushed->Add(t.bytes);
  by_worker_[t.worker].lag->Observe(std::chrono::duration<double>(now - ks.first_push_at).count());
  summed_bytes_->Add(t.compressed ? ks.init.bytes : t.bytes);  // a compressed push: the partition it decodes to
  if (trace_ != nullptr && trace_->Wants(t.round)) NoteTracedPush(ks, t);
}

void SumEngine::NoteReply(int worker, uint64_t bytes) {
  if (worker >= 0 && worker < num_workers_) by_worker_[worker].replied->Add(bytes);
}

void SumEngine::NoteRoundDone() { rounds_->Add(); }

int64_t SumEngine::TraceSummed(const KeyState& ks) const {
  const bool traced = trace_ != nullptr && ks.trace_round == ks.completed_round && trace_->Wants(ks.completed_round);
  return traced ? TraceNowNs() : 0;
}

void SumEngine::NoteRoundReplied(const KeyState& ks, uint64_t key, int64_t summed_ns) {
  if (summed_ns == 0) return;
  trace_->Add(RoundTrace{key, ks.completed_round, ks.trace_last_worker, ks.trace_first_ns, ks.trace_last_ns, summed_ns,
                         TraceNowNs()});
}

void SumEngine::NoteTracedPush(KeyState& ks, const PushTask& t) {
  // Pushes come off several I/O threads, so the order they reach the shard need not be the order
  // they arrived in: the earliest and the latest arrival count.
  const int64_t at = t.arrived_ns != 0 ? t.arrived_ns : TraceNowNs();
  if (ks.trace_round != t.round) {
    ks.trace_round = t.round;
    ks.trace_first_ns = ks.trace_last_ns = at;
    ks.trace_last_worker = t.worker;
    return;
  }
  ks.trace_first_ns = std::min(ks.trace_first_ns, at);
  if (at >= ks.trace_last_ns) {
    ks.trace_last_ns = at;
    ks.trace_last_worker = t.worker;
  }
}

}  // namespace byteps::server
