// The summation service: accepts worker data connections, decodes each frame, and routes its key
// to the SumEngine shard that owns it (key -> shard is fixed, so shards need no locks). Pushes
// are received straight into pooled buffers that the shard then sums or adopts.
// Threading: handler callbacks on transport I/O threads; shards on their own threads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace byteps::server {

class BufferPool;  // buffer_pool.h and sum_engine.h are private to the server layer
class SumEngine;
class JoinBoard;
class ServerTrace;

struct ServerOptions {
  int num_workers = 1;
  int engine_threads = 4;
  transport::TransportOptions transport;
  // BYTEPS_TRACE_*: record the rounds [trace_start_step, trace_end_step) of every key (server_trace.h)
  // and write them to <trace_dir>/server_<rank>/comm.json with WriteTrace.
  bool trace_on = false;
  std::string trace_dir = "./trace";
  int trace_start_step = 10;
  int trace_end_step = 20;
};

class Server : public transport::Handler {
 public:
  explicit Server(const ServerOptions& options);
  ~Server() override;  // stops the transport first, then the shards

  // Listens for workers; returns the bound port.
  StatusOr<int> Listen(const std::string& host, int port);
  void Shutdown();
  // Keys the shards hold state for, and keys freed because every worker released them
  // (kRelease); a snapshot, any thread (0 after Shutdown).
  size_t keys_held() const;
  size_t keys_freed() const;
  uint64_t pushed_bytes() const;  // bytes of pushes taken so far (logged at shutdown)
  // The stall report's body: every shard's open rounds (a line each), or a line saying which
  // shard did not answer within timeout_s.
  std::string OpenRounds(double timeout_s);
  // After Shutdown, with tracing on: writes the trace as server `rank` of job `job` whose clock is
  // `clock_offset_us` behind the scheduler's (ClusterClient) and returns the file's path; "" when
  // tracing is off. Errors name the path.
  StatusOr<std::string> WriteTrace(int rank, const std::string& job, int64_t clock_offset_us);

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  SumEngine& ShardFor(uint64_t key);

  ServerOptions options_;
  std::unique_ptr<BufferPool> pool_;  // outlives the shards, which release its buffers
  std::unique_ptr<JoinBoard> board_;  // the joined workers (join()), read by every shard
  std::unique_ptr<ServerTrace> trace_;  // null: not tracing; outlives the shards, which record into it
  std::vector<std::unique_ptr<SumEngine>> shards_;
  std::unique_ptr<transport::Transport> transport_;
};

}  // namespace byteps::server
