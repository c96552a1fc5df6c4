// LocalReducer's part of join() with several processes per host (see local_reducer.h): which
// non-roots a round still waits for, the round numbers of the rounds a joined process sat out,
// and the stand-ins the root runs once it joined itself.
#include <algorithm>

#include "protocol/key_layout.h"
#include "worker/local_reduce/local_reducer.h"

namespace byteps::worker::local_reduce {

std::optional<std::vector<int>> LocalReducer::AbsentJoinedLocked(const Round& r) const {
  std::vector<int> absent;
  for (const auto& [rank, peer] : peers_) {
    if (std::find(r.from.begin(), r.from.end(), rank) != r.from.end()) continue;
    if (r.part.join || !joined_.count(rank)) return std::nullopt;  // a join round waits for everyone
    absent.push_back(rank);
  }
  return absent;
}

uint32_t LocalReducer::MapRoundLocked(uint64_t key, int rank, uint32_t round) const {
  auto it = skipped_.find({key, rank});
  return it == skipped_.end() ? round : round + it->second;
}

uint32_t LocalReducer::MapRoundBackLocked(uint64_t key, int rank, uint32_t round) const {
  auto it = skipped_.find({key, rank});
  return it == skipped_.end() ? round : round - it->second;
}

bool LocalReducer::SendsToLocked(const Part& part, int rank) const {
  // A joined non-root sat this round out (it joined only after its own rounds finished).
  return part.join || !joined_.count(rank);
}

std::vector<std::function<void()>> LocalReducer::ReduceAllLocked() {
  std::vector<RoundKey> keys;
  for (const auto& [rk, r] : rounds_) keys.push_back(rk);
  std::vector<std::function<void()>> works;
  for (const RoundKey& rk : keys) {
    if (auto w = MaybeReduceLocked(rk)) works.push_back(std::move(w));
  }
  return works;
}

std::function<void()> LocalReducer::MaybeStandInLocked(const RoundKey& rk, const Part& part) {
  if (!root_joined_ || !stand_in_ || part.join) return nullptr;
  auto it = rounds_.find(rk);
  if (it == rounds_.end() || it->second.root_in) return nullptr;
  // One stand-in per tensor round: its partitions' rounds all come from the one operation.
  if (!stood_in_.insert({protocol::DeclaredKeyOf(rk.first), rk.second}).second) return nullptr;
  return [hook = stand_in_, part] { hook(part); };
}

void LocalReducer::RootJoins(StandIn stand_in) {
  std::vector<std::function<void()>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    root_joined_ = true;
    stand_in_ = std::move(stand_in);
    // Rounds the non-roots began before the root joined, which the root will never run itself.
    for (const auto& [rk, r] : rounds_) {
      if (auto w = MaybeStandInLocked(rk, r.part)) works.push_back(std::move(w));
    }
  }
  for (auto& w : works) w();
}

}  // namespace byteps::worker::local_reduce
