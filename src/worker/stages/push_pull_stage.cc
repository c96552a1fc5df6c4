#include "worker/stages/push_pull_stage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "protocol/control.h"
#include "protocol/error_frame.h"
#include "protocol/key_layout.h"
#include "worker/average.h"

namespace byteps::worker::stages {

using protocol::Header;
using protocol::Opcode;

PushPullStage::PushPullStage(pipeline::StageSink* sink, server_links::DataPlane* plane, int host_rank, int size,
                             int local_size)
    : pipeline::Stage("push-pull", sink), plane_(plane), host_rank_(host_rank), size_(size), local_size_(local_size) {}

std::string PushPullStage::HostMembers(const std::string& attrs, int local_size) {
  if (local_size <= 1 || attrs.find(protocol::kAttrMembers) == std::string::npos) return attrs;
  std::string out;
  for (const auto& [k, v] : protocol::ParseAttrs(attrs)) {
    std::string value = v;
    if (k == protocol::kAttrMembers) {
      std::vector<int> hosts;  // the ranks ascend, so their hosts do
      size_t at = 0;
      while (at < v.size()) {
        size_t comma = v.find(',', at);
        if (comma == std::string::npos) comma = v.size();
        int rank = 0;
        try {
          rank = std::stoi(v.substr(at, comma - at));
        } catch (const std::exception&) {
          return attrs;  // malformed: the servers refuse it, naming it
        }
        if (hosts.empty() || hosts.back() != rank / local_size) hosts.push_back(rank / local_size);
        at = comma + 1;
      }
      value = fmt::format("{}", fmt::join(hosts, ","));
    }
    out += fmt::format("{}{}{}{}", out.empty() ? "" : ";", k, value.empty() ? "" : "=", value);
  }
  return out;
}

server_links::OutFrame PushPullStage::InitKeyFrame(const planning::TensorPlan& plan, const planning::PartitionPlan& p,
                                                   ReduceOp op, const std::string& attrs) const {
  protocol::KeyInit ki;
  ki.name = plan.name;
  ki.bytes = p.range.length;
  ki.dtype = static_cast<int>(plan.dtype);
  ki.tensor_bytes = plan.bytes;
  ki.op = KeyOpOf(op);
  ki.attrs = HostMembers(attrs, local_size_);
  ki.offset = p.range.offset;
  server_links::OutFrame f;
  f.header.opcode = Opcode::kInitKey;
  f.header.key = p.key;
  f.header.sender = static_cast<uint32_t>(host_rank_);
  f.owned = protocol::Encode(ki);
  f.header.payload_len = f.owned.size();
  return f;
}

server_links::OutFrame PushPullStage::PushFrame(const pipeline::PartitionTask& t) const {
  server_links::OutFrame f;
  f.header.opcode = Opcode::kPushPull;
  f.header.key = t.key;
  f.header.round = t.round;
  f.header.request_id = t.id;
  f.header.sender = static_cast<uint32_t>(host_rank_);
  f.header.dtype = static_cast<uint8_t>(t.op->request.dtype);
  f.header.payload_len = t.push_len;
  f.header.arg = static_cast<uint32_t>(t.push_offset);
  if (t.joined_share) f.header.flags |= protocol::kFlagJoinedShare;
  if (t.wire.compressed) f.header.flags |= protocol::kFlagCompressed;
  f.data = t.src;
  f.len = t.push_len;
  return f;
}

void PushPullStage::Release(const planning::TensorPlan& plan, uint32_t last_round) {
  std::lock_guard<std::mutex> lock(mu_);
  announced_.erase(plan.declared_key);
  poisoned_.erase(plan.declared_key);
  for (const planning::PartitionPlan& p : plan.partitions) {
    server_links::OutFrame f;
    f.header.opcode = Opcode::kRelease;
    f.header.key = p.key;
    f.header.round = last_round;
    f.header.sender = static_cast<uint32_t>(host_rank_);
    releases_.emplace_back(p.server, std::move(f));
  }
}

void PushPullStage::SendReleases() {
  std::vector<std::pair<int, server_links::OutFrame>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out.swap(releases_);
  }
  for (const auto& [server, f] : out) (void)plane_->Send(server, f);
}

void PushPullStage::Flush() {
  SendReleases();
  plane_->Flush();
}

void PushPullStage::Start(pipeline::PartitionTask* t) {
  SendReleases();  // before the pushes of the incarnation that follows
  const planning::TensorPlan& plan = *t->op->plan;
  std::vector<server_links::OutFrame> declare;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const ReduceOp op = t->op->request.op;
    auto [a, added] = announced_.emplace(plan.declared_key, Announced{&plan, op, t->op->request.attrs});
    if (auto p = poisoned_.find(plan.declared_key); p != poisoned_.end()) {
      refused = p->second;
    } else if (a->second.op != op) {
      refused = InvalidArgument(fmt::format("tensor '{}' was first used for a {} and now for a {}; use one name per "
                                            "operation",
                                            plan.name, ReduceOpName(a->second.op), ReduceOpName(op)));
    } else {
      if (added) {
        for (const planning::PartitionPlan& p : plan.partitions)
          declare.push_back(InitKeyFrame(plan, p, op, t->op->request.attrs));
      }
      in_flight_.emplace(t->id, InFlight{t, nullptr, Status()});
    }
  }
  if (!refused.ok()) return sink()->Complete(t, refused);
  // A failed declaration means the connection dropped: the reconnect declares again.
  for (size_t i = 0; i < declare.size(); ++i) (void)plane_->Send(plan.partitions[i].server, declare[i]);
  Status st = plane_->Send(t->server, PushFrame(*t));
  // Unavailable: the connection is closed; the reconnect re-sends this partition (or fails it with
  // the link). Anything else is a bug worth failing the partition for.
  if (st.ok() || st.code() == StatusCode::kUnavailable) return;
  std::vector<pipeline::PartitionTask*> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = TakeFailedLocked([&](const pipeline::PartitionTask& x) { return &x == t; }, st);
  }
  CompleteAll(failed, st);
}

StatusOr<transport::RecvBuffer> PushPullStage::OnReplyHeader(transport::Connection& c, const Header& h) {
  transport::RecvBuffer b;
  if (h.opcode == Opcode::kError) {
    if (h.payload_len > 64 * 1024) return ProtocolError("oversized error frame from " + c.peer_name());
    return b;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(h.request_id);
  if (it == in_flight_.end()) {
    b.discard = true;  // its operation already failed (or a resend's twin answered): drop the bytes
    return b;
  }
  const pipeline::PartitionTask& t = *it->second.task;
  const bool compressed_reply = (h.flags & protocol::kFlagCompressed) != 0;
  if (compressed_reply != t.wire.compressed) {
    return ProtocolError(fmt::format("{} answered {} request {} (key {}) with {} reply", c.peer_name(),
                                     t.wire.compressed ? "compressed" : "uncompressed", h.request_id, t.key,
                                     compressed_reply ? "a compressed" : "an uncompressed"));
  }
  if (t.wire.compressed) {
    if (h.arg != 0 || h.payload_len > t.wire.reply_cap || t.key != h.key) {
      return ProtocolError(fmt::format("{} answered compressed request {} (key {}, at most {} bytes) with key {} and "
                                       "{} bytes at offset {}",
                                       c.peer_name(), h.request_id, t.key, t.wire.reply_cap, h.key, h.payload_len,
                                       h.arg));
    }
    it->second.receiving_on = &c;
    b.data = t.wire.reply;
    b.size = h.payload_len;
    return b;
  }
  // A reducescatter's reply is this worker's slice of the partition, at offset `arg`.
  const bool slice = t.op->sliced_replies;
  const bool fits = slice ? h.arg <= t.len && h.payload_len <= t.len - h.arg : h.arg == 0 && h.payload_len == t.len;
  if (!fits || t.key != h.key) {
    return ProtocolError(fmt::format("{} answered request {} (key {}, {} bytes) with key {} and {} bytes at offset {}",
                                     c.peer_name(), h.request_id, t.key, t.len, h.key, h.payload_len, h.arg));
  }
  it->second.receiving_on = &c;
  b.data = t.dst + h.arg;
  b.size = h.payload_len;
  return b;
}

void PushPullStage::OnReplyFrame(transport::Connection& c, const Header& h, transport::RecvBuffer b) {
  if (h.opcode == Opcode::kError) {
    Status st = protocol::StatusFromErrorFrame(
        h, fmt::format("{}: {}", c.peer_name(), std::string(reinterpret_cast<const char*>(b.data), b.size)));
    std::vector<pipeline::PartitionTask*> failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (h.request_id != 0) {
        failed = TakeFailedLocked([&](const pipeline::PartitionTask& t) { return t.id == h.request_id; }, st);
      } else {  // the tensor's declaration was refused: this round and every later one fail
        const uint32_t dk = protocol::DeclaredKeyOf(h.key);
        poisoned_.emplace(dk, st);
        failed = TakeFailedLocked([&](const pipeline::PartitionTask& t) { return t.op->plan->declared_key == dk; }, st);
      }
    }
    CompleteAll(failed, st);
    return;
  }
  if (b.discard) return;
  pipeline::PartitionTask* t;
  Status deferred;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = in_flight_.find(h.request_id);
    if (it == in_flight_.end()) return;
    t = it->second.task;
    deferred = it->second.deferred;
    in_flight_.erase(it);
  }
  if (deferred.ok() && t->wire.compressed) {
    t->wire.reply_len = h.payload_len;  // the decompress stage decodes (and averages) it
  } else if (deferred.ok()) {
    t->src = t->dst;
    const TensorRequest& r = t->op->request;
    if (r.average) DivideInPlace(t->dst, t->len / DataTypeSize(r.dtype), r.dtype, size_);
  }
  sink()->Complete(t, deferred);
}

template <typename Match>
std::vector<pipeline::PartitionTask*> PushPullStage::TakeFailedLocked(Match match, const Status& failure) {
  std::vector<pipeline::PartitionTask*> now;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    InFlight& f = it->second;
    if (!match(*f.task)) {
      ++it;
    } else if (f.receiving_on != nullptr) {
      if (f.deferred.ok()) f.deferred = failure;  // completed when its frame is complete
      ++it;
    } else {
      now.push_back(f.task);
      it = in_flight_.erase(it);
    }
  }
  return now;
}

void PushPullStage::CompleteAll(const std::vector<pipeline::PartitionTask*>& tasks, const Status& st) {
  for (pipeline::PartitionTask* t : tasks) sink()->Complete(t, st);
}

void PushPullStage::OnConnectionLost(const transport::Connection& c) {
  std::vector<std::pair<pipeline::PartitionTask*, Status>> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
      InFlight& f = it->second;
      if (f.receiving_on == &c) f.receiving_on = nullptr;  // the transport stopped writing into it
      if (f.receiving_on == nullptr && !f.deferred.ok()) {
        failed.emplace_back(f.task, f.deferred);
        it = in_flight_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [t, st] : failed) sink()->Complete(t, st);
}

std::vector<server_links::OutFrame> PushPullStage::CollectResend(int server, size_t index) {
  std::vector<server_links::OutFrame> frames;
  std::vector<const pipeline::PartitionTask*> out;
  std::lock_guard<std::mutex> lock(mu_);
  // Declarations first (the server keeps them; a lost InitKey is sent again, duplicates are no-ops)...
  for (const auto& [dk, a] : announced_)
    for (const planning::PartitionPlan& p : a.plan->partitions)
      if (p.server == server && plane_->ConnIndex(server, p.key) == index) frames.push_back(InitKeyFrame(*a.plan, p, a.op, a.attrs));
  // ...then every partition that was out on the lost connection, oldest first.
  for (const auto& [id, f] : in_flight_)
    if (f.task->server == server && plane_->ConnIndex(server, f.task->key) == index) out.push_back(f.task);
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->id < b->id; });
  for (const pipeline::PartitionTask* t : out) frames.push_back(PushFrame(*t));
  return frames;
}

void PushPullStage::FailServer(int server, const Status& failure) {
  std::vector<pipeline::PartitionTask*> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = TakeFailedLocked([&](const pipeline::PartitionTask& t) { return t.server == server; }, failure);
  }
  CompleteAll(failed, failure);
}

void PushPullStage::FailAll(const Status& failure) {
  std::vector<pipeline::PartitionTask*> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed = TakeFailedLocked([](const pipeline::PartitionTask&) { return true; }, failure);
  }
  CompleteAll(failed, failure);
}

bool PushPullStage::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_.empty();
}

}  // namespace byteps::worker::stages
