// The settings table: see registry.h.
#include "config/registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <vector>

#include "config/parse.h"

namespace byteps::config {
namespace {

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

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

// A rate in Gbit/s: a positive number, or "auto" (0: found out).
Status SetGbps(const Arg& a, double& out) {
  char* end = nullptr;
  const std::string v(a.value);
  if (v == "auto") {
    out = 0;
    return Status::Ok();
  }
  const double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(d > 0) || d > 1e6) return Malformed(a, "a rate in Gbit/s, e.g. 25 or 0.5");
  out = d;
  return Status::Ok();
}

Status SetRole(const Arg& a, Role& out) {
  std::string l(a.value);
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (l == "worker") out = Role::kWorker;
  else if (l == "server") out = Role::kServer;
  else if (l == "scheduler") out = Role::kScheduler;
  else {
    // A misspelled role ("wroker") gets the nearest one named.
    const char* nearest = nullptr;
    size_t best = 3;  // at most two edits away
    for (const char* role : {"worker", "server", "scheduler"}) {
      if (size_t d = EditDistance(l, role); d < best) best = d, nearest = role;
    }
    return Malformed(a, nearest ? fmt::format("one of worker, server, scheduler (did you mean {}?)", nearest)
                                : std::string("one of worker, server, scheduler"));
  }
  return Status::Ok();
}

Status SetLevel(const Arg& a, log::Level& out) {
  auto p = ParseLogLevel(a.value);
  if (!p.value) return Malformed(a, p.expected);
  out = *p.value;
  return Status::Ok();
}

// Async training changes the server's semantics (no rounds); it is not built yet, so the job runs
// synchronously and says so loudly (BYTEPS_STRICT_CONFIG=1 makes that an error).
Status MapAsync(const Arg& a, Config& c) {
  auto p = ParseBool(a.value);
  if (!p.value) return Malformed(a, p.expected);
  if (*p.value)
    c.warnings.push_back(fmt::format(
        "{}={}: asynchronous training is not built yet; training runs SYNCHRONOUSLY (every step waits for every "
        "worker, the servers sum each round), which changes the results an async job would give", a.name, a.value));
  return Status::Ok();
}

// DMLC_ENABLE_RDMA / DMLC_ENABLE_UCX select ps-lite's van: anything but "off" asks for RDMA, which
// is the UCX transport here (Load applies it unless BYTEPS_TRANSPORT says otherwise).
Status MapTransport(const Arg& a, Config& c) {
  const std::string v(a.value);
  if (v == "0" || v == "zmq" || v == "false" || v == "no" || v == "off") return Status::Ok();
  c.rdma_requested_by = std::string(a.name) + "=" + v;
  return Status::Ok();
}

Status SetTransport(const Arg& a, Config& c) {
  const std::string v(a.value);
  if (v == "auto" || v == "tcp" || v == "shm" || v == "ucx") {
    c.transport = v;
    return Status::Ok();
  }
  if (v == "rdma" || v == "ibverbs" || v == "verbs") {
    return InvalidArgument(fmt::format("{}={}: RDMA goes through UCX here: set {}=ucx (UCX_TLS chooses verbs, rc, "
                                       "tcp or sm)", a.name, a.value, a.name));
  }
  return InvalidArgument(fmt::format("{}={} is not a transport: use auto, tcp, shm or ucx", a.name, a.value));
}

constexpr Entry kRegistry[] = {
    // Topology (ps-lite names).
    {"DMLC_ROLE", "role", "this process's role: worker, server or scheduler",
     [](const Arg& a, Config& c) { return SetRole(a, c.role); },
     [](const Config& c) { return std::string(RoleName(c.role)); }},
    {"DMLC_PS_ROOT_URI", "string",
     "scheduler's address, which every node connects to (the scheduler itself listens on DMLC_NODE_HOST, else on "
     "every address, 0.0.0.0)",
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
    {"BYTEPS_PCIE_SWITCH_SIZE", "int",
     "GPUs (local processes) per PCIe switch: each switch reduces its device tensors with NCCL to its last "
     "process, and the switches' roots sum on the CPU; 0: from the topology (hwloc), else one switch; a size "
     "that does not divide BYTEPS_LOCAL_SIZE means one switch, with a warning",
     [](const Arg& a, Config& c) { return SetInt(a, 0, kIntMax, c.pcie_switch_size); },
     [](const Config& c) { return fmt::to_string(c.pcie_switch_size); }},
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
    {"BYTEPS_MIN_COMPRESS_BYTES", "bytes",
     "a tensor smaller than this is sent uncompressed even when its declaration names a compressor (0..1G)",
     [](const Arg& a, Config& c) { return SetBytes(a, 0, kGiB, c.min_compress_bytes); },
     [](const Config& c) { return FormatBytes(c.min_compress_bytes); }},
    {"BYTEPS_FORCE_DISTRIBUTED", "bool", "use the scheduler and servers even with one worker",
     [](const Arg& a, Config& c) { return SetBool(a, c.force_distributed); },
     [](const Config& c) { return fmt::to_string(c.force_distributed ? 1 : 0); }},
    // Server.
    {"BYTEPS_SERVER_ENGINE_THREAD", "int", "server summation threads (1..64)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 64, c.server_engine_threads); },
     [](const Config& c) { return fmt::to_string(c.server_engine_threads); }},
    {"BYTEPS_ENABLE_MIXED_MODE", "bool",
     "the unified architecture's mixed placement, read by the scheduler: servers on the worker machines and on CPU "
     "machines of their own share the bytes by the optimal split (each CPU server 2(n-1)/(n^2+kn-2k), each "
     "colocated one (n-k)/(n^2+kn-2k)). Unset: mixed whenever both kinds of server are there and one runs on each "
     "worker machine (also `auto`); 0: equal shares; 1: mixed, or the job fails saying what to change",
     [](const Arg& a, Config& c) {
       if (a.value == "auto") {
         c.mixed_mode = -1;
         return Status::Ok();
       }
       bool on = false;
       BYTEPS_RETURN_IF_ERROR(SetBool(a, on));
       c.mixed_mode = on ? 1 : 0;
       return Status::Ok();
     },
     [](const Config& c) { return std::string(c.mixed_mode < 0 ? "auto" : c.mixed_mode ? "1" : "0"); }, "", false,
     Disposition::kHonoured},
    {"BYTEPS_NIC_GBPS", "Gbit/s",
     "this machine's NIC rate in each direction, for the mixed placement's split when the worker and CPU machines' "
     "NICs differ. Unset or `auto`: the link speed the kernel reports for the node's interface, if any",
     [](const Arg& a, Config& c) { return SetGbps(a, c.nic_gbps); },
     [](const Config& c) { return c.nic_gbps > 0 ? fmt::format("{}", c.nic_gbps) : std::string("auto"); }},
    // Transport.
    {"BYTEPS_CONNECTIONS_PER_PEER", "int", "TCP connections to each server (1..16); unset: 2, more where the start-up probe finds a long round trip",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 16, c.connections_per_peer); },
     [](const Config& c) { return fmt::to_string(c.connections_per_peer); }},
    {"BYTEPS_IO_THREADS", "int", "transport I/O threads (1..16)",
     [](const Arg& a, Config& c) { return SetInt(a, 1, 16, c.io_threads); },
     [](const Config& c) { return fmt::to_string(c.io_threads); }},
    {"BYTEPS_SOCKET_BUFFER_BYTES", "bytes",
     "socket send/receive buffer size (0, or 64K..1G); 0: OS default",
     [](const Arg& a, Config& c) {
       // Below 64 KiB, a link whose segment size exceeds the window (loopback's is 64 KiB) sends
       // one window per retransmission timer: measured, a 2.4 MB push_pull took over 20 s.
       if (Status st = SetBytes(a, 0, kGiB, c.socket_buffer_bytes); !st.ok()) return st;
       if (c.socket_buffer_bytes == 0 || c.socket_buffer_bytes >= 64 * 1024) return Status::Ok();
       return InvalidArgument(fmt::format("{}={}: below 64K TCP stalls where a segment is larger than the "
                                          "window (e.g. loopback); use 0 (the OS default) or at least 64K",
                                          a.name, a.value));
     },
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
    // Timeline.
    {"BYTEPS_TRACE_ON", "bool",
     "1: write the timeline (chrome-trace JSON) of the rounds from BYTEPS_TRACE_START_STEP to BYTEPS_TRACE_END_STEP "
     "into BYTEPS_TRACE_DIR (docs/tracing.md)",
     [](const Arg& a, Config& c) { return SetBool(a, c.trace_on); },
     [](const Config& c) { return fmt::to_string(c.trace_on ? 1 : 0); }},
    {"BYTEPS_TRACE_DIR", "string",
     "where traces go: a worker writes <dir>/<local_rank>/comm.json, a server <dir>/server_<rank>/comm.json; "
     "created if missing, and it must be writable",
     [](const Arg& a, Config& c) { c.trace_dir = a.value; return Status::Ok(); },
     [](const Config& c) { return c.trace_dir; }},
    {"BYTEPS_TRACE_START_STEP", "int",
     "the first traced step, counted per tensor (its push_pulls); >= 1",
     [](const Arg& a, Config& c) { return SetInt(a, 1, kIntMax, c.trace_start_step); },
     [](const Config& c) { return fmt::to_string(c.trace_start_step); }},
    {"BYTEPS_TRACE_END_STEP", "int",
     "the step tracing stops at, counted per tensor; greater than BYTEPS_TRACE_START_STEP",
     [](const Arg& a, Config& c) { return SetInt(a, 2, kIntMax, c.trace_end_step); },
     [](const Config& c) { return fmt::to_string(c.trace_end_step); }},
    {"BYTEPS_METRICS_PORT", "int",
     "serve Prometheus metrics on http://<node address>:<port>/metrics (0: off: no socket, no thread); bpsrun and "
     "bpslaunch give each process of a host its own port from this one (docs/metrics.md)",
     [](const Arg& a, Config& c) { return SetInt(a, 0, 65535, c.metrics_port); },
     [](const Config& c) { return fmt::to_string(c.metrics_port); }},
    {"PS_VERBOSE", "int", "0..2; 1 raises the log level to at least INFO, 2 to at least DEBUG",
     [](const Arg& a, Config& c) { return SetInt(a, 0, 2, c.ps_verbose); },
     [](const Config& c) { return fmt::to_string(c.ps_verbose); }, "", false, Disposition::kMapped},
    {"BYTEPS_TRANSPORT", "string",
     "data connections: auto (shared memory to processes of this host that offer it, TCP to the others), tcp "
     "(TCP only), shm (as auto, but a peer of this host that offers shared memory is reached through it or the "
     "connection fails saying why, instead of falling back to TCP), ucx (UCX: RDMA where the hardware has it; "
     "UCX_TLS and the other UCX_* variables pass through to UCX)",
     SetTransport, [](const Config& c) { return c.transport; }},
    {"DMLC_ENABLE_RDMA", "string",
     "ps-lite's transport choice: unset, 0 or zmq is TCP; anything else asks for RDMA: the UCX transport "
     "(BYTEPS_TRANSPORT=ucx), unless BYTEPS_TRANSPORT is set",
     MapTransport, nullptr, "", false, Disposition::kMapped},
    {"DMLC_ENABLE_UCX", "string",
     "1 asks for ps-lite's UCX transport: BYTEPS_TRANSPORT=ucx, unless BYTEPS_TRANSPORT is set", MapTransport,
     nullptr, "", false, Disposition::kMapped},
    // Accepted, but not stored in Config.
    {"BYTEPS_ENABLE_ASYNC", "bool",
     "asynchronous training: not built yet; 1 runs synchronous training with a loud warning", MapAsync, nullptr,
     "0", false, Disposition::kMapped},
    {"BYTEPS_STRICT_CONFIG", "bool",
     "1: a variable that is ignored or cannot be honoured (see `byteps info --config`) is an error instead of a "
     "warning",
     [](const Arg& a, Config& c) { return SetBool(a, c.strict_config); },
     [](const Config& c) { return fmt::to_string(c.strict_config ? 1 : 0); }},
    {"BYTEPS_JOB_SECRET", "string",
     "per-job shared secret (set by the launchers): every connection proves it (HMAC-SHA256 challenge); "
     "also names the job's shared memory and local sockets. Empty: no authentication",
     [](const Arg& a, Config& c) { c.job_secret = a.value; return Status::Ok(); }, nullptr, "", true},
    {"BYTEPS_CUDA_HOME", "string",
     "the CUDA toolkit's folder: read by builds, and searched at run time for the CUDA runtime ($BYTEPS_CUDA_HOME/lib64) "
     "when it is not on the library path; CUDA_HOME when unset",
     [](const Arg& a, Config& c) { c.cuda_home = a.value; return Status::Ok(); },
     [](const Config& c) { return c.cuda_home; }},
    {"BYTEPS_NCCL_HOME", "string",
     "NCCL's folder: read by builds, and searched at run time for libnccl.so.2 ($BYTEPS_NCCL_HOME/lib) when it is not "
     "on the library path; NCCL_HOME when unset",
     [](const Arg& a, Config& c) { c.nccl_home = a.value; return Status::Ok(); },
     [](const Config& c) { return c.nccl_home; }},
    {"BYTEPS_TELEMETRY_ON", "bool",
     "push_pull speed sampling for get_pushpull_speed(): one sample per 10 s window of completed push_pulls; 0 "
     "turns it off",
     [](const Arg& a, Config& c) { return SetBool(a, c.telemetry_on); },
     [](const Config& c) { return std::string(c.telemetry_on ? "1" : "0"); }},
};

}  // namespace

const char* DispositionName(Disposition d) {
  switch (d) {
    case Disposition::kHonoured: return "honoured";
    case Disposition::kMapped: return "mapped";
    case Disposition::kIgnored: return "ignored";
    case Disposition::kBuild: return "build-time";
  }
  return "?";
}

std::string FormatSeconds(double v) { return fmt::format("{}", v); }

std::span<const Entry> Registry() {
  static const std::vector<Entry> all = [] {
    std::vector<Entry> v(std::begin(kRegistry), std::end(kRegistry));
    const auto launcher = LauncherEntries();
    v.insert(v.end(), launcher.begin(), launcher.end());
    const auto compat = CompatibilityEntries();
    v.insert(v.end(), compat.begin(), compat.end());
    return v;
  }();
  return all;
}

const Entry* FindEntry(std::string_view name) {
  for (const Entry& e : Registry())
    if (name == e.name) return &e;
  return nullptr;
}

}  // namespace byteps::config
