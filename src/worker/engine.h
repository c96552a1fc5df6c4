// The worker engine: what push_pull runs on. Enqueue never blocks on the network: it plans the
// tensor's partitions (KeyAssigner), queues them by priority with a credit (PriorityScheduler),
// and sends each as one combined push-pull request straight from the input tensor; the server's
// reply lands straight in the output tensor. A Handle completes when all partitions are back (or
// with the first error, which names the tensor and the peer).
//
// Non-distributed mode (DMLC_NUM_WORKER=1, no BYTEPS_FORCE_DISTRIBUTED): no network at all; the
// result is the input.
//
// Threading: all public methods are thread-safe. Reply handling runs on transport I/O threads,
// which also dispatch the next partitions when credit frees up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/cluster_client.h"
#include "common/dtype.h"
#include "config/config.h"
#include "transport/transport.h"
#include "worker/key_assigner.h"
#include "worker/local_reducer.h"
#include "worker/priority_scheduler.h"

namespace byteps::worker {

struct TensorRequest {
  std::string name;  // the core name ("byteps.<user name>" from the plugins)
  const void* input = nullptr;
  void* output = nullptr;  // may equal input (in place); must not partially overlap it
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  bool average = false;  // divide the sum by size()
  int priority = 0;      // higher goes first
};

using HandleId = int64_t;

class Engine : public transport::Handler {
 public:
  static StatusOr<std::unique_ptr<Engine>> Start(const config::Config& config);
  ~Engine() override;

  int rank() const { return rank_; }
  int size() const { return config_.size(); }
  int local_rank() const { return config_.local_rank; }
  int local_size() const { return config_.local_size; }
  bool distributed() const { return config_.distributed(); }
  const config::Config& config() const { return config_; }

  // Declares `name` (same order on every worker). With a size, places its partitions now
  // (byte-balanced over servers).
  StatusOr<uint32_t> Declare(const std::string& name, std::optional<std::pair<size_t, DataType>> size = std::nullopt);
  StatusOr<HandleId> Enqueue(const TensorRequest& request);
  // True when finished successfully, false while running; the operation's error once it failed.
  StatusOr<bool> Poll(HandleId h);
  // Waits up to timeout_s (< 0: BYTEPS_TIMEOUT). The operation's error, or DeadlineExceeded.
  Status Wait(HandleId h, double timeout_s = -1);
  void Release(HandleId h);
  // Waits for outstanding work, tells the scheduler we are done, waits for the job's end.
  Status Shutdown();

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  struct HandleState {
    HandleId id = 0;
    TensorRequest request;
    size_t remaining = 0;
    bool done = false;
    Status status;
    std::function<void(const Status&)> on_complete;  // runs under mu_ just before done
  };
  struct PartTask {
    uint64_t id = 0;
    std::shared_ptr<HandleState> handle;
    uint32_t declared_key = 0;
    size_t part = 0;
    uint64_t key = 0;
    uint32_t round = 0;
    int server = 0;
    const uint8_t* in = nullptr;
    uint8_t* out = nullptr;
    size_t len = 0;
    bool dispatched = false;
    // Set while the transport writes the reply into `out`: such a task is never completed from
    // another thread (the user could free `out`); its error waits in deferred_error.
    const transport::Connection* receiving_on = nullptr;
    Status deferred_error;
    bool holds_credit = false;  // false once the stall guard took its credit back
  };
  struct TensorState {
    const TensorPlan* plan = nullptr;
    uint32_t round = 0;
    uint32_t local_round = 0;  // rounds through the local reducer (BYTEPS_LOCAL_SIZE > 1)
    bool announced = false;  // InitKey sent to the servers
    Status error;            // a declaration mismatch poisons the tensor
    std::vector<bool> part_busy;
    std::vector<std::deque<uint64_t>> waiting;  // tasks queued behind an in-flight round
  };
  struct ServerLink {
    protocol::NodeInfo node;
    std::vector<std::shared_ptr<transport::Connection>> conns;  // guarded by mu_ after Connect
    // Per connection: when it came up, and since when it has been down in the current episode of
    // drops (a link that keeps dropping right after reconnecting must not be retried forever).
    std::vector<std::chrono::steady_clock::time_point> connected_at, down_since;
  };
  struct Outgoing {
    std::shared_ptr<transport::Connection> conn;
    protocol::Header header;
    const uint8_t* data;
    size_t len;
  };

  explicit Engine(const config::Config& config);
  Status Connect();
  StatusOr<HandleId> EnqueueLocal(const TensorRequest& r);
  // Sends r's partitions to the servers; completes `existing` when given, else a new handle.
  StatusOr<HandleId> StartDistributed(const TensorRequest& r, std::shared_ptr<HandleState> existing);
  // The connection that carries `key` to `server` (all frames of a key share one). Caller holds mu_.
  size_t ConnIndex(int server, uint64_t key) const;
  std::shared_ptr<transport::Connection> ConnFor(int server, uint64_t key) const;
  StatusOr<std::shared_ptr<transport::Connection>> OpenServerConnection(int server, double timeout_s);
  // Reconnect-and-resend: a dropped server connection (not a dead server) is re-established by
  // the reconnect thread within BYTEPS_RECONNECT_TIMEOUT; the partitions that were out on it are
  // sent again (the server ignores duplicate (worker, key, round) pushes, so results stay exact).
  void ReconnectLoop();
  Status Reconnect(int server, size_t index, const Status& reason);
  void Announce(const TensorPlan& plan);
  std::pair<protocol::Header, std::string> InitKeyFrame(const TensorPlan& plan, const PartitionPlan& p) const;
  protocol::Header PushHeader(const PartTask& t) const;
  // Moves ready partitions out of the scheduler (under mu_) and sends them (without mu_).
  void Dispatch();
  // Credit stall guard: partitions that have been out for a whole stall period are waiting for
  // other workers, not for the network; give their credit back so the queue moves. (Only possible
  // when workers enqueue in different orders; training enqueues in the same order everywhere.)
  void ReleaseStalledCreditLocked();
  void FinishTaskLocked(uint64_t task_id, const Status& st, std::vector<std::shared_ptr<HandleState>>* to_avg);
  void FailTasksLocked(const std::function<bool(const PartTask&)>& match, const Status& st);
  void FailAll(const Status& st);
  static void CompleteHandleLocked(HandleState& h);
  std::string Outstanding(const HandleState& h) const;

  config::Config config_;
  int rank_ = 0;
  // This host's worker rank (the scheduler's), kept here: the reconnect thread may still build
  // frames after Shutdown released cluster_.
  int host_rank_ = 0;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<cluster::ClusterClient> cluster_;
  std::unique_ptr<LocalReducer> local_;  // BYTEPS_LOCAL_SIZE > 1
  std::vector<ServerLink> servers_;

  std::mutex enqueue_mu_;  // serialises Enqueue so InitKey always precedes a key's first push
  mutable std::mutex mu_;
  std::condition_variable cv_;
  KeyAssigner assigner_;                                          // guarded by mu_
  PriorityScheduler scheduler_;                                   // guarded by mu_
  std::unordered_map<uint32_t, TensorState> tensors_;             // guarded by mu_
  std::unordered_map<HandleId, std::shared_ptr<HandleState>> handles_;  // guarded by mu_
  std::unordered_map<uint64_t, PartTask> tasks_;                  // guarded by mu_
  HandleId next_handle_ = 1;                                      // guarded by mu_
  uint64_t next_task_ = 1;                                        // guarded by mu_
  uint64_t completions_ = 0;  // partitions finished, for the credit stall guard; guarded by mu_
  Status failure_;                                                // guarded by mu_
  bool shut_down_ = false;                                        // guarded by mu_
  bool leaving_ = false;  // Finish sent: servers hanging up is expected; guarded by mu_

  struct LostLink {
    int server;
    size_t index;
    Status reason;
  };
  std::deque<LostLink> lost_links_;  // guarded by mu_
  std::thread reconnect_thread_;     // started by Connect
};

}  // namespace byteps::worker
