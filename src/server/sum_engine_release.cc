// SumEngine's end of a key: the workers' releases (kRelease) and freeing what no worker uses any
// more (sum_engine.h).
#include <fmt/format.h>

#include <algorithm>

#include "common/logging.h"
#include "server/sum_engine.h"

namespace byteps::server {

SumEngine::KeyState& SumEngine::StateOf(uint64_t key) {
  auto [it, added] = keys_.try_emplace(key);
  if (added) {
    it->second.last_round.assign(num_workers_, 0);
    it->second.released.assign(num_workers_, -1);
    it->second.skipped.assign(num_workers_, 0);
    held_.fetch_add(1, std::memory_order_relaxed);
  }
  return it->second;
}

Status SumEngine::PastRelease(const KeyState& ks, uint64_t key, int worker, uint32_t round, int releaser) {
  const std::string name = ks.initialized ? fmt::format("tensor '{}'", ks.init.name) : "a tensor";
  return InvalidArgument(fmt::format(
      "{} (key {}): worker {} moved the tensor to a new size, dtype or op (or a new partition size) after round {}; "
      "worker {} pushed round {}, which can never complete. Every worker must use a name at the same size the "
      "same number of times before it changes",
      name, key, releaser, ks.released[releaser], worker, round));
}

void SumEngine::HandleRelease(const ReleaseTask& t) {
  if (t.worker < 0 || t.worker >= num_workers_) return;
  KeyState& ks = StateOf(t.key);
  if (ks.released[t.worker] >= 0) return;  // a repeat
  // In the key's numbering: the worker counts only the rounds it pushed, not those it sat out joined.
  ks.released[t.worker] = t.last_round + ks.skipped[t.worker];
  // A round in progress past the release can never complete: its waiters fail now.
  const uint32_t round = ks.completed_round + 1;
  if (ks.error.ok() && !ks.waiters.empty() && round > ks.released[t.worker]) {
    for (const Waiter& w : ks.waiters) ReplyError(w.conn, t.key, w.request_id, PastRelease(ks, t.key, w.worker, round, t.worker));
    BYTEPS_LOG(Error, "{}", PastRelease(ks, t.key, ks.waiters.front().worker, round, t.worker).message());
    ks.waiters.clear();
    ks.accum.reset();
    ks.parts.clear();
    if (ks.compressed) ks.compressed->Discard();
    ks.pushed = 0;
  }
  MaybeFree(t.key);
}

bool SumEngine::MaybeFree(uint64_t key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return false;
  const KeyState& ks = it->second;
  if (!ks.waiters.empty() || ks.pushed > 0) return false;
  bool any_release = false;
  for (int w = 0; w < num_workers_; ++w) {
    const bool left = std::find(left_.begin(), left_.end(), w) != left_.end();
    if (ks.released[w] >= 0) {
      any_release = true;
      // Its rounds are not all complete yet (a push on the way, or a failed key: it stays failed).
      if (ks.error.ok() && ks.completed_round < ks.released[w]) return false;
    } else if (!left && IsMember(ks, w)) {  // a worker outside the key's process set never uses it
      return false;
    }
  }
  if (!any_release) return false;  // every worker left: the job is ending, nothing to tidy
  BYTEPS_LOG(Debug, "freed {} key {}: every worker released it", ks.initialized ? "tensor '" + ks.init.name + "'" : "a",
             key);
  keys_.erase(it);
  held_.fetch_sub(1, std::memory_order_relaxed);
  freed_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace byteps::server
