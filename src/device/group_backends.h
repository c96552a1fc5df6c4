// The backends behind NewGroupId / JoinGroup (group.cc). Internal to the device layer.
#pragma once

#include <memory>
#include <string>

#include "device/group.h"

namespace byteps::device {

StatusOr<std::string> NewFakeGroupId();
StatusOr<std::unique_ptr<Group>> JoinFakeGroup(std::shared_ptr<Device> device, const std::string& id, int rank,
                                               int size, double timeout_s);
// NCCL, loaded at run time (libnccl.so.2): a build with CUDA runs without it until a GPU group is
// formed, and then says what is missing.
StatusOr<std::string> NewNcclGroupId();
bool NcclBuilt();  // nccl.h was found at build time
bool NcclAvailable();
Status NcclStatus();  // why NCCL groups cannot form here (OK when they can)
StatusOr<std::unique_ptr<Group>> JoinNcclGroup(std::shared_ptr<Device> device, const std::string& id, int rank,
                                               int size, double timeout_s);

}  // namespace byteps::device
