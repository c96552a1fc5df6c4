#include "worker/stages/decompress_stage.h"

namespace byteps::worker::stages {

void DecompressStage::Start(pipeline::PartitionTask* task) {
  codec_->Post(task, sink(), [codecs = codecs_](pipeline::PartitionTask* t) { return codecs->Decompress(t); });
}

}  // namespace byteps::worker::stages
