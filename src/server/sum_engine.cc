#include "server/sum_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <pthread.h>

#include "common/adasum.h"
#include "common/logging.h"
#include "common/reducer.h"
#include "protocol/error_frame.h"

namespace byteps::server {

using protocol::Header;
using protocol::Opcode;

namespace {
std::string DescribeDecl(const protocol::KeyInit& k) {
  auto dt = DataTypeFromCode(k.dtype);
  return fmt::format("{} bytes of {}", k.bytes, dt ? DataTypeName(*dt) : "unknown dtype");
}
}  // namespace

SumEngine::SumEngine(int index, int num_workers, JoinBoard* board, TraceBuffer* trace)
    : index_(index),
      num_workers_(num_workers),
      own_board_(board ? nullptr : std::make_unique<JoinBoard>(num_workers)),
      board_(board ? board : own_board_.get()),
      trace_(trace) {
  if (own_board_) own_board_->set_notify([this] { Post(JoinTask{}); });
  AddMetrics();
  thread_ = std::thread([this] { Run(); });
}

SumEngine::~SumEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void SumEngine::Post(PushTask t) { Enqueue(std::move(t)); }
void SumEngine::Post(InitTask t) { Enqueue(std::move(t)); }
void SumEngine::Post(LeaveTask t) { Enqueue(t); }
void SumEngine::Post(ReleaseTask t) { Enqueue(t); }
void SumEngine::Post(JoinTask t) { Enqueue(t); }

void SumEngine::Enqueue(Task t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(t));
  }
  cv_.notify_one();
}

void SumEngine::Run() {
  std::string name = fmt::format("bps-sum{}", index_);
  pthread_setname_np(pthread_self(), name.c_str());
  std::deque<Task> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      batch.swap(queue_);
    }
    for (Task& t : batch) {
      if (auto* p = std::get_if<PushTask>(&t)) HandlePush(*p);
      else if (auto* i = std::get_if<InitTask>(&t)) HandleInit(*i);
      else if (auto* l = std::get_if<LeaveTask>(&t)) HandleLeave(*l);
      else if (auto* r = std::get_if<ReleaseTask>(&t)) HandleRelease(*r);
      else if (std::holds_alternative<JoinTask>(t)) HandleJoin();
      else if (auto* rp = std::get_if<ReportTask>(&t)) rp->out->set_value(DescribeOpenRounds());
    }
    batch.clear();
  }
}

void SumEngine::ReplyError(const std::shared_ptr<transport::Connection>& conn, uint64_t key,
                           uint64_t request_id, const Status& error) {
  (void)conn->SendCopy(protocol::ErrorHeader(Opcode::kError, error.code(), key, request_id), error.message());
}

void SumEngine::ReplyFatal(const std::shared_ptr<transport::Connection>& conn, uint64_t key,
                           uint64_t request_id, const Status& error) {
  Header h = protocol::ErrorHeader(Opcode::kError, error.code(), key, request_id);
  h.flags |= protocol::kFlagJobFatal;
  (void)conn->SendCopy(h, error.message());
}

Status SumEngine::UnevenEnd(const KeyState& ks, uint64_t key, int worker, uint32_t round, int gone) {
  const uint32_t last = ks.last_round[gone];
  return Aborted(fmt::format(
      "tensor '{}' (key {}): worker {} needs round {}, but worker {} has shut down {}, so the round can never "
      "complete. Every worker must make the same push_pulls of each tensor; for uneven data, a worker that runs "
      "out of data calls join() instead of shutting down, or every worker stops at the same step "
      "(docs/troubleshooting.md)",
      ks.init.name, key, worker, round, gone,
      last == 0 ? "without pushing it once" : fmt::format("after round {} of it", last)));
}

void SumEngine::HandleLeave(const LeaveTask& t) {
  if (t.worker < 0 || t.worker >= num_workers_ ||
      std::find(left_.begin(), left_.end(), t.worker) != left_.end()) {
    return;
  }
  left_.push_back(t.worker);
  // Rounds in progress that the leaver has not pushed can never complete: fail their waiters now.
  for (auto& [key, ks] : keys_) {
    if (!ks.initialized || !ks.error.ok() || ks.waiters.empty() || !IsMember(ks, t.worker)) continue;
    const uint32_t round = ks.completed_round + 1;
    if (ks.last_round[t.worker] >= round) continue;
    BYTEPS_LOG(Error, "{}", UnevenEnd(ks, key, ks.waiters.front().worker, round, t.worker).message());
    for (const Waiter& w : ks.waiters) ReplyFatal(w.conn, key, w.request_id, UnevenEnd(ks, key, w.worker, round, t.worker));
    ks.waiters.clear();
  }
  // A key every other worker released is free now (the leaver pushes it no more).
  std::vector<uint64_t> keys;
  for (const auto& [key, ks] : keys_) keys.push_back(key);
  for (uint64_t key : keys) MaybeFree(key);
}

void SumEngine::ReplySum(KeyState& ks, uint64_t key, const Waiter& w) {
  Header h;
  h.opcode = Opcode::kPushPullReply;
  h.key = key;
  h.round = ks.completed_round - ks.skipped[w.worker];  // the worker's own numbering
  h.request_id = w.request_id;
  h.dtype = static_cast<uint8_t>(ks.init.dtype);
  uint64_t from = 0, len = ks.init.bytes;
  if (ks.compressed) {
    h.flags |= protocol::kFlagCompressed;
    len = ks.result_len;
  } else if (!ks.scatter.empty()) {  // a reducescatter: only this worker's slice of the partition
    const uint64_t lo = std::max(ks.scatter[w.worker].first, ks.init.offset);
    const uint64_t hi = std::min(ks.scatter[w.worker].second, ks.init.offset + ks.init.bytes);
    from = lo < hi ? lo - ks.init.offset : 0;
    len = lo < hi ? hi - lo : 0;
  }
  h.arg = static_cast<uint32_t>(from);
  h.payload_len = len;
  std::shared_ptr<uint8_t> result = ks.result;
  std::vector<iovec> iov;
  if (len > 0) iov.push_back({result.get() + from, static_cast<size_t>(len)});
  NoteReply(w.worker, len);
  (void)w.conn->Send(h, iov, [result](const Status&) {});
}

std::shared_ptr<uint8_t> SumEngine::CombineAdasum(KeyState& ks) {
  std::sort(ks.parts.begin(), ks.parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::shared_ptr<uint8_t> out = ks.parts.empty() ? nullptr : ks.parts.front().second;
  auto dt = DataTypeFromCode(ks.init.dtype);
  if (ks.parts.size() > 1 && ks.init.bytes > 0 && dt && AdasumSupports(*dt)) {  // dtype checked at init
    std::vector<void*> bufs;
    for (auto& [worker, data] : ks.parts) bufs.push_back(data.get());
    AdasumTree(bufs, ks.init.bytes / DataTypeSize(*dt), *dt);
  }
  ks.parts.clear();
  return out;
}

void SumEngine::HandlePush(PushTask& t) {
  pushed_bytes_.fetch_add(t.bytes, std::memory_order_relaxed);
  auto it = keys_.find(t.key);
  if (!t.failure.ok()) {
    const bool named = it != keys_.end() && it->second.initialized;
    ReplyError(t.conn, t.key, t.request_id,
               t.failure.WithContext(fmt::format("push of {}key {} round {} from worker {}",
                                                 named ? fmt::format("tensor '{}' ", it->second.init.name) : "",
                                                 t.key, t.round, t.worker)));
    return;
  }
  if (it == keys_.end() || !it->second.initialized) {
    ReplyError(t.conn, t.key, t.request_id,
               ProtocolError(fmt::format("push for key {} from worker {} before its declaration (InitKey)", t.key,
                                         t.worker)));
    return;
  }
  KeyState& ks = it->second;
  if (!ks.error.ok()) {
    ReplyError(t.conn, t.key, t.request_id, ks.error);
    return;
  }
  if (!IsMember(ks, t.worker)) {
    ReplyError(t.conn, t.key, t.request_id, NotAMember(ks, t.key, t.worker, "pushed"));
    return;
  }
  t.round += ks.skipped[t.worker];  // the worker's round in the key's numbering (rounds it sat out joined)
  const bool concat = ks.init.op == protocol::kOpConcat;
  const bool fits = concat ? t.offset <= ks.init.bytes && t.bytes <= ks.init.bytes - t.offset
                           : t.bytes == ks.init.bytes && t.offset == 0;
  if (ks.compressed || t.compressed) [[unlikely]] {
    if (Status st = CheckCompressedPush(ks, t); !st.ok()) {
      ReplyError(t.conn, t.key, t.request_id, st);
      return;
    }
  } else if (!fits || t.dtype != ks.init.dtype) {
    ReplyError(t.conn, t.key, t.request_id,
               InvalidArgument(fmt::format("push of {} bytes at offset {} (dtype code {}) for tensor '{}' key {}, "
                                           "declared as {}{}",
                                           t.bytes, t.offset, t.dtype, ks.init.name, t.key, DescribeDecl(ks.init),
                                           concat ? " (a concatenation)" : "")));
    return;
  }
  uint32_t& last = ks.last_round[t.worker];
  if (t.round > last) {  // a new push: can its round complete?
    for (int gone : left_) {
      if (!IsMember(ks, gone) || ks.last_round[gone] >= t.round) continue;
      Status st = UnevenEnd(ks, t.key, t.worker, t.round, gone);
      BYTEPS_LOG(Error, "{}", st.message());
      ReplyFatal(t.conn, t.key, t.request_id, st);
      return;
    }
    for (int v = 0; v < num_workers_; ++v) {
      if (ks.released[v] < 0 || ks.released[v] >= static_cast<int64_t>(t.round)) continue;
      Status st = PastRelease(ks, t.key, t.worker, t.round, v);
      BYTEPS_LOG(Error, "{}", st.message());
      ReplyError(t.conn, t.key, t.request_id, st);
      return;
    }
  }
  if (t.round <= last) {
    // A resend: never count it again. Answer it if its round is complete, else re-point the
    // waiter at the connection the resend came on.
    if (t.round == ks.completed_round && !ks.round_error.ok()) {
      ReplyError(t.conn, t.key, t.request_id, ks.round_error);
    } else if (t.round == ks.completed_round && ks.result) {
      ReplySum(ks, t.key, Waiter{t.conn, t.request_id, t.worker, t.generation});
    } else {
      for (Waiter& w : ks.waiters)
        if (w.worker == t.worker && t.generation >= w.generation) w = Waiter{t.conn, t.request_id, t.worker, t.generation};
    }
    return;
  }
  if (t.round != ks.completed_round + 1) {
    ReplyError(t.conn, t.key, t.request_id,
               ProtocolError(fmt::format("tensor '{}' key {}: worker {} pushed round {} while the server is at "
                                         "round {}",
                                         ks.init.name, t.key, t.worker, t.round, ks.completed_round + 1)));
    return;
  }
  if (ks.compressed) {
    if (Status st = AddCompressed(ks, t); !st.ok()) {  // counts for nothing: the worker fails it
      BYTEPS_LOG(Error, "{}", st.message());
      ReplyError(t.conn, t.key, t.request_id, st);
      return;
    }
  }
  last = t.round;
  NoteArrival(ks, t);
  if (t.joined_share) ks.joined_shares.push_back(t.worker);
  if (concat) {
    // Each worker's part goes to its offset; the parts of one round tile the partition.
    if (ks.pushed == 0) {
      ks.accum = std::shared_ptr<uint8_t>(new uint8_t[std::max<size_t>(ks.init.bytes, 1)](),
                                          std::default_delete<uint8_t[]>());
    }
    if (t.bytes > 0) std::memcpy(ks.accum.get() + t.offset, t.data.get(), t.bytes);
    t.data.reset();
  } else if (ks.init.op == protocol::kOpJoin) {
    PushJoin(ks, t.key, t);
    return;
  } else if (ks.init.op == protocol::kOpAdasum) {
    ks.parts.emplace_back(t.worker, std::move(t.data));  // Adasum is not associative: combined at the end
  } else if (ks.compressed) {
    t.data.reset();  // already added (AddCompressed)
  } else if (ks.pushed == 0) {
    ks.accum = std::move(t.data);  // the first push's buffer becomes the accumulator: no copy
  } else {
    auto dt = DataTypeFromCode(ks.init.dtype);
    ReduceInto(ks.accum.get(), t.data.get(), ks.init.bytes / DataTypeSize(*dt), *dt, ks.kind);
    t.data.reset();
  }
  ks.waiters.push_back(Waiter{t.conn, t.request_id, t.worker, t.generation});
  if (++ks.pushed < Needed(ks)) return;
  CompleteRound(ks, t.key);
}

void SumEngine::CompleteRound(KeyState& ks, uint64_t key) {
  const std::vector<int> absent = AbsentJoined(ks);
  const bool late = ks.join_late;
  for (int w : absent) {
    ks.last_round[w]++;          // this round is done for it
    if (!late) ks.skipped[w]++;  // its later rounds map past it (late: its push of it gets the result)
  }
  ks.completed_round++;
  ks.pushed = 0;
  NoteRoundDone();
  std::vector<Waiter> waiters;
  waiters.swap(ks.waiters);
  ks.round_error = JoinedRoundError(ks, key, absent, ks.joined_shares);
  if (ks.compressed && ks.round_error.ok()) [[unlikely]] ks.round_error = FinishCompressed(ks, key);  // ks.result
  ks.joined_shares.clear();
  if (!ks.round_error.ok()) {
    BYTEPS_LOG(Error, "{}", ks.round_error.message());
    ks.accum.reset();
    ks.parts.clear();
    ks.result.reset();
    if (ks.compressed) ks.compressed->Discard();
    for (const Waiter& w : waiters) ReplyError(w.conn, key, w.request_id, ks.round_error);
    MaybeFree(key);
    return;
  }
  const auto zeros = [&] {
    return std::shared_ptr<uint8_t>(new uint8_t[std::max<size_t>(ks.init.bytes, 1)](), std::default_delete<uint8_t[]>());
  };
  if (!absent.empty() && ks.init.op == protocol::kOpAdasum) {
    for (int w : absent) ks.parts.emplace_back(w, zeros());  // each its own: the tree writes into its inputs
  } else if (!absent.empty() && ks.kind != ReduceKind::kSum && ks.init.bytes > 0) {
    // min, max, prod: the zeros count once (each is idempotent with itself); a sum adds nothing.
    auto dt = DataTypeFromCode(ks.init.dtype);
    ReduceInto(ks.accum.get(), zeros().get(), ks.init.bytes / DataTypeSize(*dt), *dt, ks.kind);
  }
  if (ks.init.op == protocol::kOpAdasum) ks.accum = CombineAdasum(ks);
  if (!ks.compressed) ks.result = std::move(ks.accum);
  const int64_t summed_ns = TraceSummed(ks);
  for (const Waiter& w : waiters) ReplySum(ks, key, w);
  NoteRoundReplied(ks, key, summed_ns);
  MaybeFree(key);  // the last round a releaser waited for
}

}  // namespace byteps::server
