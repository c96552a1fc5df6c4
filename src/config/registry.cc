// The settings registry: one table declares every environment variable byteps reads, with its type,
// help text, parser and printer. Load(), Settings(), Describe() and docs/config.md all derive from
// it, so a setting cannot be parsed in one place and documented (or defaulted) differently in
// another. Defaults live only in Config's member initializers; the table prints them from a
// default-constructed Config.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <string_view>

#include "config/config.h"
#include "config/parse.h"

// POSIX. Declared here (and read only in ProcessEnvironment) because this file is the one place
// in the code base that looks at the environment.
extern char** environ;

namespace byteps::config {
namespace {

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();
// Room for the frame header and metadata in a message that carries one whole partition.
constexpr size_t kMessageOverhead = 4096;

constexpr const char* kIgnoredType = "ignored";
constexpr const char* kIgnoredHelp = "accepted for BytePS compatibility; no effect";

// What a setter sees: the variable's name (for messages) and its non-empty value.
struct Arg {
  std::string_view name;
  std::string_view value;
};

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

std::string Num(double v) { return fmt::format("{}", v); }

using Setter = Status (*)(const Arg&, Config&);
using Printer = std::string (*)(const Config&);

struct Entry {
  const char* name;
  const char* type;
  const char* help;
  Setter set = nullptr;      // nullptr: an ignored compatibility name
  Printer show = nullptr;    // nullptr: no Config field; Describe shows the env value or fallback
  const char* fallback = "";
  bool secret = false;       // Describe never prints the value
};

// Registry order is the order of `byteps info`, Settings() and docs/config.md.
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
     [](const Config& c) { return Num(c.start_timeout_s); }},
    {"BYTEPS_TIMEOUT", "seconds", "deadline of one push_pull, barrier or shutdown wait",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.op_timeout_s); },
     [](const Config& c) { return Num(c.op_timeout_s); }},
    {"PS_HEARTBEAT_INTERVAL", "seconds", "time between heartbeats to the scheduler; 0: off",
     [](const Arg& a, Config& c) { return SetSeconds(a, true, c.heartbeat_interval_s); },
     [](const Config& c) { return Num(c.heartbeat_interval_s); }},
    {"PS_HEARTBEAT_TIMEOUT", "seconds", "a node silent this long is declared dead (> interval)",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.heartbeat_timeout_s); },
     [](const Config& c) { return Num(c.heartbeat_timeout_s); }},
    {"BYTEPS_RECONNECT_TIMEOUT", "seconds",
     "a dropped connection is re-established (and in-flight data resent) within this, else the "
     "peer is declared dead",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.reconnect_timeout_s); },
     [](const Config& c) { return Num(c.reconnect_timeout_s); }},
    {"BYTEPS_AUTH_TIMEOUT", "seconds",
     "an accepted connection that has not authenticated (or identified itself) by then is dropped",
     [](const Arg& a, Config& c) { return SetSeconds(a, false, c.auth_timeout_s); },
     [](const Config& c) { return Num(c.auth_timeout_s); }},
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

bool IsIgnored(const Entry& e) { return e.set == nullptr; }

const Entry* Find(std::string_view name) {
  for (const Entry& e : kRegistry)
    if (name == e.name) return &e;
  return nullptr;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Only these prefixes are ours to reject: a misspelled BYTEPS_/DMLC_ name would otherwise be
// silently dropped. PS_* is shared with other ps-lite builds' knobs, so unknown PS_ names pass.
bool IsOurPrefix(std::string_view name) {
  return StartsWith(name, "BYTEPS_") || StartsWith(name, "DMLC_");
}

std::string UnknownMessage(std::string_view name) {
  const Entry* best = nullptr;
  size_t best_distance = 0;
  for (const Entry& e : kRegistry) {
    const size_t d = EditDistance(name, e.name);
    if (best == nullptr || d < best_distance) {
      best = &e;
      best_distance = d;
    }
  }
  if (best != nullptr && best_distance <= 3)
    return fmt::format("unknown setting {} (did you mean {}?)", name, best->name);
  return fmt::format("unknown setting {}", name);
}

// Empty values count as unset: launchers often export NAME= to mean "not given".
const std::string* Lookup(const Environment& env, std::string_view name) {
  auto it = env.find(std::string(name));
  if (it == env.end() || it->second.empty()) return nullptr;
  return &it->second;
}

std::string ShowValue(const Entry& e, const Config& c, const Environment& env) {
  const std::string* raw = Lookup(env, e.name);
  if (e.secret) return raw ? "***" : "";
  if (e.show != nullptr) return e.show(c);
  return raw ? *raw : e.fallback;
}

// ps-lite's PS_VERBOSE predates BYTEPS_LOG_LEVEL; it can only make logging chattier, never quieter.
void ApplyVerbose(Config& c) {
  // The quietest level this PS_VERBOSE allows (lower Level values log more).
  const log::Level quietest = c.ps_verbose >= 2   ? log::Level::kDebug
                              : c.ps_verbose == 1 ? log::Level::kInfo
                                                  : log::Level::kFatal;
  if (static_cast<int>(quietest) < static_cast<int>(c.log_level)) c.log_level = quietest;
}

}  // namespace

const char* RoleName(Role r) {
  switch (r) {
    case Role::kWorker: return "worker";
    case Role::kServer: return "server";
    case Role::kScheduler: return "scheduler";
  }
  return "?";
}

Environment ProcessEnvironment() {
  Environment env;
  for (char** p = ::environ; p != nullptr && *p != nullptr; ++p) {
    const std::string_view kv(*p);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view name = kv.substr(0, eq);
    if (!IsOurPrefix(name) && !StartsWith(name, "PS_")) continue;
    env.emplace(std::string(name), std::string(kv.substr(eq + 1)));
  }
  return env;
}

const std::vector<SettingInfo>& Settings() {
  static const std::vector<SettingInfo> settings = [] {
    std::vector<SettingInfo> out;
    const Config defaults;
    for (const Entry& e : kRegistry) {
      std::string def;
      if (e.show != nullptr) def = e.show(defaults);
      else def = e.fallback;
      out.push_back({e.name, e.type, def, e.help});
    }
    return out;
  }();
  return settings;
}

StatusOr<Config> Load(const Environment& env) {
  // Report every bad variable at once: fixing a launch script one error per run is tedious.
  std::vector<std::string> errors;
  Config c;
  for (const Entry& e : kRegistry) {
    const std::string* value = Lookup(env, e.name);
    if (value == nullptr || IsIgnored(e)) continue;
    Status s = e.set(Arg{e.name, *value}, c);
    if (!s.ok()) errors.push_back(s.message());
  }
  for (const auto& [name, value] : env) {
    if (value.empty() || !IsOurPrefix(name) || Find(name) != nullptr) continue;
    errors.push_back(UnknownMessage(name));
  }
  if (!errors.empty()) {
    std::string joined;
    for (const std::string& m : errors) joined += (joined.empty() ? "" : "; ") + m;
    return InvalidArgument(joined);
  }
  ApplyVerbose(c);
  BYTEPS_RETURN_IF_ERROR(Validate(c));
  return c;
}

Status Validate(const Config& c) {
  if (c.distributed() || c.role != Role::kWorker) {
    if (c.root_port <= 0)
      return InvalidArgument(
          "DMLC_PS_ROOT_PORT is not set: a distributed job needs the scheduler's port");
    if (c.num_servers < 1)
      return InvalidArgument(fmt::format(
          "DMLC_NUM_SERVER={}: a distributed job needs at least one server", c.num_servers));
    if (c.worker_id >= 0 && c.worker_id >= c.num_workers)
      return InvalidArgument(fmt::format("DMLC_WORKER_ID={} is out of range for DMLC_NUM_WORKER={}",
                                         c.worker_id, c.num_workers));
    if (c.heartbeat_interval_s > 0 && c.heartbeat_timeout_s <= c.heartbeat_interval_s)
      return InvalidArgument(fmt::format(
          "PS_HEARTBEAT_TIMEOUT={} must be greater than PS_HEARTBEAT_INTERVAL={}",
          Num(c.heartbeat_timeout_s), Num(c.heartbeat_interval_s)));
  }
  if (c.local_rank < 0 || c.local_rank >= c.local_size)
    return InvalidArgument(fmt::format(
        "BYTEPS_LOCAL_RANK={} is out of range for BYTEPS_LOCAL_SIZE={}", c.local_rank,
        c.local_size));
  // One partition must fit in one message together with its header.
  if (c.max_message_bytes < kMessageOverhead ||
      c.max_message_bytes - kMessageOverhead < c.partition_bytes)
    return InvalidArgument(fmt::format(
        "BYTEPS_MAX_MESSAGE_BYTES={} is too small for BYTEPS_PARTITION_BYTES={}: it must be at "
        "least the partition size plus {} bytes",
        c.max_message_bytes, c.partition_bytes, kMessageOverhead));
  return Status::Ok();
}

std::string Describe(const Config& c, const Environment& env) {
  struct Row {
    std::string name, value, source, help;
  };
  std::vector<Row> rows;
  for (const Entry& e : kRegistry) {
    if (IsIgnored(e)) continue;
    const bool from_env = Lookup(env, e.name) != nullptr;
    std::string value = ShowValue(e, c, env);
    if (value.empty()) value = "\"\"";  // keeps the value column visibly filled
    rows.push_back({e.name, value, from_env ? "[env]" : "[default]", e.help});
  }
  // Ignored names only when set, so the user sees that they were noticed and had no effect.
  for (const Entry& e : kRegistry) {
    const std::string* raw = Lookup(env, e.name);
    if (IsIgnored(e) && raw != nullptr)
      rows.push_back({e.name, *raw, "[env]", std::string("ignored: ") + e.help});
  }
  size_t name_w = 0, value_w = 0, source_w = 0;
  for (const Row& r : rows) {
    name_w = std::max(name_w, r.name.size());
    value_w = std::max(value_w, r.value.size());
    source_w = std::max(source_w, r.source.size());
  }
  std::string out;
  for (const Row& r : rows)
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {}\n", r.name, name_w, r.value, value_w, r.source,
                       source_w, r.help);
  return out;
}

}  // namespace byteps::config
