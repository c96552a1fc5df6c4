#include "worker/engine_collectives.h"

#include <fmt/format.h>

#include <utility>

#include "protocol/control.h"

namespace byteps::worker {
namespace {

// An in-place request of `bytes` at `data` with declaration attributes `attrs`.
TensorRequest InPlace(const std::string& name, void* data, size_t bytes, DataType dtype, std::string attrs) {
  TensorRequest r;
  r.name = name;
  r.input = data;
  r.output = data;
  r.bytes = bytes;
  r.dtype = dtype;
  r.attrs = std::move(attrs);
  return r;
}

}  // namespace

Status EngineCollective::PushPull(const std::string& name, void* data, size_t bytes, DataType dtype) {
  return Run(name, data, bytes, dtype, "");
}

Status EngineCollective::PushPullOnServer(const std::string& name, void* data, size_t bytes, DataType dtype,
                                          int server) {
  return Run(name, data, bytes, dtype, fmt::format("{}={}", protocol::kAttrServer, server));
}

StatusOr<tuning::Collective::Placement> EngineCollective::ReportServerProbe(const std::vector<double>& seconds,
                                                                            size_t bytes) {
  return report_ ? report_(seconds, bytes) : Collective::ReportServerProbe(seconds, bytes);
}

void EngineCollective::SetPartitionBytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(*plan_mu_);
  assigner_->set_partition_bytes(bytes);
}

Status EngineCollective::Run(const std::string& name, void* data, size_t bytes, DataType dtype, std::string attrs) {
  BYTEPS_ASSIGN_OR_RETURN(HandleId h, engine_->Enqueue(InPlace(name, data, bytes, dtype, std::move(attrs))));
  Status st = engine_->Wait(h);
  engine_->Release(h);
  return st;
}

StatusOr<int64_t> EngineAsyncCollective::Start(const std::string& name, void* data, size_t bytes, DataType dtype) {
  // A worker that joined before it issued gets the round the others completed without it.
  return engine_->Enqueue(
      InPlace(name, data, bytes, dtype, fmt::format("{}={}", protocol::kAttrJoin, protocol::kJoinLate)));
}

}  // namespace byteps::worker
