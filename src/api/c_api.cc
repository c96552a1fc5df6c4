// The C API over the worker engine: the engine's life cycle (init, lazy init, suspend, resume,
// shutdown), the queries and the declarations. This file holds the process-wide engine: the only
// global state of the library (CONVENTIONS.md §6), guarded by g_mu. The operations are in
// c_api_ops.cc (c_api_state.h).
#include "byteps/c_api.h"

#include "api/c_api_state.h"

#include <fmt/format.h>

#include <cstdlib>
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
#include "device/library_homes.h"
#include "worker/engine.h"

namespace {

using byteps::Status;
using byteps::StatusOr;
using byteps::StatusCode;
using byteps::api::SetError;

// The C ABI's codes are StatusCode's values: byteps_last_error_code() returns st.code() as is.
constexpr bool SameCode(int c_code, StatusCode code) { return c_code == static_cast<int>(code); }
static_assert(SameCode(BYTEPS_OK, StatusCode::kOk) && SameCode(BYTEPS_INVALID_ARGUMENT, StatusCode::kInvalidArgument) &&
                  SameCode(BYTEPS_PRECONDITION, StatusCode::kPrecondition) &&
                  SameCode(BYTEPS_UNAVAILABLE, StatusCode::kUnavailable) &&
                  SameCode(BYTEPS_DEADLINE_EXCEEDED, StatusCode::kDeadlineExceeded) &&
                  SameCode(BYTEPS_ABORTED, StatusCode::kAborted) && SameCode(BYTEPS_PROTOCOL, StatusCode::kProtocol) &&
                  SameCode(BYTEPS_INTERNAL, StatusCode::kInternal) && SameCode(BYTEPS_MISMATCH, StatusCode::kMismatch),
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

thread_local std::string t_error;
thread_local int t_error_code = 0;

StatusOr<byteps::config::Config> LoadConfig() {
  auto cfg = byteps::config::Load(byteps::config::ProcessEnvironment());
  if (!cfg.ok()) return cfg.status();
  byteps::log::SetLevel(cfg->log_level);
  byteps::log::SetHideTime(cfg->log_hide_time);
  byteps::log::SetIdentity(fmt::format("worker:{}", cfg->worker_id < 0 ? 0 : cfg->worker_id));
  byteps::config::LogWarnings(cfg.value());
  byteps::device::SetLibraryHomes({cfg->cuda_home, cfg->nccl_home});
  return cfg;
}

// The scheduler address of the distributed job this process finished cleanly last (guarded by
// g_mu): every worker's shutdown ended it, so joining it again cannot succeed.
std::string g_finished_job;

std::string JobAddress(const byteps::config::Config& cfg) {
  return cfg.distributed() ? fmt::format("{}:{}", cfg.root_uri, cfg.root_port) : std::string();
}

// Under g_mu, from byteps_init / byteps_lazy_init: refuses at once to join a job this process
// already finished (Horovod's shutdown(); init() within one job), instead of waiting out the
// start deadline for a scheduler that has exited.
int RefuseFinishedJobLocked(const byteps::config::Config& cfg) {
  if (g_finished_job.empty() || JobAddress(cfg) != g_finished_job) return 0;
  return SetError(byteps::Precondition(fmt::format(
      "init() after shutdown(): the job at {} (DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT) ended when every worker shut "
      "down, and byteps cannot re-initialize within one job; keep one init() for the job, or start a new job "
      "(another scheduler) and init() into it, or use suspend()/resume()",
      g_finished_job)));
}

// Under g_mu: joins the job with `cfg`.
int StartLocked(const byteps::config::Config& cfg) {
  auto engine = byteps::worker::Engine::Start(cfg);
  if (!engine.ok()) return SetError(engine.status());
  byteps::api::ApplyCompressionSettings(*engine.value());
  g_engine = std::move(engine.value());
  return 0;
}

// Declares `name` again on a fresh engine, as it was declared before.
int Redeclare(byteps::worker::Engine& e, const Declared& d) {
  auto k = e.Declare(d.name, d.size);
  if (!k.ok()) return SetError(k.status().WithContext(fmt::format("resume: declaring '{}' again", d.name)));
  return 0;
}

}  // namespace

namespace byteps::api {

void Remember(const std::string& name, std::optional<std::pair<size_t, DataType>> size) {
  std::lock_guard<std::mutex> lock(g_declared_mu);
  if (g_declared_names.insert(name).second) {
    g_declared.push_back({name, size});
  } else if (size) {
    for (Declared& d : g_declared)
      if (d.name == name && !d.size) d.size = size;
  }
}

int SetError(const Status& st) {
  t_error = st.message();
  t_error_code = static_cast<int>(st.code());
  return -1;
}

void ClearError() {
  t_error.clear();
  t_error_code = 0;
}

std::shared_ptr<worker::Engine> GetEngine() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_engine && g_lazy) {
    // byteps_lazy_init: the first call that needs the job joins it (once: a failure is final).
    const config::Config cfg = *g_lazy;
    g_lazy.reset();
    if (StartLocked(cfg) != 0) {
      t_error = "byteps_lazy_init: joining the job on first use failed: " + t_error;
      return nullptr;
    }
  }
  if (!g_engine) {
    SetError(Precondition("byteps is not initialized; call byteps.init() (byteps_init) first"));
  }
  return g_engine;
}

std::shared_ptr<worker::Engine> CurrentEngine() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_engine;
}

}  // namespace byteps::api

using byteps::api::ClearError;
using byteps::api::GetEngine;
using byteps::api::Remember;

extern "C" {

int byteps_init(void) {
  ClearError();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_engine) return 0;
  g_lazy.reset();
  auto cfg = LoadConfig();
  if (!cfg.ok()) return SetError(cfg.status());
  if (RefuseFinishedJobLocked(cfg.value()) != 0) return -1;
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
  if (RefuseFinishedJobLocked(cfg.value()) != 0) return -1;
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
  if (st.ok() && e->distributed()) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_finished_job = JobAddress(e->config());
  }
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

const char* byteps_last_error(void) { return t_error.c_str(); }
int byteps_last_error_code(void) { return t_error_code; }

}  // extern "C"
