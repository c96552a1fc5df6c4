// What every worker and server runs to join a job: registers with the scheduler, learns its rank
// and the address table, sends heartbeats, takes part in barriers, and hears about failures and
// the end of the job.
// Threading: public methods are thread-safe. on_failure runs on a transport I/O thread (must not
// block). A heartbeat thread ("bps-heartbeat") runs while connected; a rejoin thread ("bps-rejoin")
// while a dropped scheduler connection is re-established. One mutex guards all state.
// Seam for tests: ClientOptions::clock drives the heartbeat (its interval and the scheduler's
// silence), so a test advances fake time instead of sleeping; the other deadlines are real time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "protocol/control.h"
#include "transport/transport.h"

namespace byteps::cluster {

struct ClientOptions {
  std::string role = "worker";  // "worker" | "server"
  int requested_rank = -1;
  std::string host = "127.0.0.1";  // address others use to reach this node
  int port = 0;                    // data port (servers)
  double nic_rate = 0;             // this machine's NIC rate in bytes/s, 0 = unknown (RegisterRequest)
  std::string root_uri = "127.0.0.1";
  int root_port = 0;
  int num_workers = 1;
  int num_servers = 1;
  double start_timeout_s = 60;
  double heartbeat_interval_s = 1;  // 0 = off
  double heartbeat_timeout_s = 15;  // the scheduler silent this long: the connection is dead
  double op_timeout_s = 300;        // barrier / finish deadline
  double reconnect_timeout_s = 5;   // a dropped scheduler connection is re-established within this
  const Clock* clock = nullptr;     // heartbeat clock; nullptr: Clock::Steady(); else borrowed,
                                    // outlives the client
  // What each heartbeat carries for `byteps top` (node_summary.h), called on the heartbeat thread;
  // empty: heartbeats carry nothing.
  std::function<std::string()> summary;
};

class ClusterClient : public transport::Handler {
 public:
  using FailureCallback = std::function<void(const Status&)>;

  // Connects to the scheduler and registers; blocks until the address table arrives, the
  // scheduler refuses us, or start_timeout_s passes. `transport` is borrowed and must outlive
  // the client.
  static StatusOr<std::unique_ptr<ClusterClient>> Join(transport::Transport& transport,
                                                       const ClientOptions& options,
                                                       FailureCallback on_failure);
  ~ClusterClient() override;

  int rank() const { return rank_; }
  const std::vector<protocol::NodeInfo>& nodes() const { return nodes_; }
  // Each server's share of the bytes and the scheduler's account of the placement (RegisterReply).
  const std::vector<double>& server_shares() const { return shares_; }
  const std::string& placement() const { return placement_; }
  // The job's id from the scheduler (16 hex characters; "" from a scheduler that sent none) and
  // what to add to this node's system clock (µs) to read the scheduler's, measured at registration
  // (clock_offset.h; 0 when the reply carried no clock). Fixed once Join returned.
  const std::string& job_id() const { return job_id_; }
  int64_t clock_offset_us() const { return clock_offset_us_; }
  std::vector<protocol::NodeInfo> servers() const { return NodesOf("server"); }
  std::vector<protocol::NodeInfo> workers() const { return NodesOf("worker"); }

  // Blocks until every worker (all_nodes=false) or every node entered barrier `id`.
  Status Barrier(uint64_t id, bool all_nodes);
  // Worker: tells the scheduler this worker is done and waits for the job's end. A worker that
  // saw a failure the scheduler may not know of yet (e.g. a server connection reset) passes it:
  // the scheduler then ends the job as failed, naming it, instead of as a clean finish.
  Status Finish(const Status& local_failure = Status::Ok());
  // Server: blocks until the scheduler ends the job. OK for a clean end, else the failure.
  Status WaitTerminate();
  // The first failure heard (node death, job error, scheduler lost); OK while healthy.
  Status failure() const;

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  ClusterClient(transport::Transport& transport, const ClientOptions& options, FailureCallback on_failure);
  protocol::RegisterRequest MakeRegisterRequest(bool rejoin) const;
  std::vector<protocol::NodeInfo> NodesOf(const std::string& role) const;
  static protocol::Header BarrierHeader(uint64_t id, bool all_nodes);
  static protocol::Header FinishHeader(uint32_t arg);
  std::shared_ptr<transport::Connection> Conn() const;
  void Fail(const Status& st);
  void HeartbeatLoop();
  // After the scheduler connection dropped (not at the job's end): reconnect, register again as
  // the same node, repeat the barrier / Finish it was waiting on. Fails the node after
  // reconnect_timeout_s.
  void Rejoin(Status reason);
  Status TryRejoin(double timeout_s);
  Status WaitFor(const std::function<bool()>& done, double timeout_s, const std::string& what);

  transport::Transport* const transport_;
  ClientOptions options_;
  const Clock& clock_;
  FailureCallback on_failure_;
  const std::string instance_;  // RegisterRequest.instance: random, the same on every registration
  std::shared_ptr<transport::Connection> conn_;  // guarded by mu_ (replaced on rejoin)
  int rank_ = -1;
  std::vector<protocol::NodeInfo> nodes_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool registered_ = false;
  std::string refusal_;
  std::set<uint64_t> released_barriers_;
  bool terminated_ = false;
  uint64_t terminate_code_ = 0;
  bool stopping_ = false;
  Status failure_;
  std::vector<double> shares_;
  std::string placement_;
  std::string job_id_;
  int64_t clock_offset_us_ = 0;
  int64_t register_sent_us_ = 0;  // system clock when the current Register went out
  std::map<uint64_t, bool> pending_barriers_;    // id -> all_nodes, until released
  bool finish_sent_ = false;
  uint32_t finish_arg_ = 0;
  std::string finish_message_;
  bool rejoining_ = false;
  Status join_lost_;  // the connection dropped while Join waited for the RegisterReply
  // A connection that closed before Join made it conn_, and why (Join claims it if it is its own).
  std::pair<std::weak_ptr<transport::Connection>, Status> early_close_;
  Clock::TimePoint last_heard_;  // any frame from the scheduler (clock_)
  bool rejoined_ = false;                        // RegisterReply for the current rejoin arrived
  std::thread heartbeat_;
  std::thread rejoin_;
};

}  // namespace byteps::cluster
