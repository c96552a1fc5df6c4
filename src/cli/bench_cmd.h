// `byteps bench`: the push-pull sweep (nccl-tests style table + JSON) run by every worker of a job,
// and a raw TCP stream mode that measures the link the sweep is compared against.
#pragma once

#include <string>

#include "config/config.h"

namespace byteps::cli {

struct BenchOptions {
  size_t min_bytes = 4;
  size_t max_bytes = 256u << 20;
  int step_factor = 4;
  int iters = 0;   // 0 = adaptive per size
  int warmup = 2;
  bool barrier = false;        // before every iteration an untimed 4-byte push_pull (the peers' barrier)
  std::string dtype = "float32";
  std::string json_path;       // also write JSON here
  int tensors = 0;             // > 0: many-tensor mode (per-tensor overhead)
  size_t tensor_bytes = 4096;
  std::string device = "cpu";  // sweep tensors in host memory, or on "cuda" / "fake" (device 0)
  double fake_copy_gbps = 25;  // --device fake: the fake copies' bandwidth (GB/s; about PCIe 4 x16)
  bool raw_tcp = false;        // measure a plain loopback TCP stream instead
  double raw_seconds = 2.0;
};

// Runs the benchmark; returns the process exit code.
int RunBench(const config::Config& config, const BenchOptions& options);

}  // namespace byteps::cli
