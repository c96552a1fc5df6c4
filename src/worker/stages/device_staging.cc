#include "worker/stages/device_staging.h"

#include <fmt/format.h>

#include <set>

#include "common/logging.h"

namespace byteps::worker::stages {

namespace {
constexpr double kDrainS = 30;  // at teardown: how long queued copies may still take
}

DeviceStaging::~DeviceStaging() {
  std::set<const device::Device*> busy;  // copies may still run there: their buffers stay
  for (auto& [id, slot] : slots_) {
    for (device::StreamHandle s : {slot->in, slot->out}) {
      Status st = slot->device->Drain(s, kDrainS);
      if (st.ok()) continue;
      BYTEPS_LOG(Warning, "{}: copies still queued at shutdown: {}", slot->device->name(), st.message());
      // A stream that failed runs nothing more; one past the deadline may.
      if (st.code() == StatusCode::kDeadlineExceeded) busy.insert(slot->device.get());
    }
  }
  if (const size_t kept = pool_.FreeAll(busy); kept > 0) {
    BYTEPS_LOG(Warning, "{} bytes of pinned staging memory stay allocated: copies with them may still run", kept);
  }
  for (auto& [id, slot] : slots_) {
    slot->device->DestroyStream(slot->in);
    slot->device->DestroyStream(slot->out);
  }
}

StatusOr<DeviceStaging::Slot*> DeviceStaging::For(device::Kind kind, int index) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = slots_[{kind, index}];
  if (slot) return slot.get();
  auto dev = device::Open(kind, index);
  if (!dev.ok()) {
    slots_.erase({kind, index});
    return dev.status();
  }
  auto s = std::make_unique<Slot>();
  s->device = *dev;
  auto in = s->device->CreateStream();
  if (!in.ok()) {
    slots_.erase({kind, index});
    return in.status();
  }
  auto out = s->device->CreateStream();
  if (!out.ok()) {
    s->device->DestroyStream(*in);
    slots_.erase({kind, index});
    return out.status();
  }
  s->in = *in;
  s->out = *out;
  slot = std::move(s);
  return slot.get();
}

Status DeviceStaging::RecordReady(pipeline::Operation& op) {
  if (op.ready_event) return Status::Ok();
  const TensorDevice& d = op.request.device;
  BYTEPS_ASSIGN_OR_RETURN(Slot * slot, For(d.kind, d.index));
  BYTEPS_ASSIGN_OR_RETURN(device::EventHandle ready, slot->device->RecordEvent(d.stream));
  std::shared_ptr<device::Device> dev = slot->device;
  op.ready_event = std::shared_ptr<void>(ready, [dev](void* e) { dev->DestroyEvent(e); });
  return Status::Ok();
}

}  // namespace byteps::worker::stages
