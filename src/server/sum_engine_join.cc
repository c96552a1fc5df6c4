// SumEngine's part of Horovod's join() (sum_engine.h): a worker that ran out of data has joined;
// the others' rounds go on without it, its share counted as zeros, until every worker joined.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.h"
#include "server/sum_engine.h"

namespace byteps::server {

bool SumEngine::HasAttr(const KeyState& ks, const char* key, const char* value) {
  for (const auto& [k, v] : protocol::ParseAttrs(ks.init.attrs))
    if (k == key && v == value) return true;
  return false;
}

int SumEngine::Needed(const KeyState& ks) const {
  if (ks.init.op == protocol::kOpJoin || !board_->any()) return ks.num_members;
  int n = 0;
  for (int w = 0; w < num_workers_; ++w)
    if (IsMember(ks, w) && !board_->joined(w)) ++n;
  return n;
}

std::vector<int> SumEngine::AbsentJoined(const KeyState& ks) const {
  std::vector<int> absent;
  if (ks.init.op == protocol::kOpJoin || !board_->any()) return absent;
  const uint32_t round = ks.completed_round + 1;
  for (int w = 0; w < num_workers_; ++w)
    if (IsMember(ks, w) && board_->joined(w) && ks.last_round[w] < round) absent.push_back(w);
  return absent;
}

Status SumEngine::JoinedRoundError(const KeyState& ks, uint64_t key, const std::vector<int>& absent,
                                   const std::vector<int>& shares) {
  if (absent.empty() && shares.empty()) return Status::Ok();
  const bool concat = ks.init.op == protocol::kOpConcat;
  if (!concat && !ks.join_fails) return Status::Ok();
  std::string who;
  if (!absent.empty()) who = fmt::format("worker{} {}", absent.size() > 1 ? "s" : "", fmt::join(absent, ", "));
  if (!shares.empty()) {
    who += fmt::format("{}a process on the host of worker{} {}", who.empty() ? "" : " and ", shares.size() > 1 ? "s" : "",
                       fmt::join(shares, ", "));
  }
  return Mismatch(fmt::format(
      "tensor '{}' (key {}, a {}) ran while {} had joined (join()): {} needs every worker's data, so it fails while "
      "any worker has joined, as in Horovod. Only allreduces go on with joined workers counted as zeros; for sparse "
      "gradients use DistributedOptimizer(sparse_as_dense=True)",
      ks.init.name, key, ks.init.op, who, concat ? "an allgather, broadcast or alltoall" : "a reducescatter"));
}

void SumEngine::PushJoin(KeyState& ks, uint64_t key, PushTask& t) {
  ks.accum = std::move(t.data);  // the last push's rank is the result
  ks.waiters.push_back(Waiter{t.conn, t.request_id, t.worker, t.generation});
  if (++ks.pushed < Needed(ks)) {
    BYTEPS_LOG(Debug, "worker {} joined ({} of {} so far)", t.worker, ks.pushed, Needed(ks));
    board_->Join(t.worker);  // every shard now completes rounds without it
    return;
  }
  // Every worker has joined: nobody is waited for, and nobody is joined any more. The workers go
  // on only after every server answered its join round, so every board is clear by then.
  board_->Reset();
  CompleteRound(ks, key);
}

void SumEngine::HandleJoin() {
  std::vector<uint64_t> ready;
  for (auto& [key, ks] : keys_) {
    if (!ks.initialized || !ks.error.ok() || ks.pushed == 0 || ks.init.op == protocol::kOpJoin) continue;
    if (ks.pushed >= Needed(ks)) ready.push_back(key);
  }
  for (uint64_t key : ready) CompleteRound(keys_.at(key), key);
}

}  // namespace byteps::server
