// The C API's process-wide state, shared by its two files: c_api.cc (the engine's life cycle,
// the queries and declarations; it owns the state) and c_api_ops.cc (the operations and handles).
// Internal to src/api/. Threading: every function may be called from any thread; the engine is
// guarded by a mutex, the last error is per thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "worker/engine.h"

namespace byteps::api {

// The running engine, started now when byteps_lazy_init deferred it; nullptr (with the last error
// set) when there is none.
std::shared_ptr<worker::Engine> GetEngine();
// The running engine, or nullptr; never starts one and sets no error.
std::shared_ptr<worker::Engine> CurrentEngine();

// Sets this thread's last error from `st`; returns -1.
int SetError(const Status& st);
void ClearError();

// Hands the learning rate and the per-name compression parameters set so far to a new engine
// (c_api_compress.cc).
void ApplyCompressionSettings(worker::Engine& engine);

// Remembers `name` (with its size when declared with one) for byteps_resume.
void Remember(const std::string& name, std::optional<std::pair<size_t, DataType>> size);

}  // namespace byteps::api
