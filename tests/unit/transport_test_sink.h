// A Handler that records frame sizes and closes, for the backends' own tests.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace byteps::transport {

class Sink : public Handler {
 public:
  StatusOr<RecvBuffer> OnHeader(Connection&, const protocol::Header&) override { return RecvBuffer{}; }
  void OnFrame(Connection&, const protocol::Header& h, RecvBuffer b) override {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.push_back(b.size);
    (void)h;
  }
  void OnClose(Connection&, const Status& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    closes_.push_back(reason);
    cv_.notify_all();
  }
  bool WaitClose(std::chrono::seconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, d, [&] { return !closes_.empty(); });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<size_t> frames_;
  std::vector<Status> closes_;
};

}  // namespace byteps::transport
