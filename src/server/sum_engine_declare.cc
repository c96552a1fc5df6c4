// A key's declarations: the first one sets the key up (members, scatter, compression); each later
// one must match it, else every waiter and the sender get the mismatch, which names what differs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>

#include "common/adasum.h"
#include "common/logging.h"
#include "server/sum_engine.h"

namespace byteps::server {

void SumEngine::HandleInit(InitTask& t) {
  KeyState& ks = StateOf(t.key);
  if (!ks.initialized) {
    ks.initialized = true;
    ks.init = t.init;
    ks.kind = protocol::ReduceKindOfOp(t.init.op).value_or(ReduceKind::kSum);
    ks.join_fails = HasAttr(ks, protocol::kAttrJoin, protocol::kJoinFails);  // parsed once, read every round
    ks.join_late = HasAttr(ks, protocol::kAttrJoin, protocol::kJoinLate);
    ks.init_worker = t.worker;
    Status st = SetMembers(ks, t.key, num_workers_, t.worker);
    if (st.ok() && ks.member[t.worker]) st = SetScatter(ks, t.key);
    if (!st.ok()) {
      BYTEPS_LOG(Error, "{}", st.message());
      if (!ks.member[t.worker]) {
        ks.initialized = false;  // a non-member's declaration does not count: the members declare the key
      } else {
        ks.error = st;  // a malformed set: every member declares the same, and every member fails alike
      }
      ReplyError(t.conn, t.key, 0, st);
      return;
    }
    auto dt = DataTypeFromCode(t.init.dtype);
    if (t.init.op == protocol::kOpAdasum && !(dt && AdasumSupports(*dt))) {
      // The workers check this first; a server never runs Adasum on integers.
      ks.error = InvalidArgument(fmt::format("adasum of tensor '{}' (key {}): dtype {} is not supported (float16, "
                                             "float32 or float64)",
                                             t.init.name, t.key, dt ? DataTypeName(*dt) : "unknown"));
      ReplyError(t.conn, t.key, 0, ks.error);
      return;
    }
    if (Status cs = SetCompression(ks, t.key); !cs.ok()) {
      BYTEPS_LOG(Error, "{}", cs.message());
      ks.error = cs;
      ReplyError(t.conn, t.key, 0, ks.error);
    }
    return;
  }
  const std::string msg = DescribeMismatch(ks, t.key, t.init, t.worker);
  if (msg.empty()) {
    if (!IsMember(ks, t.worker)) ReplyError(t.conn, t.key, 0, NotAMember(ks, t.key, t.worker, "declared"));
    return;
  }
  BYTEPS_LOG(Error, "{}", msg);
  if (ks.error.ok()) ks.error = Mismatch(msg);
  // Everyone who is waiting on this key gets the error, and so does the worker that sent it.
  for (const Waiter& w : ks.waiters) ReplyError(w.conn, t.key, w.request_id, ks.error);
  ks.waiters.clear();
  ks.accum.reset();
  ks.parts.clear();
  if (ks.compressed) ks.compressed->Discard();
  ks.pushed = 0;
  ReplyError(t.conn, t.key, 0, ks.error);
}

std::string SumEngine::DescribeMismatch(const KeyState& ks, uint64_t key, const protocol::KeyInit& b, int worker_b) {
  const protocol::KeyInit& a = ks.init;
  const int worker_a = ks.init_worker;
  if (a.name != b.name) {
    return fmt::format("declaration mismatch for key {}: worker {} declared tensor '{}' but worker {} declared "
                       "'{}' under the same key (keys come from the scheduler's name service, which gives every "
                       "name its own: the workers were given different keys for one name)",
                       key, worker_a, a.name, worker_b, b.name);
  }
  if (a.op != b.op) {
    return fmt::format("tensor '{}' (key {}) is a {} on worker {} but a {} on worker {} (the workers must run the "
                       "same operation under one name at the same time)",
                       b.name, key, a.op, worker_a, b.op, worker_b);
  }
  if (a.bytes != b.bytes || a.dtype != b.dtype || a.tensor_bytes != b.tensor_bytes) {
    const auto type = [](int code) {
      auto dt = DataTypeFromCode(code);
      return dt ? std::string(DataTypeName(*dt)) : fmt::format("unknown dtype {}", code);
    };
    return fmt::format("tensor '{}' (key {}) has {} bytes of {} on worker {} but {} bytes of {} on worker {}", b.name,
                       key, a.tensor_bytes, type(a.dtype), worker_a, b.tensor_bytes, type(b.dtype), worker_b);
  }
  if (a.attrs == b.attrs) return "";
  // Each attribute whose value differs (or that only one side has), in the first declaration's order.
  const auto pa = protocol::ParseAttrs(a.attrs), pb = protocol::ParseAttrs(b.attrs);
  const auto find = [](const auto& list, const std::string& k) -> std::optional<std::string> {
    for (const auto& [key, value] : list)
      if (key == k) return value;
    return std::nullopt;
  };
  std::vector<std::string> diffs;
  const auto compare = [&](const std::string& k) {
    auto va = find(pa, k), vb = find(pb, k);
    if (va == vb) return;
    diffs.push_back(fmt::format("{} is {} on worker {} but {} on worker {}", k, va ? *va : "unset", worker_a,
                                vb ? *vb : "unset", worker_b));
  };
  for (const auto& [k, v] : pa) compare(k);
  for (const auto& [k, v] : pb)
    if (!find(pa, k)) compare(k);
  if (diffs.empty()) {  // the same pairs, written differently (order, repeats)
    diffs.push_back(fmt::format("attributes are '{}' on worker {} but '{}' on worker {}", a.attrs, worker_a, b.attrs,
                                worker_b));
  }
  return fmt::format("tensor '{}' (key {}, a {}): {}", b.name, key, b.op, fmt::join(diffs, "; "));
}

}  // namespace byteps::server
