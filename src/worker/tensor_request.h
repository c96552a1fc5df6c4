// What the framework asks of the worker: one push_pull of one tensor.
// Threading: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/dtype.h"
#include "common/reducer.h"
#include "compress/params.h"
#include "device/device.h"
#include "protocol/control.h"

namespace byteps::worker {

// Where a tensor's bytes live: host memory (kCpu), or a device's memory, written by work the
// framework queued on `stream` (the framework's current stream; null: the device's default stream).
// A device tensor's pipeline starts with copy-in and ends with copy-out (PipelineSet).
struct TensorDevice {
  device::Kind kind = device::Kind::kCpu;
  int index = 0;
  device::StreamHandle stream = nullptr;
  bool on_host() const { return kind == device::Kind::kCpu; }
};

// What the servers make of the workers' tensors (the keys' policy, protocol::KeyInit::op).
enum class ReduceOp : uint8_t {
  kSum = 0,      // the element-wise sum (push_pull)
  kConcat = 1,   // each worker's slice placed at its offset (allgather; broadcast: only the root's)
  kMin = 2,      // the element-wise minimum (bool: and)
  kMax = 3,      // the element-wise maximum (bool: or)
  kProduct = 4,  // the element-wise product (bool: and)
  kAdasum = 5,   // Adasum of the whole tensors in rank order (common/adasum.h; float16/32/64, one
                 // partition per tensor; several processes per host: the local tree first)
  kJoin = 6,     // Engine::Join's key only (protocol::kOpJoin): never a user's reduction
};

// The element-wise reduction of an op other than kConcat and kAdasum.
inline ReduceKind ReduceKindOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin: return ReduceKind::kMin;
    case ReduceOp::kMax: return ReduceKind::kMax;
    case ReduceOp::kProduct: return ReduceKind::kProduct;
    case ReduceOp::kSum:
    case ReduceOp::kConcat:
    case ReduceOp::kAdasum:
    case ReduceOp::kJoin: break;
  }
  return ReduceKind::kSum;
}

// How errors name an operation: "sum", "min", "max", "product", "concatenation", "adasum", "join".
inline const char* ReduceOpName(ReduceOp op) {
  if (op == ReduceOp::kAdasum) return "adasum";
  if (op == ReduceOp::kJoin) return "join";
  return op == ReduceOp::kConcat ? "concatenation" : ReduceKindName(ReduceKindOf(op));
}

// The servers' policy for op (protocol::KeyInit::op).
inline const char* KeyOpOf(ReduceOp op) {
  if (op == ReduceOp::kConcat) return protocol::kOpConcat;
  if (op == ReduceOp::kAdasum) return protocol::kOpAdasum;
  if (op == ReduceOp::kJoin) return protocol::kOpJoin;
  return protocol::OpOfReduceKind(ReduceKindOf(op));
}

// The core's own tensors (the tuning's, join's) are named under this prefix: they are not the
// job's iterations (no online tuning, no speed telemetry, always partition generation 0).
inline constexpr const char* kInternalPrefix = "__byteps.";

struct TensorRequest {
  std::string name;  // the core name ("byteps.<user name>" from the plugins)
  const void* input = nullptr;
  void* output = nullptr;  // may equal input (in place); must not partially overlap it
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  bool average = false;  // divide the sum by size() (kSum only)
  int priority = 0;      // higher goes first
  TensorDevice device{};
  // kConcat: `output` receives all `bytes`; this worker contributes `slice_bytes` from `input`,
  // which belong at `slice_offset` of the output (the slices of all workers tile it).
  ReduceOp op = ReduceOp::kSum;
  size_t slice_offset = 0;
  size_t slice_bytes = 0;
  // Declaration attributes the servers compare across workers ("shape=2x3;root=1", the plugin's
  // choice; protocol::KeyInit::attrs): a difference fails every worker with kMismatch.
  std::string attrs{};
  // The compression parameters (Engine::Enqueue sets them from the compression keys of `attrs`,
  // or the name's declared ones, and rewrites `attrs` to their canonical form); null: sent as is.
  std::shared_ptr<const compress::Params> compression{};
  // Run by a host's local root on behalf of its other processes after it joined (join_stand_ins.h):
  // not one of this process's own iterations (no online tuning, no speed telemetry).
  bool stand_in = false;
};

using HandleId = int64_t;

}  // namespace byteps::worker
