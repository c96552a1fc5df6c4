// Several training processes on one worker host (BYTEPS_LOCAL_SIZE > 1): they reduce through
// shared memory first, and only the local root (the highest local rank, as in BytePS) talks to
// the servers. Control messages travel over a Unix socket between each non-root and the root;
// tensor bytes travel through per-tensor shared-memory segments:
//   non-root r: copies its input into its slot segment, sends LocalReady(key, round);
//   root:       once its own request and every LocalReady of (key, round) are in, adds the slots
//               into its output (which already holds its own input), pushes/pulls the sum like a
//               one-process worker, then copies the result into the result segment and sends
//               LocalDone(key, round); each non-root copies the result into its output.
// Segment and socket names are unique per job and per host; stale segments of dead processes
// are removed at start.
// Threading: all methods are thread-safe; callbacks run on the local transport's I/O thread or on
// the calling thread, never under the reducer's lock.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "transport/transport.h"
#include "worker/shm_segment.h"

namespace byteps::worker {

struct LocalOptions {
  int local_rank = 0;
  int local_size = 1;
  std::string job;       // job-unique token (derived from BYTEPS_JOB_SECRET or the scheduler address)
  int host_id = 0;       // DMLC_WORKER_ID: which worker host
  double start_timeout_s = 60;
  transport::TransportOptions transport;  // secret and checksum; threads/buffers are set here
};

class LocalReducer : public transport::Handler {
 public:
  using Done = std::function<void(const Status&)>;

  // Root: listens and waits until every local process has said hello. Non-root: connects to
  // the root. `on_failure` runs when the other side goes away.
  static StatusOr<std::unique_ptr<LocalReducer>> Start(const LocalOptions& options, Done on_failure);
  ~LocalReducer() override;

  bool is_root() const { return options_.local_rank == options_.local_size - 1; }

  // Non-root: contributes `input` to round `round` of tensor `key`; on success the reduced result
  // has been copied into `output` when `done` runs.
  Status Contribute(uint32_t key, const std::string& name, uint32_t round, const void* input, void* output,
                    size_t bytes, DataType dtype, Done done);
  // Root: `output` holds the root's own contribution; `ready` runs once every non-root's slot has
  // been added into it.
  Status Gather(uint32_t key, const std::string& name, uint32_t round, void* output, size_t bytes, DataType dtype,
                Done ready);
  // Root: hands the final result of (key, round) to every non-root.
  Status Publish(uint32_t key, uint32_t round, const void* result, size_t bytes);
  // Root: tells every non-root that (key, round) failed (code in the header's arg, message as payload).
  void PublishError(uint32_t key, uint32_t round, const Status& error);
  // Fails everything waiting (e.g. the job failed elsewhere).
  void FailAll(const Status& st);
  // Tells the root this process leaves cleanly (non-root), so its disconnect is not a failure.
  void Leave();

  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection& c, const protocol::Header& h) override;
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override;
  void OnClose(transport::Connection& c, const Status& reason) override;

 private:
  struct Round {
    int ready = 0;            // non-roots in
    bool root_in = false;
    void* output = nullptr;
    size_t bytes = 0;
    DataType dtype = DataType::kFloat32;
    std::string name;
    Done done;
    Status error;
  };
  struct Peer {
    std::shared_ptr<transport::Connection> conn;
    int pid = 0;
    bool left = false;
    std::map<uint32_t, std::unique_ptr<ShmSegment>> slots;  // by key (root side)
  };

  LocalReducer(const LocalOptions& options, Done on_failure);
  std::string SocketName() const;
  // Root, under mu_: when (key, round) is complete, sums and returns the callback to run.
  Done MaybeReduceLocked(uint32_t key, uint32_t round);

  LocalOptions options_;
  Done on_failure_;
  std::unique_ptr<transport::Transport> transport_;
  int root_pid_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  Status failure_;
  // Root side.
  std::map<int, Peer> peers_;  // by local rank
  std::map<std::pair<uint32_t, uint32_t>, Round> rounds_;
  std::map<uint32_t, std::unique_ptr<ShmSegment>> results_;
  // Non-root side.
  std::shared_ptr<transport::Connection> root_;
  std::map<uint32_t, std::unique_ptr<ShmSegment>> my_slots_;
  std::map<uint32_t, std::unique_ptr<ShmSegment>> result_maps_;
  struct Waiting {
    void* output;
    size_t bytes;
    Done done;
  };
  std::map<std::pair<uint32_t, uint32_t>, Waiting> waiting_;
};

}  // namespace byteps::worker
