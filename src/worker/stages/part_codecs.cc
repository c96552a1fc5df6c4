#include "worker/stages/part_codecs.h"

#include <fmt/format.h>

#include <cstring>

#include "common/half.h"
#include "worker/average.h"
#include "worker/planning/key_assigner.h"

namespace byteps::worker::stages {
namespace {

// dst[i] = element i of `in` (n elements of dtype) as float32.
void ToFloat32(const void* in, DataType dtype, size_t n, float* dst) {
  switch (dtype) {
    case DataType::kFloat32: std::memcpy(dst, in, n * sizeof(float)); return;
    case DataType::kFloat64: {
      const double* d = static_cast<const double*>(in);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(d[i]);
      return;
    }
    case DataType::kFloat16: {
      const uint16_t* h = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(h[i]);
      return;
    }
    case DataType::kBFloat16: {
      const uint16_t* b = static_cast<const uint16_t*>(in);
      for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(b[i]);
      return;
    }
    default: return;  // MakeCodec refused every other dtype before
  }
}

}  // namespace

StatusOr<PartCodecs::Part*> PartCodecs::PartFor(const pipeline::PartitionTask& t) {
  const TensorRequest& r = t.op->request;
  const size_t n = t.len / DataTypeSize(r.dtype);
  Part& p = parts_[t.key];
  if (p.codec && p.params == *r.compression && p.dtype == r.dtype && p.n == n) return &p;
  p = Part{};
  const compress::Params& params = *r.compression;
  BYTEPS_ASSIGN_OR_RETURN(p.codec, compress::MakeCodec(params, r.dtype, r.name));
  if (params.error_feedback || params.nesterov) {
    BYTEPS_ASSIGN_OR_RETURN(p.codec32, compress::MakeCodec(params, DataType::kFloat32, r.name));
    p.scratch.resize(n);
  }
  if (params.error_feedback) p.ef.emplace(n);
  if (params.nesterov) p.momentum.emplace(n, params.mu);
  p.params = params;
  p.dtype = r.dtype;
  p.n = n;
  p.generation = t.op->plan != nullptr ? planning::GenerationOf(t.op->plan->declared_key) : 0;
  p.send.resize(p.codec->MaxCompressedBytes(n));
  p.reply.resize(p.codec->MaxCompressedBytes(n));
  return &p;
}

Status PartCodecs::Compress(pipeline::PartitionTask* t) {
  BYTEPS_ASSIGN_OR_RETURN(Part * p, PartFor(*t));
  StatusOr<size_t> written = size_t{0};
  if (p->codec32) {
    // Never the user's input: the momentum rewrites the gradient it is given.
    ToFloat32(t->src, p->dtype, p->n, p->scratch.data());
    if (p->momentum) p->momentum->Apply(p->scratch.data(), p->n);
    if (p->ef) {
      const double lr = learning_rate_ != nullptr ? learning_rate_->load(std::memory_order_relaxed) : 0;
      if (lr > 0) p->ef->SetLearningRate(lr);
      written = p->ef->Compress(*p->codec32, p->scratch.data(), p->n, t->key, t->round, p->send.data(),
                                p->send.size());
    } else {
      written = p->codec32->Compress(p->scratch.data(), p->n, t->key, t->round, p->send.data(), p->send.size());
    }
  } else {
    written = p->codec->Compress(t->src, p->n, t->key, t->round, p->send.data(), p->send.size());
  }
  if (!written.ok()) return written.status().WithContext(fmt::format("compressing partition key {}", t->key));
  t->src = p->send.data();
  t->push_len = *written;
  t->push_offset = 0;
  t->wire.compressed = true;
  t->wire.reply = p->reply.data();
  t->wire.reply_cap = p->reply.size();
  t->wire.reply_len = 0;
  p->in_flight = true;
  return Status::Ok();
}

Status PartCodecs::Decompress(pipeline::PartitionTask* t) {
  auto it = parts_.find(t->key);
  if (it == parts_.end() || !t->wire.compressed || t->wire.reply != it->second.reply.data()) {
    return Internal(fmt::format("decompress of tensor '{}': partition key {} has no compressed reply",
                                t->op->request.name, t->key));
  }
  Part& p = it->second;
  p.in_flight = false;
  Status st = p.codec->Decompress(t->wire.reply, t->wire.reply_len, p.n, t->dst);
  if (st.ok() && t->op->request.average) DivideInPlace(t->dst, p.n, p.dtype, size_);
  if (st.ok()) t->src = t->dst;
  if (retired_.count(p.generation) != 0) parts_.erase(it);  // its last round
  return st;
}

void PartCodecs::Retire(uint32_t generation) {
  retired_.insert(generation);
  std::erase_if(parts_, [generation](const auto& kv) {
    return kv.second.generation == generation && !kv.second.in_flight;
  });
}

const compress::ErrorFeedback* PartCodecs::error_feedback(uint64_t key) const {
  auto it = parts_.find(key);
  return it != parts_.end() && it->second.ef ? &*it->second.ef : nullptr;
}

const compress::NesterovMomentum* PartCodecs::momentum(uint64_t key) const {
  auto it = parts_.find(key);
  return it != parts_.end() && it->second.momentum ? &*it->second.momentum : nullptr;
}

}  // namespace byteps::worker::stages
