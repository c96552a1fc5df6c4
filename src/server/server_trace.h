// A server's timeline (BYTEPS_TRACE_ON): per key and round within the traced steps, when the
// round's first and last pushes arrived, when its result was ready and when its replies were
// handed to the transport, and which worker pushed last. Written at shutdown as chrome-trace JSON
// to <BYTEPS_TRACE_DIR>/server_<rank>/comm.json (docs/tracing.md, "Servers, clocks and merging").
//
// A round's step is its number in the key's count: a key's first push_pull is round 1, as a
// worker counts a tensor's push_pulls. Rounds start_step .. end_step (both included) are recorded, as on the workers.
// Threading: each SumEngine shard records into its own TraceBuffer on its own thread (no lock on
// the hot path); ServerTrace hands the buffers out and reads them only after the shards stopped.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace byteps::server {

// The traced steps [start_step, end_step], both included; empty (end <= start): tracing is off.
struct TraceWindow {
  int start_step = 0;
  int end_step = 0;
  bool on() const { return end_step > start_step; }
  bool Contains(uint32_t round) const {
    return on() && round >= static_cast<uint32_t>(start_step) && round <= static_cast<uint32_t>(end_step);
  }
};

// One completed round of one key. Times are the steady clock in ns (TraceNowNs).
struct RoundTrace {
  uint64_t key = 0;
  uint32_t round = 0;
  int last_worker = -1;       // the worker whose push completed the round
  int64_t first_push_ns = 0;  // the round's first push arrived (read off the socket)
  int64_t last_push_ns = 0;   // its last push arrived
  int64_t summed_ns = 0;      // the result was ready (the last push summed; adasum combined)
  int64_t replied_ns = 0;     // every waiting worker's reply was handed to the transport
};

inline int64_t TraceNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One shard's records. Not thread-safe: its shard's thread only, then the reader after the shard
// stopped.
class TraceBuffer {
 public:
  explicit TraceBuffer(TraceWindow window) : window_(window) { rounds_.reserve(1024); }
  bool Wants(uint32_t round) const { return window_.Contains(round); }
  void Add(const RoundTrace& r) { rounds_.push_back(r); }
  const std::vector<RoundTrace>& rounds() const { return rounds_; }

 private:
  TraceWindow window_;
  std::vector<RoundTrace> rounds_;
};

// Who wrote the trace, for its otherData: the server's rank, the job's id and the server's clock
// offset to the scheduler's (cluster::ClusterClient::job_id / clock_offset_us).
struct TraceIdentity {
  int rank = -1;
  std::string job;
  int64_t clock_offset_us = 0;
};

// The chrome-trace JSON of `rounds`: per round the events Server.<key>.RECV (first push to last
// push; args.last_worker), .SUM (last push to result) and .REPLY (result to replies sent), pid
// "Server <rank>", tid "<key>", ts/dur in µs of this host's system clock (the steady times plus
// `system_minus_steady_us`).
std::string ServerTraceJson(const std::vector<RoundTrace>& rounds, const TraceIdentity& who, TraceWindow window,
                            int64_t system_minus_steady_us);

// The server's trace: the buffers of its shards and where the file goes.
class ServerTrace {
 public:
  // Checks that `dir` (BYTEPS_TRACE_DIR) can be created and written (a probe file is created and
  // removed), so a server that cannot write its trace fails at start, not at the end of the job.
  // The error names BYTEPS_TRACE_DIR, the path and the reason.
  static Status CheckDir(const std::string& dir);

  ServerTrace(std::string dir, TraceWindow window);
  // A buffer for one shard; owned here, lives as long as this.
  TraceBuffer* NewBuffer();
  // After the shards stopped: writes <dir>/server_<rank>/comm.json (through a temporary file and a
  // rename) and returns its path. Errors name the path and the reason.
  StatusOr<std::string> Write(const TraceIdentity& who) const;
  size_t rounds() const;

 private:
  std::string dir_;
  TraceWindow window_;
  int64_t system_minus_steady_us_;  // read once at start: the steady times become system times
  std::vector<std::unique_ptr<TraceBuffer>> buffers_;
};

}  // namespace byteps::server
