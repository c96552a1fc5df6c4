// Start-up tuning: every worker of a job runs AgreeOnSettings once, right after it joined, before
// its first push_pull. Worker 0 probes the network with a few push_pulls that all workers make
// together, derives the partition size and the credit from the settings model, and the others
// learn its decision through one more push_pull in which worker 0 contributes the values and
// everyone else zeros (so the sum is worker 0's decision, exact, over the same reliable path as
// any tensor, local non-root processes included). The partition size fixes the key layout, so
// everyone applies worker 0's; a worker whose own BYTEPS_PARTITION_BYTES differs fails with an
// error naming both values instead of summing mismatched partitions. The credit is each worker's
// own: a worker that set BYTEPS_SCHEDULING_CREDIT keeps its value.
//
// Sequence (the same on every worker, decided only by worker 0's plan, so nobody waits for a
// push_pull the others skip):
//   __byteps.tune.plan       int64[5]  worker 0: {version, probe?, partition bytes, probe servers?, 0}
//   probe only:
//   __byteps.tune.rtt        int64[1] x 4       round trip R (the fastest of the last three)
//   __byteps.tune.warm       1 MiB              warms connections and server buffers up
//   __byteps.tune.p256, p1024, p4096            4 MiB each, 3 times, interleaved, in partitions of
//                                               256 KiB, 1 MiB, 4 MiB: the fastest run gives B
//   __byteps.tune.settings   int64[5]  worker 0: {version, partition, credit, goodput, round trip ns}
//   probe servers only (a mixed placement: which rates the split should use):
//   __byteps.tune.at<s>.rtt  int64[1] x 3, then
//   __byteps.tune.at<s>      2 MiB x 2  pinned to server s (attribute "server=s"), for each server s
//                                       in turn: each worker reports the wire times to the scheduler,
//                                       whose first report re-places the servers (server_placement.h
//                                       PlaceFromProbe) before any of the job's tensors is planned
//   __byteps.tune.explore    int64[5]  every process: {can explore, 1, second candidate KiB, its square, 0}:
//                                       the partition size is explored online only if all can,
//                                       with the same candidates (engine_tuning.cc)
// Threading: runs on the thread that starts the engine; the collective's calls block.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "protocol/name_planner.h"
#include "worker/tuning/settings_model.h"

namespace byteps::worker::tuning {

// The names of the tuning's own push_pulls start with this (they are not the job's iterations, and
// the scheduler's planner does not count their bytes: protocol/name_planner.h).
inline constexpr const char* kInternalTuningPrefix = protocol::kUncountedPrefix;
inline constexpr size_t kProbeWarmBytes = 1u << 20;
inline constexpr size_t kProbeBytes = 4u << 20;
inline constexpr std::array<size_t, 3> kProbeCandidates = {256u << 10, 1u << 20, 4u << 20};
inline constexpr int kProbeRuns = 3;
inline constexpr size_t kServerProbeBytes = 2u << 20;
inline constexpr int kServerProbeRuns = 2;

// What the procedure runs on: an in-place push_pull that blocks until the sum is back.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual Status PushPull(const std::string& name, void* data, size_t bytes, DataType dtype) = 0;
  // The partition size for tensors planned from now on.
  virtual void SetPartitionBytes(size_t bytes) = 0;
  // The same push_pull with every partition on server `server` (the probe of that server's links).
  virtual Status PushPullOnServer(const std::string& name, void* data, size_t bytes, DataType dtype, int server);
  // The server probe's wire times to the scheduler; its answer: each server's share and its account.
  struct Placement {
    std::vector<double> shares;
    std::string summary;
  };
  virtual StatusOr<Placement> ReportServerProbe(const std::vector<double>& seconds, size_t bytes);
};

// Worker 0's values, learnt by everyone through one push_pull of `name` in which worker 0
// contributes `mine` (its [0] becomes kSettingsVersion) and the others zeros. Errors: the push_pull's,
// or a sum that shows no worker 0, several, or another version.
inline constexpr int64_t kSettingsVersion = 2;
using SharedVector = std::array<int64_t, 5>;
StatusOr<SharedVector> ShareFromWorker0(Collective& c, const std::string& name, bool is_rank0,
                                        const SharedVector& mine);
// The check of such a sum: exactly one worker 0, of this version.
Status CheckSharedFromWorker0(const std::string& name, const SharedVector& sum);

struct StartupOptions {
  bool is_rank0 = false;
  bool autotune = true;             // BYTEPS_AUTOTUNE (worker 0's counts)
  size_t partition_bytes = 0;       // this worker's configured value
  bool partition_pinned = false;    // set explicitly: never changed, must match worker 0's
  int credit_partitions = 0;        // this worker's configured credit in partitions (0: no cap)
  bool credit_pinned = false;
  // This process can explore the partition size online (autotune on, partition not pinned, its
  // host's only process): it does only where every process can.
  bool explore_partition = false;
  // This worker would probe each server's links for the split (autotune on, servers on worker and
  // on CPU machines, NIC rates not given by BYTEPS_NIC_GBPS, not loopback): worker 0's counts.
  bool probe_servers = false;
  int num_servers = 0;
  ModelInputs model;
};

struct StartupOutcome {
  bool probed = false;
  LinkEstimate link;  // worker 0's measurement (goodput and round trip, shared with everyone)
  std::string probe_times;  // worker 0: each candidate's time, for the log
  Choice partition_bytes;
  Choice credit_bytes;
  // Partition sizes to explore online ([0]: the one chosen above); empty: none.
  std::vector<size_t> partition_candidates;
  // The server probe's (probe_servers): this worker's wire time per server for the log, and the
  // scheduler's placement from then on; empty: not probed.
  std::string server_probe_times;
  Collective::Placement placement;
};

// B from the candidates' fastest times and the round trip: a push_pull of M bytes in partitions
// of P takes about R + (M + P) / B (all but the last partition pipelined, which is pushed, then
// pulled), more with the partitions' own cost, so each gives a lower bound on B; the largest counts.
double GoodputFromProbe(const std::array<double, kProbeCandidates.size()>& seconds, double rtt_s);

// Runs the sequence above. Errors: a push_pull failing (its status), a disagreement (the
// partition size, or two workers both acting as worker 0), or a version mismatch.
StatusOr<StartupOutcome> AgreeOnSettings(Collective& collective, const StartupOptions& options);

}  // namespace byteps::worker::tuning
