// SumEngine's process sets (sum_engine.h): which workers a key's rounds wait for. A key declared
// with the attribute "members=<ranks>" belongs to that set: only its members push, and a round
// completes when every member pushed; a worker outside the set never blocks it. A key declared
// with "scatter=<offsets>" (a reducescatter) answers each member only its slice.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <optional>

#include "server/sum_engine.h"

namespace byteps::server {

namespace {
std::string MembersText(const std::vector<char>& member) {
  std::vector<int> ranks;
  for (size_t w = 0; w < member.size(); ++w)
    if (member[w]) ranks.push_back(static_cast<int>(w));
  return fmt::format("[{}]", fmt::join(ranks, ", "));
}
}  // namespace

Status SumEngine::SetMembers(KeyState& ks, uint64_t key, int num_workers, int declaring_worker) {
  ks.member.assign(num_workers, 1);
  ks.num_members = num_workers;
  std::optional<std::string> list;
  for (const auto& [k, v] : protocol::ParseAttrs(ks.init.attrs))
    if (k == protocol::kAttrMembers) list = v;
  if (!list) return Status{};
  ks.member.assign(num_workers, 0);
  ks.num_members = 0;
  const auto bad = [&](const std::string& why) {
    return InvalidArgument(fmt::format("tensor '{}' (key {}) is declared for process set '{}', which {}", ks.init.name,
                                       key, *list, why));
  };
  int previous = -1;
  size_t start = 0;
  while (start <= list->size()) {
    size_t end = list->find(',', start);
    if (end == std::string::npos) end = list->size();
    int rank = -1;
    auto [ptr, ec] = std::from_chars(list->data() + start, list->data() + end, rank);
    if (ec != std::errc() || ptr != list->data() + end) return bad("is not a list of ranks");
    if (rank < 0 || rank >= num_workers) return bad(fmt::format("names rank {} of {} workers", rank, num_workers));
    if (rank <= previous) return bad("is not in ascending order without repeats");
    ks.member[rank] = 1;
    ks.num_members++;
    previous = rank;
    start = end + 1;
  }
  if (!ks.member[declaring_worker]) return NotAMember(ks, key, declaring_worker, "declared");
  return Status{};
}

Status SumEngine::SetScatter(KeyState& ks, uint64_t key) {
  ks.scatter.clear();
  std::optional<std::string> list;
  for (const auto& [k, v] : protocol::ParseAttrs(ks.init.attrs))
    if (k == protocol::kAttrScatter) list = v;
  if (!list) return Status{};
  std::vector<uint64_t> bounds;
  bool parsed = true;
  for (size_t start = 0; parsed && start <= list->size();) {
    size_t end = list->find(',', start);
    if (end == std::string::npos) end = list->size();
    uint64_t b = 0;
    auto [ptr, ec] = std::from_chars(list->data() + start, list->data() + end, b);
    parsed = ec == std::errc() && ptr == list->data() + end;
    bounds.push_back(b);
    start = end + 1;
  }
  if (!parsed) bounds.clear();
  const bool ascending = std::is_sorted(bounds.begin(), bounds.end());
  if (bounds.size() != static_cast<size_t>(ks.num_members) + 1 || !ascending || bounds.front() != 0 ||
      bounds.back() != ks.init.tensor_bytes || ks.init.op != protocol::kOpSum) {
    return InvalidArgument(fmt::format("tensor '{}' (key {}) is declared with scatter '{}', which is not {} ascending "
                                       "byte offsets from 0 to its {} bytes on a sum (one slice per member)",
                                       ks.init.name, key, *list, ks.num_members + 1, ks.init.tensor_bytes));
  }
  ks.scatter.assign(ks.member.size(), {0, 0});
  size_t i = 0;
  for (size_t w = 0; w < ks.member.size(); ++w)
    if (ks.member[w]) ks.scatter[w] = {bounds[i], bounds[i + 1]}, ++i;
  return Status{};
}

Status SumEngine::NotAMember(const KeyState& ks, uint64_t key, int worker, const char* what) {
  return InvalidArgument(fmt::format("worker {} {} tensor '{}' (key {}) of process set {}, which it is not a member of",
                                     worker, what, ks.init.name, key, MembersText(ks.member)));
}

}  // namespace byteps::server
