#include "worker/stand_ins.h"

#include <algorithm>
#include <chrono>

#include "common/logging.h"

namespace byteps::worker {

StandInRunner::StandInRunner(Calls calls) : calls_(std::move(calls)) {
  thread_ = std::thread([this] { Loop(); });
}

StandInRunner::~StandInRunner() { Stop(0); }

void StandInRunner::Post(const Part& part) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    posted_.push_back(part);
  }
  cv_.notify_one();
}

size_t StandInRunner::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

bool StandInRunner::Reap(std::vector<std::unique_ptr<Running>>* running) {
  std::erase_if(*running, [&](const std::unique_ptr<Running>& run) {
    StatusOr<bool> done = calls_.poll(run->h);
    if (done.ok() && !*done) return false;
    calls_.release(run->h);  // its outcome is the asking processes' (the local broadcast told them)
    return true;
  });
  return running->empty();
}

void StandInRunner::Loop() {
  std::vector<std::unique_ptr<Running>> running;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Running ones are polled every few milliseconds; otherwise only a post wakes the thread.
    if (running.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !posted_.empty(); });
    } else {
      cv_.wait_for(lock, std::chrono::milliseconds(5), [&] { return stopping_ || !posted_.empty(); });
    }
    if (stopping_) break;
    std::deque<Part> posted;
    posted.swap(posted_);
    lock.unlock();
    for (const Part& p : posted) {
      auto run = std::make_unique<Running>();
      run->zeros.assign(p.tensor_bytes, 0);
      run->scratch.resize(p.tensor_bytes);
      StatusOr<HandleId> h = calls_.enqueue(Request(p, run->zeros.data(), run->scratch.data()));
      if (!h.ok()) {
        calls_.fail(p, h.status().WithContext("the local root's stand-in"));
        continue;
      }
      run->h = *h;
      running.push_back(std::move(run));
    }
    Reap(&running);
    lock.lock();
    started_ += posted.size();
  }
  left_ = std::move(running);
}

void StandInRunner::Stop(double wait_s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (const auto& run : left_) {  // blocks on each handle in turn, within the one deadline
    const double left_s = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    (void)calls_.wait(run->h, std::max(0.0, left_s));
  }
  Reap(&left_);
  if (!left_.empty()) {
    // Their buffers may still be read or written by the pipeline: kept until the process ends.
    BYTEPS_LOG(Warning, "{} stand-in operation(s) of the local root still running at shutdown", left_.size());
    new std::vector<std::unique_ptr<Running>>(std::move(left_));  // deliberately never freed
  }
}

TensorRequest StandInRunner::Request(const Part& part, const void* zeros, void* scratch) {
  TensorRequest r;
  r.name = part.name;
  r.input = zeros;
  r.output = scratch;
  r.bytes = part.tensor_bytes;
  r.dtype = part.dtype;
  r.average = part.average;
  r.attrs = part.attrs;
  r.stand_in = true;
  if (part.adasum) {
    r.op = ReduceOp::kAdasum;
  } else {
    switch (part.kind) {
      case ReduceKind::kSum: r.op = ReduceOp::kSum; break;
      case ReduceKind::kMin: r.op = ReduceOp::kMin; break;
      case ReduceKind::kMax: r.op = ReduceOp::kMax; break;
      case ReduceKind::kProduct: r.op = ReduceOp::kProduct; break;
    }
  }
  return r;
}

}  // namespace byteps::worker
