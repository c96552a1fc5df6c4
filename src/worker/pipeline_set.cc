#include "worker/pipeline_set.h"

#include "device/group.h"

#include "worker/stages/average_stage.h"
#include "worker/stages/codec_stages.h"
#include "worker/stages/codec_thread.h"
#include "worker/stages/part_codecs.h"
#include "worker/stages/copy_out_stage.h"
#include "worker/stages/device_copy_stages.h"
#include "worker/stages/device_staging.h"
#include "worker/stages/group_stages.h"
#include "worker/stages/local_broadcast_stage.h"
#include "worker/stages/local_reduce_stage.h"
#include "worker/stages/push_pull_stage.h"

namespace byteps::worker {

PipelineSet::PipelineSet(const PipelineContext& c) : staging_(std::make_unique<stages::DeviceStaging>()) {
  auto add = [&](std::unique_ptr<pipeline::Stage> s) {
    pipeline::Stage* raw = s.get();
    c.loop->AddStage(raw);
    stages_.push_back(std::move(s));
    return raw;
  };
  local_reduce::LocalReducer* all = c.local ? c.local->all() : nullptr;
  const bool root = all == nullptr || all->is_root();
  pipeline::Stage* local_reduce =
      all ? add(std::make_unique<stages::LocalReduceStage>(c.loop, all, root && c.plane != nullptr)) : nullptr;
  pipeline::Stage* network = nullptr;
  if (root && c.plane != nullptr) {
    auto pp = std::make_unique<stages::PushPullStage>(c.loop, c.plane, c.host_rank, c.size,
                                                      all != nullptr ? all->local_size() : 1);
    push_pull_ = pp.get();
    network = add(std::move(pp));
  }
  pipeline::Stage* compress = nullptr;
  pipeline::Stage* decompress = nullptr;
  if (network) {
    part_codecs_ = std::make_unique<stages::PartCodecs>(c.learning_rate, c.size);
    codec_ = std::make_unique<stages::CodecThread>();
    compress = add(std::make_unique<stages::CompressStage>(c.loop, codec_.get(), part_codecs_.get()));
    decompress = add(std::make_unique<stages::DecompressStage>(c.loop, codec_.get(), part_codecs_.get()));
  }
  // `list` with compress and decompress around the network stage (unchanged without it).
  auto compressed = [&](const std::vector<pipeline::Stage*>& list) {
    std::vector<pipeline::Stage*> out;
    for (pipeline::Stage* s : list) {
      if (s == network) out.push_back(compress);
      out.push_back(s);
      if (s == network) out.push_back(decompress);
    }
    return out;
  };
  pipeline::Stage* average =
      root && !network && all ? add(std::make_unique<stages::AverageStage>(c.loop, c.size)) : nullptr;
  pipeline::Stage* local_broadcast = all ? add(std::make_unique<stages::LocalBroadcastStage>(c.loop, all)) : nullptr;
  pipeline::Stage* copy_out = !all && !network ? add(std::make_unique<stages::CopyOutStage>(c.loop)) : nullptr;
  pipeline::Stage* device_in =
      add(std::make_unique<stages::DeviceCopyInStage>(c.loop, staging_.get(), c.op_timeout_s));
  pipeline::Stage* device_out =
      add(std::make_unique<stages::DeviceCopyOutStage>(c.loop, staging_.get(), c.op_timeout_s));
  if (c.local) {
    local_reduce::LocalReducer* sw = c.local->pcie_switch();
    local_reduce::LocalReducer* cross = c.local->cross();
    groups_ = std::make_unique<stages::DeviceGroups>(all, sw, staging_.get(), c.start_timeout_s, c.op_timeout_s);
    pipeline::Stage* group_reduce = add(std::make_unique<stages::GroupReduceStage>(c.loop, groups_.get()));
    pipeline::Stage* group_bcast = add(std::make_unique<stages::GroupBroadcastStage>(c.loop, groups_.get()));
    pipeline::Stage* cross_reduce =
        cross ? add(std::make_unique<stages::LocalReduceStage>(c.loop, cross, false, "cross-switch-reduce")) : nullptr;
    pipeline::Stage* cross_bcast =
        cross ? add(std::make_unique<stages::LocalBroadcastStage>(c.loop, cross, "cross-switch-broadcast")) : nullptr;
    for (int avg = 0; avg < 2; ++avg) {
      std::vector<pipeline::Stage*> list{group_reduce};
      if (sw->is_root()) {
        list.push_back(device_in);
        if (cross_reduce) list.push_back(cross_reduce);
        if (root && network) list.push_back(network);
        if (root && avg && average) list.push_back(average);
        if (cross_bcast) list.push_back(cross_bcast);
        list.push_back(device_out);
      }
      list.push_back(group_bcast);
      compressed_group_pipelines_[avg] = pipeline::Pipeline(compressed(list));
      group_pipelines_[avg] = pipeline::Pipeline(std::move(list));
    }
  }

  for (int in_place = 0; in_place < 2; ++in_place) {
    for (int avg = 0; avg < 2; ++avg) {
      std::vector<pipeline::Stage*> list;
      auto push = [&](pipeline::Stage* s) {
        if (s) list.push_back(s);
      };
      push(local_reduce);
      push(network);
      if (avg) push(average);
      push(local_broadcast);
      if (!in_place) push(copy_out);
      if (in_place) {  // a device tensor's host stages work in place on its staging buffers
        std::vector<pipeline::Stage*> on_device{device_in};
        on_device.insert(on_device.end(), list.begin(), list.end());
        on_device.push_back(device_out);
        compressed_device_pipelines_[avg] = pipeline::Pipeline(compressed(on_device));
        device_pipelines_[avg] = pipeline::Pipeline(std::move(on_device));
      }
      compressed_pipelines_[in_place][avg] = pipeline::Pipeline(compressed(list));
      pipelines_[in_place][avg] = pipeline::Pipeline(std::move(list));
    }
  }
}

PipelineSet::~PipelineSet() {
  codec_.reset();    // its jobs reach the per-key state and the stages
  groups_.reset();   // first: waits for the collectives still queued, whose callbacks reach the stages
  staging_.reset();  // then the copies
}

void PipelineSet::RetireGeneration(uint32_t generation) {
  staging_->Retire(generation);
  if (codec_) codec_->Post([codecs = part_codecs_.get(), generation] { codecs->Retire(generation); });
}

StagingStats PipelineSet::staging_stats() const { return staging_->stats(); }

StatusOr<const pipeline::Pipeline*> PipelineSet::For(const TensorRequest& r) const {
  if (!r.device.on_host()) {
    // Device groups when this kind forms them and the host's processes agree they can (one device
    // each); else the CPU local reduce through pinned staging. The same answer on every local rank.
    bool group = false;
    if (groups_ && device::GroupsAvailable(r.device.kind)) {
      BYTEPS_ASSIGN_OR_RETURN(group, groups_->Ensure(r.device));
    }
    const int avg = r.average ? 1 : 0;
    if (r.compression) return group ? &compressed_group_pipelines_[avg] : &compressed_device_pipelines_[avg];
    return group ? &group_pipelines_[avg] : &device_pipelines_[avg];
  }
  if (r.compression) return &compressed_pipelines_[r.input == r.output ? 1 : 0][r.average ? 1 : 0];
  return &pipelines_[r.input == r.output ? 1 : 0][r.average ? 1 : 0];
}

}  // namespace byteps::worker
