// SumEngine's process sets (sum_engine.h): which workers a key's rounds wait for. A key declared
// with the attribute "members=<ranks>" belongs to that set: only its members push, and a round
// completes when every member pushed; a worker outside the set never blocks it.
#include <fmt/format.h>
#include <fmt/ranges.h>

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

Status SumEngine::NotAMember(const KeyState& ks, uint64_t key, int worker, const char* what) {
  return InvalidArgument(fmt::format("worker {} {} tensor '{}' (key {}) of process set {}, which it is not a member of",
                                     worker, what, ks.init.name, key, MembersText(ks.member)));
}

}  // namespace byteps::server
