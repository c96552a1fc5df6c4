// The C API over the worker engine. This file holds the process-wide engine: the only global
// state of the library (CONVENTIONS.md §6), guarded by g_mu.
#include "byteps/c_api.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <string>

#include "common/logging.h"
#include "config/config.h"
#include "worker/engine.h"

namespace {

using byteps::Status;
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

std::mutex g_mu;
std::shared_ptr<byteps::worker::Engine> g_engine;  // guarded by g_mu

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

std::shared_ptr<byteps::worker::Engine> GetEngine() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_engine) {
    SetError(byteps::Precondition("byteps is not initialized; call byteps.init() (byteps_init) first"));
  }
  return g_engine;
}

}  // namespace

extern "C" {

int byteps_init(void) {
  ClearError();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_engine) return 0;
  auto cfg = byteps::config::Load(byteps::config::ProcessEnvironment());
  if (!cfg.ok()) return SetError(cfg.status());
  byteps::log::SetLevel(cfg->log_level);
  byteps::log::SetHideTime(cfg->log_hide_time);
  byteps::log::SetIdentity(fmt::format("worker:{}", cfg->worker_id < 0 ? 0 : cfg->worker_id));
  byteps::config::LogWarnings(cfg.value());
  auto engine = byteps::worker::Engine::Start(cfg.value());
  if (!engine.ok()) return SetError(engine.status());
  g_engine = std::move(engine.value());
  return 0;
}

int byteps_shutdown(void) {
  ClearError();
  std::shared_ptr<byteps::worker::Engine> e;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    e.swap(g_engine);
  }
  if (!e) return 0;
  Status st = e->Shutdown();
  return st.ok() ? 0 : SetError(st);
}

int byteps_is_initialized(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_engine ? 1 : 0;
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
  return k.ok() ? static_cast<int>(k.value()) : SetError(k.status());
}

int byteps_declare_tensor(const char* name, size_t bytes, int dtype) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  if (name == nullptr) return SetError(byteps::InvalidArgument("declare: name is NULL"));
  auto dt = byteps::DataTypeFromCode(dtype);
  if (!dt) return SetError(byteps::InvalidArgument(fmt::format("declare of '{}': unsupported dtype code {}", name, dtype)));
  auto k = e->Declare(name, std::make_pair(bytes, *dt));
  return k.ok() ? static_cast<int>(k.value()) : SetError(k.status());
}

byteps_handle_t byteps_push_pull_async(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                       int average, int priority) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  if (name == nullptr) return SetError(byteps::InvalidArgument("push_pull: name is NULL"));
  auto dt = byteps::DataTypeFromCode(dtype);
  if (!dt) {
    return SetError(byteps::InvalidArgument(fmt::format("push_pull of '{}': unsupported dtype code {}", name, dtype)));
  }
  byteps::worker::TensorRequest r;
  r.name = name;
  r.input = input;
  r.output = output;
  r.bytes = bytes;
  r.dtype = *dt;
  r.average = average != 0;
  r.priority = priority;
  auto h = e->Enqueue(r);
  return h.ok() ? h.value() : SetError(h.status());
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
