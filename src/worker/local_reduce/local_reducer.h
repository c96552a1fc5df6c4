// Several training processes on one worker host (BYTEPS_LOCAL_SIZE > 1): they reduce through
// shared memory first, and only the local root (the highest local rank, as in BytePS) talks to
// the servers. Control messages travel over a Unix socket between each non-root and the root;
// tensor bytes travel through per-tensor shared-memory segments, one partition at a time (the
// message names the partition key; the partition's bytes sit at its offset in the tensor's
// segment), so partition i can go to the servers while partition i+1 is still being reduced:
//   non-root r: copies its partition into its slot segment, sends LocalReady(key, round);
//   root:       once its own partition and every LocalReady of (key, round) are in, adds the slots
//               into its destination, pushes/pulls the sum like a one-process worker, then copies
//               the result into the result segment and sends LocalDone(key, round); each non-root
//               copies the result into its output.
// A partition's next round is only contributed once its previous round left the pipeline
// (RoundSequencer), so one slot and one result segment per tensor suffice.
// Segment and socket names are unique per job and per host; stale segments of dead processes
// are removed at start.
// Threading: all methods are thread-safe; callbacks run on the local transport's I/O thread or on
// the calling thread, never under the reducer's lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/reducer.h"
#include "protocol/control.h"
#include "transport/transport.h"
#include "worker/local_reduce/shm_segment.h"

namespace byteps::worker::local_reduce {

struct LocalOptions {
  int local_rank = 0;    // this process's place among the circle's members (its BYTEPS_LOCAL_RANK in "")
  int local_size = 1;    // the circle's members
  // Which circle of the host's processes this reducer joins: "" every local process; a PCIe
  // switch's processes ("sw<j>") or the switches' roots ("x") in cross-switch mode (local_circles.h).
  // Its socket and shared memory are named by it.
  std::string circle;
  std::vector<int> members;  // the members' BYTEPS_LOCAL_RANKs by place (messages); empty: 0..local_size-1
  std::string job;       // job-unique token (derived from BYTEPS_JOB_SECRET or the scheduler address)
  int host_id = 0;       // DMLC_WORKER_ID: which worker host
  int global_rank = 0;   // this process's rank in the job (a process set's "members" name ranks)
  double start_timeout_s = 60;
  transport::TransportOptions transport;  // secret and checksum; threads/buffers are set here
  // A job without servers: the root plans every local process's names with this (one planner for
  // the host, so names pair by name whatever order each process first uses them in); the others
  // ask it through ResolveAtRoot. Unset: each process plans (or asks the scheduler) itself.
  std::function<StatusOr<protocol::NamePlan>(const protocol::NameRequest&)> names;
};

class LocalReducer : public transport::Handler {
 public:
  using Done = std::function<void(const Status&)>;

  // Root: listens and waits until every local process has said hello. Non-root: connects to
  // the root. `on_failure` runs when the other side goes away.
  static StatusOr<std::unique_ptr<LocalReducer>> Start(const LocalOptions& options, Done on_failure);
  ~LocalReducer() override;

  bool is_root() const { return options_.local_rank == options_.local_size - 1; }
  int local_rank() const { return options_.local_rank; }
  int local_size() const { return options_.local_size; }
  int RankOf(int place) const;  // the BYTEPS_LOCAL_RANK of the circle's member at `place` (for messages)

  // One partition of one round: `key` is its partition key, `offset`/`bytes` its place in the
  // tensor of `tensor_bytes` bytes.
  struct Part {
    uint64_t key = 0;
    uint32_t round = 0;
    std::string name;
    size_t offset = 0;
    size_t bytes = 0;
    size_t tensor_bytes = 0;
    DataType dtype = DataType::kFloat32;
    ReduceKind kind = ReduceKind::kSum;  // how the root combines the processes' contributions
    // Instead of `kind`: Adasum of the whole contributions in local-rank order (common/adasum.h's
    // tree; the host's result is then one input of the servers' tree across hosts).
    bool adasum = false;
    bool average = false;  // the sum is divided by size() (a stand-in's request needs it)
    std::string attrs;     // the request's declaration attributes (likewise)
    // Engine::Join's round: the result is the last contribution in (the host's last joiner's rank).
    bool join = false;
    // The bytes live in device memory and a device group moves them (group_stages.h): the
    // reducer only counts who is ready; no shared memory is touched.
    bool on_device = false;
  };
  // Non-root: writes `input` into this process's slot and tells the root. The result of the round
  // is taken with AwaitResult.
  Status Contribute(const Part& part, const void* input);
  // Non-root: copies the round's result into `output` once the root published it (perhaps already),
  // then runs `done`.
  void AwaitResult(const Part& part, void* output, Done done);
  // Root: `output` = `input` + every non-root's slot, once all are in (a joined one's share counts
  // as zeros: `joined_share` then); then `ready` runs.
  using GatherDone = std::function<void(const Status&, bool joined_share)>;
  Status Gather(const Part& part, const void* input, void* output, GatherDone ready);
  // Root: a tensor round the root will not enter itself goes to `stand_in` once (on the calling or
  // the I/O thread, outside the lock): the engine then runs that operation on the root's behalf,
  // its own share left out (outside the round's process set) or zeros (joined). Set once, before
  // any non-root's round can need it.
  using StandIn = std::function<void(const Part&)>;
  void SetStandIn(StandIn stand_in);
  // Process sets (attribute "members" of global ranks): a round waits for, and its result goes to,
  // the members only.
  // join() with several processes per host (root side). A non-root's join round (Part::join) marks
  // it joined: later rounds complete without it, its share zeros, and its round numbers map past
  // the rounds it sat out. Once the root itself joined (RootJoins, after its own operations
  // finished), it stands in for every round a non-root starts. The marks clear when the join
  // round completes.
  void RootJoins();
  // Root: hands the round's result to every non-root.
  Status Publish(const Part& part, const void* result);
  // Root: tells every non-root in the round that it failed (code in the header's arg, message as
  // payload).
  void PublishError(const Part& part, const Status& error);
  // Device groups (group_stages.h) use this process's local socket to form and to order: the root
  // sends every non-root one frame (in the order of the calls), a non-root sends the root its
  // device (kLocalGroup). The listener gets kLocalGroup frames on both sides and kLocalGo frames on
  // a non-root, on the I/O thread, in order; a frame a non-root sends carries its place in
  // `sender` (checked here). Frames that come while no listener is set are kept for the next one
  // (a peer's first device tensor may come before this process's pipeline exists), which gets
  // them, in order, inside SetGroupListener. Setting a listener (or none) returns once no call of
  // the previous one is in progress.
  Status SendToNonRoots(const protocol::Header& h, const std::string& payload);
  Status SendToRoot(const protocol::Header& h, const std::string& payload);  // non-root
  void SetGroupListener(std::function<void(const protocol::Header&, const std::string&)> listener);
  // Non-root of a job without servers: the root's plan for `r` (LocalOptions::names), waiting at
  // most timeout_s (local_reducer_names.cc).
  StatusOr<protocol::NamePlan> ResolveAtRoot(const protocol::NameRequest& r, double timeout_s);
  // Fails everything waiting (e.g. the job failed elsewhere).
  void FailAll(const Status& st);
  // The first failure (OK while healthy).
  Status failure() const;
  // Tells the root this process leaves cleanly (non-root), so its disconnect is not a failure.
  void Leave();
  // Root: waits up to timeout_s until every non-root left (or the circle failed); false on timeout.
  bool AwaitPeersLeft(double timeout_s);
  // Stops the local socket: no callback (listener, round) runs after this returns. The object
  // stays usable for the calls of those that still hold it (they fail).
  void Close();

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  using RoundKey = std::pair<uint64_t, uint32_t>;  // (partition key, round)
  struct Round {
    int ready = 0;  // non-roots in
    std::vector<int> from;  // their local ranks, in order of arrival
    bool root_in = false;
    bool root_last = false;  // the root came in after every non-root so far
    Part part;
    const void* input = nullptr;
    void* output = nullptr;
    GatherDone done;
    Status error;
  };
  struct Peer {
    std::shared_ptr<transport::Connection> conn;
    int pid = 0;
    int global_rank = 0;
    bool left = false;
    std::map<uint32_t, std::unique_ptr<ShmSegment>> slots;  // by declared key (root side)
  };
  struct Result {  // non-root: a round's result, published (or failed) and/or awaited
    bool published = false;
    Status error;
    Part part;
    void* output = nullptr;
    Done done;
  };

  LocalReducer(const LocalOptions& options, Done on_failure);
  std::string SocketName() const;
  // Maps (creating or opening) the tensor's segment `seg` of at least `bytes` bytes (under mu_).
  Status MapLocked(std::unique_ptr<ShmSegment>* seg, bool create, int creator_pid, const std::string& suffix,
                   size_t bytes);
  // Root, under mu_: when (key, round) is complete, returns the work that sums it and runs its callback.
  std::function<void()> MaybeReduceLocked(const RoundKey& rk);
  // "adasum" or the element-wise kind's name (errors).
  static const char* CombineName(const Part& p);
  // A mismatch error if `a` and `b` combine differently (OK if they agree).
  static Status CombineMismatch(const Part& a, const char* a_who, const Part& b, const char* b_who);
  // Non-root, under mu_: when (key, round) is both published and awaited, returns the work that
  // copies the result out and runs its callback.
  std::function<void()> MaybeDeliverLocked(const RoundKey& rk);
  void OnLocalReady(transport::Connection& c, const protocol::Header& h, const std::string& payload);
  void OnNameRequest(transport::Connection& c, const protocol::Header& h, const std::string& payload);  // root
  void OnNameReply(const protocol::Header& h, const std::string& payload);                              // non-root
  // local_reducer_join.cc, under mu_: the round's joined non-roots that did not contribute; nullopt
  // while a non-root is still waited for.
  std::optional<std::vector<int>> AbsentJoinedLocked(const Round& r) const;
  // A non-root's round `round` of `key` in the root's numbering (past the rounds it sat out).
  uint32_t MapRoundLocked(uint64_t key, int rank, uint32_t round) const;
  uint32_t MapRoundBackLocked(uint64_t key, int rank, uint32_t round) const;  // the other way
  // The round's result goes to this non-root (not to one that had joined and sat it out), with
  // the round in its own numbering.
  bool SendsToLocked(const Part& part, int rank) const;
  // After a non-root joined: the work of every round that now completes.
  std::vector<std::function<void()>> ReduceAllLocked();
  // The stand-in to start for a non-root's round the root will not enter (it joined, or is outside
  // the round's process set), if any.
  std::function<void()> MaybeStandInLocked(const RoundKey& rk, const Part& part);
  // Whether the process of this global rank belongs to the part's process set (attribute
  // "members"; none: everyone).
  static bool IsMember(const Part& part, int global_rank);

  LocalOptions options_;
  Done on_failure_;
  std::unique_ptr<transport::Transport> transport_;
  int root_pid_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;
  // Root side.
  std::map<int, Peer> peers_;  // by local rank
  std::map<RoundKey, Round> rounds_;
  std::map<uint32_t, std::unique_ptr<ShmSegment>> results_;  // by declared key
  std::set<int> joined_;    // non-roots that joined (their join round came in)
  bool root_joined_ = false;
  StandIn stand_in_;  // set for good on the root (Engine::StartLocal)
  std::map<uint32_t, uint32_t> stood_in_;  // declared key -> the last round handed to stand_in_
  std::map<std::pair<uint64_t, int>, uint32_t> skipped_;  // (partition key, non-root): rounds it sat out
  // Non-root side.
  std::shared_ptr<transport::Connection> root_;
  std::map<uint32_t, std::unique_ptr<ShmSegment>> my_slots_;     // by declared key
  std::map<uint32_t, std::unique_ptr<ShmSegment>> result_maps_;  // by declared key
  std::map<RoundKey, Result> awaited_;
  uint64_t next_name_request_ = 1;
  std::map<uint64_t, std::optional<protocol::NameReply>> name_replies_;  // by request id
  std::function<void(const protocol::Header&, const std::string&)> group_listener_;  // guarded by mu_
  int listener_calls_ = 0;  // calls of group_listener_ in progress (guarded by mu_)
  // Group frames that came with no listener set, or while SetGroupListener hands those over.
  std::deque<std::pair<protocol::Header, std::string>> early_group_frames_;
  bool early_draining_ = false;
};

}  // namespace byteps::worker::local_reduce
