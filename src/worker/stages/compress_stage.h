// Stage "compress": just before the push-pull stage, for a tensor declared with a compressor
// (TensorRequest::compression): the codec thread compresses the partition with its key's state
// (part_codecs.h: error feedback, momentum) into the key's send buffer, and points the task at it
// (src, push_len, wire.compressed, the reply buffer). The push-pull stage then sends the payload
// with kFlagCompressed; the decompress stage decodes the server's reply.
//
// Threading: Start and CreditFor on the dispatcher thread; the work and the completion on the codec
// thread; FailAll on any thread. `codec` and `codecs` outlive the stage.
#pragma once

#include "worker/pipeline/stage.h"
#include "worker/stages/codec_thread.h"
#include "worker/stages/part_codecs.h"

namespace byteps::worker::stages {

class CompressStage : public pipeline::Stage {
 public:
  CompressStage(pipeline::StageSink* sink, CodecThread* codec, PartCodecs* codecs)
      : pipeline::Stage("compress", sink), codec_(codec), codecs_(codecs) {}

  void Start(pipeline::PartitionTask* task) override;
  void FailAll(const Status& failure) override { codec_->FailAll(failure); }

 private:
  CodecThread* codec_;
  PartCodecs* codecs_;  // touched on the codec thread only
};

}  // namespace byteps::worker::stages
