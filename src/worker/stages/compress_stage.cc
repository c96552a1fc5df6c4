#include "worker/stages/compress_stage.h"

namespace byteps::worker::stages {

void CompressStage::Start(pipeline::PartitionTask* task) {
  codec_->Post(task, sink(), [codecs = codecs_](pipeline::PartitionTask* t) { return codecs->Compress(t); });
}

}  // namespace byteps::worker::stages
