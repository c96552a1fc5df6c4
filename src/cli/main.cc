// byteps-core: the native command (`byteps` forwards here).
//   byteps scheduler | server   run that role from the environment until the job ends
//   byteps info                 print the effective configuration, and the partition size and
//                               credit this job's running workers on this host chose, with why
//   byteps bench [...]          push-pull sweep as a worker of the job (see bench_cmd.h)
//   byteps top [...]            a live view of a running job, from its scheduler (see top_cmd.h)
//   (`byteps plan` is the Python wrapper's own: python/byteps/sim/plan.py)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <limits>
#include <string>

#include "cli/bench_cmd.h"
#include "cli/top_cmd.h"
#include "cluster/role_main.h"
#include "common/logging.h"
#include "config/config.h"
#include "device/cuda_runtime.h"
#include "device/group.h"
#include "device/library_homes.h"
#include "config/parse.h"
#include "server/role_main.h"
#include "worker/job_files.h"
#include "transport/transport.h"

namespace {

using byteps::config::Role;

byteps::StatusOr<byteps::config::Config> LoadFor(Role role, const char* identity) {
  auto env = byteps::config::ProcessEnvironment();
  env["DMLC_ROLE"] = byteps::config::RoleName(role);
  auto c = byteps::config::Load(env);
  if (c.ok()) {
    byteps::log::SetLevel(c->log_level);
    byteps::log::SetHideTime(c->log_hide_time);
    byteps::log::SetIdentity(identity);
    byteps::config::LogWarnings(c.value());
    byteps::device::SetLibraryHomes({c->cuda_home, c->nccl_home});
  }
  return c;
}

int Fail(const byteps::Status& st, const char* what) {
  fmt::print(stderr, "byteps {}: {}\n", what, st.message());
  return 1;
}

// A size flag of `byteps bench`, read like every byte-size setting (config::ParseBytes).
bool ParseSizeFlag(const char* flag, const std::string& text, size_t* out) {
  auto p = byteps::config::ParseBytes(text, 1, std::numeric_limits<size_t>::max());
  if (!p.value) {
    fmt::print(stderr, "byteps bench: {}='{}': expected {}\n", flag, text, p.expected);
    return false;
  }
  *out = static_cast<size_t>(*p.value);
  return true;
}

// What the tuning chose (docs/performance.md), from the records this job's workers on this host
// keep while they run; before that, what decides each value.
void PrintChosenSettings(const byteps::config::Config& c) {
  fmt::print("\nChosen settings (docs/performance.md):\n");
  auto records = byteps::worker::ReadSettingsRecords(c);
  for (const auto& r : records) {
    fmt::print("  worker {} (pid {}, {}, recorded {}): partition {} bytes, credit {} bytes\n    {}\n", r.rank, r.pid,
               r.running ? "running" : "exited without removing its record", r.written, r.partition_bytes,
               r.credit_bytes, r.report);
    if (!r.placement.empty()) fmt::print("    servers: {}\n", r.placement);
  }
  if (!records.empty()) return;
  auto how = [&](bool pinned, const char* var, const char* tuned) {
    return pinned ? fmt::format("set by {}: kept", var) : c.autotune ? std::string(tuned) : "BYTEPS_AUTOTUNE=0: the default";
  };
  fmt::print("  no worker of this job runs on this host now (none of {})\n", byteps::worker::SettingsRecordPattern(c));
  fmt::print("  partition size: {}\n", how(c.partition_bytes_pinned, "BYTEPS_PARTITION_BYTES",
                                            "worker 0 derives it from its start-up probe of the links"));
  fmt::print("  credit: {}\n", how(c.scheduling_credit_pinned, "BYTEPS_SCHEDULING_CREDIT",
                                    "derived from the probe, then tuned online over the first iterations"));
  fmt::print("  connections per server: {}\n",
             how(c.connections_per_peer_pinned, "BYTEPS_CONNECTIONS_PER_PEER",
                 "2, more where the probe's bandwidth-delay product exceeds two socket windows"));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"byteps: parameter-server communication for distributed training"};
  app.require_subcommand(1);
  app.footer("plan: which placement to run (CPU servers, colocated or mixed) and the predicted speedup over ring "
             "all-reduce; run by the Python `byteps` command: byteps plan --help");
  auto* sched = app.add_subcommand("scheduler", "run the scheduler (DMLC_PS_ROOT_PORT, DMLC_NUM_WORKER, DMLC_NUM_SERVER)");
  auto* server = app.add_subcommand("server", "run a summation server until the job ends");
  auto* info = app.add_subcommand("info", "print the effective configuration");
  bool info_config = false;
  info->add_flag("--config", info_config,
                 "every variable byteps knows, with what it does here (honoured, mapped, ignored, build-time)");
  auto* bench = app.add_subcommand("bench", "push-pull benchmark (run as every worker of a job, e.g. via bpsrun)");
  byteps::cli::BenchOptions bo;
  std::string min_b = "4", max_b = "256M", tb = "4096";
  bench->add_option("--min-bytes", min_b, "smallest size (bytes; K/M/G suffixes, powers of 1024)");
  bench->add_option("--max-bytes", max_b, "largest size");
  bench->add_option("--step-factor", bo.step_factor, "size multiplier between rows")->check(CLI::Range(2, 1024));
  bench->add_option("--iters", bo.iters, "timed iterations per size (0 = adaptive)");
  bench->add_option("--warmup", bo.warmup, "untimed iterations per size");
  bench->add_flag("--barrier", bo.barrier,
                  "before every iteration, an untimed 4-byte push_pull by every worker (a barrier, as the gloo and MPI "
                  "benchmarks time one collective from aligned ranks)");
  bench->add_option("--dtype", bo.dtype, "float32, float16, bfloat16, float64, int32, int64, int8, uint8");
  bench->add_option("--json", bo.json_path, "also write the JSON result to this file");
  bench->add_option("--tensors", bo.tensors, "many-tensor mode: this many tensors per iteration");
  bench->add_option("--tensor-bytes", tb, "many-tensor mode: bytes per tensor");
  bench->add_option("--device", bo.device, "where the sweep's tensors live: cpu, cuda (GPU 0) or fake (the test device)");
  bench->add_option("--fake-copy-gbps", bo.fake_copy_gbps, "--device fake: its copies' bandwidth in GB/s");
  bench->add_flag("--raw-tcp", bo.raw_tcp, "measure a plain loopback TCP stream (no job needed)");
  bench->add_option("--raw-seconds", bo.raw_seconds, "duration of --raw-tcp");
  auto* top = app.add_subcommand("top", "a live view of a running job: per-worker throughput, per-server load, the "
                                       "slowest tensor and the stragglers (docs/top.md)");
  byteps::cli::TopOptions to;
  top->add_option("--scheduler", to.scheduler, "the job's scheduler, HOST:PORT (default: DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT)");
  top->add_flag("--json", to.json, "print one snapshot as JSON and exit");
  top->add_option("--interval", to.interval_s, "seconds between redraws")->check(CLI::Range(0.1, 3600.0));
  top->add_option("--count", to.count, "redraws before exiting (0: until interrupted or the job ends)")
      ->check(CLI::NonNegativeNumber);
  top->add_option("--timeout", to.timeout_s, "seconds to wait for the scheduler's answer")->check(CLI::Range(0.1, 3600.0));
  CLI11_PARSE(app, argc, argv);

  if (*sched) {
    auto c = LoadFor(Role::kScheduler, "scheduler");
    if (!c.ok()) return Fail(c.status(), "scheduler");
    auto st = byteps::cluster::RunScheduler(c.value());
    return st.ok() ? 0 : Fail(st, "scheduler");
  }
  if (*server) {
    auto c = LoadFor(Role::kServer, "server");
    if (!c.ok()) return Fail(c.status(), "server");
    auto st = byteps::server::RunServer(c.value());
    return st.ok() ? 0 : Fail(st, "server");
  }
  if (*info) {
    auto env = byteps::config::ProcessEnvironment();
    if (info_config) {
      fmt::print("{}", byteps::config::DescribeDispositions(env));
      return 0;
    }
    auto c = byteps::config::Load(env);
    if (!c.ok()) return Fail(c.status(), "info");
    byteps::device::SetLibraryHomes({c->cuda_home, c->nccl_home});
    fmt::print("{}", byteps::config::Describe(c.value(), env));
    std::string built;
    for (auto k : {byteps::transport::TransportKind::kAuto, byteps::transport::TransportKind::kTcp,
                   byteps::transport::TransportKind::kShm, byteps::transport::TransportKind::kUcx}) {
      if (byteps::transport::TransportBuilt(k)) built += fmt::format("{}{}", built.empty() ? "" : " ",
                                                                    byteps::transport::TransportKindName(k));
    }
    fmt::print("transports built: {}\n", built);
    // GPU groups (the NCCL local reduce of a host's GPUs): whether this build and machine have them.
    const auto groups = byteps::device::GroupsStatus(byteps::device::Kind::kCuda);
    fmt::print("gpu groups: {}\n", groups.ok() ? "nccl" : "none (" + groups.message() + ")");
    fmt::print("cuda runtime: {}\n", byteps::device::CudaRuntimeDescription());
    for (const std::string& w : c->warnings) fmt::print("warning: {}\n", w);
    PrintChosenSettings(c.value());
    return 0;
  }
  if (*top) {
    auto c = byteps::config::Load(byteps::config::ProcessEnvironment());
    if (!c.ok()) return Fail(c.status(), "top");
    byteps::log::SetLevel(c->log_level);
    return byteps::cli::RunTop(c.value(), to);
  }
  if (*bench) {
    if (!ParseSizeFlag("--min-bytes", min_b, &bo.min_bytes) || !ParseSizeFlag("--max-bytes", max_b, &bo.max_bytes) ||
        !ParseSizeFlag("--tensor-bytes", tb, &bo.tensor_bytes)) {
      return 2;
    }
    if (bo.raw_tcp) return byteps::cli::RunBench({}, bo);
    auto c = LoadFor(Role::kWorker, "worker");
    if (!c.ok()) return Fail(c.status(), "bench");
    return byteps::cli::RunBench(c.value(), bo);
  }
  return 0;
}
