// What the copy stages share for device tensors: each device's two copy streams (device-to-host for
// copy-in, host-to-device for copy-out, so both directions of the bus overlap) and a pinned host
// buffer per partition key, where every host-side stage (local reduce, push-pull) works in place.
//
// A partition's buffer is reused by its next round only after this round's copy-out finished: a
// round leaves the pipeline when its copy-out completes, and the next round of the same partition
// enters only then (RoundSequencer).
//
// Threading: any thread (one mutex). Devices are opened on first use.
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

namespace byteps::worker::stages {

class DeviceStaging {
 public:
  struct Slot {
    std::shared_ptr<device::Device> device;
    device::StreamHandle in = nullptr;   // copy-in: device to host
    device::StreamHandle out = nullptr;  // copy-out: host to device
  };

  DeviceStaging() = default;
  // Waits (bounded) for the copies still queued, then frees the buffers and streams.
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // The device `kind`:`index` with its copy streams (opened and created on first use).
  StatusOr<Slot*> For(device::Kind kind, int index);
  // Records `op`'s ready event on the framework's stream (the moment of the call), once.
  Status RecordReady(pipeline::Operation& op);
  // The pinned buffer of partition `key` on `slot`'s device, at least `bytes` long.
  StatusOr<uint8_t*> Buffer(Slot* slot, uint64_t key, size_t bytes);

 private:
  std::mutex mu_;
  std::map<std::pair<device::Kind, int>, std::unique_ptr<Slot>> slots_;
  struct Staged {
    Slot* slot;
    void* ptr;
    size_t bytes;
  };
  std::map<std::pair<Slot*, uint64_t>, Staged> buffers_;
};

}  // namespace byteps::worker::stages
