// One of worker 0's decisions during training, learnt by every worker through one internal
// push_pull (worker 0 contributes its values, everyone else zeros: ShareFromWorker0's encoding)
// that is started without waiting for it and waited for only by the uses that need it.
//
// Issue starts the push_pull once (later calls do nothing), asking `mine` for worker 0's values
// only then. Get waits for the sum, at most timeout_s from its call, with no lock held while it
// waits (several threads may wait at once); the first outcome is kept, so every later Get answers
// at once. Errors name the tensor whose use waited and the agreement's own tensor.
// Threading: every method from any thread. The push_pull's buffer lives in this object: it must
// outlive the operation (the engine keeps it until its pipelines are gone).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "worker/tuning/startup_agreement.h"

namespace byteps::worker::tuning {

// What an agreement runs on: an in-place push_pull started now and waited for later.
class AsyncCollective {
 public:
  virtual ~AsyncCollective() = default;
  virtual StatusOr<int64_t> Start(const std::string& name, void* data, size_t bytes, DataType dtype) = 0;
  // Several threads may wait for one handle at once; Release comes after the last Wait.
  virtual Status Wait(int64_t handle, double timeout_s) = 0;
  virtual void Release(int64_t handle) = 0;
};

class Worker0Agreement {
 public:
  // `absent`: the outcome when the sum carries no word from worker 0 because worker 0 had joined
  // (join()) before it issued: the servers counted it as zeros, and its own later Issue gets that
  // same sum (the agreement's key is declared "join=late"). Without it, that is an error.
  Worker0Agreement(std::string name, bool is_rank0, double timeout_s,
                   std::optional<SharedVector> absent = std::nullopt);

  // Starts the push_pull unless it started already; `mine` gives worker 0's values (its [0] is
  // replaced by the version). A failure to start is kept as the agreement's outcome.
  void Issue(AsyncCollective& c, const std::function<SharedVector()>& mine);
  bool issued() const;
  // Worker 0's values, waiting for them if need be (the use of `tensor` needs them).
  StatusOr<SharedVector> Get(AsyncCollective& c, const std::string& tensor);
  // The outcome, if it is known already (never waits).
  std::optional<StatusOr<SharedVector>> peek() const;

 private:
  void Keep(AsyncCollective& c, const Status& st);  // under mu_

  const std::string name_;
  const bool is_rank0_;
  const double timeout_s_;
  const std::optional<SharedVector> absent_;
  mutable std::mutex mu_;
  SharedVector data_{};              // the push_pull's buffer
  std::optional<int64_t> handle_;    // once started
  std::optional<StatusOr<SharedVector>> outcome_;
};

}  // namespace byteps::worker::tuning
