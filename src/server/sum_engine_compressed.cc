// SumEngine's compressed keys (sum_engine.h, compressed_key.h): declarations whose attributes
// configure compression. Each push is a codec payload decoded onto the round's float32 sum; the
// completed round's sum is compressed once and every reply of the round carries that payload
// (flag kFlagCompressed). Shard thread only.
#include <fmt/format.h>

#include "server/sum_engine.h"

namespace byteps::server {

Status SumEngine::SetCompression(KeyState& ks, uint64_t key) {
  auto state = CompressedKey::FromInit(ks.init, key);
  if (!state.ok()) return state.status();
  ks.compressed = std::move(state.value());
  return Status();
}

Status SumEngine::CheckCompressedPush(const KeyState& ks, const PushTask& t) {
  const uint32_t round = t.round - ks.skipped[t.worker];  // the worker's own numbering
  if (!ks.compressed) {
    return ProtocolError(fmt::format("tensor '{}' (key {}): worker {} pushed round {} compressed, but the key was "
                                     "declared without compression (its attributes '{}'); the workers must "
                                     "compress a tensor alike",
                                     ks.init.name, t.key, t.worker, round, ks.init.attrs));
  }
  if (!t.compressed) {
    return ProtocolError(fmt::format("tensor '{}' (key {}): worker {} pushed round {} uncompressed, but the key "
                                     "was declared compressed ({}); the workers must compress a tensor alike",
                                     ks.init.name, t.key, t.worker, round, ks.compressed->params().ToString()));
  }
  if (t.offset != 0 || t.bytes > ks.compressed->max_payload()) {
    return ProtocolError(fmt::format("tensor '{}' (key {}): worker {} pushed a compressed payload of {} bytes at "
                                     "offset {} for round {}; its codec ({}) writes at most {} bytes, at offset 0, "
                                     "for {} elements",
                                     ks.init.name, t.key, t.worker, t.bytes, t.offset, round,
                                     ks.compressed->params().ToString(),
                                     ks.compressed->max_payload(), ks.compressed->elements()));
  }
  return Status();
}

Status SumEngine::AddCompressed(KeyState& ks, const PushTask& t) {
  Status st = ks.compressed->Add(t.data.get(), t.bytes);
  if (st.ok()) return st;
  return st.WithContext(fmt::format("push of tensor '{}' key {} round {} from worker {}", ks.init.name, t.key,
                                    t.round - ks.skipped[t.worker], t.worker));
}

Status SumEngine::FinishCompressed(KeyState& ks, uint64_t key) {
  auto out = ks.compressed->Finish(key, ks.completed_round);
  if (!out.ok()) {
    return out.status().WithContext(fmt::format("tensor '{}' (key {}) round {}: compressing the round's sum",
                                                ks.init.name, key, ks.completed_round));
  }
  ks.result = std::move(out->first);
  ks.result_len = out->second;
  return Status();
}

}  // namespace byteps::server
