#include "worker/stages/codec_thread.h"

#include <pthread.h>

#include <utility>
#include <vector>

namespace byteps::worker::stages {

CodecThread::CodecThread() : thread_([this] { Run(); }) {}

CodecThread::~CodecThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CodecThread::Post(pipeline::PartitionTask* task, pipeline::StageSink* sink, Work work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{task, sink, std::move(work), nullptr});
  }
  cv_.notify_one();
}

void CodecThread::Post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(Job{nullptr, nullptr, nullptr, std::move(fn)});
  }
  cv_.notify_one();
}

void CodecThread::FailAll(const Status& failure) {
  std::deque<Job> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::deque<Job> kept;
    for (Job& j : jobs_) (j.task != nullptr ? failed : kept).push_back(std::move(j));
    jobs_.swap(kept);
  }
  for (Job& j : failed) j.sink->Complete(j.task, failure);
}

bool CodecThread::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.empty() && !running_job_;
}

void CodecThread::Run() {
  pthread_setname_np(pthread_self(), "bps-codec");
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    if (job.task == nullptr) {
      job.upkeep();
    } else {
      Status st = job.work(job.task);
      job.sink->Complete(job.task, st);
    }
    lock.lock();
    running_job_ = false;
  }
}

}  // namespace byteps::worker::stages
