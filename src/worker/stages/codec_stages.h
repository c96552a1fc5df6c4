// The stages "compress" and "decompress", for a tensor declared with a compressor
// (TensorRequest::compression). Both hand the partition to the codec thread, which runs one
// PartCodecs method with the key's state (part_codecs.h) and completes the task:
// - compress, just before the push-pull stage: compresses the partition (error feedback, momentum)
//   into the key's send buffer and points the task at it (src, push_len, wire.compressed, the reply
//   buffer). The push-pull stage sends the payload with kFlagCompressed.
// - decompress, just after the push-pull stage: decodes the server's compressed reply
//   (task->wire.reply) into the partition's destination, as the tensor's dtype, and divides it by
//   the job's worker count when the request averages (the push-pull stage does not average a
//   compressed partition). Then src = dst, as after an uncompressed push-pull.
//
// Threading: Start on the dispatcher thread; the work and the completion on the codec thread;
// FailAll on any thread. `codec` and `codecs` outlive the stage.
#pragma once

#include "worker/pipeline/stage.h"
#include "worker/stages/codec_thread.h"
#include "worker/stages/part_codecs.h"

namespace byteps::worker::stages {

class CodecStage : public pipeline::Stage {
 public:
  using Work = Status (PartCodecs::*)(pipeline::PartitionTask*);

  CodecStage(const char* name, Work work, pipeline::StageSink* sink, CodecThread* codec, PartCodecs* codecs)
      : pipeline::Stage(name, sink), work_(work), codec_(codec), codecs_(codecs) {}

  void Start(pipeline::PartitionTask* task) override {
    codec_->Post(task, sink(), [codecs = codecs_, work = work_](pipeline::PartitionTask* t) { return (codecs->*work)(t); });
  }
  void FailAll(const Status& failure) override { codec_->FailAll(failure); }

 private:
  Work work_;
  CodecThread* codec_;
  PartCodecs* codecs_;  // touched on the codec thread only
};

class CompressStage : public CodecStage {
 public:
  CompressStage(pipeline::StageSink* sink, CodecThread* codec, PartCodecs* codecs)
      : CodecStage("compress", &PartCodecs::Compress, sink, codec, codecs) {}
};

class DecompressStage : public CodecStage {
 public:
  DecompressStage(pipeline::StageSink* sink, CodecThread* codec, PartCodecs* codecs)
      : CodecStage("decompress", &PartCodecs::Decompress, sink, codec, codecs) {}
};

}  // namespace byteps::worker::stages
