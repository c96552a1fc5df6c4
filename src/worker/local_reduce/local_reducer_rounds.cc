// LocalReducer: the rounds of each partition (see local_reducer.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/adasum.h"
#include "common/logging.h"
#include "common/reducer.h"
#include "protocol/control.h"
#include "protocol/error_frame.h"
#include "protocol/key_layout.h"
#include "worker/local_reduce/local_reducer.h"

namespace byteps::worker::local_reduce {

using protocol::Header;
using protocol::Opcode;

namespace {
std::string SlotSuffix(const LocalOptions& o, uint32_t key, int rank) {
  return fmt::format("w{}{}-k{}-slot{}", o.host_id, o.circle, key, rank);
}
std::string ResultSuffix(const LocalOptions& o, uint32_t key) {
  return fmt::format("w{}{}-k{}-result", o.host_id, o.circle, key);
}
}  // namespace

Status LocalReducer::MapLocked(std::unique_ptr<ShmSegment>* seg, bool create, int creator_pid,
                               const std::string& suffix, size_t bytes) {
  if (*seg) {
    if ((*seg)->size() < bytes) {
      return InvalidArgument(fmt::format("shared memory {} holds {} bytes, the tensor now needs {}", (*seg)->name(),
                                         (*seg)->size(), bytes));
    }
    return Status::Ok();
  }
  const std::string name = ShmSegment::Name(creator_pid, options_.job, suffix);
  auto s = create ? ShmSegment::Create(name, bytes) : ShmSegment::Open(name, bytes);
  if (!s.ok()) return s.status();
  *seg = std::move(s.value());
  return Status::Ok();
}

Status LocalReducer::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

Status LocalReducer::Contribute(const Part& part, const void* input) {
  std::shared_ptr<transport::Connection> root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    const uint32_t dk = protocol::DeclaredKeyOf(part.key);
    if (!part.on_device) {
      BYTEPS_RETURN_IF_ERROR(MapLocked(&my_slots_[dk], true, getpid(),
                                       SlotSuffix(options_, dk, options_.local_rank), part.tensor_bytes));
      if (part.bytes > 0) std::memcpy(my_slots_[dk]->data() + part.offset, input, part.bytes);
    }
    awaited_[{part.key, part.round}].part = part;
    root = root_;
  }
  protocol::KeyInit ki{part.name, part.bytes, static_cast<int>(part.dtype), part.tensor_bytes,
                       part.join     ? protocol::kOpJoin
                       : part.adasum ? protocol::kOpAdasum
                                     : protocol::OpOfReduceKind(part.kind),
                       part.attrs};
  Header h;
  h.opcode = Opcode::kLocalReady;
  h.key = part.key;
  h.round = part.round;
  h.sender = static_cast<uint32_t>(options_.local_rank);
  // Bit 0: nothing in shared memory (a device group moves the bytes); bit 1: averaged.
  h.arg = (part.on_device ? 1u : 0u) | (part.average ? 2u : 0u);
  return root->SendCopy(h, protocol::Encode(ki));
}

void LocalReducer::AwaitResult(const Part& part, void* output, Done done) {
  std::function<void()> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) {
      work = [done, st = failure_] { done(st); };
    } else {
      Result& r = awaited_[{part.key, part.round}];
      r.part = part;
      r.output = output;
      r.done = std::move(done);
      work = MaybeDeliverLocked({part.key, part.round});
    }
  }
  if (work) work();
}

std::function<void()> LocalReducer::MaybeDeliverLocked(const RoundKey& rk) {
  auto it = awaited_.find(rk);
  if (it == awaited_.end() || !it->second.published || !it->second.done) return nullptr;
  Result r = std::move(it->second);
  awaited_.erase(it);
  if (!r.error.ok()) return [r] { r.done(r.error); };
  const uint32_t dk = protocol::DeclaredKeyOf(rk.first);
  Status st = MapLocked(&result_maps_[dk], false, root_pid_, ResultSuffix(options_, dk), r.part.tensor_bytes);
  if (!st.ok()) return [r, st] { r.done(st); };
  // The root writes this region again only after our next LocalReady of this partition, which
  // waits for this round to leave the pipeline: copying outside the lock is safe.
  const uint8_t* from = result_maps_[dk]->data() + r.part.offset;
  return [r, from] {
    if (r.part.bytes > 0) std::memcpy(r.output, from, r.part.bytes);
    r.done(Status::Ok());
  };
}

Status LocalReducer::Gather(const Part& part, const void* input, void* output, GatherDone ready) {
  std::function<void()> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    Round& r = rounds_[{part.key, part.round}];
    if (r.ready > 0 && r.part.name != part.name) {
      r.error = InvalidArgument(fmt::format("a local rank declared tensor '{}' where the local root has '{}' "
                                            "(declare tensors in the same order in every process)",
                                            r.part.name, part.name));
    } else if (r.ready > 0) {
      if (Status st = CombineMismatch(r.part, "a local rank", part, "the local root"); !st.ok()) r.error = st;
    }
    r.root_in = true;
    r.root_last = true;
    r.part = part;
    r.input = input;
    r.output = output;
    r.done = std::move(ready);
    work = MaybeReduceLocked({part.key, part.round});
  }
  if (work) work();
  return Status::Ok();
}

std::function<void()> LocalReducer::MaybeReduceLocked(const RoundKey& rk) {
  auto it = rounds_.find(rk);
  if (it == rounds_.end() || !it->second.root_in) return nullptr;
  std::optional<std::vector<int>> absent = AbsentJoinedLocked(it->second);
  if (!absent) return nullptr;  // a non-root is still waited for
  Round round = std::move(it->second);
  rounds_.erase(it);
  for (int rank : *absent) skipped_[{rk.first, rank}]++;  // its later rounds of the key map past this one
  // Outside the round's process set the root's own share does not count (its stand-in's zeros).
  const bool root_counts = IsMember(round.part, options_.global_rank);
  // A joined process's zeros are in it: a joined non-root's, or the root's own in a stand-in.
  const bool joined_share = !round.part.join && (!absent->empty() || (root_joined_ && root_counts));
  if (round.part.join) {  // every local process joined: nobody is joined any more
    joined_.clear();
    root_joined_ = false;
  }
  if (!round.error.ok()) return [round] { round.done(round.error, false); };
  if (round.part.on_device) {
    if (!joined_share) return [round] { round.done(Status::Ok(), false); };  // all ready: the group sums
    Status err = Precondition(fmt::format("tensor '{}': a device tensor's round while local rank {} has joined "
                                          "(join()) is not supported with several processes per host; use CPU "
                                          "tensors around join()",
                                          round.part.name, RankOf(absent->empty() ? options_.local_size - 1 : (*absent)[0])));
    return [round, err] { round.done(err, true); };
  }
  // The slots' bytes for this round stay put until every local rank has the result (each rank's
  // next round of the partition waits for it), so the sum runs outside the lock. A joined
  // non-root's share is zeros (nullptr here).
  const uint32_t dk = protocol::DeclaredKeyOf(rk.first);
  std::vector<const uint8_t*> slots;  // in local-rank order
  const uint8_t* last = nullptr;      // a join round's last contribution, when a non-root's
  for (auto& [rank, peer] : peers_) {
    if (!round.part.join && !IsMember(round.part, peer.global_rank)) continue;  // outside the set
    if (std::find(absent->begin(), absent->end(), rank) != absent->end()) {
      slots.push_back(nullptr);
      continue;
    }
    auto s = peer.slots.find(dk);
    if (s == peer.slots.end() || s->second->size() < round.part.offset + round.part.bytes) {
      Status err = InvalidArgument(fmt::format("tensor '{}': local rank {} has no slot of {} bytes", round.part.name,
                                               rank, round.part.tensor_bytes));
      return [round, err] { round.done(err, false); };
    }
    slots.push_back(s->second->data() + round.part.offset);
    if (!round.root_last && !round.from.empty() && round.from.back() == rank) last = slots.back();
  }
  return [round, slots, last, joined_share, root_counts] {
    const Part& p = round.part;
    const size_t count = p.bytes / DataTypeSize(p.dtype);
    if (p.join) {
      const void* from = last != nullptr ? last : round.input;
      if (p.bytes > 0 && round.output != from) std::memmove(round.output, from, p.bytes);
    } else if (p.adasum) {
      // The tree over the host's processes in local-rank order (the root is the highest), on
      // copies: AdasumTree overwrites its inputs, and the slots are the other processes' memory.
      std::vector<std::vector<uint8_t>> copies;
      for (const uint8_t* s : slots) copies.push_back(s ? std::vector<uint8_t>(s, s + p.bytes) : std::vector<uint8_t>(p.bytes));
      const auto* in = static_cast<const uint8_t*>(round.input);
      copies.emplace_back(in, in + p.bytes);
      std::vector<void*> parts;
      for (auto& c : copies) parts.push_back(c.data());
      AdasumTree(parts, count, p.dtype);
      if (p.bytes > 0) std::memcpy(round.output, parts[0], p.bytes);
    } else {
      bool first = root_counts;  // the output holds a share already
      if (root_counts && p.bytes > 0 && round.output != round.input) std::memmove(round.output, round.input, p.bytes);
      for (const uint8_t* s : slots) {
        if (s == nullptr) continue;
        if (first) {
          ReduceInto(round.output, s, count, p.dtype, p.kind);
        } else if (p.bytes > 0) {
          std::memcpy(round.output, s, p.bytes);
        }
        first = true;
      }
      if (!first && p.bytes > 0) std::memset(round.output, 0, p.bytes);  // nobody's share: joined members' zeros
      // min, max, product: joined processes' zeros count once (each is idempotent with itself).
      if (joined_share && p.kind != ReduceKind::kSum) {
        std::vector<uint8_t> zeros(p.bytes);
        ReduceInto(round.output, zeros.data(), count, p.dtype, p.kind);
      }
    }
    round.done(Status::Ok(), joined_share);
  };
}

void LocalReducer::OnLocalReady(transport::Connection& c, const Header& h, const std::string& payload) {
  auto ki = protocol::DecodeKeyInit(payload);
  std::vector<std::function<void()>> works;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto pit = peers_.find(static_cast<int>(c.tag));
    if (!ki.ok() || pit == peers_.end()) return;
    Peer& peer = pit->second;
    const int rank = pit->first;
    const uint32_t dk = protocol::DeclaredKeyOf(h.key);
    const RoundKey rk{h.key, MapRoundLocked(h.key, rank, h.round)};
    Round& r = rounds_[rk];
    if ((h.arg & 1) == 0) {  // 1: a device group's round, nothing in shared memory
      Status st = MapLocked(&peer.slots[dk], false, peer.pid, SlotSuffix(options_, dk, rank), ki->tensor_bytes);
      if (!st.ok() && r.error.ok()) r.error = st;
    }
    if ((r.root_in || r.ready > 0) && r.part.name != ki->name && r.error.ok()) {
      r.error = InvalidArgument(fmt::format("local rank {} declared tensor '{}' where {} has '{}' "
                                            "(declare tensors in the same order in every process)",
                                            rank, ki->name, r.root_in ? "the local root" : "another local rank",
                                            r.part.name));
    }
    Part theirs;
    theirs.key = rk.first;
    theirs.round = rk.second;
    theirs.name = ki->name;
    theirs.bytes = ki->bytes;
    theirs.tensor_bytes = ki->tensor_bytes;
    theirs.dtype = static_cast<DataType>(ki->dtype);
    theirs.kind = protocol::ReduceKindOfOp(ki->op).value_or(ReduceKind::kSum);
    theirs.adasum = ki->op == protocol::kOpAdasum;
    theirs.join = ki->op == protocol::kOpJoin;
    theirs.average = (h.arg & 2) != 0;
    theirs.attrs = ki->attrs;
    theirs.on_device = (h.arg & 1) != 0;
    if ((r.root_in || r.ready > 0) && r.part.name == ki->name && r.error.ok()) {
      const std::string who = fmt::format("local rank {}", rank);
      r.error = CombineMismatch(theirs, who.c_str(), r.part, r.root_in ? "the local root" : "another local rank");
    }
    if (!r.root_in && r.ready == 0) r.part = theirs;  // checked when the root's own partition comes in
    r.ready++;
    r.from.push_back(rank);
    r.root_last = false;
    if (theirs.join) {
      joined_.insert(rank);
      works = ReduceAllLocked();  // rounds that waited for it complete without it
    } else if (auto work = MaybeReduceLocked(rk)) {
      works.push_back(std::move(work));
    } else if (auto stand_in = MaybeStandInLocked(rk, theirs)) {
      works.push_back(std::move(stand_in));
    }
  }
  for (auto& w : works) w();
}

const char* LocalReducer::CombineName(const Part& p) {
  return p.adasum ? "adasum" : ReduceKindName(p.kind);
}

Status LocalReducer::CombineMismatch(const Part& a, const char* a_who, const Part& b, const char* b_who) {
  if (a.adasum == b.adasum && (a.adasum || a.kind == b.kind)) return Status::Ok();
  return Mismatch(fmt::format("tensor '{}': {} reduces it by {} but {} by {}", a.name, a_who, CombineName(a), b_who,
                              CombineName(b)));
}

Status LocalReducer::Publish(const Part& part, const void* result) {
  std::vector<std::pair<std::shared_ptr<transport::Connection>, uint32_t>> conns;  // with the round in its numbering
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    const uint32_t dk = protocol::DeclaredKeyOf(part.key);
    BYTEPS_RETURN_IF_ERROR(
        MapLocked(&results_[dk], true, getpid(), ResultSuffix(options_, dk), part.tensor_bytes));
    if (part.bytes > 0) std::memcpy(results_[dk]->data() + part.offset, result, part.bytes);
    for (auto& [rank, peer] : peers_)
      if (SendsToLocked(part, rank)) conns.emplace_back(peer.conn, MapRoundBackLocked(part.key, rank, part.round));
  }
  Header h;
  h.opcode = Opcode::kLocalDone;
  h.key = part.key;
  h.arg = static_cast<uint32_t>(getpid());
  for (auto& [c, round] : conns) {
    h.round = round;
    (void)c->SendCopy(h, "");
  }
  return Status::Ok();
}

void LocalReducer::PublishError(const Part& part, const Status& error) {
  std::vector<std::pair<std::shared_ptr<transport::Connection>, uint32_t>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [rank, peer] : peers_)
      if (SendsToLocked(part, rank)) conns.emplace_back(peer.conn, MapRoundBackLocked(part.key, rank, part.round));
  }
  Header h = protocol::ErrorHeader(Opcode::kError, error.code(), part.key);  // the local ranks raise the same kind
  for (auto& [c, round] : conns) {
    h.round = round;
    (void)c->SendCopy(h, error.message());
  }
}

}  // namespace byteps::worker::local_reduce

namespace byteps::worker::local_reduce {

Status LocalReducer::SendToNonRoots(const Header& h, const std::string& payload) {
  std::vector<std::shared_ptr<transport::Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    for (auto& [rank, peer] : peers_)
      if (!peer.left) conns.push_back(peer.conn);
  }
  for (auto& c : conns) BYTEPS_RETURN_IF_ERROR(c->SendCopy(h, payload));
  return Status::Ok();
}

Status LocalReducer::SendToRoot(const Header& h, const std::string& payload) {
  std::shared_ptr<transport::Connection> root;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    root = root_;
  }
  if (!root) return Internal("SendToRoot on the local root");
  return root->SendCopy(h, payload);
}

void LocalReducer::SetGroupListener(std::function<void(const Header&, const std::string&)> listener) {
  std::unique_lock<std::mutex> lock(mu_);
  group_listener_ = listener;
  cv_.wait(lock, [&] { return listener_calls_ == 0; });  // a call in progress ends before we return
  if (!listener) return;
  // The frames that came before it, in order; the I/O thread queues behind them meanwhile.
  early_draining_ = true;
  while (!early_group_frames_.empty() && group_listener_) {
    auto [h, payload] = std::move(early_group_frames_.front());
    early_group_frames_.pop_front();
    ++listener_calls_;
    lock.unlock();
    listener(h, payload);
    lock.lock();
    --listener_calls_;
  }
  early_draining_ = false;
  cv_.notify_all();
}

}  // namespace byteps::worker::local_reduce
