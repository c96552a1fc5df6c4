#include "device/group.h"

#include <atomic>

#include <fmt/format.h>

#include "device/group_backends.h"

namespace byteps::device {

namespace {
std::atomic<bool> g_fake_groups{false};
}  // namespace

void EnableFakeGroups(bool on) { g_fake_groups = on; }

Status GroupsStatus(Kind kind) {
  switch (kind) {
    case Kind::kFake:
      return g_fake_groups.load() ? Status::Ok()
                                  : Precondition("fake groups exist only inside a test that enabled them");
    case Kind::kCuda:
      return NcclStatus();
    case Kind::kCpu:
      break;
  }
  return Precondition("cpu devices form no groups (processes of a host reduce through shared memory)");
}

bool GroupsAvailable(Kind kind) {
  switch (kind) {
    case Kind::kFake:
      return g_fake_groups.load();
    case Kind::kCuda:
      return NcclAvailable();
    case Kind::kCpu:
      break;
  }
  return false;
}

bool GroupsBuilt(Kind kind) {
  switch (kind) {
    case Kind::kFake:
      return true;
    case Kind::kCuda:
      return NcclBuilt();
    case Kind::kCpu:
      break;
  }
  return false;
}

StatusOr<std::string> NewGroupId(Kind kind) {
  switch (kind) {
    case Kind::kFake:
      return NewFakeGroupId();
    case Kind::kCuda:
      return NewNcclGroupId();
    case Kind::kCpu:
      break;
  }
  return InvalidArgument(fmt::format("{} devices form no group (host memory is reduced on the CPU)", KindName(kind)));
}

StatusOr<std::unique_ptr<Group>> JoinGroup(std::shared_ptr<Device> device, const std::string& id, int rank, int size,
                                           double timeout_s) {
  if (size < 1 || rank < 0 || rank >= size) {
    return InvalidArgument(fmt::format("group on {}: rank {} of {} is out of range", device->name(), rank, size));
  }
  switch (device->kind()) {
    case Kind::kFake:
      return JoinFakeGroup(std::move(device), id, rank, size, timeout_s);
    case Kind::kCuda:
      return JoinNcclGroup(std::move(device), id, rank, size, timeout_s);
    case Kind::kCpu:
      break;
  }
  return InvalidArgument(fmt::format("{} devices form no group (host memory is reduced on the CPU)", device->name()));
}

}  // namespace byteps::device
