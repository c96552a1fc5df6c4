// The fake backend: a device whose asynchrony is real, for testing the GPU path's ordering and
// waiting logic on a machine without a GPU. Device memory is host memory, but it is touched only by
// the device's own streams. Each stream (the default one included) is a thread that runs its queue
// in order: copies take `latency_s + bytes / bytes_per_s` (the memmove itself included), events
// complete when the stream reaches them, a wait holds the stream (not the caller) until its event
// completed, however long that takes. Tests can also queue their own work on a stream (Launch: a
// "kernel"; Enqueue: one that can fail) and hold a stream closed (Hold) to prove that nobody waits
// on it from the CPU.
//
// Failures are CUDA's, not kinder: a failed op breaks its stream for good (later copies and
// kernels do nothing, events recorded later report the error, and so does a stream that waits for
// such an event); a host function queued after the failure never runs (it is counted as dropped).
// DestroyStream returns at once, as cudaStreamDestroy does; the stream's thread still runs what
// was queued and ends then.
//
// Threading: every call from any thread. Host functions and launched work run on the stream's
// thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

#include "device/device.h"

namespace byteps::device {

struct FakeOptions {
  double copy_latency_s = 0;  // per copy
  double copy_bytes_per_s = 0;  // 0: no time per byte
  int numa_node = -1;  // the device's NUMA node: host memory prefers it, streams created later run on it
};

// A closed gate queued on a stream: the stream runs nothing queued after it until Open().
class FakeGate {
 public:
  virtual ~FakeGate() = default;
  virtual void Open() = 0;
  virtual bool reached() const = 0;  // the stream is waiting at the gate
};

class FakeDevice : public Device {
 public:
  // The process's fake device `index` (the one device::Open(Kind::kFake, index) returns).
  static std::shared_ptr<FakeDevice> Get(int index);

  virtual void SetOptions(const FakeOptions& options) = 0;
  virtual std::shared_ptr<FakeGate> Hold(StreamHandle stream) = 0;
  virtual Status Launch(StreamHandle stream, std::function<void()> work) = 0;
  // Like Launch, for work that can fail: an error breaks the stream (later events carry it, later
  // host functions never run), as a failed kernel does.
  virtual Status Enqueue(StreamHandle stream, std::function<Status()> work) = 0;
  // Counters, for tests: copies run; host functions dropped because their stream had failed; the
  // longest any host function ran (CUDA forbids them to block: a long one held its stream).
  virtual uint64_t copies() const = 0;
  virtual uint64_t copied_bytes() const = 0;
  virtual uint64_t dropped_host_functions() const = 0;
  virtual double longest_host_function_s() const = 0;
};

}  // namespace byteps::device
