#include "worker/pipeline_set.h"

#include "device/group.h"

#include "worker/stages/average_stage.h"
#include "worker/stages/copy_out_stage.h"
#include "worker/stages/device_copy_stages.h"
#include "worker/stages/device_staging.h"
#include "worker/stages/group_stages.h"
#include "worker/stages/local_broadcast_stage.h"
#include "worker/stages/local_reduce_stage.h"
#include "worker/stages/push_pull_stage.h"

namespace byteps::worker {

PipelineSet::PipelineSet(const PipelineContext& c) : staging_(std::make_unique<stages::DeviceStaging>()) {
  auto add = [&](std::unique_ptr<Stage> s) {
    Stage* raw = s.get();
    c.loop->AddStage(raw);
    stages_.push_back(std::move(s));
    return raw;
  };
  const bool root = c.local == nullptr || c.local->is_root();
  Stage* local_reduce = c.local ? add(std::make_unique<stages::LocalReduceStage>(c.loop, c.local)) : nullptr;
  Stage* network = nullptr;
  if (root && c.plane != nullptr) {
    auto pp = std::make_unique<stages::PushPullStage>(c.loop, c.plane, c.host_rank, c.size);
    push_pull_ = pp.get();
    network = add(std::move(pp));
  }
  Stage* average = root && !network && c.local ? add(std::make_unique<stages::AverageStage>(c.loop, c.size)) : nullptr;
  Stage* local_broadcast = c.local ? add(std::make_unique<stages::LocalBroadcastStage>(c.loop, c.local)) : nullptr;
  Stage* copy_out = !c.local && !network ? add(std::make_unique<stages::CopyOutStage>(c.loop)) : nullptr;
  Stage* device_in = add(std::make_unique<stages::DeviceCopyInStage>(c.loop, staging_.get()));
  Stage* device_out = add(std::make_unique<stages::DeviceCopyOutStage>(c.loop, staging_.get()));
  if (c.local) {
    groups_ = std::make_unique<stages::DeviceGroups>(c.local, staging_.get(), c.start_timeout_s);
    Stage* group_reduce = add(std::make_unique<stages::GroupReduceStage>(c.loop, groups_.get()));
    Stage* group_bcast = add(std::make_unique<stages::GroupBroadcastStage>(c.loop, groups_.get()));
    for (int avg = 0; avg < 2; ++avg) {
      std::vector<Stage*> list{group_reduce};
      if (root) {
        list.push_back(device_in);
        if (network) list.push_back(network);
        if (avg && average) list.push_back(average);
        list.push_back(device_out);
      }
      list.push_back(group_bcast);
      group_pipelines_[avg] = Pipeline(std::move(list));
    }
  }

  for (int in_place = 0; in_place < 2; ++in_place) {
    for (int avg = 0; avg < 2; ++avg) {
      std::vector<Stage*> list;
      auto push = [&](Stage* s) {
        if (s) list.push_back(s);
      };
      push(local_reduce);
      push(network);
      if (avg) push(average);
      push(local_broadcast);
      if (!in_place) push(copy_out);
      if (in_place) {  // a device tensor's host stages work in place on its staging buffers
        std::vector<Stage*> on_device{device_in};
        on_device.insert(on_device.end(), list.begin(), list.end());
        on_device.push_back(device_out);
        device_pipelines_[avg] = Pipeline(std::move(on_device));
      }
      pipelines_[in_place][avg] = Pipeline(std::move(list));
    }
  }
}

PipelineSet::~PipelineSet() {
  groups_.reset();   // first: waits for the collectives still queued, whose callbacks reach the stages
  staging_.reset();  // then the copies
}

const Pipeline* PipelineSet::For(const TensorRequest& r) const {
  if (!r.device.on_host()) {
    const bool group = groups_ && device::GroupsAvailable(r.device.kind);
    return group ? &group_pipelines_[r.average ? 1 : 0] : &device_pipelines_[r.average ? 1 : 0];
  }
  return &pipelines_[r.input == r.output ? 1 : 0][r.average ? 1 : 0];
}

}  // namespace byteps::worker
