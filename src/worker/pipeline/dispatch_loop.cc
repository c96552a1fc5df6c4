#include "worker/pipeline/dispatch_loop.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>

#include "common/owner_query.h"

namespace byteps::worker::pipeline {

DispatchLoop::DispatchLoop(const Dispatcher::Options& options, Dispatcher::Finished on_finished)
    : on_finished_(std::move(on_finished)),
      core_(options, [this](PartitionTask* t, const Status& st) { Finished(t, st); }) {
  core_.SetObserver(&stage_metrics_);
  observers_.Add(&stage_metrics_);
}

DispatchLoop::~DispatchLoop() { Stop(); }

void DispatchLoop::AddObserver(Observer* observer) {
  observers_.Add(observer);
  core_.SetObserver(&observers_);
}

void DispatchLoop::Start() {
  std::lock_guard<std::mutex> lock(mu_);  // thread_id_ is set before the thread reads anything
  thread_ = std::thread([this] { Loop(); });
  thread_id_ = thread_.get_id();
}

void DispatchLoop::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void DispatchLoop::Submit(std::shared_ptr<Operation> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_.push_back(std::move(op));
  }
  cv_.notify_one();
}

void DispatchLoop::Complete(PartitionTask* task, const Status& status) {
  if (std::this_thread::get_id() == thread_id_) {
    core_.Complete(task, status, Dispatcher::Clock::now());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    completed_.emplace_back(task, status);
  }
  cv_.notify_one();
}

void DispatchLoop::FailAll(const Status& failure) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    failures_.push_back(failure);
  }
  cv_.notify_one();
}

void DispatchLoop::SetCredit(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    credit_ = bytes;
  }
  cv_.notify_one();
}

StatusOr<InFlight> DispatchLoop::Snapshot(double timeout_s) {
  return owner_query::AskOwner<InFlight>(
      timeout_s,
      [this](owner_query::Reply<InFlight> slot) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (stop_ || !thread_.joinable()) return Unavailable("the dispatcher thread is not running");
          snapshots_.push_back(std::move(slot));
        }
        cv_.notify_one();
        return Status::Ok();
      },
      [timeout_s] {
        return Unavailable(fmt::format("the dispatcher thread did not answer within {:g} s (it is stuck in a stage)",
                                       timeout_s));
      });
}

InFlight DispatchLoop::TakeSnapshot() const {
  InFlight f;
  f.credit_in_flight = core_.credit_in_flight();
  f.credit_limit = core_.credit_limit();
  const auto now = std::chrono::steady_clock::now();
  std::vector<const Operation*> ops;
  for (const auto& [op, entry] : live_) ops.push_back(op);
  std::sort(ops.begin(), ops.end(), [](const Operation* a, const Operation* b) {
    return a->submitted_at < b->submitted_at || (a->submitted_at == b->submitted_at && a->id < b->id);
  });
  f.operations = ops.size();
  for (const Operation* op : ops) {
    for (const PartitionTask& t : op->parts) {
      if (t.where == PartitionTask::Where::kFinished) continue;
      TaskState s;
      s.tensor = op->request.name;
      s.part = t.part;
      s.parts = op->parts.size();
      s.key = t.key;
      s.round = t.round;
      s.server = t.server;
      s.bytes = t.len;
      s.stage = t.stage < op->pipeline->size() ? op->pipeline->at(t.stage)->name() : "";
      s.where = t.where;
      s.age_s = std::chrono::duration<double>(now - op->submitted_at).count();
      f.tasks.push_back(std::move(s));
    }
  }
  return f;
}

void DispatchLoop::Finished(PartitionTask* task, const Status& status) {
  on_finished_(task, status);
  --tasks_live_;
  auto it = live_.find(task->op);
  if (it != live_.end() && --it->second.first == 0) {
    core_.observer()->OperationFinished(*task->op);
    live_.erase(it);  // the last reference may go here
  }
}

void DispatchLoop::Loop() {
  pthread_setname_np(pthread_self(), "bps-dispatch");
  std::vector<std::shared_ptr<Operation>> submitted;
  std::vector<std::pair<PartitionTask*, Status>> completed;
  std::vector<Status> failures;
  std::optional<size_t> credit;
  std::vector<owner_query::Reply<InFlight>> snapshots;
  std::optional<Dispatcher::Clock::time_point> wake;
  for (bool last = false; !last;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stop_ || !submitted_.empty() || !completed_.empty() || !failures_.empty() || credit_.has_value() ||
               !snapshots_.empty();
      };
      if (wake) cv_.wait_until(lock, *wake, ready);
      else cv_.wait(lock, ready);
      last = stop_;
      submitted.swap(submitted_);
      completed.swap(completed_);
      failures.swap(failures_);
      credit = std::exchange(credit_, std::nullopt);
      snapshots.swap(snapshots_);
    }
    if (credit) core_.SetCredit(*credit);
    const auto now = Dispatcher::Clock::now();
    // Completions first: they free credit and rounds for what was submitted after them.
    for (auto& [task, st] : completed) core_.Complete(task, st, now);
    for (auto& op : submitted) {
      Operation* raw = op.get();
      tasks_live_ += raw->parts.size();
      live_.emplace(raw, std::make_pair(raw->parts.size(), std::move(op)));
      core_.Submit(raw);
    }
    for (const Status& f : failures) core_.FailAll(f);
    submitted.clear();
    completed.clear();
    failures.clear();
    wake = core_.Run(Dispatcher::Clock::now());
    tasks_gauge_->Set(static_cast<double>(tasks_live_));
    credit_gauge_->Set(static_cast<double>(core_.credit_in_flight()));
    credit_limit_gauge_->Set(static_cast<double>(core_.credit_limit()));
    for (auto& slot : snapshots) slot->set_value(TakeSnapshot());
    snapshots.clear();
  }
  // Stopped: whoever still asks gets an empty answer rather than a broken promise.
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& slot : snapshots_) slot->set_value(InFlight{});
  snapshots_.clear();
}

}  // namespace byteps::worker::pipeline
