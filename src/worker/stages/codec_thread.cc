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
    jobs_.push_back(Job{task, sink, std::move(work)});
  }
  cv_.notify_one();
}

void CodecThread::FailAll(const Status& failure) {
  std::deque<Job> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed.swap(jobs_);
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
    Status st = job.work(job.task);
    job.sink->Complete(job.task, st);
    lock.lock();
    running_job_ = false;
  }
}

}  // namespace byteps::worker::stages
