// DeviceGroups' forming (group_stages.h): the host-wide verdict whether device groups form, the
// group of this process's circle, and its teardown. kLocalGroup frames (docs/wire-format.md):
// `request_id` says what the frame is, `arg` = device kind, `key` = device index, `sender` = the
// sender's place in its circle.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/logging.h"
#include "worker/stages/group_stages.h"

namespace byteps::worker::stages {

using protocol::Header;
using protocol::Opcode;

namespace {

constexpr uint64_t kGroupId = 0;     // circle root -> non-root: the group's id (payload)
constexpr uint64_t kMyDevice = 1;    // non-root -> the host's local root: my device (payload: its hardware id)
constexpr uint64_t kGroups = 2;      // the host's local root -> non-root: the devices form groups
constexpr uint64_t kNoGroups = 3;    // ... they do not (payload: why)
constexpr double kDrainS = 30;       // at teardown, at most this long for the collectives still queued

Header GroupFrame(uint64_t what, const TensorDevice& d, int place) {
  Header h;
  h.opcode = Opcode::kLocalGroup;
  h.request_id = what;
  h.arg = static_cast<uint32_t>(d.kind);
  h.key = static_cast<uint64_t>(d.index);
  h.sender = static_cast<uint32_t>(place);
  return h;
}

std::string NameOf(device::Kind kind, int index) { return fmt::format("{}:{}", device::KindName(kind), index); }

}  // namespace

DeviceGroups::DeviceGroups(local_reduce::LocalReducer* all, local_reduce::LocalReducer* circle, DeviceStaging* staging,
                           double start_timeout_s, double op_timeout_s)
    : all_(all), local_(circle), staging_(staging), start_timeout_s_(start_timeout_s), op_timeout_s_(op_timeout_s) {
  auto listener = [this](const Header& h, const std::string& p) { OnFrame(h, p); };
  local_->SetGroupListener(listener);
  if (all_ != local_) all_->SetGroupListener(listener);
}

DeviceGroups::~DeviceGroups() {
  local_->SetGroupListener(nullptr);
  if (all_ != local_) all_->SetGroupListener(nullptr);
  bool idle_or_aborted = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (group_ && !group_->aborted()) idle_or_aborted = false;
  }
  if (!idle_or_aborted && device_ && stream_) {
    // Never ncclCommDestroy with a collective in flight: drained, or else aborted.
    Status st = device_->Drain(stream_, std::min(op_timeout_s_, kDrainS));
    if (!st.ok()) {
      BYTEPS_LOG(Warning, "{}: collectives still queued at shutdown (the group is aborted): {}", device_->name(),
                 st.message());
      std::lock_guard<std::mutex> lock(mu_);
      group_->Abort();
    }
  }
  completions_.reset();  // no completion runs after this
  group_.reset();
  if (device_ && stream_) device_->DestroyStream(stream_);
}

Status DeviceGroups::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool DeviceGroups::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return group_ && group_->aborted();
}

std::string DeviceGroups::Members() const {
  return fmt::format("local ranks {} to {}", local_->RankOf(0), local_->RankOf(local_->local_size() - 1));
}

StatusOr<bool> DeviceGroups::Ensure(const TensorDevice& d) {
  std::lock_guard<std::mutex> form(form_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    if (decided_) {
      if (!*decided_ || (device_->kind() == d.kind && device_->index() == d.index)) return *decided_;
      return InvalidArgument(fmt::format("this process's device group is on {}, and a tensor is on {}; each "
                                         "process of a host drives one device",
                                         device_->name(), NameOf(d.kind, d.index)));
    }
  }
  StatusOr<DeviceStaging::Slot*> slot = staging_->For(d.kind, d.index);
  StatusOr<bool> verdict = slot.ok() ? DecideForHost(d, *(*slot)->device) : StatusOr<bool>(slot.status());
  if (!verdict.ok()) {
    verdict = verdict.status().WithContext(fmt::format("deciding on device groups with the other processes of this "
                                                       "host (BYTEPS_LOCAL_RANK={}, BYTEPS_LOCAL_SIZE={})",
                                                       all_->local_rank(), all_->local_size()));
  }
  Status formed = verdict.ok() && *verdict ? Form(d, *slot) : Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (!verdict.ok() || !formed.ok()) {
    if (failure_.ok()) failure_ = verdict.ok() ? formed : verdict.status();
    return failure_;
  }
  decided_ = *verdict;
  return *decided_;
}

StatusOr<bool> DeviceGroups::DecideForHost(const TensorDevice& d, const device::Device& dev) {
  const int size = all_->local_size();
  const auto timeout = std::chrono::duration<double>(start_timeout_s_);
  if (!all_->is_root()) {
    BYTEPS_RETURN_IF_ERROR(all_->SendToRoot(GroupFrame(kMyDevice, d, all_->local_rank()), dev.hardware_id()));
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return verdict_.has_value() || !failure_.ok(); })) {
      return DeadlineExceeded(fmt::format("{}: the local root (local rank {}) said nothing within {:.0f} s "
                                          "(BYTEPS_START_TIMEOUT; does the local root use device tensors too?)",
                                          dev.name(), size - 1, start_timeout_s_));
    }
    if (!failure_.ok()) return failure_;
    return *verdict_;
  }
  std::vector<Report> reports;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const bool all_in = cv_.wait_for(lock, timeout, [&] {
      return static_cast<int>(reports_.size()) == size - 1 || !failure_.ok();
    });
    if (!failure_.ok()) return failure_;
    if (!all_in) {
      std::string missing;
      for (int r = 0; r < size - 1; ++r)
        if (!reports_.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return DeadlineExceeded(fmt::format("{}: local rank(s) {} did not say which device they use within {:.0f} s "
                                          "(BYTEPS_START_TIMEOUT; does every process of the host use device "
                                          "tensors?)",
                                          dev.name(), missing, start_timeout_s_));
    }
    for (auto& [rank, r] : reports_) reports.push_back(r);
  }
  reports.push_back({d.kind, d.index, dev.hardware_id()});
  // One device per process, and all of one kind: else NCCL refuses the group (a GPU twice).
  std::string why;
  for (int i = 0; i < size && why.empty(); ++i) {
    for (int j = i + 1; j < size && why.empty(); ++j) {
      const Report& a = reports[i];
      const Report& b = reports[j];
      if (a.kind != b.kind) {
        why = fmt::format("local ranks {} and {} use devices of different kinds ({} and {})", i, j,
                          NameOf(a.kind, a.index), NameOf(b.kind, b.index));
      } else if (a.hardware_id == b.hardware_id) {
        why = fmt::format("local ranks {} and {} use the same device ({}{})", i, j, NameOf(a.kind, a.index),
                          a.hardware_id == NameOf(a.kind, a.index) ? "" : ", " + a.hardware_id);
      }
    }
  }
  if (!why.empty()) {
    why += ": they form no device group (one needs a device per process: NCCL refuses a GPU twice), so this "
           "host's device tensors reduce on the CPU through pinned staging (copy-in, shared-memory local reduce, "
           "copy-out)";
  }
  BYTEPS_RETURN_IF_ERROR(all_->SendToNonRoots(GroupFrame(why.empty() ? kGroups : kNoGroups, d, size - 1), why));
  if (!why.empty()) BYTEPS_LOG(Warning, "{}", why);
  std::lock_guard<std::mutex> lock(mu_);
  verdict_ = why.empty();
  return *verdict_;
}

Status DeviceGroups::Form(const TensorDevice& d, DeviceStaging::Slot* slot) {
  std::string id;
  if (is_root()) {
    BYTEPS_ASSIGN_OR_RETURN(id, device::NewGroupId(d.kind));
    BYTEPS_RETURN_IF_ERROR(local_->SendToNonRoots(GroupFrame(kGroupId, d, local_->local_rank()), id));
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(start_timeout_s_),
                      [&] { return !id_.empty() || !failure_.ok(); })) {
      return DeadlineExceeded(fmt::format("{}: the root of its device group ({}) sent no group within {:.0f} s "
                                          "(BYTEPS_START_TIMEOUT)",
                                          slot->device->name(), Members(), start_timeout_s_));
    }
    if (!failure_.ok()) return failure_;
    id = id_;
  }
  const int rank = local_->local_rank(), size = local_->local_size();
  auto joined = device::JoinGroup(slot->device, id, rank, size, start_timeout_s_);
  if (!joined.ok()) {
    return joined.status().WithContext(fmt::format("the device group of BYTEPS_LOCAL_RANK={} (its members: {})",
                                                   local_->RankOf(rank), Members()));
  }
  std::unique_ptr<device::Group> g = std::move(joined).value();
  BYTEPS_ASSIGN_OR_RETURN(device::StreamHandle s, slot->device->CreateStream());
  std::lock_guard<std::mutex> lock(mu_);
  device_ = slot->device;
  stream_ = s;
  group_ = std::move(g);
  return Status::Ok();
}

void DeviceGroups::OnFormationFrame(const Header& h, const std::string& payload) {
  switch (h.request_id) {
    case kGroupId:
      id_ = payload;
      break;
    case kMyDevice:
      reports_[static_cast<int>(h.sender)] = {static_cast<device::Kind>(h.arg), static_cast<int>(h.key), payload};
      break;
    case kGroups:
    case kNoGroups:
      verdict_ = h.request_id == kGroups;
      break;
    default:
      BYTEPS_LOG(Warning, "ignored a LocalGroup frame of unknown kind {}", h.request_id);
      return;
  }
  cv_.notify_all();
}

}  // namespace byteps::worker::stages
