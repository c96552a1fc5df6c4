#include "device/cuda_runtime.h"
#include "device/library_homes.h"

#ifdef BYTEPS_HAVE_CUDA

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#ifndef BYTEPS_CUDART_SONAME
#error "BYTEPS_CUDART_SONAME (libcudart.so.<major>) is set by src/device/CMakeLists.txt"
#endif
#ifndef BYTEPS_CUDART_LIB_DIRS
#define BYTEPS_CUDART_LIB_DIRS ""
#endif

// Every runtime function a backend calls: (return type, name, parameters, arguments).
#define BYTEPS_CUDART_FUNCTIONS(X)                                                                      \
  X(cudaError_t, cudaSetDevice, (int d), (d))                                                           \
  X(cudaError_t, cudaGetDeviceCount, (int* n), (n))                                                     \
  X(cudaError_t, cudaDeviceGetPCIBusId, (char* bus, int len, int d), (bus, len, d))                     \
  X(cudaError_t, cudaDriverGetVersion, (int* v), (v))                                                   \
  X(cudaError_t, cudaRuntimeGetVersion, (int* v), (v))                                                  \
  X(cudaError_t, cudaHostAlloc, (void** p, size_t n, unsigned int f), (p, n, f))                        \
  X(cudaError_t, cudaFreeHost, (void* p), (p))                                                          \
  X(cudaError_t, cudaMalloc, (void** p, size_t n), (p, n))                                              \
  X(cudaError_t, cudaFree, (void* p), (p))                                                              \
  X(cudaError_t, cudaStreamCreateWithFlags, (cudaStream_t * s, unsigned int f), (s, f))                 \
  X(cudaError_t, cudaStreamDestroy, (cudaStream_t s), (s))                                              \
  X(cudaError_t, cudaStreamQuery, (cudaStream_t s), (s))                                                \
  X(cudaError_t, cudaStreamSynchronize, (cudaStream_t s), (s))                                          \
  X(cudaError_t, cudaStreamAddCallback, (cudaStream_t s, cudaStreamCallback_t cb, void* u, unsigned f), \
    (s, cb, u, f))                                                                                      \
  X(cudaError_t, cudaLaunchHostFunc, (cudaStream_t s, cudaHostFn_t fn, void* u), (s, fn, u))            \
  X(cudaError_t, cudaMemcpyAsync, (void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t st), \
    (d, s, n, k, st))                                                                                   \
  X(cudaError_t, cudaEventCreateWithFlags, (cudaEvent_t * e, unsigned int f), (e, f))                   \
  X(cudaError_t, cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s))                              \
  X(cudaError_t, cudaEventQuery, (cudaEvent_t e), (e))                                                  \
  X(cudaError_t, cudaEventSynchronize, (cudaEvent_t e), (e))                                            \
  X(cudaError_t, cudaEventDestroy, (cudaEvent_t e), (e))                                                \
  X(cudaError_t, cudaStreamWaitEvent, (cudaStream_t s, cudaEvent_t e, unsigned int f), (s, e, f))       \
  X(cudaError_t, cudaGetLastError, (), ())                                                              \
  X(const char*, cudaGetErrorString, (cudaError_t e), (e))                                              \
  X(const char*, cudaGetErrorName, (cudaError_t e), (e))

namespace byteps::device {
namespace {

struct Runtime {
#define BYTEPS_CUDART_POINTER(ret, name, params, args) ret(*name) params = nullptr;
  BYTEPS_CUDART_FUNCTIONS(BYTEPS_CUDART_POINTER)
#undef BYTEPS_CUDART_POINTER
  void* handle = nullptr;
  std::string path;
  Status status;
};

std::vector<std::string> Candidates() {
  std::vector<std::string> dirs;
  std::string built = BYTEPS_CUDART_LIB_DIRS;
  for (size_t start = 0; start <= built.size();) {
    size_t end = built.find(':', start);
    if (end == std::string::npos) end = built.size();
    if (end > start) dirs.push_back(built.substr(start, end - start));
    start = end + 1;
  }
  if (const std::string home = GetLibraryHomes().cuda; !home.empty()) dirs.push_back(home + "/lib64");
  return dirs;
}

Runtime Load() {
  Runtime rt;
  const char* soname = BYTEPS_CUDART_SONAME;
  std::string tried;
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);  // torch's, already in the process
  if (h == nullptr) h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    tried = fmt::format("{} ({})", soname, dlerror());
    for (const std::string& dir : Candidates()) {
      const std::string path = dir + "/" + soname;
      h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h != nullptr) break;
      tried += ", " + path;
    }
  }
  if (h == nullptr) {
    rt.status = Unavailable(fmt::format(
        "the CUDA runtime could not be loaded: tried {}: install the CUDA runtime the toolkit of this build "
        "matches (torch's pip wheel brings one), or set BYTEPS_CUDA_HOME to the toolkit",
        tried));
    return rt;
  }
  std::string missing;
#define BYTEPS_CUDART_BIND(ret, name, params, args)                      \
  rt.name = reinterpret_cast<ret(*) params>(dlsym(h, #name));            \
  if (rt.name == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(#name);
  BYTEPS_CUDART_FUNCTIONS(BYTEPS_CUDART_BIND)
#undef BYTEPS_CUDART_BIND
  Dl_info info{};
  rt.path = rt.cudaGetErrorString && dladdr(reinterpret_cast<void*>(rt.cudaGetErrorString), &info) && info.dli_fname
                ? info.dli_fname
                : soname;
  if (!missing.empty()) {
    rt.status = Unavailable(fmt::format("the CUDA runtime {} lacks {}: it is older than this build's toolkit", rt.path,
                                        missing));
    return rt;
  }
  rt.handle = h;
  return rt;
}

const Runtime& Rt() {
  static const Runtime rt = Load();
  return rt;
}

std::string Version(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }

}  // namespace

Status CudaRuntimeStatus() { return Rt().status; }

std::string CudaRuntimeDescription() {
  const Runtime& rt = Rt();
  if (!rt.status.ok()) return rt.status.message();
  int runtime = 0, driver = 0;
  (void)rt.cudaRuntimeGetVersion(&runtime);
  (void)rt.cudaDriverGetVersion(&driver);
  return fmt::format("{}: runtime {}, driver {}", rt.path, Version(runtime),
                     driver == 0 ? "none (no NVIDIA driver)" : Version(driver));
}

}  // namespace byteps::device

// The definitions the backends link against, hidden so that they never stand in for the real
// runtime in another library of the process.
#define BYTEPS_CUDART_FORWARD(ret, name, params, args)                                       \
  extern "C" __attribute__((visibility("hidden"))) ret CUDARTAPI name params {              \
    const auto& rt = byteps::device::Rt();                                                   \
    if (rt.handle == nullptr) return byteps::device::NotLoaded<ret>();                       \
    return rt.name args;                                                                     \
  }
namespace byteps::device {
template <typename T>
T NotLoaded();
template <>
cudaError_t NotLoaded<cudaError_t>() {
  return cudaErrorSharedObjectInitFailed;
}
template <>
const char* NotLoaded<const char*>() {
  return "the CUDA runtime is not loaded (byteps info says why)";
}
}  // namespace byteps::device
BYTEPS_CUDART_FUNCTIONS(BYTEPS_CUDART_FORWARD)
#undef BYTEPS_CUDART_FORWARD

#else  // !BYTEPS_HAVE_CUDA

namespace byteps::device {
Status CudaRuntimeStatus() { return Precondition("this byteps was built without CUDA"); }
std::string CudaRuntimeDescription() { return "not built (no CUDA toolkit at build time)"; }
}  // namespace byteps::device

#endif
