#include "worker/tuning/worker0_agreement.h"

#include <fmt/format.h>

#include <utility>

namespace byteps::worker::tuning {

Worker0Agreement::Worker0Agreement(std::string name, bool is_rank0, double timeout_s,
                                   std::optional<SharedVector> absent)
    : name_(std::move(name)), is_rank0_(is_rank0), timeout_s_(timeout_s), absent_(std::move(absent)) {}

void Worker0Agreement::Issue(AsyncCollective& c, const std::function<SharedVector()>& mine) {
  std::lock_guard<std::mutex> lock(mu_);
  if (handle_ || outcome_) return;
  data_ = SharedVector{};
  if (is_rank0_) data_ = mine();
  data_[0] = is_rank0_ ? kSettingsVersion : 0;
  // Start never waits for the network (it may ask the name service for the agreement's key).
  auto h = c.Start(name_, data_.data(), sizeof(data_), DataType::kInt64);
  if (!h.ok()) {
    outcome_ = h.status().WithContext(fmt::format("starting the agreement '{}'", name_));
    return;
  }
  handle_ = *h;
}

bool Worker0Agreement::issued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return handle_.has_value() || outcome_.has_value();
}

std::optional<StatusOr<SharedVector>> Worker0Agreement::peek() const {
  std::lock_guard<std::mutex> lock(mu_);
  return outcome_;
}

void Worker0Agreement::Keep(AsyncCollective& c, const Status& st) {
  if (outcome_) return;
  if (!st.ok()) {
    outcome_ = st;
  } else if (data_[0] == 0 && absent_) {
    outcome_ = *absent_;  // worker 0 had joined before deciding: everyone takes the default
  } else {
    Status checked = CheckSharedFromWorker0(name_, data_);
    outcome_ = checked.ok() ? StatusOr<SharedVector>(data_) : StatusOr<SharedVector>(checked);
  }
  c.Release(*handle_);
}

StatusOr<SharedVector> Worker0Agreement::Get(AsyncCollective& c, const std::string& tensor) {
  std::optional<int64_t> h;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!outcome_ && !handle_) {
      return Internal(fmt::format("the use of tensor '{}' needs the agreement '{}', which this worker never started",
                                  tensor, name_));
    }
    if (!outcome_) h = *handle_;
  }
  Status st;
  if (h) st = c.Wait(*h, timeout_s_);  // no lock: other threads wait alongside
  std::lock_guard<std::mutex> lock(mu_);
  // Another waiter may have kept the outcome first (and released the handle this one waited on).
  if (h) Keep(c, st);
  if (!outcome_->ok()) {
    return outcome_->status().WithContext(fmt::format("tensor '{}' waits for the online tuning's agreement '{}'",
                                                      tensor, name_));
  }
  return *outcome_;
}

}  // namespace byteps::worker::tuning
