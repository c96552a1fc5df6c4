// The cpu backend: host memory is the device; copies run inside the call and events are done at
// once, so a pipeline built for devices costs a CPU tensor nothing.
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "device/backends.h"

namespace byteps::device {
namespace {

void* const kSentinel = reinterpret_cast<void*>(uintptr_t{1});  // every cpu stream and event

class CpuDevice final : public Device {
 public:
  Kind kind() const override { return Kind::kCpu; }
  int index() const override { return 0; }
  StatusOr<void*> AllocHost(size_t bytes) override { return AlignedHost(bytes, "cpu"); }
  void FreeHost(void* p) override { std::free(p); }
  StatusOr<void*> AllocDevice(size_t bytes) override { return AlignedHost(bytes, "cpu"); }
  void FreeDevice(void* p) override { std::free(p); }
  StatusOr<StreamHandle> CreateStream() override { return kSentinel; }
  void DestroyStream(StreamHandle) override {}
  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyKind, StreamHandle) override {
    if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
    return Status::Ok();
  }
  StatusOr<EventHandle> RecordEvent(StreamHandle) override { return kSentinel; }
  StatusOr<bool> QueryEvent(EventHandle) override { return true; }
  Status StreamWaitEvent(StreamHandle, EventHandle) override { return Status::Ok(); }
  void DestroyEvent(EventHandle) override {}
  Status LaunchHostFunc(StreamHandle, std::function<void()> fn) override {
    fn();  // the "stream" finished inside each call, and never fails
    return Status::Ok();
  }
};

}  // namespace

std::shared_ptr<Device> OpenCpu() {
  static const std::shared_ptr<Device> cpu = std::make_shared<CpuDevice>();
  return cpu;
}

}  // namespace byteps::device
