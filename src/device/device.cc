#include "device/device.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "common/logging.h"
#include "device/backends.h"
#include "device/numa.h"

namespace byteps::device {

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kCpu:
      return "cpu";
    case Kind::kCuda:
      return "cuda";
    case Kind::kFake:
      return "fake";
  }
  return "unknown";
}

std::string Device::name() const { return fmt::format("{}:{}", KindName(kind()), index()); }

Status Device::Drain(StreamHandle stream, double timeout_s) {
  // Success wakes the wait through a host function; an error never calls one (CUDA's rule), so the
  // event is also queried, backing off to 20 ms. The host function may run after a wait that timed
  // out: the state it writes is shared.
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto w = std::make_shared<Waiter>();
  BYTEPS_ASSIGN_OR_RETURN(EventHandle event, RecordEvent(stream));
  struct EventGuard {
    Device* dev;
    EventHandle e;
    ~EventGuard() { dev->DestroyEvent(e); }
  } guard{this, event};
  BYTEPS_RETURN_IF_ERROR(LaunchHostFunc(stream, [w] {
    std::lock_guard<std::mutex> lock(w->mu);
    w->done = true;
    w->cv.notify_all();
  }));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  auto pause = std::chrono::microseconds(500);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(w->mu);
      if (w->cv.wait_until(lock, std::min(deadline, Clock::now() + Clock::duration(pause)), [&] { return w->done; }))
        return Status::Ok();
    }
    StatusOr<bool> finished = QueryEvent(event);  // never under w->mu: the host function takes it
    if (!finished.ok()) return finished.status();
    if (*finished) return Status::Ok();
    if (Clock::now() >= deadline) {
      return DeadlineExceeded(fmt::format("{}: the work queued on a stream did not complete within {:.1f} s", name(),
                                          timeout_s));
    }
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

Status Device::StreamWaitStream(StreamHandle waiter, StreamHandle producer) {
  BYTEPS_ASSIGN_OR_RETURN(EventHandle event, RecordEvent(producer));
  Status st = StreamWaitEvent(waiter, event);
  DestroyEvent(event);
  return st;
}

StatusOr<void*> AlignedHost(size_t bytes, const char* who) {
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (p == nullptr) return Unavailable(fmt::format("{}: could not allocate {} bytes", who, bytes));
  return p;
}

StatusOr<void*> AlignedHostOnNode(size_t bytes, int node, const char* who) {
  if (node < 0) return AlignedHost(bytes, who);
  constexpr size_t kPage = 4096;
  void* p = std::aligned_alloc(kPage, (std::max<size_t>(bytes, 1) + kPage - 1) / kPage * kPage);
  if (p == nullptr) return Unavailable(fmt::format("{}: could not allocate {} bytes", who, bytes));
  if (Status st = PreferNode(p, bytes, node); !st.ok()) {
    // Placement is an optimisation: a container that refuses memory policies still copies.
    static std::once_flag warned;
    std::call_once(warned, [&] {
      BYTEPS_LOG(Warning, "{}: staging memory is not placed on NUMA node {}: {}", who, node, st.message());
    });
  }
  return p;
}

bool Built(Kind kind) { return kind != Kind::kCuda || CudaBuilt(); }

StatusOr<std::shared_ptr<Device>> Open(Kind kind, int index) {
  if (index < 0) return InvalidArgument(fmt::format("device index {} of {} is negative", index, KindName(kind)));
  switch (kind) {
    case Kind::kCpu:
      return OpenCpu();
    case Kind::kFake:
      return OpenFake(index);
    case Kind::kCuda:
      return OpenCuda(index);
  }
  return InvalidArgument(fmt::format("unknown device kind {}", static_cast<int>(kind)));
}

}  // namespace byteps::device
