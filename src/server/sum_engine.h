// One summation shard: a thread that owns a set of keys outright (no per-key locks). Per key and
// round it accumulates the pushes of all workers, then answers every waiting push-pull with the
// round's sum from a completed-round buffer, while the next round accumulates in a fresh buffer.
// A key's declared op is its policy: "sum", "min", "max" or "prod" reduce whole partitions element
// by element; "concat" (allgather, broadcast) places each push at its offset instead: each worker
// pushes only its part of the partition (possibly nothing); "adasum" keeps each worker's push of
// the round and, once all are in, combines them in rank order (common/adasum.h: the tensor is
// one partition, so this is the whole tensor's Adasum). Workers that declare a key
// differently (name, size, dtype, op or attributes) all get a kMismatch error naming what differs.
// A "sum" key whose attributes configure compression (sum_engine_compressed.cc, compressed_key.h)
// takes codec payloads (kFlagCompressed), decodes them onto a float32 sum and answers the round
// with that sum compressed once.
// A push is identified by (worker, key, round): a duplicate never counts twice.
// Join (Horovod's join(), sum_engine_join.cc): a "join" key's push marks its worker joined on the
// server's JoinBoard; while it is joined, rounds of the other keys complete without it, as if it
// had pushed zeros (min/max/prod reduce with a zero buffer, adasum combines a zero vector);
// concatenations and keys declared "join=fail" (reducescatter) fail that round instead (kMismatch);
// "join=late" keys (one-shot agreements) answer the joined worker's own later push of the round
// with its result.
// Per (key, worker) the shard counts the rounds completed without the worker (`skipped`): its later
// pushes and releases are numbered in its own rounds and mapped onto the key's (round + skipped),
// and replies carry the worker's own round. The join round completes once every worker pushed it;
// its result is the last push (the last worker's rank), and the board resets.
// Threading: Post* from any thread; everything else on the shard's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/dtype.h"
#include "common/metrics.h"
#include "common/owner_query.h"
#include "protocol/control.h"
#include "server/compressed_key.h"
#include "server/join_board.h"
#include "server/server_trace.h"
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
  bool joined_share = false;  // protocol::kFlagJoinedShare: a process behind it has joined
  bool compressed = false;    // protocol::kFlagCompressed: data is a codec's payload of the partition
  int64_t arrived_ns = 0;     // tracing: when the whole frame had arrived (TraceNowNs); 0 = not taken
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

// Someone joined (JoinBoard): open rounds whose non-joined members all pushed complete now.
struct JoinTask {};

// The stall report (kill -USR1): the shard's open rounds, as text (sum_engine_report.cc).
struct ReportTask {
  owner_query::Reply<std::string> out;
};

class SumEngine {
 public:
  // `board`: the server's joined workers, shared by its shards (null: a board of this shard's own).
  // `trace`: where this shard records its traced rounds (null: tracing off); borrowed, outlives
  // the shard, written only on the shard's thread.
  SumEngine(int index, int num_workers, JoinBoard* board = nullptr, TraceBuffer* trace = nullptr);
  ~SumEngine();  // drains and joins
  SumEngine(const SumEngine&) = delete;
  SumEngine& operator=(const SumEngine&) = delete;

  void Post(PushTask t);
  void Post(InitTask t);
  void Post(LeaveTask t);
  void Post(ReleaseTask t);
  void Post(JoinTask t);
  // The open rounds of this shard's keys: one line each (the key, its tensor, who pushed, who is
  // missing, replies waiting), taken on the shard's thread. Unavailable when the shard does not
  // answer within timeout_s.
  StatusOr<std::string> OpenRounds(double timeout_s);
  // Keys this shard holds state for / has freed (any thread; a snapshot).
  size_t keys_held() const { return held_.load(std::memory_order_relaxed); }
  size_t keys_freed() const { return freed_.load(std::memory_order_relaxed); }
  // Bytes of pushes this shard took (any thread; a snapshot): its share of the job's traffic.
  uint64_t pushed_bytes() const { return pushed_bytes_.load(std::memory_order_relaxed); }

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
    bool join_fails = false;             // attribute join=fail
    bool join_late = false;              // attribute join=late
    int init_worker = -1;
    Status error;  // not OK: the key is poisoned (declaration mismatch)
    uint32_t completed_round = 0;
    std::shared_ptr<uint8_t> accum;
    // adasum keys: the round's pushes so far, with their workers (combined in rank order at the end)
    std::vector<std::pair<int, std::shared_ptr<uint8_t>>> parts;
    int pushed = 0;
    std::vector<uint32_t> last_round;  // per worker
    std::vector<int64_t> released;     // per worker: its last round once it released the key, else -1
    std::vector<uint32_t> skipped;     // per worker: rounds completed while it had joined (zeros)
    Status round_error;                // the completed round failed (a concatenation while joined)
    std::vector<int> joined_shares;    // this round's pushers with a joined process behind them
    std::vector<Waiter> waiters;
    std::chrono::steady_clock::time_point first_push_at{};  // of the open round (arrival lag)
    std::shared_ptr<uint8_t> result;   // sum of completed_round
    // Compressed keys (compression attributes, sum_engine_compressed.cc): the codec, the open
    // round's float32 sum and the error feedback; result is then the compressed sum, result_len
    // its length. Null: the key's pushes and replies are plain partitions.
    std::unique_ptr<CompressedKey> compressed;
    size_t result_len = 0;
    // Per worker: whether it belongs to the key's process set (attribute "members"; all by
    // default). Only members push; a round completes when every member pushed.
    std::vector<char> member;
    int num_members = 0;
    // Per worker: the tensor bytes its replies carry (attribute "scatter", a reducescatter); empty:
    // the whole partition.
    std::vector<std::pair<uint64_t, uint64_t>> scatter;
    // Tracing (trace_ set, the round traced): the current round's earliest and latest push
    // arrival and the latest's worker; trace_round says which round they belong to.
    uint32_t trace_round = 0;
    int64_t trace_first_ns = 0;
    int64_t trace_last_ns = 0;
    int trace_last_worker = -1;
  };
  using Task = std::variant<PushTask, InitTask, LeaveTask, ReleaseTask, JoinTask, ReportTask>;

  void Run();
  void HandleInit(InitTask& t);
  void HandlePush(PushTask& t);
  void HandleLeave(const LeaveTask& t);
  std::string DescribeOpenRounds() const;  // sum_engine_report.cc
  void HandleRelease(const ReleaseTask& t);  // sum_engine_release.cc
  // sum_engine_join.cc: completes every open round that no longer waits for anyone.
  void HandleJoin();
  // A join key's push (its data is the pusher's rank): marks the worker joined, or completes the
  // join round and resets the board.
  void PushJoin(KeyState& ks, uint64_t key, PushTask& t);
  // The members that have joined and did not push the current round (they count as zeros).
  std::vector<int> AbsentJoined(const KeyState& ks) const;
  // Why a round of this key cannot go on while `absent` have joined, or `shares` pushed with a joined
  // process behind them (OK when it can).
  static Status JoinedRoundError(const KeyState& ks, uint64_t key, const std::vector<int>& absent,
                                 const std::vector<int>& shares);
  // Whether the key was declared with attribute key=value.
  static bool HasAttr(const KeyState& ks, const char* key, const char* value);
  // sum_engine_compressed.cc: the key's compression state from its first declaration (none when
  // its attributes configure none); an error names the tensor and the key.
  static Status SetCompression(KeyState& ks, uint64_t key);
  // Whether push `t` (its round in the key's numbering) fits the key's policy: the compressed flag
  // as declared, a compressed payload no larger than the codec writes. Named errors otherwise.
  static Status CheckCompressedPush(const KeyState& ks, const PushTask& t);
  // Decodes a compressed push onto the round's sum; a payload that does not decode is an error
  // naming the tensor, key, worker and round, and adds nothing.
  static Status AddCompressed(KeyState& ks, const PushTask& t);
  // The completing round's result: the compressed sum into ks.result / ks.result_len.
  static Status FinishCompressed(KeyState& ks, uint64_t key);
  // Completes the current round: the joined absentees' zeros, the result, the waiters' replies.
  void CompleteRound(KeyState& ks, uint64_t key);
  // sum_engine_observe.cc: the metrics and the trace of the shard's rounds.
  void AddMetrics();  // the constructor: by_worker_, rounds_, summed_bytes_
  // A new push `t` of the key's open round was taken (the round's first push starts its lag clock).
  void NoteArrival(KeyState& ks, const PushTask& t);
  // Tracing: a new push `t` of a traced round arrived (its times go into ks).
  static void NoteTracedPush(KeyState& ks, const PushTask& t);
  void NoteReply(int worker, uint64_t bytes);  // a reply of `bytes` went to `worker`
  void NoteRoundDone();                        // a round completed (failed or not)
  // Tracing: the time the completed round's result was ready, 0 when the round is not traced.
  int64_t TraceSummed(const KeyState& ks) const;
  // Tracing: the completed round's replies went out; records it when summed_ns is not 0.
  void NoteRoundReplied(const KeyState& ks, uint64_t key, int64_t summed_ns);
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
  // The members' slices from the attribute "scatter" (after SetMembers); an error names the tensor.
  static Status SetScatter(KeyState& ks, uint64_t key);
  // Pushes the current round needs: every member that has not joined (a join round: everyone).
  int Needed(const KeyState& ks) const;
  static bool IsMember(const KeyState& ks, int worker) { return ks.member.empty() || ks.member[worker]; }
  static Status NotAMember(const KeyState& ks, uint64_t key, int worker, const char* what);

  const int index_;
  const int num_workers_;
  std::unordered_map<uint64_t, KeyState> keys_;  // shard thread only
  std::vector<int> left_;                         // workers that have left (Leave), shard thread only
  std::unique_ptr<JoinBoard> own_board_;          // when no shared board was given
  JoinBoard* board_;
  struct WorkerMetrics {
    metrics::Counter* pushed;
    metrics::Counter* replied;
    metrics::Histogram* lag;
  };
  std::vector<WorkerMetrics> by_worker_;  // metrics::Global(), by worker rank; fixed after construction
  metrics::Counter* rounds_ = nullptr;
  metrics::Counter* summed_bytes_ = nullptr;
  TraceBuffer* const trace_;                      // null: not tracing
  std::atomic<size_t> held_{0};
  std::atomic<uint64_t> pushed_bytes_{0};
  std::atomic<size_t> freed_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;
};

}  // namespace byteps::server
