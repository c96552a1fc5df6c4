// The settings only byteps' Python launchers and tools read (bpslaunch, bpsrun, the progress
// bars): the core accepts them (a script may export them for every process) and `byteps info`
// lists them, but nothing in the core changes with them. See registry.h.
#include "config/registry.h"

namespace byteps::config {
namespace {

// No Config field: nothing to parse.
Status Accept(const Arg&, Config&) { return Status::Ok(); }

const Entry kLauncherEntries[] = {
    {"BYTEPS_NUMA_ON", "bool",
     "bpslaunch binds each local rank to CPU cores (taskset) when 1, or when BYTEPS_VISIBLE_CPU_CORES is set; "
     "default 0 (the original defaulted it on)", Accept, nullptr, "0"},
    {"BYTEPS_VISIBLE_CPU_CORES", "string",
     "bpslaunch: the cores of each local rank, \"a,b-c:d-e\" (one colon-separated entry per rank); without it "
     "the allowed cores are split evenly, the root (last) rank taking the remainder", Accept, nullptr, ""},
    {"BYTEPS_PROGRESS", "bool",
     "0: the main job and the benchmarks show no progress bar or progress lines (read by Python only)", Accept,
     nullptr, "1"},
    {"BYTEPS_CORE_BINARY", "string",
     "path of the byteps core binary (used by Python launchers only)", Accept, nullptr, ""},
    {"BYTEPS_SLURM_SERVERS", "int",
     "bpslaunch under Slurm: how many nodes run servers (docs/launchers.md; read by the launcher only)", Accept,
     nullptr, ""},
    {"BYTEPS_SLURM_MODE", "string",
     "bpslaunch under Slurm: colocated or separate servers (docs/launchers.md; read by the launcher only)", Accept,
     nullptr, ""},
    {"BYTEPS_SLURM_GPUS_PER_WORKER", "int",
     "bpslaunch under Slurm: GPUs each worker process uses (docs/launchers.md; read by the launcher only)", Accept,
     nullptr, ""},
};

}  // namespace

std::span<const Entry> LauncherEntries() { return kLauncherEntries; }

}  // namespace byteps::config
