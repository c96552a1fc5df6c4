// Stage "push-pull": sends a partition to its server as one combined push-pull request, straight
// from the partition's bytes, and receives the round's sum straight into its destination (the
// output tensor on CPU); with `average`, divides it on the I/O thread that received it, while other
// partitions still travel. The first partition of a tensor to go out declares every partition of
// the tensor to its server (InitKey) first, on the connection its frames use. Uses the credit
// (bytes in flight).
//
// A compressed partition (task->wire.compressed, set by the compress stage) goes out with
// kFlagCompressed; its reply must carry the flag too and lands in wire.reply (at most reply_cap
// bytes; reply_len says how many), undivided: the decompress stage decodes and averages it.
//
// A server's error keeps its code: a request's error fails that partition; a declaration error
// (request id 0) fails the tensor now and every later round of it.
//
// Threading: Start/CreditFor on the dispatcher thread; the DataClient methods on transport I/O
// threads (and CollectResend on the reconnect thread); FailAll on any thread. One mutex guards
// the in-flight table; completions are made outside it. A partition whose reply is being written
// into its destination is never completed from another thread (the user could free the output);
// its failure waits until the transport is done with it.
#pragma once

#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "worker/pipeline/stage.h"
#include "worker/server_links/data_plane.h"

namespace byteps::worker::stages {

class PushPullStage : public pipeline::Stage, public server_links::DataClient {
 public:
  // host_rank: this host's worker rank (the sender of every frame); size: the job's worker
  // processes (the divisor of `average`); local_size: processes per host (a process set's
  // members, global ranks, become the hosts they run on: the servers count hosts).
  PushPullStage(pipeline::StageSink* sink, server_links::DataPlane* plane, int host_rank, int size,
                int local_size = 1);
  // `attrs` with attribute "members" (global ranks) as the hosts of those ranks, rank / local_size.
  static std::string HostMembers(const std::string& attrs, int local_size);

  // A compressed partition holds the credit of the bytes it sends.
  size_t CreditFor(const pipeline::PartitionTask& task) const override {
    return task.wire.compressed ? task.push_len : task.len;
  }
  void Start(pipeline::PartitionTask* task) override;
  void Flush() override;
  void FailAll(const Status& failure) override;

  StatusOr<transport::RecvBuffer> OnReplyHeader(transport::Connection& conn, const protocol::Header& h) override;
  void OnReplyFrame(transport::Connection& conn, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnConnectionLost(const transport::Connection& conn) override;
  std::vector<server_links::OutFrame> CollectResend(int server, size_t index) override;
  void FailServer(int server, const Status& failure) override;
  bool idle() const override;
  // This worker is done with `plan`'s keys after `last_round` (a new incarnation of its name, or a
  // retired generation): forgets the declaration and queues a kRelease to each partition's server,
  // sent on the dispatcher thread with the next Start or Flush. Any thread; a release lost with
  // its connection only leaves the key on that server.
  void Release(const planning::TensorPlan& plan, uint32_t last_round);

 private:
  struct InFlight {
    pipeline::PartitionTask* task;
    const transport::Connection* receiving_on = nullptr;  // the transport writes into task->dst
    Status deferred;  // a failure that waits for receiving_on to clear
  };
  server_links::OutFrame InitKeyFrame(const planning::TensorPlan& plan, const planning::PartitionPlan& p,
                                      ReduceOp op, const std::string& attrs) const;
  server_links::OutFrame PushFrame(const pipeline::PartitionTask& t) const;
  void SendReleases();  // dispatcher thread
  // Removes the matching in-flight tasks and returns those that may complete now (under mu_).
  template <typename Match>
  std::vector<pipeline::PartitionTask*> TakeFailedLocked(Match match, const Status& failure);
  void CompleteAll(const std::vector<pipeline::PartitionTask*>& tasks, const Status& st);

  server_links::DataPlane* plane_;
  const int host_rank_;
  const int size_;
  const int local_size_;

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, InFlight> in_flight_;            // by task id (= request id)
  struct Announced {
    const planning::TensorPlan* plan;
    ReduceOp op;  // a name keeps the operation it was first used with
    std::string attrs;  // and the attributes it was declared with
  };
  std::unordered_map<uint32_t, Announced> announced_;  // by declared key
  std::unordered_map<uint32_t, Status> poisoned_;               // declared key -> the server's error
  std::vector<std::pair<int, server_links::OutFrame>> releases_;  // (server, kRelease) to send
};

}  // namespace byteps::worker::stages
