// The device layer: what the worker pipeline needs of an accelerator, and nothing more. Pinned host
// memory for staging, asynchronous copies on a stream, events (record, query, make a stream wait),
// and a callback once a stream's queued work has finished. Backends:
//
//   cpu   identity: host memory is the "device"; copies run inside the call, events are done at once.
//   cuda  the CUDA runtime (built when CMake finds the CUDA toolkit; BYTEPS_HAVE_CUDA).
//   fake  for tests: each stream is a thread that runs its queue in order, copies take a
//         configurable time, and a test can hold a stream (a gate) to prove nobody blocks on it.
//
// Streams and events are opaque handles owned by the backend (cudaStream_t / cudaEvent_t for cuda).
// A null stream is the device's default stream. The framework's stream (torch's current stream) is
// passed in as a handle too: the pipeline records an event on it and makes its own copy stream wait
// for that event, never the CPU.
//
// Failures behave as CUDA's: a failed copy or kernel breaks its stream, events recorded after it
// report the error, and no host function queued after it ever runs. NCCL adds that a collective
// whose peer never queued its part never finishes. So nothing may wait for a host function alone:
// Completions (completions.h) watches an event with a deadline as well.
//
// Threading: every call may come from any thread; the backend serialises what it must. Host
// functions (LaunchHostFunc) run on a backend thread (or, for cpu, inside the call); they must not
// block and must not call the device (CUDA forbids both): they only hand work to a thread of ours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace byteps::device {

enum class Kind : uint8_t { kCpu = 0, kCuda = 1, kFake = 2 };
const char* KindName(Kind kind);  // "cpu", "cuda", "fake"

enum class CopyKind : uint8_t {
  kDeviceToHost = 0,
  kHostToDevice = 1,
  kDeviceToDevice = 2,
};

using StreamHandle = void*;
using EventHandle = void*;

class Device {
 public:
  virtual ~Device() = default;
  virtual Kind kind() const = 0;
  virtual int index() const = 0;
  std::string name() const;  // "cuda:0"
  // What identifies the physical device across the processes of a host (they may number their
  // GPUs differently under CUDA_VISIBLE_DEVICES): the PCI bus id for cuda, the name otherwise.
  virtual std::string hardware_id() const { return name(); }
  // The NUMA node of the device (where its staging memory and copy threads belong); -1: unknown.
  virtual int numa_node() const { return -1; }

  // Page-locked host memory (plain aligned memory for cpu / fake), for staging; never null on OK.
  // Its pages come from numa_node()'s memory where the machine has NUMA (numa.h).
  virtual StatusOr<void*> AllocHost(size_t bytes) = 0;
  virtual void FreeHost(void* ptr) = 0;
  // Device memory (host memory for cpu / fake). Used by tests and by a backend's own staging.
  virtual StatusOr<void*> AllocDevice(size_t bytes) = 0;
  virtual void FreeDevice(void* ptr) = 0;

  // A stream of this layer's own (non-blocking with respect to the default stream).
  virtual StatusOr<StreamHandle> CreateStream() = 0;
  virtual void DestroyStream(StreamHandle stream) = 0;

  // Queues a copy of `bytes` on `stream`, after what is queued there already; returns at once.
  virtual Status CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream) = 0;

  // An event that completes when the work queued on `stream` so far has finished.
  virtual StatusOr<EventHandle> RecordEvent(StreamHandle stream) = 0;
  // True once the event completed (an error if the work before it failed).
  virtual StatusOr<bool> QueryEvent(EventHandle event) = 0;
  // Work queued on `stream` after this call waits for `event` (on the device: the CPU does not wait).
  virtual Status StreamWaitEvent(StreamHandle stream, EventHandle event) = 0;
  // The handle may be destroyed while a wait on it is still queued (the backend keeps what it needs).
  virtual void DestroyEvent(EventHandle event) = 0;

  // cudaLaunchHostFunc: runs `fn` once the work queued on `stream` so far has finished, and only if
  // all of it succeeded; after an error on the stream, no host function queued there ever runs.
  virtual Status LaunchHostFunc(StreamHandle stream, std::function<void()> fn) = 0;

  // Blocks until the work queued on `stream` so far finished: OK, the stream's error (seen through
  // an event, polled), or DeadlineExceeded naming the device once `timeout_s` passed. For tests and
  // shutdown only: the pipeline never waits on the CPU.
  Status Drain(StreamHandle stream, double timeout_s);

  // Makes `waiter` wait on the device for the work queued on `producer` so far.
  Status StreamWaitStream(StreamHandle waiter, StreamHandle producer);
};

// The device `index` of `kind`. Errors name what is missing: "this byteps was built without CUDA:
// rebuild with the CUDA toolkit installed (cmake finds it under /usr/local/cuda)", no such GPU...
StatusOr<std::shared_ptr<Device>> Open(Kind kind, int index);
// Whether `kind` is compiled into this build (cpu and fake always are).
bool Built(Kind kind);

}  // namespace byteps::device
