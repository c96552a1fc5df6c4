// The stages this worker process needs and the pipelines built from them. Which stages exist
// depends on the process's place on its host (alone, local root, local non-root) and on whether
// the job is distributed; which pipeline a call takes depends on the tensor's device and the
// call's options (in place or not, average or not). Stages with nothing to do are left out:
//
//   alone,     distributed:       push-pull
//   alone,     not distributed:   (nothing) | copy-out when out of place
//   local root, distributed:      local-reduce -> push-pull -> local-broadcast
//   local root, not distributed:  local-reduce [-> average] -> local-broadcast
//   local non-root:               local-reduce -> local-broadcast
//
// A device tensor (TensorDevice not on the host) takes copy-in, then the in-place host list of
// its process, then copy-out: the host stages work in place on a pinned buffer the partition round
// leases from the staging pool (stages/staging_pool.h).
// On a host with several processes whose devices form groups (NCCL; the fake device), one device
// per process, it takes the group stages instead of the shared-memory ones (group_stages.h; the
// host's processes decide it together at the first device tensor, so all take the same ones; two
// processes on one device keep the shared-memory ones):
//   local root:     group-reduce -> copy-in -> push-pull | [average] -> copy-out -> group-broadcast
//   local non-root: group-reduce -> group-broadcast
// With several PCIe switches (local_reduce/local_circles.h) the groups are per switch, and the
// switches' roots sum on the CPU in between:
//   switch root:     group-reduce -> copy-in -> cross-reduce -> [push-pull | average on the local
//                    root] -> cross-broadcast -> copy-out -> group-broadcast
//   switch non-root: group-reduce -> group-broadcast
//
// A compressed tensor (TensorRequest::compression) takes the same pipeline with compress just
// before push-pull and decompress just after it (codec_stages.h; the codec
// work runs on the process's codec thread, codec_thread.h), where push-pull is in it:
//   alone,      distributed:      compress -> push-pull -> decompress
//   local root, distributed:      local-reduce -> compress -> push-pull -> decompress -> local-broadcast
//   group root:                   ... copy-in [-> cross-reduce] -> compress -> push-pull -> decompress ...
// Elsewhere (no push-pull in the process) it takes the uncompressed pipeline.
//
// Threading: immutable after construction (the staging it owns is thread-safe).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "worker/local_reduce/local_circles.h"
#include "worker/pipeline/dispatch_loop.h"
#include "worker/pipeline/pipeline.h"
#include "worker/server_links/data_plane.h"
#include "worker/staging_stats.h"
#include "worker/tensor_request.h"

namespace byteps::worker {

namespace stages {
class PushPullStage;
class DeviceStaging;
class DeviceGroups;
class CodecThread;
class PartCodecs;
}

struct PipelineContext {
  pipeline::DispatchLoop* loop = nullptr;       // every stage completes through it and is registered with it
  local_reduce::LocalCircles* local = nullptr;  // set when BYTEPS_LOCAL_SIZE > 1
  server_links::DataPlane* plane = nullptr;     // set when this process talks to the servers
  int host_rank = 0;                            // this host's worker rank (frames' sender)
  int size = 1;                                 // worker processes in the job (the divisor of `average`)
  double start_timeout_s = 60;                  // how long forming a host's device group may take
  double op_timeout_s = 300;                    // BYTEPS_TIMEOUT: how long a queued collective may take
  // The learning rate error feedback scales its residual by (the engine's; outlives the set; null: none).
  const std::atomic<double>* learning_rate = nullptr;
};

class PipelineSet {
 public:
  explicit PipelineSet(const PipelineContext& context);
  ~PipelineSet();

  // The pipeline of `request`. A host's first device tensor may block (bounded by the start
  // timeout) while its processes decide on device groups and form them; an error names why.
  StatusOr<const pipeline::Pipeline*> For(const TensorRequest& request) const;
  // The network stage (the server links' client), or nullptr when this process has none.
  stages::PushPullStage* push_pull() const { return push_pull_; }
  // The online tuner left key generation `generation` behind for good (planning/key_assigner.h):
  // what the pipelines hold per key of it goes once its last rounds are done (the device tensors'
  // pinned staging, the compressed tensors' codec state). Any thread.
  void RetireGeneration(uint32_t generation);
  // The device tensors' pinned staging memory (staging_stats.h). Any thread.
  StagingStats staging_stats() const;

 private:
  std::unique_ptr<stages::DeviceStaging> staging_;  // before the stages: they use it until they go
  std::vector<std::unique_ptr<pipeline::Stage>> stages_;
  // The codec thread and the per-key codec state of the compress and decompress stages (only with
  // push-pull); the thread stops first in the destructor.
  std::unique_ptr<stages::PartCodecs> part_codecs_;
  std::unique_ptr<stages::CodecThread> codec_;
  stages::PushPullStage* push_pull_ = nullptr;
  pipeline::Pipeline pipelines_[2][2];  // host tensors: [in place][average]
  std::unique_ptr<stages::DeviceGroups> groups_;  // BYTEPS_LOCAL_SIZE > 1 (before the stages, after staging)
  pipeline::Pipeline device_pipelines_[2];  // device tensors: [average]
  pipeline::Pipeline group_pipelines_[2];   // device tensors over a device group: [average]
  // The same with compress / decompress around push-pull (copies of the above without push-pull).
  pipeline::Pipeline compressed_pipelines_[2][2];
  pipeline::Pipeline compressed_device_pipelines_[2];
  pipeline::Pipeline compressed_group_pipelines_[2];
};

}  // namespace byteps::worker
