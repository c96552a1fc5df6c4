// The worker's codec thread ("bps-codec"): the compress and decompress stages hand it their work
// (compressing a partition, decoding a reply), so codecs never run on the dispatcher thread or on a
// transport I/O thread. One thread per process: the jobs of one partition key run in order, and
// the per-key codec state (part_codecs.h) is touched by this thread only.
//
// Threading: Post and FailAll on any thread. A job's completion (sink->Complete) runs on the codec
// thread, or on FailAll's caller for jobs that had not started. The destructor stops the thread
// and joins it; jobs still queued then are dropped (the engine drains its work before that).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.h"
#include "worker/pipeline/stage.h"

namespace byteps::worker::stages {

class CodecThread {
 public:
  // The work of one partition; its Status completes the task in `sink`.
  using Work = std::function<Status(pipeline::PartitionTask*)>;

  CodecThread();
  ~CodecThread();
  CodecThread(const CodecThread&) = delete;
  CodecThread& operator=(const CodecThread&) = delete;

  void Post(pipeline::PartitionTask* task, pipeline::StageSink* sink, Work work);
  // Runs `fn` on the codec thread after the jobs queued before it (the per-key state's upkeep).
  // FailAll keeps it queued.
  void Post(std::function<void()> fn);
  // Completes every job not yet started with `failure`.
  void FailAll(const Status& failure);
  // No job queued or running.
  bool idle() const;

 private:
  struct Job {
    pipeline::PartitionTask* task;  // null: an upkeep job (`upkeep`)
    pipeline::StageSink* sink;
    Work work;
    std::function<void()> upkeep;
  };
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;  // guarded by mu_
  bool running_job_ = false;  // guarded by mu_
  bool stop_ = false;     // guarded by mu_
  std::thread thread_;    // last: starts after the rest is ready
};

}  // namespace byteps::worker::stages
