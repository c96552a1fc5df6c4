// byteps-core: the native command (`byteps` forwards here).
//   byteps scheduler | server   run that role from the environment until the job ends
//   byteps info                 print the effective configuration
//   byteps bench [...]          push-pull sweep as a worker of the job (see bench_cmd.h)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fmt/format.h>

#include "cli/bench_cmd.h"
#include "cluster/role_main.h"
#include "common/logging.h"
#include "config/config.h"
#include "server/role_main.h"

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
  }
  return c;
}

int Fail(const byteps::Status& st, const char* what) {
  fmt::print(stderr, "byteps {}: {}\n", what, st.message());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"byteps: parameter-server communication for distributed training"};
  app.require_subcommand(1);
  auto* sched = app.add_subcommand("scheduler", "run the scheduler (DMLC_PS_ROOT_PORT, DMLC_NUM_WORKER, DMLC_NUM_SERVER)");
  auto* server = app.add_subcommand("server", "run a summation server until the job ends");
  auto* info = app.add_subcommand("info", "print the effective configuration");
  auto* bench = app.add_subcommand("bench", "push-pull benchmark (run as every worker of a job, e.g. via bpsrun)");
  byteps::cli::BenchOptions bo;
  std::string min_b = "4", max_b = "256M", tb = "4096";
  bench->add_option("--min-bytes", min_b, "smallest size (K/M/G suffixes)");
  bench->add_option("--max-bytes", max_b, "largest size");
  bench->add_option("--step-factor", bo.step_factor, "size multiplier between rows")->check(CLI::Range(2, 1024));
  bench->add_option("--iters", bo.iters, "timed iterations per size (0 = adaptive)");
  bench->add_option("--warmup", bo.warmup, "untimed iterations per size");
  bench->add_option("--dtype", bo.dtype, "float32, float16, bfloat16, float64, int32, int64, int8, uint8");
  bench->add_option("--json", bo.json_path, "also write the JSON result to this file");
  bench->add_option("--tensors", bo.tensors, "many-tensor mode: this many tensors per iteration");
  bench->add_option("--tensor-bytes", tb, "many-tensor mode: bytes per tensor");
  bench->add_flag("--raw-tcp", bo.raw_tcp, "measure a plain loopback TCP stream (no job needed)");
  bench->add_option("--raw-seconds", bo.raw_seconds, "duration of --raw-tcp");
  CLI11_PARSE(app, argc, argv);

  auto parse_bytes = [](const std::string& s, size_t* out) {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    std::string suf = end ? end : "";
    size_t mul = suf.empty() ? 1 : suf == "K" ? 1024 : suf == "M" ? (1u << 20) : suf == "G" ? (1u << 30) : 0;
    if (mul == 0 || v <= 0) return false;
    *out = static_cast<size_t>(v * mul);
    return true;
  };

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
    auto c = byteps::config::Load(env);
    if (!c.ok()) return Fail(c.status(), "info");
    fmt::print("{}", byteps::config::Describe(c.value(), env));
    return 0;
  }
  if (*bench) {
    if (!parse_bytes(min_b, &bo.min_bytes) || !parse_bytes(max_b, &bo.max_bytes) ||
        !parse_bytes(tb, &bo.tensor_bytes)) {
      fmt::print(stderr, "byteps bench: sizes are positive numbers with an optional K/M/G suffix\n");
      return 2;
    }
    if (bo.raw_tcp) return byteps::cli::RunBench({}, bo);
    auto c = LoadFor(Role::kWorker, "worker");
    if (!c.ok()) return Fail(c.status(), "bench");
    return byteps::cli::RunBench(c.value(), bo);
  }
  return 0;
}
