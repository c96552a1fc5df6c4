// What `byteps top` shows (docs/top.md), computed from the scheduler's TopReply: per worker its
// throughput, push_pulls per second, partitions in flight, the tuner's choices and its slowest
// tensor; per server its load and the worker that arrives last; and the stragglers. Rates are the
// difference of a node's last two heartbeat summaries (cluster/node_summary.h) over their times.
// Threading: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "protocol/control.h"

namespace byteps::cli {

struct NodeRow {
  std::string role;
  int rank = -1;
  std::string host;
  int pid = 0;
  double heard_s = 0;
  bool finished = false;
  bool away = false;
  bool reporting = false;  // a summary arrived
  // Worker: bytes/s pushed and pulled, push_pulls/s. Server: bytes/s taken in and replied, bytes/s
  // summed, rounds/s. Unknown (one summary yet): nullopt.
  std::optional<double> in_rate, out_rate, ops_rate, sum_rate;
  // Worker.
  double in_flight = 0, credit_bytes = 0, partition_bytes = 0;
  double errors = 0, reconnects = 0;
  std::string slowest_tensor;  // of the last heartbeat interval; "" none completed
  double slowest_s = 0;
  // Server: the worker whose pushes arrived last in the interval, by its mean lag after the first.
  int laggard = -1;
  double laggard_lag_s = 0;
};

struct Straggler {
  int worker = 0;
  double lag_s = 0;      // mean time after each round's first push, over every server, last interval
  bool flagged = false;  // >= 1 ms and more than 3x the other workers' mean
};

struct TopView {
  std::string job;
  bool started = false;
  double uptime_s = 0;
  int num_workers = 0, num_servers = 0;
  std::string placement;
  std::vector<NodeRow> workers, servers;
  std::vector<Straggler> lags;  // every worker with arrivals in the interval, the most behind first
};

TopView BuildTopView(const protocol::TopReply& reply);
// The screen: a header, the workers' table, the servers' table, the stragglers.
std::string RenderTopText(const TopView& view);
// The same as one JSON object (bytes per second, seconds).
std::string TopViewJson(const TopView& view);

}  // namespace byteps::cli
