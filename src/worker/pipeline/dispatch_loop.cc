#include "worker/pipeline/dispatch_loop.h"

#include <pthread.h>

namespace byteps::worker::pipeline {

DispatchLoop::DispatchLoop(const Dispatcher::Options& options, Dispatcher::Finished on_finished)
    : on_finished_(std::move(on_finished)),
      core_(options, [this](PartitionTask* t, const Status& st) { Finished(t, st); }) {}

DispatchLoop::~DispatchLoop() { Stop(); }

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

void DispatchLoop::Finished(PartitionTask* task, const Status& status) {
  on_finished_(task, status);
  auto it = live_.find(task->op);
  if (it != live_.end() && --it->second.first == 0) {
    if (observer_) observer_->OperationFinished(*task->op);
    live_.erase(it);  // the last reference may go here
  }
}

void DispatchLoop::Loop() {
  pthread_setname_np(pthread_self(), "bps-dispatch");
  std::vector<std::shared_ptr<Operation>> submitted;
  std::vector<std::pair<PartitionTask*, Status>> completed;
  std::vector<Status> failures;
  std::optional<size_t> credit;
  std::optional<Dispatcher::Clock::time_point> wake;
  for (bool last = false; !last;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [&] {
        return stop_ || !submitted_.empty() || !completed_.empty() || !failures_.empty() || credit_.has_value();
      };
      if (wake) cv_.wait_until(lock, *wake, ready);
      else cv_.wait(lock, ready);
      last = stop_;
      submitted.swap(submitted_);
      completed.swap(completed_);
      failures.swap(failures_);
      credit = std::exchange(credit_, std::nullopt);
    }
    if (credit) core_.SetCredit(*credit);
    const auto now = Dispatcher::Clock::now();
    // Completions first: they free credit and rounds for what was submitted after them.
    for (auto& [task, st] : completed) core_.Complete(task, st, now);
    for (auto& op : submitted) {
      Operation* raw = op.get();
      live_.emplace(raw, std::make_pair(raw->parts.size(), std::move(op)));
      core_.Submit(raw);
    }
    for (const Status& f : failures) core_.FailAll(f);
    submitted.clear();
    completed.clear();
    failures.clear();
    wake = core_.Run(Dispatcher::Clock::now());
  }
}

}  // namespace byteps::worker::pipeline
