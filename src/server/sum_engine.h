// One summation shard: a thread that owns a set of keys outright (no per-key locks). Per key and
// round it accumulates the pushes of all workers, then answers every waiting push-pull with the
// round's sum from a completed-round buffer, while the next round accumulates in a fresh buffer.
// A key's declared op is its policy: "sum", "min", "max" or "prod" reduce whole partitions element
// by element; "concat" (allgather, broadcast) places each push at its offset instead: each worker
// pushes only its part of the partition (possibly nothing); "adasum" keeps each worker's push of
// the round and, once all are in, combines them in rank order (common/adasum.h: the tensor is
// one partition, so this is the whole tensor's Adasum). Workers that declare a key
// differently (name, size, dtype, op or attributes) all get a kMismatch error naming what differs.
// A push is identified by (worker, key, round): a duplicate never counts twice.
// Threading: Post* from any thread; everything else on the shard's own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/dtype.h"
#include "protocol/control.h"
#include "transport/transport.h"

namespace byteps::server {

struct PushTask {
  uint64_t key = 0;
  uint32_t round = 0;
  int worker = 0;
  // Which of the worker's connections to this server it came on (the Hello's count, growing with
  // every reconnect): a resend re-points its waiter only at a newer connection, never back at the
  // old one, whose late bytes can still arrive after the resend.
  uint64_t generation = 0;
  uint64_t request_id = 0;
  uint8_t dtype = 0;
  std::shared_ptr<transport::Connection> conn;
  std::shared_ptr<uint8_t> data;
  size_t bytes = 0;
  uint32_t offset = 0;  // concat keys: where in the partition these bytes go (the header's arg)
  // Not OK: the payload could not be received (no memory for it); the push fails with this,
  // named by its tensor, and counts for nothing.
  Status failure;
};

struct InitTask {
  uint64_t key = 0;
  int worker = 0;
  std::shared_ptr<transport::Connection> conn;
  protocol::KeyInit init;
};

// A worker has shut down (its Leave frame): it pushes nothing more. A round it has not pushed
// can never complete: whoever waits on one, or pushes one later, gets a job-fatal error naming
// both workers, the tensor and both rounds, instead of waiting for BYTEPS_TIMEOUT.
struct LeaveTask {
  int worker = 0;
};

// A worker is done with a key after `last_round` (its last push; 0: none): it moved the tensor to
// a new incarnation, or the online tuner left the key's generation behind. Once every worker
// released the key (or left) and its rounds are complete, the shard frees it. A push of a round
// past a releaser's last round can never complete: it fails naming both workers and both rounds.
struct ReleaseTask {
  uint64_t key = 0;
  int worker = 0;
  uint32_t last_round = 0;
};

class SumEngine {
 public:
  SumEngine(int index, int num_workers);
  ~SumEngine();  // drains and joins
  SumEngine(const SumEngine&) = delete;
  SumEngine& operator=(const SumEngine&) = delete;

  void Post(PushTask t);
  void Post(InitTask t);
  void Post(LeaveTask t);
  void Post(ReleaseTask t);
  // Keys this shard holds state for / has freed (any thread; a snapshot).
  size_t keys_held() const { return held_.load(std::memory_order_relaxed); }
  size_t keys_freed() const { return freed_.load(std::memory_order_relaxed); }

 private:
  struct Waiter {
    std::shared_ptr<transport::Connection> conn;
    uint64_t request_id;
    int worker;
    uint64_t generation = 0;
  };
  struct KeyState {
    bool initialized = false;
    protocol::KeyInit init;
    ReduceKind kind = ReduceKind::kSum;  // init.op's reduction (not used by concat keys)
    int init_worker = -1;
    Status error;  // not OK: the key is poisoned (declaration mismatch)
    uint32_t completed_round = 0;
    std::shared_ptr<uint8_t> accum;
    // adasum keys: the round's pushes so far, with their workers (combined in rank order at the end)
    std::vector<std::pair<int, std::shared_ptr<uint8_t>>> parts;
    int pushed = 0;
    std::vector<uint32_t> last_round;  // per worker
    std::vector<int64_t> released;     // per worker: its last round once it released the key, else -1
    std::vector<Waiter> waiters;
    std::shared_ptr<uint8_t> result;   // sum of completed_round
    // Per worker: whether it belongs to the key's process set (attribute "members"; all by
    // default). Only members push; a round completes when every member pushed.
    std::vector<char> member;
    int num_members = 0;
  };
  using Task = std::variant<PushTask, InitTask, LeaveTask, ReleaseTask>;

  void Run();
  void HandleInit(InitTask& t);
  void HandlePush(PushTask& t);
  void HandleLeave(const LeaveTask& t);
  void HandleRelease(const ReleaseTask& t);  // sum_engine_release.cc
  // The state of `key`, with its per-worker vectors sized.
  KeyState& StateOf(uint64_t key);
  // Frees `key` when every worker released it (or left) and its rounds are complete; true if it did.
  bool MaybeFree(uint64_t key);
  // The error for `worker` pushing `round` of a key that `releaser` released after an earlier round.
  static Status PastRelease(const KeyState& ks, uint64_t key, int worker, uint32_t round, int releaser);
  // Why `b` (from worker_b) differs from the key's first declaration, or "" when it does not.
  static std::string DescribeMismatch(const KeyState& ks, uint64_t key, const protocol::KeyInit& b, int worker_b);
  // The error for `worker` needing `round` of `key`, which `gone` (a worker that left) never pushed.
  static Status UnevenEnd(const KeyState& ks, uint64_t key, int worker, uint32_t round, int gone);
  static void ReplyFatal(const std::shared_ptr<transport::Connection>& conn, uint64_t key, uint64_t request_id,
                         const Status& error);
  void ReplySum(KeyState& ks, uint64_t key, const Waiter& w);
  // An adasum key's round result: the Adasum of ks.parts in rank order (ks.parts is emptied).
  static std::shared_ptr<uint8_t> CombineAdasum(KeyState& ks);
  static void ReplyError(const std::shared_ptr<transport::Connection>& conn, uint64_t key,
                         uint64_t request_id, const Status& error);
  void Enqueue(Task t);
  // sum_engine_members.cc: the key's process set from its first declaration (an error names the
  // tensor when the attribute is malformed or leaves out the declaring worker); the pushes a
  // round needs; the error for a push or declaration from a worker outside the set.
  static Status SetMembers(KeyState& ks, uint64_t key, int num_workers, int declaring_worker);
  static int Needed(const KeyState& ks) { return ks.num_members; }
  static bool IsMember(const KeyState& ks, int worker) { return ks.member.empty() || ks.member[worker]; }
  static Status NotAMember(const KeyState& ks, uint64_t key, int worker, const char* what);

  const int index_;
  const int num_workers_;
  std::unordered_map<uint64_t, KeyState> keys_;  // shard thread only
  std::vector<int> left_;                         // workers that have left (Leave), shard thread only
  std::atomic<size_t> held_{0};
  std::atomic<size_t> freed_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;
};

}  // namespace byteps::server
