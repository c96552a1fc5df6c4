// LocalReducer's part of join() with several processes per host (see local_reducer.h): which
// non-roots a round still waits for, the round numbers of the rounds a joined process sat out,
// and the stand-ins the root runs once it joined itself.
#include <algorithm>

#include "protocol/control.h"
#include "protocol/key_layout.h"
#include "worker/local_reduce/local_reducer.h"

namespace byteps::worker::local_reduce {

std::optional<std::vector<int>> LocalReducer::AbsentJoinedLocked(const Round& r) const {
  std::vector<int> absent;
  for (const auto& [rank, peer] : peers_) {
    if (!IsMember(r.part, peer.global_rank)) continue;  // outside the round's set: neither waited for nor zeros
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
  if (part.join) return true;
  // A joined non-root sat this round out (it joined only after its own rounds finished).
  if (joined_.count(rank)) return false;
  auto it = peers_.find(rank);
  return it != peers_.end() && IsMember(part, it->second.global_rank);
}

bool LocalReducer::IsMember(const Part& part, int global_rank) {
  if (part.attrs.find(protocol::kAttrMembers) == std::string::npos) return true;  // the common case, unparsed
  for (const auto& [k, v] : protocol::ParseAttrs(part.attrs)) {
    if (k != protocol::kAttrMembers) continue;
    size_t at = 0;
    while (at <= v.size()) {
      size_t comma = v.find(',', at);
      if (comma == std::string::npos) comma = v.size();
      if (v.compare(at, comma - at, std::to_string(global_rank)) == 0) return true;
      at = comma + 1;
    }
    return false;
  }
  return true;
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
  if (!stand_in_ || part.join) return nullptr;
  if (!root_joined_ && IsMember(part, options_.global_rank)) return nullptr;  // the root runs it itself
  auto it = rounds_.find(rk);
  if (it == rounds_.end() || it->second.root_in) return nullptr;
  // One stand-in per tensor round: its partitions' rounds all come from the one operation, and a
  // tensor's next round starts only after this one finished everywhere.
  auto [last, added] = stood_in_.try_emplace(protocol::DeclaredKeyOf(rk.first), rk.second);
  if (!added && last->second >= rk.second) return nullptr;
  last->second = rk.second;
  return [hook = stand_in_, part] { hook(part); };
}

void LocalReducer::SetStandIn(StandIn stand_in) {
  std::lock_guard<std::mutex> lock(mu_);
  stand_in_ = std::move(stand_in);
}

void LocalReducer::RootJoins() {
  std::vector<std::function<void()>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    root_joined_ = true;
    // Rounds the non-roots began before the root joined, which the root will never run itself.
    for (const auto& [rk, r] : rounds_) {
      if (auto w = MaybeStandInLocked(rk, r.part)) works.push_back(std::move(w));
    }
  }
  for (auto& w : works) w();
}

}  // namespace byteps::worker::local_reduce
