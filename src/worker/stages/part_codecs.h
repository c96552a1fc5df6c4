// What a compressed tensor keeps per partition key on the worker, between rounds and from the
// compress stage to the decompress stage: the codec of its parameters, the error feedback's
// residual (ef=vanilla) and the Nesterov momentum (momentum=nesterov), the buffer the compressed
// push is sent from and the one the server's compressed reply is received into (both kept until the
// round's reply is decoded).
//
// Compress: the partition's len bytes at task->src (never modified; a float32 copy is taken when
// the momentum or a non-float32 dtype with error feedback needs one) -> the send buffer; sets
// src / push_len / wire. Decompress: wire.reply -> task->dst (divided by `size` when the request
// averages); src = dst.
//
// Retire(g): key generation g (planning/key_assigner.h) gets no new rounds; each of its keys' state
// goes now, or once the round it has in flight is decoded (a round that failed keeps its state).
//
// Threading: one thread at a time (the codec thread). The learning rate is read from an atomic the
// engine writes (byteps_set_learning_rate), before each round's error feedback.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "compress/codec.h"
#include "compress/error_feedback.h"
#include "compress/momentum.h"
#include "worker/pipeline/partition_task.h"

namespace byteps::worker::stages {

class PartCodecs {
 public:
  // learning_rate: the engine's (> 0 once set; 0: none, the error feedback's ratio stays 1);
  // null: none. size: the divisor of an averaging request.
  PartCodecs(const std::atomic<double>* learning_rate, int size) : learning_rate_(learning_rate), size_(size) {}

  Status Compress(pipeline::PartitionTask* task);
  Status Decompress(pipeline::PartitionTask* task);

  void Retire(uint32_t generation);

  // The keys with state (tests).
  size_t size() const { return parts_.size(); }
  // The state of partition key `key` (tests); null when it has none.
  const compress::ErrorFeedback* error_feedback(uint64_t key) const;
  const compress::NesterovMomentum* momentum(uint64_t key) const;

 private:
  struct Part {
    compress::Params params;
    DataType dtype = DataType::kFloat32;
    size_t n = 0;
    uint32_t generation = 0;  // of the key (its plan's declared key)
    bool in_flight = false;   // compressed, its reply not decoded yet
    std::unique_ptr<compress::Codec> codec;    // the tensor's dtype: compresses without state, decodes
    std::unique_ptr<compress::Codec> codec32;  // float32: compresses after momentum / error feedback
    std::optional<compress::ErrorFeedback> ef;
    std::optional<compress::NesterovMomentum> momentum;
    std::vector<float> scratch;  // the float32 working copy
    std::vector<uint8_t> send;
    std::vector<uint8_t> reply;
  };
  // The key's state for the task's parameters, dtype and size (made anew when they changed).
  StatusOr<Part*> PartFor(const pipeline::PartitionTask& task);

  const std::atomic<double>* learning_rate_;
  const int size_;
  std::unordered_map<uint64_t, Part> parts_;
  std::unordered_set<uint32_t> retired_;  // generations whose keys' state goes after their last round
};

}  // namespace byteps::worker::stages
