// The original BytePS / ps-lite names that have no counterpart here (accepted; each one that is
// set logs one warning with the reason, an error with BYTEPS_STRICT_CONFIG=1), and the names only
// builds read (accepted silently). See registry.h.
#include "config/registry.h"

namespace byteps::config {
namespace {

constexpr const char* kWhyNuma =
    "bpslaunch splits the allowed cores evenly over the local ranks (or follows BYTEPS_VISIBLE_CPU_CORES): "
    "no quotas, blacklist or hyperthread layout";
constexpr const char* kWhyGdb =
    "bpslaunch does not wrap commands in gdb; run `gdb --args` yourself";
constexpr const char* kWhyOmp =
    "sums run on byteps' own threads (BYTEPS_SERVER_ENGINE_THREAD on servers), not OpenMP";
// The NCCL knobs' warning depends on the build too (a test checks it against device::Built and
// device::GroupsBuilt).
#if defined(BYTEPS_CONFIG_NCCL_BUILT)
constexpr const char* kWhyGpu =
    "the GPU path posts one NCCL reduce and broadcast per partition on one communicator per PCIe switch: "
    "there are no NCCL groups, rings or reduce roots to choose";
#elif defined(BYTEPS_CONFIG_CUDA_BUILT)
constexpr const char* kWhyGpu =
    "this build has no GPU groups (nccl.h was not found when it was built: set BYTEPS_NCCL_HOME and rebuild): "
    "a host's GPUs reduce through the CPU, and there are no NCCL groups, rings or reduce roots to choose";
#else
constexpr const char* kWhyGpu =
    "this build has no CUDA (rebuild with the CUDA toolkit installed): CUDA tensors are refused, and there are "
    "no NCCL groups, rings or reduce roots to choose";
#endif
constexpr const char* kWhyCompress =
    "the codecs run on each worker's own codec thread (one per process, beside the dispatcher): there is no "
    "pool to size";
constexpr const char* kWhySocket =
    "local processes reach each other through sockets and shared memory named by the job, not files in a "
    "directory";
constexpr const char* kWhyHash =
    "partitions go to servers by bytes (the least-loaded server first), not by a key hash";
constexpr const char* kWhyMixed =
    "the mixed placement (BYTEPS_ENABLE_MIXED_MODE) gives each server its exact byte share (each within one "
    "partition of it), not a hash over buckets: there is no bound to set";
constexpr const char* kWhySched =
    "servers sum in arrival order; priority comes from the workers' scheduling (BYTEPS_SCHEDULING_CREDIT)";
constexpr const char* kWhyBlocking =
    "servers always sum on their engine threads";
constexpr const char* kWhyDebug =
    "per-key value logging is not built; BYTEPS_LOG_LEVEL=DEBUG logs each operation";
constexpr const char* kWhyIpc =
    "processes of one host (a colocated worker and server) use shared memory by default (BYTEPS_TRANSPORT=auto); "
    "the receiver copies straight from the sender's memory, with no copy threads; BYTEPS_TRANSPORT=tcp turns it off";
// What the original's RDMA / UCX knobs mean here depends on the build (a test checks each against
// transport::TransportBuilt).
#ifdef BYTEPS_CONFIG_UCX_BUILT
constexpr const char* kWhyRdma =
    "byteps has no verbs transport of its own to tune: RDMA goes through UCX (DMLC_ENABLE_RDMA or "
    "BYTEPS_TRANSPORT=ucx), which UCX's own variables tune (UCX_TLS, UCX_IB_*, UCX_RNDV_THRESH, ...)";
constexpr const char* kWhyUcx =
    "byteps' UCX transport chooses its own protocols and order (eager below 64 KiB, rendezvous above, frames "
    "in send order, reconnects through BYTEPS_RECONNECT_TIMEOUT); tune UCX itself with its UCX_* variables";
#else
constexpr const char* kWhyRdma =
    "RDMA is not in this build (it comes through the UCX transport: install libucx-dev and rebuild); the job "
    "runs over BYTEPS_TRANSPORT (auto: TCP between hosts, shared memory within one)";
constexpr const char* kWhyUcx =
    "the UCX transport is not in this build (install libucx-dev and rebuild); the job runs over "
    "BYTEPS_TRANSPORT (auto: TCP between hosts, shared memory within one)";
#endif
constexpr const char* kWhyZmq =
    "byteps has its own TCP transport, not ZeroMQ (see BYTEPS_IO_THREADS, BYTEPS_MAX_CONNECTIONS)";
constexpr const char* kWhyOrdered =
    "workers take their rank from DMLC_WORKER_ID (else the order they register in), servers from the order "
    "they register in";
constexpr const char* kWhyLocal =
    "processes on one host talk over loopback TCP (no ipc:// sockets)";
constexpr const char* kWhyK8s =
    "the scheduler always listens on every address (0.0.0.0), or on DMLC_NODE_HOST when set, as the "
    "original's does under Kubernetes";
constexpr const char* kWhyPslite =
    "a ps-lite internal with no counterpart here";
constexpr const char* kWhyRank =
    "ranks come from DMLC_WORKER_ID / BYTEPS_GLOBAL_RANK";
constexpr const char* kWhyResend =
    "TCP does not lose frames; a dropped connection is reconnected and its requests resent "
    "(BYTEPS_RECONNECT_TIMEOUT)";
constexpr const char* kWhyDrop =
    "message dropping for tests is not built (tools/faultproxy injects faults)";
constexpr const char* kBuildHelp = "read by a build (setup.py or scripts/), not by a running process";

constexpr Entry Ignored(const char* name, const char* why) {
  return Entry{name, "ignored", why, nullptr, nullptr, "", false, Disposition::kIgnored};
}

constexpr Entry Build(const char* name) {
  return Entry{name, "string", kBuildHelp, nullptr, nullptr, "", false, Disposition::kBuild};
}

constexpr Entry kCompatibility[] = {
    Ignored("BYTEPS_NUMA_DEFAULT_QUOTA", kWhyNuma),
    Ignored("BYTEPS_NUMA_ROOT_QUOTA", kWhyNuma),
    Ignored("BYTEPS_CPU_BLACKLIST", kWhyNuma),
    Ignored("BYTEPS_MULTITHREADED_CPU", kWhyNuma),
    Ignored("BYTEPS_ENABLE_GDB", kWhyGdb),
    Ignored("BYTEPS_OMP_THREAD_PER_GPU", kWhyOmp),
    Ignored("BYTEPS_NCCL_GROUP_SIZE", kWhyGpu),
    Ignored("BYTEPS_NCCL_NUM_RINGS", kWhyGpu),
    Ignored("BYTEPS_REDUCE_ROOTS", kWhyGpu),
    Ignored("BYTEPS_THREADPOOL_SIZE", kWhyCompress),
    Ignored("BYTEPS_SOCKET_PATH", kWhySocket),
    Ignored("BYTEPS_KEY_HASH_FN", kWhyHash),
    Ignored("BYTEPS_BUILT_IN_HASH_COEF", kWhyHash),
    Ignored("BYTEPS_MIXED_MODE_BOUND", kWhyMixed),
    Ignored("BYTEPS_SERVER_ENABLE_SCHEDULE", kWhySched),
    Ignored("BYTEPS_SERVER_ENGINE_BLOCKING", kWhyBlocking),
    Ignored("BYTEPS_DEBUG_SAMPLE_TENSOR", kWhyDebug),
    Ignored("BYTEPS_SERVER_DEBUG", kWhyDebug),
    Ignored("BYTEPS_SERVER_DEBUG_KEY", kWhyDebug),
    Ignored("PS_KEY_LOG", kWhyDebug),
    Ignored("BYTEPS_ENABLE_IPC", kWhyIpc),
    Ignored("BYTEPS_IPC_COPY_NUM_THREADS", kWhyIpc),
    Ignored("BYTEPS_IPC_ENABLE_ASYNC_COPY", kWhyIpc),
    Ignored("BYTEPS_RDMA_START_DEPTH", kWhyRdma),
    Ignored("BYTEPS_RDMA_RX_DEPTH", kWhyRdma),
    Ignored("BYTEPS_RDMA_MAX_CONCURR_WR", kWhyRdma),
    Ignored("BYTEPS_PRINT_RDMA_LOG", kWhyRdma),
    Ignored("BYTEPS_ADDRESS_POOL_SIZE", kWhyRdma),
    Ignored("BYTEPS_UCX_SHORT_THRESH", kWhyUcx),
    Ignored("BYTEPS_UCX_FORCE_REQ_ORDER", kWhyUcx),
    Ignored("BYTEPS_UCX_QUEUE_SENDS", kWhyUcx),
    Ignored("BYTEPS_UCX_ERRH_ENABLE", kWhyUcx),
    Ignored("BYTEPS_UCX_RECONNECT_TMO", kWhyUcx),
    Ignored("DMLC_NUM_CPU_DEV", kWhyUcx),
    Ignored("DMLC_NUM_GPU_DEV", kWhyUcx),
    Ignored("BYTEPS_ZMQ_MAX_SOCKET", kWhyZmq),
    Ignored("BYTEPS_ZMQ_NTHREADS", kWhyZmq),
    Ignored("BYTEPS_ORDERED_HOSTS", kWhyOrdered),
    Ignored("DMLC_LOCAL", kWhyLocal),
    Ignored("DMLC_USE_KUBERNETES", kWhyK8s),
    Ignored("DMLC_GROUP_SIZE", kWhyPslite),
    Ignored("DMLC_NUM_PORTS", kWhyPslite),
    Ignored("DMLC_LOCKLESS_QUEUE", kWhyPslite),
    Ignored("DMLC_POLLING_IN_NANOSECOND", kWhyPslite),
    Ignored("DMLC_RANK", kWhyRank),
    Ignored("PS_RESEND", kWhyResend),
    Ignored("PS_RESEND_TIMEOUT", kWhyResend),
    Ignored("PS_DROP_MSG", kWhyDrop),
    // Read by builds (the original's setup.py, this project's scripts/), never by a running process.
    Build("BYTEPS_NCCL_LINK"),
    Build("BYTEPS_CUDA_INCLUDE"),
    Build("BYTEPS_CUDA_LIB"),
    Build("BYTEPS_WITH_TENSORFLOW"),
    Build("BYTEPS_WITHOUT_TENSORFLOW"),
    Build("BYTEPS_WITH_PYTORCH"),
    Build("BYTEPS_WITHOUT_PYTORCH"),
    Build("BYTEPS_WITH_MXNET"),
    Build("BYTEPS_WITHOUT_MXNET"),
    Build("BYTEPS_WITH_UCX"),
    Build("BYTEPS_UCX_HOME"),
    Build("BYTEPS_UCX_PREFIX"),
    Build("BYTEPS_WITHOUT_PRESETUP"),
    Build("BYTEPS_USE_MPI"),
    Build("BYTEPS_CMAKE_ARGS"),
    Build("BYTEPS_SKIP_SANITIZERS"),
    Build("BYTEPS_SKIP_FUZZ"),
};

}  // namespace

std::span<const Entry> CompatibilityEntries() { return kCompatibility; }

}  // namespace byteps::config
