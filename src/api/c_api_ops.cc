// The C API's operations: push_pull and the other reductions, allgather, broadcast (each also on a
// device), the push_pull speed and the handles. The engine and the last error come from c_api.cc
// (c_api_state.h).
#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "api/c_api_state.h"
#include "byteps/c_api.h"
#include "device/device.h"
#include "protocol/control.h"
#include "worker/engine.h"

namespace byteps::api {
namespace {

static_assert(BYTEPS_INT16 == static_cast<int>(DataType::kInt16) && BYTEPS_BOOL == static_cast<int>(DataType::kBool) &&
                  BYTEPS_BFLOAT16 == static_cast<int>(DataType::kBFloat16),
              "enum byteps_dtype (include/byteps/c_api.h) must match byteps::DataType");

// The worker's op of a byteps_reduce_op code.
StatusOr<worker::ReduceOp> ReduceOpOf(const char* name, int reduce_op) {
  switch (reduce_op) {
    case BYTEPS_OP_SUM: return worker::ReduceOp::kSum;
    case BYTEPS_OP_MIN: return worker::ReduceOp::kMin;
    case BYTEPS_OP_MAX: return worker::ReduceOp::kMax;
    case BYTEPS_OP_PRODUCT: return worker::ReduceOp::kProduct;
    case BYTEPS_OP_ADASUM: return worker::ReduceOp::kAdasum;
    default: break;
  }
  return InvalidArgument(fmt::format("reduce of '{}': unknown reduce op {} (0 sum, 1 min, 2 max, 3 product, 4 adasum)",
                                     name ? name : "(null)", reduce_op));
}

// A request for `what` ("push_pull", "allgather") of `name`, its output and dtype checked.
StatusOr<worker::TensorRequest> RequestFor(const char* what, const char* name, void* output, size_t bytes, int dtype,
                                           int priority, int device_kind, int device_index, void* stream) {
  if (name == nullptr) return InvalidArgument(fmt::format("{}: name is NULL", what));
  auto dt = DataTypeFromCode(dtype);
  if (!dt) return InvalidArgument(fmt::format("{} of '{}': unsupported dtype code {}", what, name, dtype));
  if (device_kind != BYTEPS_DEVICE_CPU && device_kind != BYTEPS_DEVICE_CUDA && device_kind != BYTEPS_DEVICE_FAKE) {
    return InvalidArgument(
        fmt::format("{} of '{}': unknown device kind {} (0 cpu, 1 cuda, 2 fake)", what, name, device_kind));
  }
  worker::TensorRequest r;
  r.name = name;
  r.output = output;
  r.bytes = bytes;
  r.dtype = *dt;
  r.priority = priority;
  if (device_kind != BYTEPS_DEVICE_CPU) {
    r.device = {static_cast<device::Kind>(device_kind), device_index, stream};
  }
  return r;
}

// Enqueues `r` and remembers its name for byteps_resume: the handle, or -1.
byteps_handle_t Start(worker::Engine& e, const worker::TensorRequest& r) {
  auto h = e.Enqueue(r);
  if (!h.ok()) return SetError(h.status());
  Remember(r.name, std::nullopt);
  return h.value();
}

}  // namespace
}  // namespace byteps::api

using byteps::Status;
using byteps::api::ClearError;
using byteps::api::CurrentEngine;
using byteps::api::GetEngine;
using byteps::api::RequestFor;
using byteps::api::SetError;
using byteps::api::Start;

extern "C" {

byteps_handle_t byteps_push_pull_async(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                       int average, int priority) {
  return byteps_push_pull_async_on(name, input, output, bytes, dtype, average, priority, BYTEPS_DEVICE_CPU, 0,
                                   nullptr);
}

byteps_handle_t byteps_push_pull_async_on(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                          int average, int priority, int device_kind, int device_index,
                                          void* stream) {
  return byteps_reduce_async_on(name, input, output, bytes, dtype, BYTEPS_OP_SUM, average, nullptr, priority,
                                device_kind, device_index, stream);
}

byteps_handle_t byteps_reduce_async_on(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                       int reduce_op, int average, const char* attrs, int priority, int device_kind,
                                       int device_index, void* stream) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  auto op = byteps::api::ReduceOpOf(name, reduce_op);
  if (!op.ok()) return SetError(op.status());
  auto r = RequestFor("push_pull", name, output, bytes, dtype, priority, device_kind, device_index, stream);
  if (!r.ok()) return SetError(r.status());
  r->input = input;
  r->average = average != 0;
  r->op = *op;
  r->attrs = attrs != nullptr ? attrs : "";
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
  return byteps_allgather_async_ex(name, input, slice_bytes, output, total_bytes, slice_offset, dtype, priority,
                                   device_kind, device_index, stream, nullptr);
}

byteps_handle_t byteps_allgather_async_ex(const char* name, const void* input, size_t slice_bytes, void* output,
                                          size_t total_bytes, size_t slice_offset, int dtype, int priority,
                                          int device_kind, int device_index, void* stream, const char* attrs) {
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
    // over all workers is the concatenation (x + 0, exact; bools, which are not summed: x or 0).
    auto* out = static_cast<uint8_t*>(output);
    if (out != nullptr) {
      if (slice_bytes > 0 && input != nullptr && input != out + slice_offset) {
        std::memmove(out + slice_offset, input, slice_bytes);  // first: input may lie inside output
      }
      std::memset(out, 0, slice_offset);
      std::memset(out + slice_offset + slice_bytes, 0, total_bytes - slice_offset - slice_bytes);
    }
    // Its rounds fail while a process has joined (join()), as a concatenation's do.
    std::string join_fails = attrs != nullptr ? attrs : "";
    join_fails += fmt::format("{}{}={}", join_fails.empty() ? "" : ";", byteps::protocol::kAttrJoin,
                              byteps::protocol::kJoinFails);
    return byteps_reduce_async_on(name, output, output, total_bytes, dtype,
                                  dtype == BYTEPS_BOOL ? BYTEPS_OP_MAX : BYTEPS_OP_SUM, /*average=*/0,
                                  join_fails.c_str(), priority, BYTEPS_DEVICE_CPU, 0, nullptr);
  }
  r->input = input;
  r->attrs = attrs != nullptr ? attrs : "";
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
  return byteps_broadcast_async_ex(name, buffer, bytes, dtype, root_rank, priority, device_kind, device_index, stream,
                                   nullptr);
}

byteps_handle_t byteps_broadcast_async_ex(const char* name, void* buffer, size_t bytes, int dtype, int root_rank,
                                          int priority, int device_kind, int device_index, void* stream,
                                          const char* attrs) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  if (root_rank < 0 || root_rank >= e->size()) {
    return SetError(byteps::InvalidArgument(fmt::format("broadcast of '{}': root rank {} is not in [0, {})",
                                                        name ? name : "(null)", root_rank, e->size())));
  }
  // The servers forward the root's bytes: a concatenation in which only the root has a slice.
  const bool root = e->rank() == root_rank;
  return byteps_allgather_async_ex(name, buffer, root ? bytes : 0, buffer, bytes, 0, dtype, priority, device_kind,
                                   device_index, stream, attrs);
}

int byteps_get_pushpull_speed(int64_t* ms_since_epoch, double* mb_per_s) {
  ClearError();
  if (ms_since_epoch == nullptr || mb_per_s == nullptr) {
    return SetError(byteps::InvalidArgument("get_pushpull_speed: NULL output pointer"));
  }
  std::shared_ptr<byteps::worker::Engine> e = CurrentEngine();
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

int byteps_join(void) {
  ClearError();
  auto e = GetEngine();
  if (!e) return -1;
  auto last = e->Join();
  return last.ok() ? last.value() : SetError(last.status());
}

void byteps_release(byteps_handle_t handle) {
  std::shared_ptr<byteps::worker::Engine> e = CurrentEngine();
  if (e) e->Release(handle);
}

}  // extern "C"
