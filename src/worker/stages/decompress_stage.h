// Stage "decompress": just after the push-pull stage, for a compressed tensor: the codec thread
// decodes the server's compressed reply (task->wire.reply) into the partition's destination, as
// the tensor's dtype, and divides it by the job's worker count when the request averages (the
// push-pull stage does not average a compressed partition). Then src = dst, as after an
// uncompressed push-pull.
//
// Threading: as the compress stage (compress_stage.h).
#pragma once

#include "worker/pipeline/stage.h"
#include "worker/stages/codec_thread.h"
#include "worker/stages/part_codecs.h"

namespace byteps::worker::stages {

class DecompressStage : public pipeline::Stage {
 public:
  DecompressStage(pipeline::StageSink* sink, CodecThread* codec, PartCodecs* codecs)
      : pipeline::Stage("decompress", sink), codec_(codec), codecs_(codecs) {}

  void Start(pipeline::PartitionTask* task) override;
  void FailAll(const Status& failure) override { codec_->FailAll(failure); }

 private:
  CodecThread* codec_;
  PartCodecs* codecs_;  // touched on the codec thread only
};

}  // namespace byteps::worker::stages
