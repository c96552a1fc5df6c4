// What the copy stages share for device tensors: each device's two copy streams (device-to-host for
// copy-in, host-to-device for copy-out, so both directions of the bus overlap) and the pool of
// pinned host buffers (staging_pool.h), where every host-side stage (local reduce, push-pull) works
// in place. A partition round leases a buffer at copy-in (keyed by its task id) and gives it back
// when its copy-out finished on the device; the pool hands it to another partition only then.
//
// Threading: any thread (one mutex for the slots; the pool has its own). Devices are opened on
// first use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "common/status.h"
#include "device/device.h"
#include "worker/pipeline/partition_task.h"
#include "worker/stages/staging_pool.h"

namespace byteps::worker::stages {

class DeviceStaging {
 public:
  struct Slot {
    std::shared_ptr<device::Device> device;
    device::StreamHandle in = nullptr;   // copy-in: device to host
    device::StreamHandle out = nullptr;  // copy-out: host to device
  };

  DeviceStaging() = default;
  // Waits (bounded) for the copies still queued, then frees the buffers and streams. A device whose
  // copies are still queued after the wait keeps the buffers they use (never freed under a copy).
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // The device `kind`:`index` with its copy streams (opened and created on first use).
  StatusOr<Slot*> For(device::Kind kind, int index);
  // Records `op`'s ready event on the framework's stream (the moment of the call), once.
  Status RecordReady(pipeline::Operation& op);
  // A pinned buffer of at least `bytes` on `slot`'s device for the partition round `lease` (its
  // task id) of key generation `generation`, held by the pipeline until Release.
  StatusOr<uint8_t*> Acquire(Slot* slot, uint64_t lease, uint32_t generation, size_t bytes) {
    return pool_.Acquire(slot->device.get(), lease, generation, bytes);
  }
  // A device copy with the lease's buffer was queued; its completion callback calls Release.
  void Hold(uint64_t lease) { pool_.Hold(lease); }
  // One holder (the pipeline, or a device copy that finished) is done with the lease's buffer.
  // Never calls the device: safe in a device callback.
  void Release(uint64_t lease) { pool_.Release(lease); }
  // The key generation `generation` gets no new rounds: its pinned buffers go.
  void Retire(uint32_t generation) { pool_.Retire(generation); }
  StagingStats stats() const { return pool_.stats(); }

 private:
  std::mutex mu_;
  std::map<std::pair<device::Kind, int>, std::unique_ptr<Slot>> slots_;
  StagingPool pool_;  // after the slots: its buffers are freed through their devices
};

}  // namespace byteps::worker::stages
