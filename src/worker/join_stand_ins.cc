#include "worker/join_stand_ins.h"

#include <chrono>

namespace byteps::worker {

void JoinStandIns::Post(const Part& part) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    posted_.push_back(part);
  }
  cv_.notify_one();
}

std::vector<JoinStandIns::Part> JoinStandIns::Take(double wait_s) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return !posted_.empty(); });
  std::vector<Part> out(posted_.begin(), posted_.end());
  posted_.clear();
  return out;
}

TensorRequest JoinStandIns::Request(const Part& part, const void* zeros, void* scratch) {
  TensorRequest r;
  r.name = part.name;
  r.input = zeros;
  r.output = scratch;
  r.bytes = part.tensor_bytes;
  r.dtype = part.dtype;
  r.average = part.average;
  r.attrs = part.attrs;
  r.stand_in = true;
  if (part.adasum) {
    r.op = ReduceOp::kAdasum;
  } else {
    switch (part.kind) {
      case ReduceKind::kSum: r.op = ReduceOp::kSum; break;
      case ReduceKind::kMin: r.op = ReduceOp::kMin; break;
      case ReduceKind::kMax: r.op = ReduceOp::kMax; break;
      case ReduceKind::kProduct: r.op = ReduceOp::kProduct; break;
    }
  }
  return r;
}

}  // namespace byteps::worker
