// Builds typed configs from the environment: Load (every bad variable reported at once, unknown
// names with a "did you mean"), the cross-field Validate, and the views of the settings table
// (Settings, Describe). The table itself is registry.cc.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>

#include "config/config.h"
#include "config/parse.h"
#include "config/registry.h"

// POSIX. Declared here (and read only in ProcessEnvironment) because this file is the one place
// in the code base that looks at the environment.
extern char** environ;

namespace byteps::config {
namespace {

// Room for the frame header and metadata in a message that carries one whole partition.
constexpr size_t kMessageOverhead = 4096;

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
  for (const Entry& e : Registry()) {
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
    if (!IsOurPrefix(name) && !StartsWith(name, "PS_") && name != "CUDA_VISIBLE_DEVICES" &&
        name != "NVIDIA_VISIBLE_DEVICES" && name != "CUDA_HOME" && name != "NCCL_HOME" && name != "TMPDIR") {
      continue;
    }
    env.emplace(std::string(name), std::string(kv.substr(eq + 1)));
  }
  return env;
}

const std::vector<SettingInfo>& Settings() {
  static const std::vector<SettingInfo> settings = [] {
    std::vector<SettingInfo> out;
    const Config defaults;
    for (const Entry& e : Registry()) {
      std::string def;
      if (e.show != nullptr) def = e.show(defaults);
      else def = e.fallback;
      out.push_back({e.name, e.type, def, e.help, DispositionName(e.disposition)});
    }
    return out;
  }();
  return settings;
}

StatusOr<Config> Load(const Environment& env) {
  // Report every bad variable at once: fixing a launch script one error per run is tedious.
  std::vector<std::string> errors;
  Config c;
  for (const Entry& e : Registry()) {
    const std::string* value = Lookup(env, e.name);
    if (value == nullptr) continue;
    if (IsIgnored(e)) {
      if (e.disposition == Disposition::kIgnored) {
        c.warnings.push_back(fmt::format("{}={} is accepted and ignored: {}", e.name, *value, e.help));
      }
      continue;
    }
    Status s = e.set(Arg{e.name, *value}, c);
    if (!s.ok()) errors.push_back(s.message());
  }
  if (!c.rdma_requested_by.empty()) {
    if (Lookup(env, "BYTEPS_TRANSPORT") == nullptr) {
      c.transport = "ucx";
    } else if (c.transport != "ucx") {
      c.warnings.push_back(fmt::format("{} asks for RDMA (the UCX transport), but BYTEPS_TRANSPORT={} is set and wins",
                                       c.rdma_requested_by, c.transport));
    }
  }
  for (const auto& [name, value] : env) {
    if (value.empty() || !IsOurPrefix(name) || FindEntry(name) != nullptr) continue;
    errors.push_back(UnknownMessage(name));
  }
  if (c.strict_config) {
    for (const std::string& w : c.warnings) errors.push_back(w + " (an error with BYTEPS_STRICT_CONFIG=1)");
  }
  if (!errors.empty()) {
    std::string joined;
    for (const std::string& m : errors) joined += (joined.empty() ? "" : "; ") + m;
    return InvalidArgument(joined);
  }
  ApplyVerbose(c);
  c.partition_bytes_pinned = Lookup(env, "BYTEPS_PARTITION_BYTES") != nullptr;
  c.scheduling_credit_pinned = Lookup(env, "BYTEPS_SCHEDULING_CREDIT") != nullptr;
  c.connections_per_peer_pinned = Lookup(env, "BYTEPS_CONNECTIONS_PER_PEER") != nullptr;
  // Not settings of ours: which GPUs the process may use (the topology's switch size counts those).
  if (const std::string* v = Lookup(env, "CUDA_VISIBLE_DEVICES")) c.cuda_visible_devices = *v;
  if (const std::string* v = Lookup(env, "NVIDIA_VISIBLE_DEVICES")) c.nvidia_visible_devices = *v;
  // The libraries' usual variables, when byteps' own are unset.
  if (const std::string* v = Lookup(env, "CUDA_HOME"); v && c.cuda_home.empty()) c.cuda_home = *v;
  if (const std::string* v = Lookup(env, "NCCL_HOME"); v && c.nccl_home.empty()) c.nccl_home = *v;
  if (const std::string* v = Lookup(env, "TMPDIR"); v && !v->empty()) c.tmp_dir = *v;
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
          FormatSeconds(c.heartbeat_timeout_s), FormatSeconds(c.heartbeat_interval_s)));
  }
  if (c.local_rank < 0 || c.local_rank >= c.local_size)
    return InvalidArgument(fmt::format(
        "BYTEPS_LOCAL_RANK={} is out of range for BYTEPS_LOCAL_SIZE={}", c.local_rank,
        c.local_size));
  if (c.trace_on && c.trace_end_step <= c.trace_start_step)
    return InvalidArgument(fmt::format(
        "BYTEPS_TRACE_END_STEP={} must be greater than BYTEPS_TRACE_START_STEP={}: no step would be traced",
        c.trace_end_step, c.trace_start_step));
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
  for (const Entry& e : Registry()) {
    if (IsIgnored(e)) continue;
    const bool from_env = Lookup(env, e.name) != nullptr;
    std::string value = ShowValue(e, c, env);
    if (value.empty()) value = "\"\"";  // keeps the value column visibly filled
    rows.push_back({e.name, value, from_env ? "[env]" : "[default]", e.help});
  }
  // Ignored names only when set, so the user sees that they were noticed and had no effect.
  for (const Entry& e : Registry()) {
    const std::string* raw = Lookup(env, e.name);
    if (IsIgnored(e) && raw != nullptr)
      rows.push_back({e.name, *raw, "[env]", fmt::format("{}: {}", DispositionName(e.disposition), e.help)});
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

std::string DescribeDispositions(const Environment& env) {
  size_t name_w = 0;
  for (const Entry& e : Registry()) name_w = std::max(name_w, std::string_view(e.name).size());
  std::string out = fmt::format(
      "Every variable byteps reads, and the original BytePS / ps-lite ones: honoured (same meaning), mapped (means "
      "something here), ignored (accepted, one warning when set; an error with BYTEPS_STRICT_CONFIG=1), "
      "build-time (read by builds only). * = set in this environment.\n");
  for (const Entry& e : Registry()) {
    const std::string* raw = Lookup(env, e.name);
    out += fmt::format("{} {:<{}}  {:<10}  {}\n", raw ? "*" : " ", e.name, name_w, DispositionName(e.disposition),
                       e.help);
  }
  return out;
}

void LogWarnings(const Config& c) {
  for (const std::string& w : c.warnings) BYTEPS_LOG(Warning, "{}", w);
}

}  // namespace byteps::config
