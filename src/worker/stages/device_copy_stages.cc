#include "worker/stages/device_copy_stages.h"

#include <fmt/format.h>

#include "worker/planning/key_assigner.h"

namespace byteps::worker::stages {

void InFlightCopies::Add(pipeline::PartitionTask* t) {
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.insert(t);
}

bool InFlightCopies::Take(pipeline::PartitionTask* t) {
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.erase(t) > 0;
}

std::vector<pipeline::PartitionTask*> InFlightCopies::TakeAll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<pipeline::PartitionTask*> all(tasks_.begin(), tasks_.end());
  tasks_.clear();
  return all;
}

namespace {

std::string Where(const pipeline::PartitionTask& t, const device::Device& d) {
  return fmt::format("'{}' partition {} on {}", t.op->request.name, t.part, d.name());
}

// Completes `t` through `sink` once the work queued on `stream` so far is done, failed, or passed
// `deadline_s`; `then` runs first on success (on the completions thread). Once the work succeeded
// the device is done with the buffer of lease `lease`: its holder (this copy's, or for copy-out the
// pipeline's) is released, also when the task was failed meanwhile (FailAll completed it before the
// device finished). A copy that failed or passed its deadline keeps its buffer (the device may
// still write it): freed at shutdown, after the streams drained.
template <typename Then>
void CompleteWhenDone(pipeline::StageSink* sink, InFlightCopies* in_flight, device::Completions* completions,
                      double deadline_s, DeviceStaging* staging, uint64_t lease, DeviceStaging::Slot* slot,
                      device::StreamHandle stream, pipeline::PartitionTask* t, const char* what, Then then) {
  in_flight->Add(t);
  device::Device* dev = slot->device.get();  // lives as long as the staging, which outlives the copies
  auto done = [sink, in_flight, staging, lease, t, then, dev](const Status& s) {
    if (s.ok()) staging->Release(lease);
    if (!in_flight->Take(t)) return;  // failed meanwhile (FailAll): completed already
    if (s.ok()) {
      then();
      return sink->Complete(t, s);
    }
    sink->Complete(t, s.WithContext(Where(*t, *dev)));
  };
  Status st = completions->Watch(slot->device, stream, deadline_s, what, std::move(done));
  if (!st.ok() && in_flight->Take(t)) sink->Complete(t, st.WithContext(Where(*t, *slot->device)));
}

void FailEvery(pipeline::StageSink* sink, InFlightCopies* in_flight, const Status& failure) {
  for (pipeline::PartitionTask* t : in_flight->TakeAll()) sink->Complete(t, failure);
}

}  // namespace

Status DeviceCopyInStage::Admit(pipeline::Operation& op) { return staging_->RecordReady(op); }

void DeviceCopyInStage::Start(pipeline::PartitionTask* t) {
  const TensorDevice& d = t->op->request.device;
  auto slot = staging_->For(d.kind, d.index);
  if (!slot.ok()) return sink()->Complete(t, slot.status());
  // The pipeline holds the buffer from here until copy-out finished (or copy-out's Skip).
  auto buf = staging_->Acquire(*slot, t->id, planning::GenerationOf(t->op->plan->declared_key), t->len);
  if (!buf.ok()) return sink()->Complete(t, buf.status().WithContext(Where(*t, *(*slot)->device)));
  device::Device& dev = *(*slot)->device;
  Status st = t->op->ready_event ? dev.StreamWaitEvent((*slot)->in, t->op->ready_event.get()) : Status::Ok();
  // What this worker contributes (a concatenation's slice, else the whole partition) goes to the
  // buffer's start, where the push-pull stage sends it from.
  if (st.ok() && t->push_len > 0) st = dev.CopyAsync(*buf, t->src, t->push_len, device::CopyKind::kDeviceToHost, (*slot)->in);
  if (!st.ok()) return sink()->Complete(t, st.WithContext(Where(*t, dev)));
  uint8_t* host = *buf;
  staging_->Hold(t->id);  // the copy's hold, released once the device finished it
  CompleteWhenDone(sink(), &in_flight_, &completions_, deadline_s_, staging_, t->id, *slot, (*slot)->in, t,
                   "the copy to the host (after the framework's stream reached the call; BYTEPS_TIMEOUT)", [t, host] {
    t->src = host;
    t->dst = host;
  });
}

void DeviceCopyInStage::FailAll(const Status& failure) { FailEvery(sink(), &in_flight_, failure); }

void DeviceCopyOutStage::Start(pipeline::PartitionTask* t) {
  const TensorRequest& r = t->op->request;
  auto slot = staging_->For(r.device.kind, r.device.index);
  if (!slot.ok()) {
    staging_->Release(t->id);  // nothing was queued: the pipeline's hold ends here
    return sink()->Complete(t, slot.status());
  }
  device::Device& dev = *(*slot)->device;
  uint8_t* out = static_cast<uint8_t*>(r.output) + t->offset;
  Status st = t->len > 0 ? dev.CopyAsync(out, t->src, t->len, device::CopyKind::kHostToDevice, (*slot)->out)
                         : Status::Ok();
  if (!st.ok()) {
    staging_->Release(t->id);
    return sink()->Complete(t, st.WithContext(Where(*t, dev)));
  }
  st = dev.StreamWaitStream(r.device.stream, (*slot)->out);
  if (!st.ok()) {
    // The copy is queued: the buffer goes back once the device finished it.
    DeviceStaging* staging = staging_;
    const uint64_t lease = t->id;
    (void)completions_.Watch((*slot)->device, (*slot)->out, deadline_s_, "the copy back to the device",
                             [staging, lease](const Status& done) {
                               if (done.ok()) staging->Release(lease);
                             });
    return sink()->Complete(t, st.WithContext(Where(*t, dev)));
  }
  CompleteWhenDone(sink(), &in_flight_, &completions_, deadline_s_, staging_, t->id, *slot, (*slot)->out, t,
                   "the copy back to the device (BYTEPS_TIMEOUT)", [t, out] {
    t->src = out;
    t->dst = out;
  });
}

void DeviceCopyOutStage::Skip(pipeline::PartitionTask* t, const Status&) { staging_->Release(t->id); }

void DeviceCopyOutStage::FailAll(const Status& failure) { FailEvery(sink(), &in_flight_, failure); }

}  // namespace byteps::worker::stages
