#include "worker/stages/group_stages.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "protocol/error_frame.h"
#include "worker/stages/local_part.h"

namespace byteps::worker::stages {

using protocol::Header;
using protocol::Opcode;

namespace {
constexpr uint32_t kGoReduce = 0, kGoBroadcast = 1, kGoFailed = 2;

Header Go(const pipeline::PartitionTask& t, uint32_t what) {
  Header h;
  h.opcode = Opcode::kLocalGo;
  h.key = t.key;
  h.round = t.round;
  h.arg = what;
  return h;
}
}  // namespace

uint8_t* DeviceGroups::OutputOf(const pipeline::PartitionTask& t) const {
  return static_cast<uint8_t*>(t.op->request.output) + t.offset;
}

void DeviceGroups::Finish(pipeline::StageSink* sink, pipeline::PartitionTask* t, const Status& st) {
  sink->Complete(t, st.ok() ? st : st.WithContext(fmt::format("'{}' partition {}", t->op->request.name, t->part)));
}

Status DeviceGroups::WatchLocked(const char* what, device::Completions::Done done) {
  return completions_->Watch(device_, stream_, op_timeout_s_,
                             fmt::format("the group's {} on local rank {} of {} (BYTEPS_TIMEOUT)", what,
                                         local_->RankOf(local_->local_rank()), local_->local_size()),
                             std::move(done));
}

void DeviceGroups::StartReduce(pipeline::PartitionTask* t, pipeline::StageSink* sink) {
  local_reduce::LocalReducer::Part part = LocalPartOf(*t);
  part.on_device = true;
  const RoundKey rk{t->key, t->round};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok() || !group_) return Finish(sink, t, failure_.ok() ? Internal("no device group") : failure_);
    if (!is_root()) {
      Pending& p = pending_[rk];
      p.task = t;
      p.reduce_sink = sink;
    }
  }
  if (!is_root()) {
    Status st = local_->Contribute(part, nullptr);  // tells the root; its Go(reduce) queues our Reduce
    if (!st.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.erase(rk) == 0) return;  // failed meanwhile: completed there
      }
      Finish(sink, t, st);
    }
    return;
  }
  Status st = local_->Gather(part, nullptr, nullptr, [this, t, sink](const Status& ready, bool /*joined_share*/) {
    if (!ready.ok()) return Finish(sink, t, ready);
    std::lock_guard<std::mutex> lock(mu_);
    QueueReduceLocked(t, sink);
  });
  if (!st.ok()) Finish(sink, t, st);
}

void DeviceGroups::QueueReduceLocked(pipeline::PartitionTask* t, pipeline::StageSink* sink) {
  const size_t count = t->len / DataTypeSize(t->op->request.dtype);
  const int root = local_->local_size() - 1;
  Status st = failure_;
  if (st.ok() && is_root()) st = local_->SendToNonRoots(Go(*t, kGoReduce), "");
  if (st.ok() && t->op->ready_event) st = device_->StreamWaitEvent(stream_, t->op->ready_event.get());
  uint8_t* out = is_root() ? OutputOf(*t) : nullptr;
  if (st.ok()) {
    st = group_->Reduce(t->src, is_root() ? out : const_cast<uint8_t*>(t->src), count, t->op->request.dtype, root,
                        stream_);
  }
  if (st.ok()) {
    queued_[t] = sink;
    st = WatchLocked("reduce", [this, t, out](const Status& s) { OnQueuedDone(t, s, out); });
    if (!st.ok()) queued_.erase(t);
  }
  if (!st.ok()) Finish(sink, t, st);
}

void DeviceGroups::OnQueuedDone(pipeline::PartitionTask* t, const Status& st, uint8_t* out) {
  if (!st.ok()) FailGroup(st);  // completes `t` too, with the cause
  pipeline::StageSink* sink = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = queued_.find(t);
    if (it == queued_.end()) return;  // failed meanwhile: completed there
    sink = it->second;
    queued_.erase(it);
  }
  if (out) t->src = t->dst = out;
  Finish(sink, t, Status::Ok());
}

void DeviceGroups::StartBroadcast(pipeline::PartitionTask* t, pipeline::StageSink* sink) {
  const RoundKey rk{t->key, t->round};
  uint8_t* out = OutputOf(*t);
  std::unique_lock<std::mutex> lock(mu_);
  if (is_root()) {
    Status st = failure_;
    if (st.ok()) st = local_->SendToNonRoots(Go(*t, kGoBroadcast), "");
    if (st.ok()) st = group_->Broadcast(out, t->len, local_->local_size() - 1, stream_);
    if (st.ok()) st = device_->StreamWaitStream(t->op->request.device.stream, stream_);
    if (st.ok()) {
      queued_[t] = sink;
      st = WatchLocked("broadcast", [this, t, out](const Status& s) { OnQueuedDone(t, s, out); });
      if (!st.ok()) queued_.erase(t);
    }
    lock.unlock();
    if (!st.ok()) Finish(sink, t, st);
    return;
  }
  auto it = pending_.find(rk);
  if (it == pending_.end()) {  // failed meanwhile (FailAll, or the root's Go(failed))
    Status st = failure_.ok() ? Aborted("the local root failed this round") : failure_;
    lock.unlock();
    return Finish(sink, t, st);
  }
  if (!it->second.bcast_done) {
    it->second.bcast_sink = sink;  // the Go(broadcast)'s completion finishes it
    return;
  }
  Status st = it->second.bcast_status;
  pending_.erase(it);
  lock.unlock();
  if (st.ok()) t->src = t->dst = out;
  Finish(sink, t, st);
}

void DeviceGroups::QueueBroadcastLocked(const RoundKey& rk) {
  auto it = pending_.find(rk);
  if (it == pending_.end()) return;
  pipeline::PartitionTask* t = it->second.task;
  Status st = failure_;
  if (st.ok()) st = group_->Broadcast(OutputOf(*t), t->len, local_->local_size() - 1, stream_);
  if (st.ok()) st = device_->StreamWaitStream(t->op->request.device.stream, stream_);
  if (st.ok()) {
    it->second.bcast_queued = true;
    st = WatchLocked("broadcast", [this, rk](const Status& s) { OnNonRootBroadcastDone(rk, s); });
  }
  if (!st.ok()) {
    it->second.bcast_done = true;
    it->second.bcast_status = st;
  }
}

void DeviceGroups::OnNonRootBroadcastDone(const RoundKey& rk, const Status& s) {
  if (!s.ok()) FailGroup(s);  // completes the round too, with the cause
  pipeline::StageSink* sink = nullptr;
  pipeline::PartitionTask* task = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto p = pending_.find(rk);
    if (p == pending_.end()) return;
    p->second.bcast_done = true;
    p->second.bcast_status = s;
    if (!p->second.bcast_sink) return;  // its stage has not started: it finishes there
    sink = p->second.bcast_sink;
    task = p->second.task;
    pending_.erase(p);
  }
  if (s.ok()) task->src = task->dst = OutputOf(*task);
  Finish(sink, task, s);
}

void DeviceGroups::OnFrame(const Header& h, const std::string& payload) {
  std::unique_lock<std::mutex> lock(mu_);
  if (h.opcode == Opcode::kLocalGroup) return OnFormationFrame(h, payload);
  if (is_root()) return;
  const RoundKey rk{h.key, h.round};
  auto it = pending_.find(rk);
  if (it == pending_.end()) return;  // failed here already
  if (h.arg == kGoReduce) {
    it->second.reduce_queued = true;
    QueueReduceLocked(it->second.task, it->second.reduce_sink);
    return;
  }
  if (h.arg == kGoBroadcast) return QueueBroadcastLocked(rk);
  // The root failed this round: neither side queues (more of) it.
  Status st(static_cast<StatusCode>(h.request_id), payload);
  Pending& p = it->second;
  pipeline::StageSink* sink = nullptr;
  if (!p.reduce_queued) {
    sink = p.reduce_sink;  // still in group-reduce: its Go(reduce) never came
  } else if (p.bcast_sink) {
    sink = p.bcast_sink;
  } else {  // between the stages: group-broadcast finishes it when it starts
    p.bcast_done = true;
    p.bcast_status = st;
    return;
  }
  pipeline::PartitionTask* t = p.task;
  pending_.erase(it);
  lock.unlock();
  Finish(sink, t, st);
}

void DeviceGroups::SkipBroadcast(pipeline::PartitionTask* t, const Status& failure) {
  if (is_root()) {
    Header h = Go(*t, kGoFailed);
    h.request_id = static_cast<uint64_t>(failure.code());
    (void)local_->SendToNonRoots(h, failure.message());
    return;
  }
  // A non-root round failed here but not at the root: the group's order can no longer be kept.
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find({t->key, t->round});
    if (it == pending_.end()) return;  // the root failed it: nothing queued on either side
    pending_.erase(it);
  }
  FailGroup(failure.WithContext("the device group stopped (a round failed on this local rank)"));
}

std::vector<std::pair<pipeline::PartitionTask*, pipeline::StageSink*>> DeviceGroups::TakeAllLocked() {
  std::vector<std::pair<pipeline::PartitionTask*, pipeline::StageSink*>> out(queued_.begin(), queued_.end());
  queued_.clear();
  for (auto& [rk, p] : pending_) {
    if (!p.reduce_queued) {
      out.emplace_back(p.task, p.reduce_sink);
    } else if (p.bcast_sink) {
      out.emplace_back(p.task, p.bcast_sink);
    }  // else: its reduce is in queued_ (taken above), or its broadcast stage finds it gone
  }
  pending_.clear();
  cv_.notify_all();
  return out;
}

void DeviceGroups::FailGroup(const Status& failure) {
  std::vector<std::pair<pipeline::PartitionTask*, pipeline::StageSink*>> fail;
  Status cause;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) {
      failure_ = failure.WithContext(
          fmt::format("the device group of local rank {} was aborted", local_->RankOf(local_->local_rank())));
      BYTEPS_LOG(Error, "the device group was aborted (ncclCommAbort) after a failure: {}", failure.message());
    }
    if (group_) group_->Abort();  // ends what is stuck; what was queued in it is garbage now
    cause = failure_;
    fail = TakeAllLocked();
  }
  for (auto& [t, sink] : fail) Finish(sink, t, cause);
}

void DeviceGroups::FailAll(const Status& failure) {
  std::vector<std::pair<pipeline::PartitionTask*, pipeline::StageSink*>> fail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = failure;
    // Collectives in flight may never finish now (a peer that went): they are ended.
    if (group_ && completions_->pending() > 0) group_->Abort();
    fail = TakeAllLocked();
  }
  for (auto& [t, sink] : fail) Finish(sink, t, failure);
}

Status GroupReduceStage::Admit(pipeline::Operation& op) {
  BYTEPS_ASSIGN_OR_RETURN(bool grouped, groups_->Ensure(op.request.device));
  if (!grouped) return Internal("group-reduce admitted a device tensor on a host whose processes form no group");
  return groups_->staging()->RecordReady(op);
}

}  // namespace byteps::worker::stages
