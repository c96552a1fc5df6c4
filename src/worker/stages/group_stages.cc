#include "worker/stages/group_stages.h"

#include <chrono>

#include <fmt/format.h>

#include "common/logging.h"
#include "protocol/error_frame.h"
#include "worker/stages/local_part.h"

namespace byteps::worker::stages {

using protocol::Header;
using protocol::Opcode;

namespace {
constexpr uint32_t kGoReduce = 0, kGoBroadcast = 1, kGoFailed = 2;
constexpr double kDrainS = 30;

Header Go(const pipeline::PartitionTask& t, uint32_t what) {
  Header h;
  h.opcode = Opcode::kLocalGo;
  h.key = t.key;
  h.round = t.round;
  h.arg = what;
  return h;
}
}  // namespace

DeviceGroups::DeviceGroups(local_reduce::LocalReducer* local, DeviceStaging* staging, double start_timeout_s)
    : local_(local), staging_(staging), start_timeout_s_(start_timeout_s) {
  if (!local_->is_root()) local_->SetGroupListener([this](const Header& h, const std::string& p) { OnFrame(h, p); });
}

DeviceGroups::~DeviceGroups() {
  local_->SetGroupListener(nullptr);
  if (device_ && stream_) {
    Status st = device_->Drain(stream_, kDrainS);
    if (!st.ok()) BYTEPS_LOG(Warning, "{}: collectives still queued at shutdown: {}", device_->name(), st.message());
  }
  group_.reset();
  if (device_ && stream_) device_->DestroyStream(stream_);
}

Status DeviceGroups::Ensure(const TensorDevice& d) {
  std::lock_guard<std::mutex> form(form_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    if (group_) {
      if (device_->kind() == d.kind && device_->index() == d.index) return Status::Ok();
      return InvalidArgument(fmt::format("this process's device group is on {}, and a tensor is on {}:{}; each "
                                         "process of a host drives one device",
                                         device_->name(), device::KindName(d.kind), d.index));
    }
  }
  BYTEPS_ASSIGN_OR_RETURN(DeviceStaging::Slot * slot, staging_->For(d.kind, d.index));
  std::string id;
  if (is_root()) {
    BYTEPS_ASSIGN_OR_RETURN(id, device::NewGroupId(d.kind));
    Header h;
    h.opcode = Opcode::kLocalGroup;
    h.arg = static_cast<uint32_t>(d.kind);
    h.sender = static_cast<uint32_t>(d.index);
    BYTEPS_RETURN_IF_ERROR(local_->SendToNonRoots(h, id));
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(start_timeout_s_),
                      [&] { return !id_.empty() || !failure_.ok(); })) {
      return DeadlineExceeded(fmt::format("{}: the local root sent no device group within {:.0f} s "
                                          "(BYTEPS_START_TIMEOUT; does the local root use device tensors too?)",
                                          slot->device->name(), start_timeout_s_));
    }
    if (!failure_.ok()) return failure_;
    id = id_;
  }
  const int rank = local_->local_rank(), size = local_->local_size();
  auto joined = device::JoinGroup(slot->device, id, rank, size, start_timeout_s_);
  if (!joined.ok()) {
    return joined.status().WithContext(fmt::format("the device group of BYTEPS_LOCAL_RANK={} (its members: local ranks "
                                                   "{} to {})",
                                                   local_->RankOf(rank), local_->RankOf(0), local_->RankOf(size - 1)));
  }
  std::unique_ptr<device::Group> g = std::move(joined).value();
  BYTEPS_ASSIGN_OR_RETURN(device::StreamHandle s, slot->device->CreateStream());
  std::lock_guard<std::mutex> lock(mu_);
  device_ = slot->device;
  stream_ = s;
  group_ = std::move(g);
  return Status::Ok();
}

uint8_t* DeviceGroups::OutputOf(const pipeline::PartitionTask& t) const {
  return static_cast<uint8_t*>(t.op->request.output) + t.offset;
}

void DeviceGroups::Finish(pipeline::StageSink* sink, pipeline::PartitionTask* t, const Status& st) {
  sink->Complete(t, st.ok() ? st : st.WithContext(fmt::format("'{}' partition {}", t->op->request.name, t->part)));
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
        pending_.erase(rk);
      }
      Finish(sink, t, st);
    }
    return;
  }
  Status st = local_->Gather(part, nullptr, nullptr, [this, t, sink](const Status& ready) {
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
  if (st.ok()) st = group_->Reduce(t->src, is_root() ? out : const_cast<uint8_t*>(t->src), count, t->op->request.dtype, root, stream_);
  if (st.ok()) {
    st = device_->OnDone(stream_, [this, t, sink, out](Status s) {
      if (s.ok() && out) t->src = t->dst = out;
      Finish(sink, t, s);
    });
  }
  if (!st.ok()) Finish(sink, t, st);
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
      st = device_->OnDone(stream_, [this, t, sink, out](Status s) {
        if (s.ok()) t->src = t->dst = out;
        Finish(sink, t, s);
      });
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
    st = device_->OnDone(stream_, [this, rk](Status s) {
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
    });
  }
  if (!st.ok()) {
    it->second.bcast_done = true;
    it->second.bcast_status = st;
  }
}

void DeviceGroups::OnFrame(const Header& h, const std::string& payload) {
  std::unique_lock<std::mutex> lock(mu_);
  if (h.opcode == Opcode::kLocalGroup) {
    id_ = payload;
    cv_.notify_all();
    return;
  }
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find({t->key, t->round});
  if (it == pending_.end()) return;  // the root failed it: nothing queued on either side
  pending_.erase(it);
  if (failure_.ok()) failure_ = failure.WithContext("the device group stopped (a round failed on this local rank)");
}

void DeviceGroups::FailAll(const Status& failure) {
  std::map<RoundKey, Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = failure;
    pending.swap(pending_);
    cv_.notify_all();
  }
  // Tasks whose collective is queued complete from its callback; the rest complete here.
  for (auto& [rk, p] : pending) {
    if (!p.reduce_queued) {
      Finish(p.reduce_sink, p.task, failure);
    } else if (p.bcast_sink) {
      Finish(p.bcast_sink, p.task, failure);
    }
  }
}

Status GroupReduceStage::Admit(pipeline::Operation& op) {
  BYTEPS_RETURN_IF_ERROR(groups_->Ensure(op.request.device));
  return groups_->staging()->RecordReady(op);
}


}  // namespace byteps::worker::stages
