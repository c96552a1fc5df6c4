// The cuda backend, over the CUDA runtime API. Compiled only when CMake found the CUDA toolkit
// (BYTEPS_HAVE_CUDA); otherwise OpenCuda says how to get it. The runtime is loaded at run time
// (cuda_runtime.h), and OpenCuda says so when it cannot be. Every call sets the device first, so
// it may come from any thread. LaunchHostFunc is cudaLaunchHostFunc: the function runs on CUDA's
// own thread, only when the work before it succeeded, and must neither block nor call CUDA (ours
// only push a ticket onto a Completions queue, completions.h).
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "device/backends.h"
#include "device/cuda_runtime.h"
#include "device/numa.h"
#include "device/topology.h"

#ifdef BYTEPS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace byteps::device {

#ifndef BYTEPS_HAVE_CUDA

bool CudaBuilt() { return false; }

StatusOr<std::shared_ptr<Device>> OpenCuda(int index) {
  return Precondition(fmt::format(
      "cuda:{}: this byteps was built without CUDA: rebuild with the CUDA toolkit installed (CMake looks for it "
      "with find_package(CUDAToolkit), e.g. under /usr/local/cuda; set CUDAToolkit_ROOT otherwise)",
      index));
}

#else

bool CudaBuilt() { return true; }

namespace {

Status CudaError(cudaError_t err, int index, const char* what) {
  return Unavailable(fmt::format("cuda:{}: {} failed: {} ({})", index, what, cudaGetErrorString(err),
                                 cudaGetErrorName(err)));
}

#define BYTEPS_CUDA_CHECK(expr, what)                             \
  do {                                                            \
    cudaError_t err_ = (expr);                                    \
    if (err_ != cudaSuccess) return CudaError(err_, index_, what); \
  } while (0)

cudaMemcpyKind ToCuda(CopyKind k) {
  switch (k) {
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index) : index_(index) {
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, index) == cudaSuccess) {
      bus_id_ = bus;
      numa_node_ = NumaNodeOfPci(bus);
    }
  }
  Kind kind() const override { return Kind::kCuda; }
  int index() const override { return index_; }
  int numa_node() const override { return numa_node_; }

  StatusOr<void*> AllocHost(size_t bytes) override {
    BYTEPS_RETURN_IF_ERROR(Use());
    void* p = nullptr;
    ScopedPreferredNode on_node(numa_node_);  // the driver takes and pins the pages inside the call
    BYTEPS_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable), "cudaHostAlloc");
    return p;
  }
  void FreeHost(void* p) override {
    if (p) (void)cudaFreeHost(p);
  }
  StatusOr<void*> AllocDevice(size_t bytes) override {
    BYTEPS_RETURN_IF_ERROR(Use());
    void* p = nullptr;
    BYTEPS_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
    return p;
  }
  void FreeDevice(void* p) override {
    if (p && Use().ok()) (void)cudaFree(p);
  }
  StatusOr<StreamHandle> CreateStream() override {
    BYTEPS_RETURN_IF_ERROR(Use());
    cudaStream_t s = nullptr;
    BYTEPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return static_cast<StreamHandle>(s);
  }
  void DestroyStream(StreamHandle s) override {
    if (s && Use().ok()) (void)cudaStreamDestroy(static_cast<cudaStream_t>(s));
  }
  Status CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle s) override {
    if (bytes == 0) return Status::Ok();
    BYTEPS_RETURN_IF_ERROR(Use());
    BYTEPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, ToCuda(kind), static_cast<cudaStream_t>(s)),
                      "cudaMemcpyAsync");
    return Status::Ok();
  }
  StatusOr<EventHandle> RecordEvent(StreamHandle s) override {
    BYTEPS_RETURN_IF_ERROR(Use());
    cudaEvent_t e = nullptr;
    BYTEPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    cudaError_t err = cudaEventRecord(e, static_cast<cudaStream_t>(s));
    if (err != cudaSuccess) {
      (void)cudaEventDestroy(e);
      return CudaError(err, index_, "cudaEventRecord");
    }
    return static_cast<EventHandle>(e);
  }
  StatusOr<bool> QueryEvent(EventHandle e) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (err == cudaSuccess) return true;
    if (err == cudaErrorNotReady) return false;
    return CudaError(err, index_, "cudaEventQuery");
  }
  Status StreamWaitEvent(StreamHandle s, EventHandle e) override {
    BYTEPS_RETURN_IF_ERROR(Use());
    BYTEPS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s), static_cast<cudaEvent_t>(e), 0),
                      "cudaStreamWaitEvent");
    return Status::Ok();
  }
  void DestroyEvent(EventHandle e) override {
    if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));  // deferred by CUDA while a wait is queued
  }
  Status LaunchHostFunc(StreamHandle s, std::function<void()> fn) override {
    BYTEPS_RETURN_IF_ERROR(Use());
    auto* arg = new std::function<void()>(std::move(fn));
    cudaError_t err = cudaLaunchHostFunc(static_cast<cudaStream_t>(s), &CudaDevice::RunHost, arg);
    if (err != cudaSuccess) {
      delete arg;
      return CudaError(err, index_, "cudaLaunchHostFunc");
    }
    return Status::Ok();
  }
  std::string hardware_id() const override { return bus_id_.empty() ? name() : bus_id_; }

 private:
  static void CUDART_CB RunHost(void* arg) {
    // CUDA calls it only when the work before it succeeded; after an error on its stream it is
    // never called (and its std::function is leaked: CUDA gives no way to learn it was dropped).
    std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(arg));
    (*fn)();
  }
  Status Use() {
    BYTEPS_CUDA_CHECK(cudaSetDevice(index_), "cudaSetDevice");
    return Status::Ok();
  }
  const int index_;
  int numa_node_ = -1;
  std::string bus_id_;  // "0000:3b:00.0": the same GPU in every process, whatever its index there
};

}  // namespace

StatusOr<std::shared_ptr<Device>> OpenCuda(int index) {
  if (Status rt = CudaRuntimeStatus(); !rt.ok()) return Unavailable(fmt::format("cuda:{}: {}", index, rt.message()));
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // A driver older than the runtime is the usual cause: say which versions met.
    return Unavailable(fmt::format("cuda:{}: no usable GPU: cudaGetDeviceCount failed: {} ({}); {}", index,
                                   cudaGetErrorString(err), cudaGetErrorName(err), CudaRuntimeDescription()));
  }
  if (index >= count) {
    return InvalidArgument(fmt::format("cuda:{}: no such GPU ({} visible; CUDA_VISIBLE_DEVICES selects them)", index,
                                       count));
  }
  static std::mutex mu;
  static std::vector<std::shared_ptr<Device>> devices;
  std::lock_guard<std::mutex> lock(mu);
  if (devices.size() < static_cast<size_t>(count)) devices.resize(count);
  if (!devices[index]) devices[index] = std::make_shared<CudaDevice>(index);
  return devices[index];
}

#endif  // BYTEPS_HAVE_CUDA

}  // namespace byteps::device
