// SumEngine: the open rounds, for the stall report (kill -USR1 on a server).
#include <fmt/format.h>

#include <algorithm>

#include "common/owner_query.h"
#include "server/sum_engine.h"

namespace byteps::server {

StatusOr<std::string> SumEngine::OpenRounds(double timeout_s) {
  return owner_query::AskOwner<std::string>(
      timeout_s,
      [this](owner_query::Reply<std::string> out) {
        Enqueue(ReportTask{std::move(out)});
        return Status::Ok();
      },
      [this, timeout_s] {
        return Unavailable(fmt::format("summation thread {} did not answer within {:g} s", index_, timeout_s));
      });
}

std::string SumEngine::DescribeOpenRounds() const {
  std::vector<uint64_t> open;
  for (const auto& [key, ks] : keys_)
    if (ks.pushed > 0 || !ks.waiters.empty()) open.push_back(key);
  std::sort(open.begin(), open.end());
  std::string out;
  for (uint64_t key : open) {
    const KeyState& ks = keys_.at(key);
    std::string pushed, missing;
    for (int w = 0; w < num_workers_; ++w) {
      if (!IsMember(ks, w)) continue;
      const bool in = ks.last_round[w] > ks.completed_round;  // the key's numbering
      const bool gone = std::find(left_.begin(), left_.end(), w) != left_.end();
      std::string& list = in ? pushed : missing;
      list += fmt::format("{}{}{}", list.empty() ? "" : ",", w, !in && gone ? " (left)" : "");
    }
    out += fmt::format("  key {} '{}' ({} bytes, {}) round {}: pushed by [{}], waiting for [{}]; {} reply(ies) waiting\n",
                       key, ks.init.name, ks.init.bytes, ks.init.op, ks.completed_round + 1, pushed, missing,
                       ks.waiters.size());
  }
  return out;
}

}  // namespace byteps::server
