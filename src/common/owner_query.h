// Asking the thread that owns some state for a value computed there, with a deadline: the caller
// hands a reply slot to the owner (its inbox), the owner fills it between two passes, the caller
// waits at most timeout_s. A caller that gave up leaves the slot behind; the owner's late answer
// lands in it and goes with it (the slot is shared).
// Used by the stall reports: DispatchLoop::Snapshot (worker), SumEngine::OpenRounds (server).
// Threading: AskOwner runs on the caller's thread; `post` is called there once.
#pragma once

#include <chrono>
#include <future>
#include <memory>
#include <utility>

#include "common/status.h"

namespace byteps::owner_query {

// Where the owner puts its answer (set_value once, on its own thread).
template <typename T>
using Reply = std::shared_ptr<std::promise<T>>;

// post(Reply<T>) -> Status: hands the slot to the owner, or says why it cannot (the owner is not
// running; that error is returned as is). timed_out() -> Status: the error when the owner does not
// answer within timeout_s (it names the owner).
template <typename T, typename Post, typename TimedOut>
StatusOr<T> AskOwner(double timeout_s, Post&& post, TimedOut&& timed_out) {
  auto reply = std::make_shared<std::promise<T>>();
  std::future<T> answer = reply->get_future();
  if (Status st = post(std::move(reply)); !st.ok()) return st;
  if (answer.wait_for(std::chrono::duration<double>(timeout_s)) != std::future_status::ready) return timed_out();
  return answer.get();
}

}  // namespace byteps::owner_query
