// Stages "copy-in" and "copy-out" of a device tensor (a CUDA tensor; the fake device in tests).
//
//   copy-in   Admit (the framework's thread): records an event on the framework's stream, the
//             moment of the call. Start: the device-to-host stream waits for that event on the
//             device, then copies the partition into its pinned buffer; the task completes when
//             the copy is done (a device callback), with src = dst = the buffer, so every host
//             stage after it works in place.
//   copy-out  copies the buffer to the partition's place in the output tensor on the host-to-device
//             stream, makes the framework's stream wait for that copy (work the framework queues
//             later sees the result, and the GPU never stalls on the CPU), and completes when the
//             copy is done; the buffer goes back to the pool then (device_staging.h).
//             A partition that failed before reaching copy-out gives its buffer back in Skip (once
//             the device finished the copy-in that writes it).
//
// Neither stage ever blocks the CPU on the framework's stream. A copy's completion is watched
// (device::Completions: an event with the op deadline, BYTEPS_TIMEOUT), so a failed stream, which
// calls no host function, still fails the task, naming the tensor and the device. A task failed
// elsewhere (FailAll) is completed at once; its copy's later completion finds it gone and does
// nothing.
// Threading: Admit on the framework thread; Start / FailAll per Stage; completions on each stage's
// completions thread.
#pragma once

#include <mutex>
#include <unordered_set>

#include "device/completions.h"
#include "worker/pipeline/stage.h"
#include "worker/stages/device_staging.h"

namespace byteps::worker::stages {

// The tasks a copy stage has started and not completed yet (completed exactly once).
class InFlightCopies {
 public:
  void Add(pipeline::PartitionTask* t);
  // True once per task: the caller completes it.
  bool Take(pipeline::PartitionTask* t);
  std::vector<pipeline::PartitionTask*> TakeAll();

 private:
  std::mutex mu_;
  std::unordered_set<pipeline::PartitionTask*> tasks_;
};

class DeviceCopyInStage : public pipeline::Stage {
 public:
  // `deadline_s`: how long a copy may take (its wait for the framework's stream included).
  DeviceCopyInStage(pipeline::StageSink* sink, DeviceStaging* staging, double deadline_s)
      : pipeline::Stage("copy-in", sink), staging_(staging), deadline_s_(deadline_s) {}
  Status Admit(pipeline::Operation& op) override;
  void Start(pipeline::PartitionTask* task) override;
  void FailAll(const Status& failure) override;

 private:
  DeviceStaging* staging_;
  const double deadline_s_;
  InFlightCopies in_flight_;
  device::Completions completions_;  // last: its thread stops first
};

class DeviceCopyOutStage : public pipeline::Stage {
 public:
  DeviceCopyOutStage(pipeline::StageSink* sink, DeviceStaging* staging, double deadline_s)
      : pipeline::Stage("copy-out", sink), staging_(staging), deadline_s_(deadline_s) {}
  void Start(pipeline::PartitionTask* task) override;
  void Skip(pipeline::PartitionTask* task, const Status& failure) override;
  void FailAll(const Status& failure) override;

 private:
  DeviceStaging* staging_;
  const double deadline_s_;
  InFlightCopies in_flight_;
  device::Completions completions_;  // last: its thread stops first
};

}  // namespace byteps::worker::stages
