// LocalReducer: the rounds of each partition (see local_reducer.h).
#include <fmt/format.h>
#include <unistd.h>

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
                       part.adasum ? protocol::kOpAdasum : protocol::OpOfReduceKind(part.kind), ""};
  Header h;
  h.opcode = Opcode::kLocalReady;
  h.key = part.key;
  h.round = part.round;
  h.sender = static_cast<uint32_t>(options_.local_rank);
  h.arg = part.on_device ? 1 : 0;  // 1: nothing in shared memory (a device group moves the bytes)
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

Status LocalReducer::Gather(const Part& part, const void* input, void* output, Done ready) {
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
  if (it == rounds_.end()) return nullptr;
  Round& r = it->second;
  if (!r.root_in || r.ready < options_.local_size - 1) return nullptr;
  Round round = std::move(r);
  rounds_.erase(it);
  if (!round.error.ok()) return [round] { round.done(round.error); };
  if (round.part.on_device) return [round] { round.done(Status::Ok()); };  // all ready: the group sums
  // The slots' bytes for this round stay put until every local rank has the result (each rank's
  // next round of the partition waits for it), so the sum runs outside the lock.
  const uint32_t dk = protocol::DeclaredKeyOf(rk.first);
  std::vector<const uint8_t*> slots;
  for (auto& [rank, peer] : peers_) {
    auto s = peer.slots.find(dk);
    if (s == peer.slots.end() || s->second->size() < round.part.offset + round.part.bytes) {
      Status err = InvalidArgument(fmt::format("tensor '{}': local rank {} has no slot of {} bytes", round.part.name,
                                               rank, round.part.tensor_bytes));
      return [round, err] { round.done(err); };
    }
    slots.push_back(s->second->data() + round.part.offset);
  }
  if (round.part.adasum) {
    // The tree over the host's processes in local-rank order (the root is the highest), on copies:
    // AdasumTree overwrites its inputs, and the slots are the other processes' memory.
    return [round, slots] {
      const Part& p = round.part;
      std::vector<std::vector<uint8_t>> copies;
      std::vector<void*> parts;
      for (const uint8_t* s : slots) copies.emplace_back(s, s + p.bytes);
      const auto* in = static_cast<const uint8_t*>(round.input);
      copies.emplace_back(in, in + p.bytes);
      for (auto& c : copies) parts.push_back(c.data());
      AdasumTree(parts, p.bytes / DataTypeSize(p.dtype), p.dtype);
      if (p.bytes > 0) std::memcpy(round.output, parts[0], p.bytes);
      round.done(Status::Ok());
    };
  }
  return [round, slots] {
    const Part& p = round.part;
    if (p.bytes > 0 && round.output != round.input) std::memmove(round.output, round.input, p.bytes);
    const size_t count = p.bytes / DataTypeSize(p.dtype);
    for (const uint8_t* s : slots) ReduceInto(round.output, s, count, p.dtype, p.kind);
    round.done(Status::Ok());
  };
}

void LocalReducer::OnLocalReady(transport::Connection& c, const Header& h, const std::string& payload) {
  auto ki = protocol::DecodeKeyInit(payload);
  std::function<void()> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto pit = peers_.find(static_cast<int>(c.tag));
    if (!ki.ok() || pit == peers_.end()) return;
    Peer& peer = pit->second;
    const uint32_t dk = protocol::DeclaredKeyOf(h.key);
    Round& r = rounds_[{h.key, h.round}];
    if (h.arg == 0) {  // 1: a device group's round, nothing in shared memory
      Status st = MapLocked(&peer.slots[dk], false, peer.pid, SlotSuffix(options_, dk, pit->first),
                            ki->tensor_bytes);
      if (!st.ok() && r.error.ok()) r.error = st;
    }
    if ((r.root_in || r.ready > 0) && r.part.name != ki->name && r.error.ok()) {
      r.error = InvalidArgument(fmt::format("local rank {} declared tensor '{}' where {} has '{}' "
                                            "(declare tensors in the same order in every process)",
                                            pit->first, ki->name, r.root_in ? "the local root" : "another local rank",
                                            r.part.name));
    }
    Part theirs;
    theirs.name = ki->name;
    theirs.kind = protocol::ReduceKindOfOp(ki->op).value_or(ReduceKind::kSum);
    theirs.adasum = ki->op == protocol::kOpAdasum;
    if ((r.root_in || r.ready > 0) && r.part.name == ki->name && r.error.ok()) {
      const std::string who = fmt::format("local rank {}", pit->first);
      r.error = CombineMismatch(theirs, who.c_str(), r.part, r.root_in ? "the local root" : "another local rank");
    }
    if (!r.root_in && r.ready == 0) {  // checked when the root's own partition comes in
      r.part.name = ki->name;
      r.part.kind = theirs.kind;
      r.part.adasum = theirs.adasum;
    }
    r.ready++;
    work = MaybeReduceLocked({h.key, h.round});
  }
  if (work) work();
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
  std::vector<std::shared_ptr<transport::Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.ok()) return failure_;
    const uint32_t dk = protocol::DeclaredKeyOf(part.key);
    BYTEPS_RETURN_IF_ERROR(
        MapLocked(&results_[dk], true, getpid(), ResultSuffix(options_, dk), part.tensor_bytes));
    if (part.bytes > 0) std::memcpy(results_[dk]->data() + part.offset, result, part.bytes);
    for (auto& [rank, peer] : peers_) conns.push_back(peer.conn);
  }
  Header h;
  h.opcode = Opcode::kLocalDone;
  h.key = part.key;
  h.round = part.round;
  h.arg = static_cast<uint32_t>(getpid());
  for (auto& c : conns) (void)c->SendCopy(h, "");
  return Status::Ok();
}

void LocalReducer::PublishError(uint64_t key, uint32_t round, const Status& error) {
  std::vector<std::shared_ptr<transport::Connection>> conns;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [rank, peer] : peers_) conns.push_back(peer.conn);
  }
  Header h = protocol::ErrorHeader(Opcode::kError, error.code(), key);  // the local ranks raise the same kind
  h.round = round;
  for (auto& c : conns) (void)c->SendCopy(h, error.message());
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
