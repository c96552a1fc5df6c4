// The server's side of a compressed key (KeyInit attributes that enable compression,
// compress::ParamsFromAttrs): the workers push codec payloads of the partition; the shard decodes
// each onto a float32 sum of the partition's n elements and, once the round is complete,
// compresses that sum once (through error feedback when ef=vanilla; never momentum) into a fresh
// buffer that every reply of the round carries.
//
// The object is the key's whole compression state: the open round's sum and the error feedback's
// residual. Nothing else of the shard goes into it, so it can be carried, rebuilt or checkpointed
// on its own.
// Threading: one thread at a time (the key's shard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compress/codec.h"
#include "compress/error_feedback.h"
#include "compress/params.h"
#include "protocol/control.h"

namespace byteps::server {

class CompressedKey {
 public:
  // The state for `key` from its first declaration: null when its attributes configure no
  // compression. Errors (naming the tensor and the key): bad compression attributes, an op other
  // than "sum", a dtype the codecs cannot take, a reducescatter (attribute "scatter").
  static StatusOr<std::unique_ptr<CompressedKey>> FromInit(const protocol::KeyInit& init, uint64_t key);

  const compress::Params& params() const { return params_; }
  size_t elements() const { return sum_.size(); }
  // The largest payload a worker's push (and the server's reply) may have.
  size_t max_payload() const { return max_payload_; }

  // Decodes a worker's payload onto the round's sum (the round's first Add starts from zeros).
  // A payload that does not decode (a ProtocolError naming the tensor) leaves the sum as it was.
  Status Add(const uint8_t* payload, size_t len);
  // The round's result: the sum compressed (through the error feedback when on) into a fresh
  // buffer, and its length. The next Add starts a new round. `round`: the key's round (the random
  // stream of randomk and dithering).
  StatusOr<std::pair<std::shared_ptr<uint8_t>, size_t>> Finish(uint64_t key, uint64_t round);
  // Drops the open round's sum (its pushes were failed); the residual stays.
  void Discard() { open_ = false; }

 private:
  CompressedKey(const compress::Params& params, std::unique_ptr<compress::Codec> codec, size_t n);

  compress::Params params_;
  std::unique_ptr<compress::Codec> codec_;      // float32
  std::optional<compress::ErrorFeedback> ef_;   // ef=vanilla
  std::vector<float> sum_;                      // the open round's sum
  size_t max_payload_ = 0;
  bool open_ = false;                           // sum_ holds this round's pushes (else: stale)
};

}  // namespace byteps::server
