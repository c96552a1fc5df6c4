// The settings table: see registry.h.
#include "config/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>

#include "config/parse.h"

namespace byteps::config {
namespace {

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();
constexpr const char* kIgnoredType = "ignored";
constexpr const char* kIgnoredHelp = "accepted for BytePS compatibility; no effect";

Status Malformed(const Arg& a, const std::string& expected) {
  return InvalidArgument(fmt::format("{}='{}': expected {}", a.name, a.value, expected));
}

Status SetInt(const Arg& a, int64_t min, int64_t max, int& out) {
  auto p = ParseInt(a.value, min, max);
  if (!p.value) return Malformed(a, p.expected);
  out = static_cast<int>(*p.value);
  return Status::Ok();
}

Status SetBytes(const Arg& a, uint64_t min, uint64_t max, size_t& out) {
  auto p = ParseBytes(a.value, min, std::min<uint64_t>(max, std::numeric_limits<size_t>::max()));
  if (!p.value) return Malformed(a, p.expected);
  out = static_cast<size_t>(*p.value);
  return Status::Ok();
}

Status SetBool(const Arg& a, bool& out) {
  auto p = ParseBool(a.value);
  if (!p.value) return Malformed(a, p.expected);
  out = *p.value;
  return Status::Ok();
}

Status SetSeconds(const Arg& a, bool allow_zero, double& out) {
  auto p = ParseSeconds(a.value, allow_zero);
  if (!p.value) return Malformed(a, p.expected);
  out = *p.value;
  return Status::Ok();
}

Status SetRole(const Arg& a, Role& out) {
  std::string l(a.value);
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (l == "worker") out = Role::kWorker;
  else if (l == "server") out = Role::kServer;
  else if (l == "scheduler") out = Role::kScheduler;
  else return Malformed(a, "one of worker, server, scheduler");
  return Status::Ok();
}

Status SetLevel(const Arg& a, log::Level& out) {
  auto p = ParseLogLevel(a.value);
  if (!p.value) return Malformed(a, p.expected);
  out = *p.value;
  return Status::Ok();
}

// Settings without a Config field (read by launchers, or reserved) need no parsing here.
Status Accept(const Arg&, Config&) { return Status::Ok(); }

// Async training changes the server's semantics (no rounds); refusing it beats silently running
// synchronous training while the user believes otherwise.
Status RejectAsync(const Arg& a, Config&) {
  auto p = ParseBool(a.value);
  if (!p.value) return Malformed(a, p.expected);
  if (*p.value)
    return InvalidArgument(fmt::format(
        "{}={}: asynchronous training is not supported yet; unset it or set 0", a.name, a.value));
  return Status::Ok();
}

constexpr Entry kRegistry[] = {
    // Topology (ps-lite names).
    {"DMLC_ROLE", "role", "this process's role: worker, server or scheduler",
     [](const Arg& a, Config& c) { return SetRole(a, c.role); },
     [](const Config& c) { return std::string(RoleName(c.role)); }},
    {"DMLC_PS_ROOT_URI", "string", "scheduler's IP address (the scheduler binds there)",
     [](const Arg& a, Config& c) { c.root_uri = a.value; return Status::Ok(); },
     [](const Config& c) { return c.root_uri; }},
    {"DMLC_PS_ROOT_PORT", "int", "scheduler's port, 1..65535 (required when distributed)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 65535, c.root_port); },
     [](const Config& c) { return fmt::to_string(c.root_port); }},
    {"DMLC_NUM_WORKER", "int", "number of worker machines (>= 1)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, kIntMax, c.num_workers); },
     [](const Config& c) { return fmt::to_string(c.num_workers); }},
    {"DMLC_NUM_SERVER", "int", "number of servers (>= 1 when distributed)",
     [](const Arg& a, Config& c) { return SetInt(a, 0, kIntMax, c.num_servers); },
     [](const Config& c) { return fmt::to_string(c.num_servers); }},
    {"DMLC_WORKER_ID", "int", "this worker machine's index; -1: the scheduler assigns by arrival",
     [](const Arg& a, Config& c) { return SetInt(a, 0, kIntMax, c.worker_id); },
     [](const Config& c) { return fmt::to_string(c.worker_id); }},
    {"DMLC_INTERFACE", "string", "network interface whose IPv4 address this node announces",
     [](const Arg& a, Config& c) { c.interface = a.value; return Status::Ok(); },
     [](const Config& c) { return c.interface; }},
    {"DMLC_NODE_HOST", "string", "explicit address this node announces (wins over DMLC_INTERFACE)",
     [](const Arg& a, Config& c) { c.node_host = a.value; return Status::Ok(); },
     [](const Config& c) { return c.node_host; }},
    {"DMLC_PORT", "int", "this node's listening port, 0..65535; 0: ephemeral",
     [](const Arg& a, Config& c) { return SetInt(a, 0, 65535, c.port); },
     [](const Config& c) { return fmt::to_string(c.port); }},
    {"BYTEPS_ADVERTISE_PORT", "int",
     "port others use to reach this node's listener (NAT, proxies), 0..65535; 0: the bound port",
     [](const Arg& a, Config& c) { return SetInt(a, 0, 65535, c.advertise_port); },
     [](const Config& c) { return fmt::to_string(c.advertise_port); }},
    {"BYTEPS_LOCAL_RANK", "int", "index of this worker process on its machine (< local size)",
     [](const Arg& a, Config& c) { return SetInt(a, 0, kIntMax, c.local_rank); },
     [](const Config& c) { return fmt::to_string(c.local_rank); }},
    {"BYTEPS_LOCAL_SIZE", "int", "number of worker processes on this machine (>= 1)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, kIntMax, c.local_size); },
     [](const Config& c) { return fmt::to_string(c.local_size); }},
    {"BYTEPS_GLOBAL_RANK", "int",
     "overrides the global rank; -1: local_rank + worker_id * local_size",
     [](const Arg& a, Config& c) { return SetInt(a, 0, kIntMax, c.global_rank); },
     [](const Config& c) { return fmt::to_string(c.global_rank); }},
    // Worker engine.
    {"BYTEPS_PARTITION_BYTES", "bytes",
     "tensors are split into partitions of at most this size (4..1G)",
     [](const Arg& a, Config& c) { return SetBytes(a, 4, kGiB, c.partition_bytes); },
     [](const Config& c) { return FormatBytes(c.partition_bytes); }},
    {"BYTEPS_SCHEDULING_CREDIT", "int", "partitions in flight per worker; 0: no cap",
     [](const Arg& a, Config& c) { return SetInt(a, 0, kIntMax, c.scheduling_credit); },
     [](const Config& c) { return fmt::to_string(c.scheduling_credit); }},
    {"BYTEPS_AUTOTUNE", "bool",
     "worker 0 probes the network at start-up and picks the partition size and credit for every "
     "worker, then, over the first 19 large iterations, every worker tries a second partition size and "
     "applies worker 0's verdict, and each worker tunes its own credit (docs/performance.md); values set "
     "explicitly are kept",
     [](const Arg& a, Config& c) { return SetBool(a, c.autotune); },
     [](const Config& c) { return fmt::to_string(c.autotune ? 1 : 0); }},
    {"BYTEPS_FORCE_DISTRIBUTED", "bool", "use the scheduler and servers even with one worker",
     [](const Arg& a, Config& c) { return SetBool(a, c.force_distributed); },
     [](const Config& c) { return fmt::to_string(c.force_distributed ? 1 : 0); }},
    // Server.
    {"BYTEPS_SERVER_ENGINE_THREAD", "int", "server summation threads (1..64)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 64, c.server_engine_threads); },
     [](const Config& c) { return fmt::to_string(c.server_engine_threads); }},
    // Transport.
    {"BYTEPS_CONNECTIONS_PER_PEER", "int", "TCP connections opened to each peer (1..16)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 16, c.connections_per_peer); },
     [](const Config& c) { return fmt::to_string(c.connections_per_peer); }},
    {"BYTEPS_IO_THREADS", "int", "transport I/O threads (1..16)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 16, c.io_threads); },
     [](const Config& c) { return fmt::to_string(c.io_threads); }},
    {"BYTEPS_SOCKET_BUFFER_BYTES", "bytes",
     "socket send/receive buffer size (0..1G); 0: OS default",
     [](const Arg& a, Config& c) { return SetBytes(a, 0, kGiB, c.socket_buffer_bytes); },
     [](const Config& c) { return FormatBytes(c.socket_buffer_bytes); }},
    {"BYTEPS_MAX_MESSAGE_BYTES", "bytes",
     "largest message accepted from a peer (>= 4K and >= partition bytes + 4K)",
     [](const Arg& a, Config& c) { return SetBytes(a, 4096, kUnbounded, c.max_message_bytes); },
     [](const Config& c) { return FormatBytes(c.max_message_bytes); }},
    {"BYTEPS_MAX_CONNECTIONS", "int",
     "most connections a process accepts at once (1..65536); more are refused and logged",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 65536, c.max_connections); },
     [](const Config& c) { return fmt::to_string(c.max_connections); }},
    {"BYTEPS_CHECKSUM", "bool",
     "CRC32C on every frame's header and payload (for links that corrupt silently); all nodes alike",
     [](const Arg& a, Config& c) { return SetBool(a, c.checksum); },
     [](const Config& c) { return fmt::to_string(c.checksum ? 1 : 0); }},
    // Deadlines.
    {"BYTEPS_START_TIMEOUT", "seconds", "rendezvous with the scheduler must complete within this",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.start_timeout_s); },
     [](const Config& c) { return FormatSeconds(c.start_timeout_s); }},
    {"BYTEPS_TIMEOUT", "seconds", "deadline of one push_pull, barrier or shutdown wait",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.op_timeout_s); },
     [](const Config& c) { return FormatSeconds(c.op_timeout_s); }},
    {"PS_HEARTBEAT_INTERVAL", "seconds", "time between heartbeats to the scheduler; 0: off",
     [](const Arg& a, Config& c) { return SetSeconds(a, true, c.heartbeat_interval_s); },
     [](const Config& c) { return FormatSeconds(c.heartbeat_interval_s); }},
    {"PS_HEARTBEAT_TIMEOUT", "seconds", "a node silent this long is declared dead (> interval)",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.heartbeat_timeout_s); },
     [](const Config& c) { return FormatSeconds(c.heartbeat_timeout_s); }},
    {"BYTEPS_RECONNECT_TIMEOUT", "seconds",
     "a dropped connection is re-established (and in-flight data resent) within this, else the "
     "peer is declared dead",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.reconnect_timeout_s); },
     [](const Config& c) { return FormatSeconds(c.reconnect_timeout_s); }},
    {"BYTEPS_AUTH_TIMEOUT", "seconds",
     "an accepted connection that has not authenticated (or identified itself) by then is dropped",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.auth_timeout_s); },
     [](const Config& c) { return FormatSeconds(c.auth_timeout_s); }},
    // Logging.
    {"BYTEPS_LOG_LEVEL", "level", "minimum level logged: TRACE, DEBUG, INFO, WARNING, ERROR, FATAL",
     [](const Arg& a, Config& c) { return SetLevel(a, c.log_level); },
     [](const Config& c) { return std::string(log::LevelName(c.log_level)); }},
    {"BYTEPS_LOG_HIDE_TIME", "bool", "omit the timestamp from log lines",
     [](const Arg& a, Config& c) { return SetBool(a, c.log_hide_time); },
     [](const Config& c) { return fmt::to_string(c.log_hide_time ? 1 : 0); }},
    {"PS_VERBOSE", "int", "0..2; 1 raises the log level to at least INFO, 2 to at least DEBUG",
     [](const Arg& a, Config& c) { return SetInt(a, 0, 2, c.ps_verbose); },
     [](const Config& c) { return fmt::to_string(c.ps_verbose); }},
    // Accepted, but not stored in Config.
    {"BYTEPS_ENABLE_ASYNC", "bool", "asynchronous training; only 0 (off) is supported", RejectAsync,
     nullptr, "0"},
    {"BYTEPS_JOB_SECRET", "string",
     "per-job shared secret (set by the launchers): every connection proves it (HMAC-SHA256 challenge); "
     "also names the job's shared memory and local sockets. Empty: no authentication",
     [](const Arg& a, Config& c) { c.job_secret = a.value; return Status::Ok(); }, nullptr, "", true},
    {"BYTEPS_CORE_BINARY", "string",
     "path of the byteps core binary (used by Python launchers only)", Accept, nullptr, ""},
    // Original BytePS / ps-lite names that have no meaning here (tracing, NUMA binding, NCCL, RDMA,
    // ZMQ...). Accepting them lets existing launch scripts run unchanged.
    {"BYTEPS_TRACE_ON", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_TRACE_START_STEP", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_TRACE_END_STEP", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_TRACE_DIR", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_TELEMETRY_ON", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_NUMA_ON", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_VISIBLE_CPU_CORES", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_NUMA_DEFAULT_QUOTA", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_NUMA_ROOT_QUOTA", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_CPU_BLACKLIST", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_MULTITHREADED_CPU", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_ENABLE_GDB", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_OMP_THREAD_PER_GPU", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_PCIE_SWITCH_SIZE", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_NCCL_GROUP_SIZE", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_NCCL_NUM_RINGS", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_THREADPOOL_SIZE", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_MIN_COMPRESS_BYTES", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_SOCKET_PATH", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_KEY_HASH_FN", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_SERVER_ENABLE_SCHEDULE", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_SERVER_ENGINE_BLOCKING", kIgnoredType, kIgnoredHelp},
    {"BYTEPS_ENABLE_IPC", kIgnoredType, kIgnoredHelp},
    {"DMLC_ENABLE_RDMA", kIgnoredType, kIgnoredHelp},
    {"DMLC_LOCAL", kIgnoredType, kIgnoredHelp},
    {"DMLC_USE_KUBERNETES", kIgnoredType, kIgnoredHelp},
    {"DMLC_GROUP_SIZE", kIgnoredType, kIgnoredHelp},
    {"DMLC_NUM_PORTS", kIgnoredType, kIgnoredHelp},
    {"DMLC_NUM_CPU_DEV", kIgnoredType, kIgnoredHelp},
    {"DMLC_NUM_GPU_DEV", kIgnoredType, kIgnoredHelp},
    {"PS_RESEND", kIgnoredType, kIgnoredHelp},
    {"PS_RESEND_TIMEOUT", kIgnoredType, kIgnoredHelp},
    {"PS_KEY_LOG", kIgnoredType, kIgnoredHelp},
};

}  // namespace

std::string FormatSeconds(double v) { return fmt::format("{}", v); }

std::span<const Entry> Registry() { return kRegistry; }

const Entry* FindEntry(std::string_view name) {
  for (const Entry& e : kRegistry)
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace byteps::config
