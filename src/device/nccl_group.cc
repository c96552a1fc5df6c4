// NCCL groups for CUDA devices. libnccl.so.2 is opened at run time (dlopen), so a build with CUDA
// loads and runs without NCCL until a host's GPUs form a group; then a missing library is an error
// that names it. Init is non-blocking with a deadline (a peer that never joins fails the init,
// naming the GPU and the rank, instead of hanging); collectives go on the caller's stream.
#include <fmt/format.h>

#include "device/group_backends.h"
#include "device/library_homes.h"

#if defined(BYTEPS_HAVE_CUDA) && defined(BYTEPS_HAVE_NCCL_H)
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#endif

namespace byteps::device {

#if !(defined(BYTEPS_HAVE_CUDA) && defined(BYTEPS_HAVE_NCCL_H))

bool NcclBuilt() { return false; }
bool NcclAvailable() { return false; }

Status NcclStatus() {
  return Precondition("this byteps was built without CUDA and NCCL headers (nccl.h was not found at build time: "
                      "set BYTEPS_NCCL_HOME, or install NCCL or pip's nvidia-nccl wheel, and rebuild)");
}

StatusOr<std::string> NewNcclGroupId() {
  return Precondition("this byteps was built without CUDA and NCCL headers: GPU groups (the NCCL local reduce) are "
                      "not available");
}
StatusOr<std::unique_ptr<Group>> JoinNcclGroup(std::shared_ptr<Device> device, const std::string&, int rank, int size,
                                               double) {
  return Precondition(fmt::format("NCCL init on {} (local rank {} of {}): this byteps was built without CUDA and NCCL "
                                  "headers",
                                  device->name(), rank, size));
}

#else

namespace {

struct Nccl {
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t) = nullptr;
  ncclResult_t (*Bcast)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  Status loaded;
};

const Nccl& Load() {
  static Nccl n;
  static std::once_flag once;
  std::call_once(once, [] {
    // By name first: LD_LIBRARY_PATH, the system's folders, or the copy torch already loaded (its
    // pip wheel's, which has this soname). Then the folder the build found it in (BYTEPS_NCCL_HOME,
    // NCCL_HOME, CUDA's folders or pip's nvidia/nccl/lib at build time).
    // Then <BYTEPS_NCCL_HOME, else NCCL_HOME>/lib, as at build time (library_homes.h).
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    std::string first = lib ? "" : dlerror();
    if (!lib) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    std::string searched;
#ifdef BYTEPS_NCCL_LIB_DIR
    if (!lib) lib = dlopen(BYTEPS_NCCL_LIB_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    searched = ", " BYTEPS_NCCL_LIB_DIR " (where the build found it)";
#endif
    if (const std::string home = GetLibraryHomes().nccl; !lib && !home.empty()) {
      const std::string path = home + "/lib/libnccl.so.2";
      lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      searched += fmt::format(", {} (BYTEPS_NCCL_HOME / NCCL_HOME)", path);
    }
    if (!lib) {
      n.loaded = Unavailable(fmt::format("NCCL could not be loaded (libnccl.so.2 not on the library path{}: {}); "
                                         "install NCCL or put its lib folder on LD_LIBRARY_PATH",
                                         searched, first));
      return;
    }
    auto sym = [&](auto* fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (!*fn && n.loaded.ok()) n.loaded = Unavailable(fmt::format("NCCL lacks {} (too old: 2.14 or later needed)", name));
    };
    sym(&n.GetUniqueId, "ncclGetUniqueId");
    sym(&n.CommInitRankConfig, "ncclCommInitRankConfig");
    sym(&n.CommGetAsyncError, "ncclCommGetAsyncError");
    sym(&n.CommAbort, "ncclCommAbort");
    sym(&n.CommDestroy, "ncclCommDestroy");
    sym(&n.Reduce, "ncclReduce");
    sym(&n.Bcast, "ncclBcast");
    sym(&n.GetErrorString, "ncclGetErrorString");
  });
  return n;
}

StatusOr<ncclDataType_t> NcclType(DataType dt) {
  switch (dt) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kInt8: return ncclInt8;
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt16:  // NCCL has no 16-bit integers
    case DataType::kBool:   // a device group sums, and bools are not summed
      break;
  }
  return InvalidArgument(fmt::format("NCCL has no {}", DataTypeName(dt)));
}

class NcclGroup final : public Group {
 public:
  NcclGroup(std::shared_ptr<Device> dev, ncclComm_t comm, int rank, int size)
      : dev_(std::move(dev)), comm_(comm), rank_(rank), size_(size) {}
  // The caller drained the group's stream first, or aborted the group (Abort frees the
  // communicator): ncclCommDestroy never meets a collective still in flight.
  ~NcclGroup() override {
    if (comm_ == nullptr) return;
    (void)cudaSetDevice(dev_->index());
    (void)Load().CommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, int root, StreamHandle s) override {
    BYTEPS_RETURN_IF_ERROR(Usable());
    BYTEPS_ASSIGN_OR_RETURN(ncclDataType_t t, NcclType(dtype));
    (void)cudaSetDevice(dev_->index());
    return Done("ncclReduce", Load().Reduce(send, recv, count, t, ncclSum, root, comm_, static_cast<cudaStream_t>(s)));
  }
  Status Broadcast(void* buf, size_t bytes, int root, StreamHandle s) override {
    BYTEPS_RETURN_IF_ERROR(Usable());
    (void)cudaSetDevice(dev_->index());
    return Done("ncclBcast", Load().Bcast(buf, bytes, ncclUint8, root, comm_, static_cast<cudaStream_t>(s)));
  }
  // ncclCommAbort stops this rank's kernels still spinning (a peer that never queued its part) and
  // frees the communicator; CUDA sees no error, so the caller already failed that work.
  void Abort() override {
    if (comm_ == nullptr) return;
    (void)cudaSetDevice(dev_->index());
    (void)Load().CommAbort(comm_);
    comm_ = nullptr;
  }
  bool aborted() const override { return comm_ == nullptr; }

 private:
  Status Usable() const {
    if (comm_ != nullptr) return Status::Ok();
    return Precondition(fmt::format("NCCL group on {} (local rank {} of {}) was aborted; it queues nothing more",
                                    dev_->name(), rank_, size_));
  }
  // A non-blocking communicator may still be enqueuing: wait (bounded) until it is not.
  Status Done(const char* what, ncclResult_t r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (r == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
      (void)Load().CommGetAsyncError(comm_, &r);
    }
    if (r == ncclSuccess) return Status::Ok();
    return Unavailable(fmt::format("{} on {} (local rank {} of {}) failed: {}", what, dev_->name(), rank_, size_,
                                   Load().GetErrorString(r)));
  }
  std::shared_ptr<Device> dev_;
  ncclComm_t comm_;
  const int rank_, size_;
};

}  // namespace

bool NcclBuilt() { return true; }
bool NcclAvailable() { return Load().loaded.ok(); }

Status NcclStatus() { return Load().loaded; }

StatusOr<std::string> NewNcclGroupId() {
  const Nccl& n = Load();
  BYTEPS_RETURN_IF_ERROR(n.loaded);
  ncclUniqueId id;
  ncclResult_t r = n.GetUniqueId(&id);
  if (r != ncclSuccess) return Unavailable(fmt::format("ncclGetUniqueId failed: {}", n.GetErrorString(r)));
  return std::string(id.internal, sizeof(id.internal));
}

StatusOr<std::unique_ptr<Group>> JoinNcclGroup(std::shared_ptr<Device> device, const std::string& id, int rank,
                                               int size, double timeout_s) {
  const std::string where = fmt::format("NCCL init on {} (local rank {} of {})", device->name(), rank, size);
  const Nccl& n = Load();
  if (!n.loaded.ok()) return n.loaded.WithContext(where);
  ncclUniqueId uid;
  if (id.size() != sizeof(uid.internal)) {
    return InvalidArgument(fmt::format("{}: a group id of {} bytes (NCCL's are {})", where, id.size(),
                                       sizeof(uid.internal)));
  }
  std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
  if (cudaSetDevice(device->index()) != cudaSuccess) return Unavailable(where + ": cudaSetDevice failed");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = n.CommInitRankConfig(&comm, size, uid, rank, &config);
  // NCCL's nonblocking init has no wait with a deadline and no fd or callback to block on: its
  // state is only read through ncclCommGetAsyncError, so this polls, backing off to 5 ms. The sleep
  // is deliberate: there is no event to wait on instead. A blocking init on a helper thread would
  // give one (a condition set when it returns), but could not be cut off at the deadline: it hands
  // out the communicator ncclCommAbort needs only when it is done.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::microseconds(50);
  while (r == ncclInProgress) {
    if (std::chrono::steady_clock::now() >= deadline) {
      (void)n.CommAbort(comm);
      return DeadlineExceeded(fmt::format("{} failed: the other ranks did not join within {:.1f} s", where, timeout_s));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
    (void)n.CommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    if (comm) (void)n.CommAbort(comm);
    return Unavailable(fmt::format("{} failed: {}", where, n.GetErrorString(r)));
  }
  return std::unique_ptr<Group>(new NcclGroup(std::move(device), comm, rank, size));
}

#endif

}  // namespace byteps::device
