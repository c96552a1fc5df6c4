// Typed configuration of a byteps process. Load (load.cc) is the only reader of the
// environment in the whole code base; components receive these structs and never call getenv, so
// tests build configs directly. Threading: plain values.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/logging.h"
#include "common/status.h"

namespace byteps::config {

enum class Role { kWorker, kServer, kScheduler };
const char* RoleName(Role r);

// A snapshot of environment variables (name -> value). Tests build one by hand.
using Environment = std::map<std::string, std::string>;
// Reads the process environment (the one place that does).
Environment ProcessEnvironment();

struct Config {
  // Topology (ps-lite names).
  Role role = Role::kWorker;
  std::string root_uri = "127.0.0.1";  // DMLC_PS_ROOT_URI
  int root_port = 0;                   // DMLC_PS_ROOT_PORT (required when distributed)
  int num_workers = 1;                 // DMLC_NUM_WORKER
  int num_servers = 0;                 // DMLC_NUM_SERVER (>= 1 required when distributed)
  int worker_id = -1;                  // DMLC_WORKER_ID (-1: scheduler assigns in arrival order)
  std::string interface;               // DMLC_INTERFACE (NIC whose IPv4 address is announced)
  std::string node_host;               // DMLC_NODE_HOST (explicit address; wins over interface)
  int port = 0;                        // DMLC_PORT (0: ephemeral)
  int advertise_port = 0;              // BYTEPS_ADVERTISE_PORT (0: the bound port)
  int local_rank = 0;                  // BYTEPS_LOCAL_RANK
  int local_size = 1;                  // BYTEPS_LOCAL_SIZE
  int global_rank = -1;                // BYTEPS_GLOBAL_RANK (-1: derived)
  int pcie_switch_size = 0;            // BYTEPS_PCIE_SWITCH_SIZE (0: from the topology, else one switch)
  std::string cuda_visible_devices;    // CUDA_VISIBLE_DEVICES (which GPUs count for the topology)
  std::string nvidia_visible_devices;  // NVIDIA_VISIBLE_DEVICES (the same, when CUDA's is unset)
  std::string job_secret;              // BYTEPS_JOB_SECRET (never printed)
  std::string cuda_home;               // BYTEPS_CUDA_HOME, else CUDA_HOME: the CUDA runtime's search folder
  std::string nccl_home;               // BYTEPS_NCCL_HOME, else NCCL_HOME: libnccl's search folder

  // Worker engine.
  size_t partition_bytes = 4096000;    // BYTEPS_PARTITION_BYTES
  int scheduling_credit = 0;           // BYTEPS_SCHEDULING_CREDIT (partitions in flight; 0 = no cap)
  bool force_distributed = false;      // BYTEPS_FORCE_DISTRIBUTED
  bool autotune = true;                // BYTEPS_AUTOTUNE: partition size, credit and connections from the network
  // Set explicitly in the environment: the autotuner leaves them alone (Load fills these).
  bool partition_bytes_pinned = false;
  bool scheduling_credit_pinned = false;
  bool connections_per_peer_pinned = false;
  // BYTEPS_MIN_COMPRESS_BYTES: a tensor smaller than this is sent uncompressed even when its
  // declaration asks for a compressor (the original's default, 64 KiB).
  size_t min_compress_bytes = 65536;
  bool telemetry_on = true;            // BYTEPS_TELEMETRY_ON: get_pushpull_speed's samples
  double telemetry_window_s = 10;      // a sample per window this long (BytePS's 10 s; tests shorten it)

  // Server.
  int server_engine_threads = 4;       // BYTEPS_SERVER_ENGINE_THREAD
  // BYTEPS_ENABLE_MIXED_MODE, read by the scheduler (protocol/server_placement.h): -1 unset (mix
  // whenever servers run on worker machines and on CPU machines alike), 0 equal shares, 1 mix or fail.
  int mixed_mode = -1;
  double nic_gbps = 0;                 // BYTEPS_NIC_GBPS: this machine's NIC rate (0: what the kernel reports)

  // Transport.
  int connections_per_peer = 2;        // BYTEPS_CONNECTIONS_PER_PEER
  int io_threads = 2;                  // BYTEPS_IO_THREADS
  size_t socket_buffer_bytes = 4u << 20;    // BYTEPS_SOCKET_BUFFER_BYTES
  size_t max_message_bytes = 1ull << 30;    // BYTEPS_MAX_MESSAGE_BYTES
  int max_connections = 1024;          // BYTEPS_MAX_CONNECTIONS (accepted, per process)
  bool checksum = false;               // BYTEPS_CHECKSUM (CRC32C on every frame)
  std::string transport = "auto";      // BYTEPS_TRANSPORT: auto (shm to this host's peers, else tcp), tcp, shm, ucx
  std::string rdma_requested_by;       // "DMLC_ENABLE_RDMA=1" when the original's variable asked for RDMA (UCX)

  // Deadlines (seconds).
  double start_timeout_s = 60;         // BYTEPS_START_TIMEOUT: rendezvous must complete by then
  double op_timeout_s = 300;           // BYTEPS_TIMEOUT: a push_pull/barrier/shutdown wait
  double heartbeat_interval_s = 1;     // PS_HEARTBEAT_INTERVAL
  double heartbeat_timeout_s = 15;     // PS_HEARTBEAT_TIMEOUT: silent node declared dead
  double reconnect_timeout_s = 5;      // BYTEPS_RECONNECT_TIMEOUT: a dropped connection must be
                                       // re-established by then, else its peer is declared dead
  double auth_timeout_s = 10;          // BYTEPS_AUTH_TIMEOUT: an accepted connection must
                                       // authenticate (or say Hello) by then

  // Logging.
  log::Level log_level = log::Level::kWarning;  // BYTEPS_LOG_LEVEL
  bool log_hide_time = false;          // BYTEPS_LOG_HIDE_TIME
  int ps_verbose = 0;                  // PS_VERBOSE (0..2; >=1 raises the level to INFO/DEBUG)

  // Timeline (docs/tracing.md): BytePS's names and defaults.
  bool trace_on = false;               // BYTEPS_TRACE_ON
  std::string trace_dir = "./trace";   // BYTEPS_TRACE_DIR: <dir>/<local_rank>/comm.json per worker
  int trace_start_step = 10;           // BYTEPS_TRACE_START_STEP (>= 1): a tensor's first traced round
  int trace_end_step = 20;             // BYTEPS_TRACE_END_STEP (> start): the round tracing stops at
  // Not a setting of ours: the system's folder for temporary files (TMPDIR, when set and not
  // empty), where the stall reports go when not tracing (common/report_file.h).
  std::string tmp_dir = "/tmp";

  // Metrics (docs/metrics.md): 0 = no endpoint, no socket, no thread.
  int metrics_port = 0;                // BYTEPS_METRICS_PORT: Prometheus text on http://<node host>:<port>/metrics

  // Compatibility.
  bool strict_config = false;          // BYTEPS_STRICT_CONFIG: the warnings below are errors
  // One line per variable that is set but ignored, or asks for what this build cannot do (with the
  // fallback taken). Load fills it; each process logs it once at WARNING.
  std::vector<std::string> warnings;

  // True when this worker must talk to a scheduler and servers.
  bool distributed() const { return num_workers > 1 || force_distributed; }
  // Global rank/size of a worker process (BytePS: rank = local_rank + worker_id * local_size).
  int size() const { return num_workers * local_size; }
};

// One registered setting: what `byteps info` and docs/config.md print.
struct SettingInfo {
  std::string name;
  std::string type;      // "int", "bytes", "bool", "seconds", "string", "role", "level"
  std::string default_value;
  std::string help;
  std::string disposition;  // "honoured", "mapped", "ignored", "build-time" (registry.h)
};
const std::vector<SettingInfo>& Settings();

// Builds a Config from env. Errors (InvalidArgument) name the variable, the bad value and the
// accepted form, e.g. "BYTEPS_PARTITION_BYTES='4k0': expected a positive integer number of bytes
// (optionally with K/M/G suffix)". Unknown BYTEPS_* / DMLC_* names are errors too (typos).
StatusOr<Config> Load(const Environment& env);

// Cross-field checks for a distributed role (root port set, num_servers >= 1, worker_id < num
// workers, ...). Load() calls it; exposed for tests.
Status Validate(const Config& c);

// "NAME = value   (default d)  help" lines for `byteps info`; marks values that came from env.
std::string Describe(const Config& c, const Environment& env);

// Every variable byteps knows (its own and the original BytePS / ps-lite ones) with what it does
// here: honoured, mapped, ignored (with why) or build-time, for `byteps info --config`.
std::string DescribeDispositions(const Environment& env);

// Logs Config::warnings once each at WARNING (the roles' and the library's start).
void LogWarnings(const Config& c);

}  // namespace byteps::config
