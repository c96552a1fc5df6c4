// The C API over the worker engine. This file holds the process-wide engine: the only global
// state of the library (CONVENTIONS.md §6), guarded by g_mu.
#include "byteps/c_api.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "config/config.h"
#include "device/device.h"
#include "worker/engine.h"

namespace {

using byteps::Status;
using byteps::StatusOr;
using byteps::StatusCode;

// The C ABI's codes are StatusCode's values: byteps_last_error_code() returns st.code() as is.
constexpr bool SameCode(int c_code, StatusCode code) { return c_code == static_cast<int>(code); }
static_assert(SameCode(BYTEPS_OK, StatusCode::kOk) && SameCode(BYTEPS_INVALID_ARGUMENT, StatusCode::kInvalidArgument) &&
                  SameCode(BYTEPS_PRECONDITION, StatusCode::kPrecondition) &&
                  SameCode(BYTEPS_UNAVAILABLE, StatusCode::kUnavailable) &&
                  SameCode(BYTEPS_DEADLINE_EXCEEDED, StatusCode::kDeadlineExceeded) &&
                  SameCode(BYTEPS_ABORTED, StatusCode::kAborted) && SameCode(BYTEPS_PROTOCOL, StatusCode::kProtocol) &&
                  SameCode(BYTEPS_INTERNAL, StatusCode::kInternal),
              "enum byteps_status (include/byteps/c_api.h) must match byteps::StatusCode");
static_assert(BYTEPS_DEVICE_CPU == static_cast<int>(byteps::device::Kind::kCpu) &&
                  BYTEPS_DEVICE_CUDA == static_cast<int>(byteps::device::Kind::kCuda) &&
                  BYTEPS_DEVICE_FAKE == static_cast<int>(byteps::device::Kind::kFake),
              "enum byteps_device_kind (include/byteps/c_api.h) must match byteps::device::Kind");

std::mutex g_mu;
std::shared_ptr<byteps::worker::Engine> g_engine;  // guarded by g_mu
// byteps_lazy_init's configuration: the engine starts (joins the job) on first use.
std::optional<byteps::config::Config> g_lazy;  // guarded by g_mu

// Every name declared or pushed since byteps_init, in first-use order, with its size when
// declared with one: byteps_resume declares them again in this order, so keys and server
// placement are the same. Kept across shutdown and suspend (as in BytePS); restarted by init.
struct Declared {
  std::string name;
  std::optional<std::pair<size_t, byteps::DataType>> size;
};
std::mutex g_declared_mu;
std::vector<Declared> g_declared;            // guarded by g_declared_mu
std::unordered_set<std::string> g_declared_names;  // guarded by g_declared_mu

void Remember(const std::string& name, std::optional<std::pair<size_t, byteps::DataType>> size) {
  std::lock_guard<std::mutex> lock(g_declared_mu);
  if (g_declared_names.insert(name).second) {
    g_declared.push_back({name, size});
  } else if (size) {
    for (Declared& d : g_declared)
      if (d.name == name && !d.size) d.size = size;
  }
}

thread_local std::string t_error;
thread_local int t_error_code = 0;

int SetError(const Status& st) {
  t_error = st.message();
  t_error_code = static_cast<int>(st.code());
  return -1;
}

void ClearError() {
  t_error.clear();
  t_error_code = 0;
}

StatusOr<byteps::config::Config> LoadConfig() {
  auto cfg = byteps::config::Load(byteps::config::ProcessEnvironment());
  if (!cfg.ok()) return cfg.status();
  byteps::log::SetLevel(cfg->log_level);
  byteps::log::SetHideTime(cfg->log_hide_time);
  byteps::log::SetIdentity(fmt::format("worker:{}", cfg->worker_id < 0 ? 0 : cfg->worker_id));
  byteps::config::LogWarnings(cfg.value());
  return cfg;
}

// Under g_mu: joins the job with `cfg`.
int StartLocked(const byteps::config::Config& cfg) {
  auto engine = byteps::worker::Engine::Start(cfg);
  if (!engine.ok()) return SetError(engine.status());
  g_engine = std::move(engine.value());
  return 0;
}

std::shared_ptr<byteps::worker::Engine> GetEngine() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_engine && g_lazy) {
    // byteps_lazy_init: the first call that needs the job joins it (once: a failure is final).
    const byteps::config::Config cfg = *g_lazy;
    g_lazy.reset();
    if (StartLocked(cfg) != 0) {
      t_error = "byteps_lazy_init: joining the job on first use failed: " + t_error;
      return nullptr;
    }
  }
  if (!g_engine) {
    SetError(byteps::Precondition("byteps is not initialized; call byteps.init() (byteps_init) first"));
  }
  return g_engine;
}

// Declares `name` again on a fresh engine, as it was declared before.
int Redeclare(byteps::worker::Engine& e, const Declared& d) {
  auto k = e.Declare(d.name, d.size);
  if (!k.ok()) return SetError(k.status().WithContext(fmt::format("resume: declaring '{}' again", d.name)));
  return 0;
}

// A request for `what` ("push_pull", "allgather") of `name`, its output and dtype checked.
StatusOr<byteps::worker::TensorRequest> RequestFor(const char* what, const char* name, void* output, size_t bytes,
                                                   int dtype, int priority, int device_kind, int device_index,
                                                   void* stream) {
  if (name == nullptr) return byteps::InvalidArgument(fmt::format("{}: name is NULL", what));
  auto dt = byteps::DataTypeFromCode(dtype);
  if (!dt) return byteps::InvalidArgument(fmt::format("{} of '{}': unsupported dtype code {}", what, name, dtype));
  if (device_kind != BYTEPS_DEVICE_CPU && device_kind != BYTEPS_DEVICE_CUDA && device_kind != BYTEPS_DEVICE_FAKE) {
    return byteps::InvalidArgument(
        fmt::format("{} of '{}': unknown device kind {} (0 cpu, 1 cuda, 2 fake)", what, name, device_kind));
  }
  byteps::worker::TensorRequest r;
  r.name = name;
  r.output = output;
  r.bytes = bytes;
  r.dtype = *dt;
  r.priority = priority;
  if (device_kind != BYTEPS_DEVICE_CPU) {
    r.device = {static_cast<byteps::device::Kind>(device_kind), device_index, stream};
  }
  return r;
}

// Enqueues `r` and remembers its name for byteps_resume: the handle, or -1.
byteps_handle_t Start(byteps::worker::Engine& e, const byteps::worker::TensorRequest& r) {
  auto h = e.Enqueue(r);
  if (!h.ok()) return SetError(h.status());
  Remember(r.name, std::nullopt);
  return h.value();
}

}  // namespace

extern "C" {

int byteps_init(void) {
  ClearError();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_engine) return 0;
  g_lazy.reset();
  auto cfg = LoadConfig();
  if (!cfg.ok()) return SetError(cfg.status());
  {
    std::lock_guard<std::mutex> declared(g_declared_mu);
    g_declared.clear();
    g_declared_names.clear();
  }
  return StartLocked(cfg.value());
}

int byteps_lazy_init(void) {
  ClearError();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_engine || g_lazy) return 0;
  auto cfg = LoadConfig();
  if (!cfg.ok()) return SetError(cfg.status());
  {
    std::lock_guard<std::mutex> declared(g_declared_mu);
    g_declared.clear();
    g_declared_names.clear();
  }
  g_lazy = std::move(cfg.value());
  return 0;
}

int byteps_suspend(void) { return byteps_shutdown(); }

int byteps_resume(int num_workers, int num_servers, int global_rank) {
  ClearError();
  if (num_workers < 1 || num_servers < 0) {
    return SetError(byteps::InvalidArgument(
        fmt::format("resume({}, {}, {}): needs at least one worker and no negative server count", num_workers,
                    num_servers, global_rank)));
  }
  if (byteps_shutdown() != 0) return -1;
  ::setenv("DMLC_NUM_WORKER", std::to_string(num_workers).c_str(), 1);
  ::setenv("DMLC_NUM_SERVER", std::to_string(num_servers).c_str(), 1);
  if (global_rank >= 0) ::setenv("BYTEPS_GLOBAL_RANK", std::to_string(global_rank).c_str(), 1);
  std::shared_ptr<byteps::worker::Engine> e;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_lazy.reset();
    auto cfg = LoadConfig();
    if (!cfg.ok()) return SetError(cfg.status().WithContext("resume"));
    if (StartLocked(cfg.value()) != 0) return -1;
    e = g_engine;
  }
  std::vector<Declared> replay;
  {
    std::lock_guard<std::mutex> lock(g_declared_mu);
    replay = g_declared;
  }
  for (const Declared& d : replay)
    if (Redeclare(*e, d) != 0) return -1;
  return 0;
}

int byteps_shutdown(void) {
  ClearError();
  std::shared_ptr<byteps::worker::Engine> e;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    e.swap(g_engine);
    g_lazy.reset();
  }
  if (!e) return 0;
  Status st = e->Shutdown();
  return st.ok() ? 0 : SetError(st);
}

int byteps_is_initialized(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_engine || g_lazy ? 1 : 0;
}

int byteps_rank(void) {
  auto e = GetEngine();
  return e ? e->rank() : -1;
}
int byteps_size(void) {
  auto e = GetEngine();
  return e ? e->size() : -1;
}
int byteps_local_rank(void) {
  auto e = GetEngine();
  return e ? e->local_rank() : -1;
}
int byteps_local_size(void) {
  auto e = GetEngine();
  return e ? e->local_size() : -1;
}

int byteps_declare(const char* name) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  if (name == nullptr) return SetError(byteps::InvalidArgument("declare: name is NULL"));
  auto k = e->Declare(name);
  if (!k.ok()) return SetError(k.status());
  Remember(name, std::nullopt);
  return static_cast<int>(k.value());
}

int byteps_declare_tensor(const char* name, size_t bytes, int dtype) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  if (name == nullptr) return SetError(byteps::InvalidArgument("declare: name is NULL"));
  auto dt = byteps::DataTypeFromCode(dtype);
  if (!dt) return SetError(byteps::InvalidArgument(fmt::format("declare of '{}': unsupported dtype code {}", name, dtype)));
  auto k = e->Declare(name, std::make_pair(bytes, *dt));
  if (!k.ok()) return SetError(k.status());
  Remember(name, std::make_pair(bytes, *dt));
  return static_cast<int>(k.value());
}

byteps_handle_t byteps_push_pull_async(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                       int average, int priority) {
  return byteps_push_pull_async_on(name, input, output, bytes, dtype, average, priority, BYTEPS_DEVICE_CPU, 0,
                                   nullptr);
}

byteps_handle_t byteps_push_pull_async_on(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                          int average, int priority, int device_kind, int device_index,
                                          void* stream) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  auto r = RequestFor("push_pull", name, output, bytes, dtype, priority, device_kind, device_index, stream);
  if (!r.ok()) return SetError(r.status());
  r->input = input;
  r->average = average != 0;
  return Start(*e, *r);
}

int byteps_device_built(int device_kind) {
  switch (device_kind) {
    case BYTEPS_DEVICE_CPU:
    case BYTEPS_DEVICE_FAKE:
      return 1;
    case BYTEPS_DEVICE_CUDA:
      return byteps::device::Built(byteps::device::Kind::kCuda) ? 1 : 0;
    default:
      return 0;
  }
}

byteps_handle_t byteps_allgather_async(const char* name, const void* input, size_t slice_bytes, void* output,
                                       size_t total_bytes, size_t slice_offset, int dtype, int priority) {
  return byteps_allgather_async_on(name, input, slice_bytes, output, total_bytes, slice_offset, dtype, priority,
                                   BYTEPS_DEVICE_CPU, 0, nullptr);
}

byteps_handle_t byteps_allgather_async_on(const char* name, const void* input, size_t slice_bytes, void* output,
                                          size_t total_bytes, size_t slice_offset, int dtype, int priority,
                                          int device_kind, int device_index, void* stream) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  auto r = RequestFor("allgather", name, output, total_bytes, dtype, priority, device_kind, device_index, stream);
  if (!r.ok()) return SetError(r.status());
  if (slice_offset > total_bytes || slice_bytes > total_bytes - slice_offset) {
    return SetError(byteps::InvalidArgument(fmt::format(
        "allgather of '{}': a slice of {} bytes at offset {} does not fit {} bytes", name, slice_bytes, slice_offset,
        total_bytes)));
  }
  if (e->local_size() > 1) {
    if (!r->device.on_host()) {
      return SetError(byteps::Precondition(fmt::format(
          "allgather of '{}': a device tensor on a host with several processes (BYTEPS_LOCAL_SIZE={}) is not built "
          "yet; pass a CPU tensor",
          r->name, e->local_size())));
    }
    // A host's processes reduce locally by summing: the slice goes into a zeroed output, whose sum
    // over all workers is the concatenation (x + 0, exact).
    auto* out = static_cast<uint8_t*>(output);
    if (out != nullptr) {
      if (slice_bytes > 0 && input != nullptr && input != out + slice_offset) {
        std::memmove(out + slice_offset, input, slice_bytes);  // first: input may lie inside output
      }
      std::memset(out, 0, slice_offset);
      std::memset(out + slice_offset + slice_bytes, 0, total_bytes - slice_offset - slice_bytes);
    }
    return byteps_push_pull_async(name, output, output, total_bytes, dtype, /*average=*/0, priority);
  }
  r->input = input;
  r->op = byteps::worker::ReduceOp::kConcat;
  r->slice_offset = slice_offset;
  r->slice_bytes = slice_bytes;
  return Start(*e, *r);
}

byteps_handle_t byteps_broadcast_async(const char* name, void* buffer, size_t bytes, int dtype, int root_rank,
                                       int priority) {
  return byteps_broadcast_async_on(name, buffer, bytes, dtype, root_rank, priority, BYTEPS_DEVICE_CPU, 0, nullptr);
}

byteps_handle_t byteps_broadcast_async_on(const char* name, void* buffer, size_t bytes, int dtype, int root_rank,
                                          int priority, int device_kind, int device_index, void* stream) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  if (root_rank < 0 || root_rank >= e->size()) {
    return SetError(byteps::InvalidArgument(fmt::format("broadcast of '{}': root rank {} is not in [0, {})",
                                                        name ? name : "(null)", root_rank, e->size())));
  }
  // The servers forward the root's bytes: a concatenation in which only the root has a slice.
  const bool root = e->rank() == root_rank;
  return byteps_allgather_async_on(name, buffer, root ? bytes : 0, buffer, bytes, 0, dtype, priority, device_kind,
                                   device_index, stream);
}

int byteps_get_pushpull_speed(int64_t* ms_since_epoch, double* mb_per_s) {
  ClearError();
  if (ms_since_epoch == nullptr || mb_per_s == nullptr) {
    return SetError(byteps::InvalidArgument("get_pushpull_speed: NULL output pointer"));
  }
  std::shared_ptr<byteps::worker::Engine> e;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    e = g_engine;
  }
  const byteps::worker::SpeedSample s = e ? e->NextSpeedSample() : byteps::worker::SpeedSample{};
  *ms_since_epoch = s.ms_since_epoch;
  *mb_per_s = s.mb_per_s;
  return 0;
}

int byteps_poll(byteps_handle_t handle) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  auto r = e->Poll(handle);
  if (!r.ok()) return SetError(r.status());
  return r.value() ? 1 : 0;
}

int byteps_wait(byteps_handle_t handle, double timeout_s) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  Status st = e->Wait(handle, timeout_s);
  return st.ok() ? 0 : SetError(st);
}

void byteps_release(byteps_handle_t handle) {
  std::shared_ptr<byteps::worker::Engine> e;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    e = g_engine;
  }
  if (e) e->Release(handle);
}

const char* byteps_last_error(void) { return t_error.c_str(); }
int byteps_last_error_code(void) { return t_error_code; }

}  // extern "C"
