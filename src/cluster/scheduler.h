// The scheduler service: rendezvous (registration, rank assignment, address table), barriers,
// heartbeats, failure notices and orderly shutdown, and the name service (NameRequest: the one
// NamePlanner of the job, protocol/name_planner.h; asked on any connection, registered or not).
// It carries no tensor data.
//
// Lifecycle: Start() listens; nodes register; when DMLC_NUM_WORKER workers and DMLC_NUM_SERVER
// servers are in, everyone gets the address table. If that does not happen within
// start_timeout_s, every registered node gets a JobError naming the missing roles/ranks. When all
// workers have sent Finish, everyone gets Terminate(0) and Wait() returns OK. A node that dies
// (connection lost or heartbeat silent) before finishing is announced to all (NodeFailed), the job
// is terminated with failure, and Wait() returns an error naming it.
// Threading: Start/Wait/Stop from the owning thread; handler callbacks on transport I/O threads;
// a watchdog thread ("sched-watchdog") enforces the start, heartbeat and rejoin deadlines. One
// mutex guards all state; frames go out after it is released.
// Seams for tests: Start over any Transport (e.g. an in-memory one), and SchedulerOptions::clock
// (the watchdog reads and waits on it, so a test advances fake time instead of sleeping).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "protocol/control.h"
#include "protocol/name_planner.h"
#include "protocol/server_placement.h"
#include "transport/transport.h"

namespace byteps::cluster {

struct SchedulerOptions {
  std::string host = "0.0.0.0";
  int port = 0;
  int num_workers = 1;
  int num_servers = 1;
  double start_timeout_s = 60;
  double heartbeat_timeout_s = 15;  // 0 = heartbeats not checked
  double reconnect_timeout_s = 5;   // a node whose connection dropped may rejoin within this
  // BYTEPS_ENABLE_MIXED_MODE: how the servers' shares of the bytes are decided at the rendezvous
  // from the hosts the nodes registered (protocol/server_placement.h).
  protocol::MixedMode mixed_mode = protocol::MixedMode::kAuto;
  transport::TransportOptions transport;
  const Clock* clock = nullptr;     // nullptr: Clock::Steady(); else borrowed, outlives the scheduler
};

class Scheduler : public transport::Handler {
 public:
  // Listens on options.host:port over TCP (options.transport).
  static StatusOr<std::unique_ptr<Scheduler>> Start(const SchedulerOptions& options);
  // The same over `transport` (owned; options.transport is then unused).
  static StatusOr<std::unique_ptr<Scheduler>> Start(const SchedulerOptions& options,
                                                    std::unique_ptr<transport::Transport> transport);
  ~Scheduler() override;

  int port() const { return port_; }
  // The job's id: 16 random hex characters made at start, sent to every node in its RegisterReply
  // (the traces carry it, so that `byteps trace merge` refuses files of different jobs).
  const std::string& job_id() const { return job_id_; }
  // Whether every node registered and got the address table (the job started).
  bool rendezvous_done() const;
  // Blocks until the job ends. OK when every worker finished; otherwise the reason.
  Status Wait();
  // After Wait: gives nodes up to timeout_s to read Terminate and hang up.
  void WaitDisconnect(double timeout_s);
  // After a Wait that failed before the job started: waits up to timeout_s until every node of the
  // job has had its registration answered (accepted, or refused with the reason), so that a node
  // still starting hears why rather than finding nobody. Every node: the job's size, or the larger
  // size a node claimed (its processes were launched for that). Returns as soon as all have.
  void WaitEveryRegistrationAnswered(double timeout_s);
  // Ends the job now with `reason` (e.g. on SIGTERM): nodes get Terminate(failure).
  void Stop(const Status& reason);
  // For kill -USR1 (scheduler_report.cc): the nodes, when each was last heard from, who is
  // missing, the open barriers. Text, a line each.
  std::string Report() const;

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  struct Node {
    std::shared_ptr<transport::Connection> conn;
    protocol::RegisterRequest req;
    protocol::NodeInfo info;  // rank filled at rendezvous
    uint64_t arrival = 0;     // registration order: free ranks go by it
    Clock::TimePoint last_seen;
    // When its Register arrived (system steady clock, not clock_: the RegisterReply's held_us is
    // real time, for the node's clock offset).
    std::chrono::steady_clock::time_point registered_at;
    bool finished = false;
    // Its last two heartbeats' summaries (node_summary.h) for `byteps top`; "" for none yet.
    std::string summary, previous;
  };
  using Outbox = std::vector<std::pair<std::shared_ptr<transport::Connection>, std::pair<protocol::Header, std::string>>>;

  Scheduler(const SchedulerOptions& options, std::unique_ptr<transport::Transport> transport);
  void HandleRegister(transport::Connection& c, const std::string& payload, Outbox* out);
  // `byteps top`'s answer (scheduler_top.cc): every node and its last summaries, encoded (under mu_).
  std::string TopReplyLocked() const;
  // The name service's answer to a NameRequest (under mu_).
  std::string HandleNameRequestLocked(const std::string& payload);
  // A registered node whose connection dropped reconnects (RegisterRequest.rejoin).
  void HandleRejoin(transport::Connection& c, const protocol::RegisterRequest& r, Outbox* out);
  void HandleBarrierLocked(transport::Connection& c, const Node& node, const protocol::Header& h, Outbox* out);
  void HandleFinishLocked(Node& node, const protocol::Header& h, const std::string& payload, Outbox* out);
  void MaybeCompleteRendezvousLocked(Outbox* out);
  // The servers' shares from the registered hosts and NIC rates (ranks assigned); the job's error
  // for a layout BYTEPS_ENABLE_MIXED_MODE=1 cannot mix.
  StatusOr<protocol::ServerPlacement> PlaceServersLocked(const std::vector<Node*>& order) const;
  // A worker's start-up probe report (NameRequest::probe_seconds): the placement from the measured
  // rates (protocol::PlaceFromProbe) for what is placed from now on; the first report decides, later
  // ones get the same answer. Errors: before the rendezvous, or a report that does not fit the job.
  Status PlaceFromProbeLocked(const protocol::NameRequest& r);
  void FailJobLocked(const Status& reason, const protocol::NodeInfo* dead, Outbox* out);
  // A registration (not a rejoin) was answered and the answer sent.
  void NoteRegistrationAnswered(const std::string& payload);
  void TerminateLocked(uint64_t code, Outbox* out);
  std::string MissingLocked() const;
  int CountLocked(const char* role) const;  // registered nodes of `role`
  void Watchdog();
  // One pass of the watchdog at time `now`: the start deadline, rejoin deadlines, heartbeats.
  void CheckDeadlinesLocked(Clock::TimePoint now, Outbox* out);
  static void Flush(Outbox* out);
  static std::string NewJobId();
  // Stamps a reply with the job id and the scheduler's clock; held since `since` (µs of hold).
  void StampClock(protocol::RegisterReply& reply, std::chrono::steady_clock::time_point since) const;

  SchedulerOptions options_;
  const Clock& clock_;
  std::unique_ptr<transport::Transport> transport_;
  int port_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<transport::Connection*, Node> nodes_;  // registered nodes
  uint64_t next_arrival_ = 0;
  bool rendezvous_done_ = false;
  bool job_over_ = false;
  Status result_;
  int finished_workers_ = 0;
  std::map<uint64_t, std::set<transport::Connection*>> barriers_;
  std::set<uint64_t> released_barriers_;  // a node that rejoins may ask again
  std::vector<protocol::NodeInfo> table_;  // the address table sent at rendezvous
  protocol::NamePlanner names_;  // given the servers' shares at the rendezvous
  const std::string job_id_;
  protocol::ServerPlacement placement_;
  bool probed_ = false;  // a start-up probe's report placed the servers (PlaceFromProbeLocked)
  // Nodes whose connection dropped: they have until `deadline` to rejoin (after the rendezvous)
  // or to register again (before it; then they hold no slot).
  struct LostNode {
    Node node;
    std::string reason;
    Clock::TimePoint deadline;
  };
  std::vector<LostNode> lost_;
  // Nodes whose registration was answered (by instance, else role, pid and host), and the largest
  // job size a registering node claimed: for WaitEveryRegistrationAnswered.
  std::set<std::string> answered_;
  int largest_claimed_size_ = 0;
  Clock::TimePoint start_time_;
  std::thread watchdog_;
};

}  // namespace byteps::cluster
