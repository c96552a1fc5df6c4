// The settings registry: every type's parser (forms, suffixes, bounds), the exact error messages
// (each names the variable, the value and the accepted form), unknown-name suggestions, ignored
// compatibility names, PS_VERBOSE, Validate's cross-field rules, Describe and ProcessEnvironment.
#include "config/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/parse.h"

namespace byteps::config {
namespace {

// A minimal environment that passes Validate for a distributed job.
Environment Dist() {
  return {{"DMLC_NUM_WORKER", "2"}, {"DMLC_NUM_SERVER", "1"}, {"DMLC_PS_ROOT_PORT", "9000"}};
}

Environment With(Environment env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

Config MustLoad(const Environment& env) {
  auto c = Load(env);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? c.value() : Config{};
}

// The error message Load reports for env (empty when it unexpectedly succeeds).
std::string LoadError(const Environment& env) {
  auto c = Load(env);
  EXPECT_FALSE(c.ok());
  if (c.ok()) return "";
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  return c.status().message();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const std::string* FindLine(const std::vector<std::string>& lines, const std::string& name) {
  for (const std::string& l : lines)
    if (l.rfind(name + " ", 0) == 0) return &l;
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Defaults and topology.

TEST(ConfigLoad, EmptyEnvironmentGivesDefaults) {
  Config c = MustLoad({});
  Config d;
  EXPECT_EQ(c.role, Role::kWorker);
  EXPECT_EQ(c.root_uri, d.root_uri);
  EXPECT_EQ(c.root_port, 0);
  EXPECT_EQ(c.num_workers, 1);
  EXPECT_EQ(c.num_servers, 0);
  EXPECT_EQ(c.worker_id, -1);
  EXPECT_EQ(c.partition_bytes, d.partition_bytes);
  EXPECT_EQ(c.max_message_bytes, d.max_message_bytes);
  EXPECT_EQ(c.log_level, log::Level::kWarning);
  EXPECT_FALSE(c.distributed());
}

TEST(ConfigLoad, RoleIsCaseInsensitive) {
  EXPECT_EQ(MustLoad(With(Dist(), "DMLC_ROLE", "worker")).role, Role::kWorker);
  EXPECT_EQ(MustLoad(With(Dist(), "DMLC_ROLE", "SERVER")).role, Role::kServer);
  EXPECT_EQ(MustLoad(With(Dist(), "DMLC_ROLE", "Scheduler")).role, Role::kScheduler);
  EXPECT_EQ(LoadError({{"DMLC_ROLE", "joint"}}),
            "DMLC_ROLE='joint': expected one of worker, server, scheduler");
  EXPECT_EQ(LoadError({{"DMLC_ROLE", "wroker"}}),
            "DMLC_ROLE='wroker': expected one of worker, server, scheduler (did you mean worker?)");
  EXPECT_EQ(LoadError({{"DMLC_ROLE", "Schedular"}}),
            "DMLC_ROLE='Schedular': expected one of worker, server, scheduler (did you mean scheduler?)");
}

TEST(ConfigLoad, RoleName) {
  EXPECT_STREQ(RoleName(Role::kWorker), "worker");
  EXPECT_STREQ(RoleName(Role::kServer), "server");
  EXPECT_STREQ(RoleName(Role::kScheduler), "scheduler");
}

TEST(ConfigLoad, TopologyFields) {
  Environment env = Dist();
  env["DMLC_ROLE"] = "worker";
  env["DMLC_PS_ROOT_URI"] = "10.0.0.1";
  env["DMLC_NUM_WORKER"] = "4";
  env["DMLC_NUM_SERVER"] = "3";
  env["DMLC_WORKER_ID"] = "2";
  env["DMLC_INTERFACE"] = "eth1";
  env["DMLC_NODE_HOST"] = "10.0.0.7";
  env["DMLC_PORT"] = "12345";
  env["BYTEPS_LOCAL_RANK"] = "3";
  env["BYTEPS_LOCAL_SIZE"] = "8";
  env["BYTEPS_GLOBAL_RANK"] = "19";
  Config c = MustLoad(env);
  EXPECT_EQ(c.root_uri, "10.0.0.1");
  EXPECT_EQ(c.root_port, 9000);
  EXPECT_EQ(c.num_workers, 4);
  EXPECT_EQ(c.num_servers, 3);
  EXPECT_EQ(c.worker_id, 2);
  EXPECT_EQ(c.interface, "eth1");
  EXPECT_EQ(c.node_host, "10.0.0.7");
  EXPECT_EQ(c.port, 12345);
  EXPECT_EQ(c.local_rank, 3);
  EXPECT_EQ(c.local_size, 8);
  EXPECT_EQ(c.global_rank, 19);
  EXPECT_EQ(c.size(), 32);
  EXPECT_TRUE(c.distributed());
}

TEST(ConfigLoad, OtherScalarFields) {
  Environment env;
  env["BYTEPS_SCHEDULING_CREDIT"] = "7";
  env["BYTEPS_SERVER_ENGINE_THREAD"] = "9";
  env["BYTEPS_CONNECTIONS_PER_PEER"] = "3";
  env["BYTEPS_IO_THREADS"] = "5";
  env["BYTEPS_SOCKET_BUFFER_BYTES"] = "256K";
  env["BYTEPS_MAX_MESSAGE_BYTES"] = "64M";
  env["BYTEPS_START_TIMEOUT"] = "12.5";
  env["BYTEPS_TIMEOUT"] = "600";
  env["PS_HEARTBEAT_INTERVAL"] = "2";
  env["PS_HEARTBEAT_TIMEOUT"] = "30";
  env["BYTEPS_LOG_HIDE_TIME"] = "yes";
  Config c = MustLoad(env);
  EXPECT_EQ(c.scheduling_credit, 7);
  EXPECT_EQ(c.server_engine_threads, 9);
  EXPECT_EQ(c.connections_per_peer, 3);
  EXPECT_EQ(c.io_threads, 5);
  EXPECT_EQ(c.socket_buffer_bytes, 256u * 1024);
  EXPECT_EQ(c.max_message_bytes, 64u << 20);
  EXPECT_DOUBLE_EQ(c.start_timeout_s, 12.5);
  EXPECT_DOUBLE_EQ(c.op_timeout_s, 600);
  EXPECT_DOUBLE_EQ(c.heartbeat_interval_s, 2);
  EXPECT_DOUBLE_EQ(c.heartbeat_timeout_s, 30);
  EXPECT_TRUE(c.log_hide_time);
}

TEST(ConfigLoad, EmptyValuesCountAsUnset) {
  Config c = MustLoad({{"DMLC_NUM_WORKER", ""},
                       {"DMLC_PS_ROOT_URI", ""},
                       {"DMLC_ROLE", ""},
                       {"BYTEPS_PARTITION_BYTES", ""},
                       {"BYTEPS_ENABLE_ASYNC", ""},
                       {"BYTEPS_NO_SUCH_THING", ""}});
  EXPECT_EQ(c.num_workers, 1);
  EXPECT_EQ(c.root_uri, Config{}.root_uri);
  EXPECT_EQ(c.role, Role::kWorker);
  EXPECT_EQ(c.partition_bytes, Config{}.partition_bytes);
}

// ---------------------------------------------------------------------------------------------
// Integers.

struct BadValue {
  const char* name;
  const char* value;
  const char* message;
};

TEST(ConfigLoad, IntegerErrorsNameVariableValueAndForm) {
  const BadValue cases[] = {
      {"DMLC_NUM_WORKER", "two", "DMLC_NUM_WORKER='two': expected an integer >= 1"},
      {"DMLC_NUM_WORKER", "0", "DMLC_NUM_WORKER='0': expected an integer >= 1"},
      {"DMLC_NUM_WORKER", "1.5", "DMLC_NUM_WORKER='1.5': expected an integer >= 1"},
      {"DMLC_NUM_WORKER", " 2", "DMLC_NUM_WORKER=' 2': expected an integer >= 1"},
      {"DMLC_NUM_WORKER", "2 ", "DMLC_NUM_WORKER='2 ': expected an integer >= 1"},
      {"DMLC_NUM_WORKER", "0x10", "DMLC_NUM_WORKER='0x10': expected an integer >= 1"},
      {"DMLC_NUM_WORKER", "99999999999", "DMLC_NUM_WORKER='99999999999': expected an integer >= 1"},
      {"DMLC_NUM_SERVER", "-1", "DMLC_NUM_SERVER='-1': expected an integer >= 0"},
      {"DMLC_WORKER_ID", "-1", "DMLC_WORKER_ID='-1': expected an integer >= 0"},
      {"DMLC_PS_ROOT_PORT", "0", "DMLC_PS_ROOT_PORT='0': expected an integer in [1, 65535]"},
      {"DMLC_PS_ROOT_PORT", "65536", "DMLC_PS_ROOT_PORT='65536': expected an integer in [1, 65535]"},
      {"DMLC_PORT", "-1", "DMLC_PORT='-1': expected an integer in [0, 65535]"},
      {"DMLC_PORT", "70000", "DMLC_PORT='70000': expected an integer in [0, 65535]"},
      {"BYTEPS_LOCAL_RANK", "-1", "BYTEPS_LOCAL_RANK='-1': expected an integer >= 0"},
      {"BYTEPS_LOCAL_SIZE", "0", "BYTEPS_LOCAL_SIZE='0': expected an integer >= 1"},
      {"BYTEPS_GLOBAL_RANK", "x", "BYTEPS_GLOBAL_RANK='x': expected an integer >= 0"},
      {"BYTEPS_SCHEDULING_CREDIT", "-3",
       "BYTEPS_SCHEDULING_CREDIT='-3': expected an integer >= 0"},
      {"BYTEPS_SERVER_ENGINE_THREAD", "0",
       "BYTEPS_SERVER_ENGINE_THREAD='0': expected an integer in [1, 64]"},
      {"BYTEPS_SERVER_ENGINE_THREAD", "65",
       "BYTEPS_SERVER_ENGINE_THREAD='65': expected an integer in [1, 64]"},
      {"BYTEPS_CONNECTIONS_PER_PEER", "17",
       "BYTEPS_CONNECTIONS_PER_PEER='17': expected an integer in [1, 16]"},
      {"BYTEPS_IO_THREADS", "0", "BYTEPS_IO_THREADS='0': expected an integer in [1, 16]"},
      {"PS_VERBOSE", "3", "PS_VERBOSE='3': expected an integer in [0, 2]"},
  };
  for (const BadValue& b : cases)
    EXPECT_EQ(LoadError({{b.name, b.value}}), b.message) << b.name << "=" << b.value;
}

TEST(ConfigLoad, IntegerBoundsAreInclusive) {
  EXPECT_EQ(MustLoad(With(Dist(), "DMLC_PS_ROOT_PORT", "1")).root_port, 1);
  EXPECT_EQ(MustLoad(With(Dist(), "DMLC_PS_ROOT_PORT", "65535")).root_port, 65535);
  EXPECT_EQ(MustLoad({{"DMLC_PORT", "0"}}).port, 0);
  EXPECT_EQ(MustLoad({{"DMLC_PORT", "65535"}}).port, 65535);
  EXPECT_EQ(MustLoad({{"BYTEPS_SERVER_ENGINE_THREAD", "1"}}).server_engine_threads, 1);
  EXPECT_EQ(MustLoad({{"BYTEPS_SERVER_ENGINE_THREAD", "64"}}).server_engine_threads, 64);
  EXPECT_EQ(MustLoad({{"BYTEPS_CONNECTIONS_PER_PEER", "16"}}).connections_per_peer, 16);
  EXPECT_EQ(MustLoad({{"BYTEPS_IO_THREADS", "1"}}).io_threads, 1);
  EXPECT_EQ(MustLoad({{"BYTEPS_IO_THREADS", "16"}}).io_threads, 16);
  EXPECT_EQ(MustLoad({{"DMLC_NUM_SERVER", "0"}}).num_servers, 0);
  EXPECT_EQ(MustLoad({{"BYTEPS_SCHEDULING_CREDIT", "0"}}).scheduling_credit, 0);
  EXPECT_EQ(MustLoad({{"BYTEPS_GLOBAL_RANK", "0"}}).global_rank, 0);
  EXPECT_EQ(MustLoad(With(Dist(), "DMLC_NUM_WORKER", "007")).num_workers, 7);
}

// ---------------------------------------------------------------------------------------------
// Byte counts.

TEST(ConfigLoad, BytesSuffixesArePowersOf1024) {
  auto partition = [](const char* v) {
    return MustLoad({{"BYTEPS_PARTITION_BYTES", v}}).partition_bytes;
  };
  EXPECT_EQ(partition("4096000"), 4096000u);
  EXPECT_EQ(partition("4"), 4u);
  EXPECT_EQ(partition("4k"), 4096u);
  EXPECT_EQ(partition("4K"), 4096u);
  EXPECT_EQ(partition("2m"), 2u << 20);
  EXPECT_EQ(partition("3M"), 3u << 20);
  // 1G partitions need a larger message limit than the 1 GiB default (partition + header).
  auto big = [](const char* v) {
    return MustLoad({{"BYTEPS_PARTITION_BYTES", v}, {"BYTEPS_MAX_MESSAGE_BYTES", "2G"}})
        .partition_bytes;
  };
  EXPECT_EQ(big("1g"), 1u << 30);
  EXPECT_EQ(big("1024M"), 1u << 30);
  EXPECT_EQ(big("1048576K"), 1u << 30);
  EXPECT_EQ(big("1073741824"), 1u << 30);
}

TEST(ConfigLoad, BytesErrors) {
  const std::string partition_form =
      "expected a positive integer number of bytes (optionally with K/M/G suffix) from 4 to 1G";
  for (const char* v : {"4k0", "3", "0", "K", "-4", "4KB", "1.5M", "1025M", "2G", " 4K", "4 K",
                        "99999999999999999999", "17179869184G"})
    EXPECT_EQ(LoadError({{"BYTEPS_PARTITION_BYTES", v}}),
              std::string("BYTEPS_PARTITION_BYTES='") + v + "': " + partition_form)
        << v;
  EXPECT_EQ(LoadError({{"BYTEPS_SOCKET_BUFFER_BYTES", "2G"}}),
            "BYTEPS_SOCKET_BUFFER_BYTES='2G': expected an integer number of bytes (optionally "
            "with K/M/G suffix) from 0 to 1G");
  EXPECT_EQ(LoadError({{"BYTEPS_MAX_MESSAGE_BYTES", "4095"}}),
            "BYTEPS_MAX_MESSAGE_BYTES='4095': expected a positive integer number of bytes "
            "(optionally with K/M/G suffix) of at least 4K");
}

TEST(ConfigLoad, BytesBounds) {
  EXPECT_EQ(MustLoad({{"BYTEPS_SOCKET_BUFFER_BYTES", "0"}}).socket_buffer_bytes, 0u);
  EXPECT_EQ(MustLoad({{"BYTEPS_SOCKET_BUFFER_BYTES", "64K"}}).socket_buffer_bytes, 64u << 10);
  // A small buffer stalls TCP where a segment is larger than the window: an error, not a hang.
  EXPECT_EQ(LoadError({{"BYTEPS_SOCKET_BUFFER_BYTES", "8K"}}),
            "BYTEPS_SOCKET_BUFFER_BYTES=8K: below 64K TCP stalls where a segment is larger than the window (e.g. "
            "loopback); use 0 (the OS default) or at least 64K");
  EXPECT_EQ(MustLoad({{"BYTEPS_SOCKET_BUFFER_BYTES", "1G"}}).socket_buffer_bytes, 1u << 30);
  // The 4K minimum itself is only reachable by Validate when a partition is empty, which the
  // 4-byte minimum forbids; the parser bound is still checked on its own.
  auto p = ParseBytes("4096", 4096, ~0ull);
  ASSERT_TRUE(p.value.has_value());
  Config c = MustLoad({{"BYTEPS_PARTITION_BYTES", "4"}, {"BYTEPS_MAX_MESSAGE_BYTES", "4100"}});
  EXPECT_EQ(c.max_message_bytes, 4100u);
  EXPECT_EQ(MustLoad({{"BYTEPS_MAX_MESSAGE_BYTES", "64G"}}).max_message_bytes, 64ull << 30);
}

// ---------------------------------------------------------------------------------------------
// Booleans, seconds, levels.

TEST(ConfigLoad, BooleanSpellings) {
  for (const char* v : {"1", "true", "TRUE", "yes", "Yes", "on", "ON"})
    EXPECT_TRUE(MustLoad({{"BYTEPS_LOG_HIDE_TIME", v}}).log_hide_time) << v;
  for (const char* v : {"0", "false", "False", "no", "NO", "off", "Off"})
    EXPECT_FALSE(MustLoad({{"BYTEPS_LOG_HIDE_TIME", v}}).log_hide_time) << v;
  EXPECT_TRUE(MustLoad(With(Dist(), "BYTEPS_FORCE_DISTRIBUTED", "on")).force_distributed);
  for (const char* v : {"2", "maybe", "y", "tru"})
    EXPECT_EQ(LoadError({{"BYTEPS_FORCE_DISTRIBUTED", v}}),
              std::string("BYTEPS_FORCE_DISTRIBUTED='") + v +
                  "': expected a boolean (0/1, true/false, yes/no, on/off)");
}

TEST(ConfigLoad, ForceDistributedWithOneWorkerNeedsScheduler) {
  Config c = MustLoad({{"BYTEPS_FORCE_DISTRIBUTED", "1"},
                       {"DMLC_PS_ROOT_PORT", "1234"},
                       {"DMLC_NUM_SERVER", "1"}});
  EXPECT_EQ(c.num_workers, 1);
  EXPECT_TRUE(c.distributed());
  EXPECT_EQ(LoadError({{"BYTEPS_FORCE_DISTRIBUTED", "1"}}),
            "DMLC_PS_ROOT_PORT is not set: a distributed job needs the scheduler's port");
}

TEST(ConfigLoad, Seconds) {
  EXPECT_DOUBLE_EQ(MustLoad({{"BYTEPS_START_TIMEOUT", "0.5"}}).start_timeout_s, 0.5);
  EXPECT_DOUBLE_EQ(MustLoad({{"BYTEPS_TIMEOUT", "1e3"}}).op_timeout_s, 1000);
  EXPECT_DOUBLE_EQ(MustLoad({{"BYTEPS_TIMEOUT", "1000000000"}}).op_timeout_s, 1e9);
  EXPECT_DOUBLE_EQ(MustLoad({{"PS_HEARTBEAT_INTERVAL", "0"}}).heartbeat_interval_s, 0);
  const std::string positive =
      "expected a positive number of seconds (e.g. 30 or 0.5), at most 1000000000";
  for (const char* v : {"0", "-1", "abc", "inf", "nan", "30s", "1e10", "", " 5"}) {
    if (*v == '\0') continue;  // empty = unset, covered elsewhere
    EXPECT_EQ(LoadError({{"BYTEPS_TIMEOUT", v}}), std::string("BYTEPS_TIMEOUT='") + v + "': " +
                                                      positive)
        << v;
  }
  EXPECT_EQ(LoadError({{"BYTEPS_START_TIMEOUT", "0"}}),
            "BYTEPS_START_TIMEOUT='0': " + positive);
  EXPECT_EQ(LoadError({{"PS_HEARTBEAT_TIMEOUT", "0"}}), "PS_HEARTBEAT_TIMEOUT='0': " + positive);
  EXPECT_EQ(LoadError({{"PS_HEARTBEAT_INTERVAL", "-2"}}),
            "PS_HEARTBEAT_INTERVAL='-2': expected a non-negative number of seconds (0 = off), "
            "at most 1000000000");
}

TEST(ConfigLoad, LogLevel) {
  EXPECT_EQ(MustLoad({{"BYTEPS_LOG_LEVEL", "trace"}}).log_level, log::Level::kTrace);
  EXPECT_EQ(MustLoad({{"BYTEPS_LOG_LEVEL", "Debug"}}).log_level, log::Level::kDebug);
  EXPECT_EQ(MustLoad({{"BYTEPS_LOG_LEVEL", "INFO"}}).log_level, log::Level::kInfo);
  EXPECT_EQ(MustLoad({{"BYTEPS_LOG_LEVEL", "warning"}}).log_level, log::Level::kWarning);
  EXPECT_EQ(MustLoad({{"BYTEPS_LOG_LEVEL", "ERROR"}}).log_level, log::Level::kError);
  EXPECT_EQ(MustLoad({{"BYTEPS_LOG_LEVEL", "fatal"}}).log_level, log::Level::kFatal);
  // Unlike the original (which fell back to WARNING), a typo is an error.
  EXPECT_EQ(LoadError({{"BYTEPS_LOG_LEVEL", "VERBOSE"}}),
            "BYTEPS_LOG_LEVEL='VERBOSE': expected one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL");
}

TEST(ConfigLoad, PsVerboseRaisesLogLevel) {
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "0"}}).log_level, log::Level::kWarning);
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "1"}}).log_level, log::Level::kInfo);
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "2"}}).log_level, log::Level::kDebug);
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "1"}, {"BYTEPS_LOG_LEVEL", "ERROR"}}).log_level,
            log::Level::kInfo);
  // Never makes logging quieter.
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "1"}, {"BYTEPS_LOG_LEVEL", "TRACE"}}).log_level,
            log::Level::kTrace);
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "2"}, {"BYTEPS_LOG_LEVEL", "INFO"}}).log_level,
            log::Level::kDebug);
  EXPECT_EQ(MustLoad({{"PS_VERBOSE", "2"}}).ps_verbose, 2);
}

// ---------------------------------------------------------------------------------------------
// Unknown, ignored and unsupported names.

TEST(ConfigLoad, UnknownNamesSuggestClosest) {
  EXPECT_EQ(LoadError({{"BYTEPS_PARTITON_BYTES", "1M"}}),
            "unknown setting BYTEPS_PARTITON_BYTES (did you mean BYTEPS_PARTITION_BYTES?)");
  EXPECT_EQ(LoadError({{"DMLC_NUM_WORKERS", "2"}}),
            "unknown setting DMLC_NUM_WORKERS (did you mean DMLC_NUM_WORKER?)");
  EXPECT_EQ(LoadError({{"BYTEPS_LOGLEVEL", "INFO"}}),
            "unknown setting BYTEPS_LOGLEVEL (did you mean BYTEPS_LOG_LEVEL?)");
  EXPECT_EQ(LoadError({{"BYTEPS_TOTALLY_UNKNOWN_THING", "1"}}),
            "unknown setting BYTEPS_TOTALLY_UNKNOWN_THING");
  EXPECT_EQ(LoadError({{"DMLC_SOMETHING_ELSE", "1"}}), "unknown setting DMLC_SOMETHING_ELSE");
  // Distance 3 is still suggested; distance 4 is not.
  EXPECT_EQ(LoadError({{"BYTEPS_IO_THREADSXXX", "1"}}),
            "unknown setting BYTEPS_IO_THREADSXXX (did you mean BYTEPS_IO_THREADS?)");
  EXPECT_EQ(LoadError({{"BYTEPS_IO_THREADSXXXX", "1"}}), "unknown setting BYTEPS_IO_THREADSXXXX");
}

// Where the stall reports go when not tracing (common/report_file.h): TMPDIR, read here so that
// no other code looks at the environment.
TEST(ConfigLoad, TmpDirIsTmpdirElseSlashTmp) {
  EXPECT_EQ(MustLoad({}).tmp_dir, "/tmp");
  EXPECT_EQ(MustLoad({{"TMPDIR", ""}}).tmp_dir, "/tmp");
  EXPECT_EQ(MustLoad({{"TMPDIR", "/scratch/job7"}}).tmp_dir, "/scratch/job7");
}

TEST(ConfigLoad, UnknownPsAndForeignNamesAreIgnored) {
  MustLoad({{"PS_SOMETHING_NEW", "1"},
            {"PS_DROP_MSG", "5"},
            {"PATH", "/usr/bin"},
            {"byteps_partition_bytes", "oops"},
            {"NCCL_DEBUG", "INFO"}});
}

// Every BYTEPS_* / DMLC_* / PS_* variable the original BytePS and its ps-lite read
// (../shared/reference/byteps-compat.md section 2), with a value a deployment would set.
const std::map<std::string, std::string>& OriginalVariables() {
  static const std::map<std::string, std::string> vars = {
      {"DMLC_ROLE", "worker"}, {"DMLC_NUM_WORKER", "1"}, {"DMLC_NUM_SERVER", "1"}, {"DMLC_PS_ROOT_URI", "10.0.0.1"},
      {"DMLC_PS_ROOT_PORT", "1234"}, {"DMLC_WORKER_ID", "0"}, {"BYTEPS_LOCAL_RANK", "0"}, {"BYTEPS_LOCAL_SIZE", "1"},
      {"BYTEPS_GLOBAL_RANK", "0"}, {"DMLC_INTERFACE", "eth0"}, {"DMLC_NODE_HOST", "10.0.0.2"}, {"DMLC_PORT", "9000"},
      {"DMLC_ENABLE_RDMA", "ibverbs"}, {"DMLC_ENABLE_UCX", "1"}, {"DMLC_LOCAL", "1"}, {"DMLC_USE_KUBERNETES", "1"},
      {"DMLC_GROUP_SIZE", "1"}, {"DMLC_NUM_PORTS", "1"}, {"DMLC_LOCKLESS_QUEUE", "1"},
      {"DMLC_POLLING_IN_NANOSECOND", "1000"}, {"DMLC_RANK", "3"}, {"BYTEPS_PARTITION_BYTES", "4096000"},
      {"BYTEPS_FORCE_DISTRIBUTED", "0"}, {"BYTEPS_PCIE_SWITCH_SIZE", "8"}, {"BYTEPS_NCCL_GROUP_SIZE", "4"},
      {"BYTEPS_NCCL_NUM_RINGS", "1"}, {"BYTEPS_SCHEDULING_CREDIT", "4"}, {"BYTEPS_REDUCE_ROOTS", "0,4"},
      {"BYTEPS_KEY_HASH_FN", "djb2"}, {"BYTEPS_BUILT_IN_HASH_COEF", "1"}, {"BYTEPS_ENABLE_MIXED_MODE", "1"},
      {"BYTEPS_MIXED_MODE_BOUND", "101"}, {"BYTEPS_THREADPOOL_SIZE", "4"}, {"BYTEPS_MIN_COMPRESS_BYTES", "65536"},
      {"BYTEPS_OMP_THREAD_PER_GPU", "4"}, {"BYTEPS_SOCKET_PATH", "/tmp"}, {"BYTEPS_LOG_LEVEL", "INFO"},
      {"BYTEPS_LOG_HIDE_TIME", "1"}, {"BYTEPS_DEBUG_SAMPLE_TENSOR", "0x10"}, {"BYTEPS_TRACE_ON", "1"},
      {"BYTEPS_TRACE_START_STEP", "10"}, {"BYTEPS_TRACE_END_STEP", "20"}, {"BYTEPS_TRACE_DIR", "./trace"},
      {"BYTEPS_TELEMETRY_ON", "1"}, {"BYTEPS_ENABLE_ASYNC", "1"}, {"BYTEPS_SERVER_ENGINE_THREAD", "4"},
      {"BYTEPS_SERVER_ENABLE_SCHEDULE", "1"}, {"BYTEPS_SERVER_ENGINE_BLOCKING", "0"}, {"BYTEPS_SERVER_DEBUG", "1"},
      {"BYTEPS_SERVER_DEBUG_KEY", "0"}, {"PS_KEY_LOG", "1"}, {"PS_VERBOSE", "1"}, {"PS_HEARTBEAT_INTERVAL", "5"},
      {"PS_HEARTBEAT_TIMEOUT", "30"}, {"PS_RESEND", "1"}, {"PS_RESEND_TIMEOUT", "1000"}, {"PS_DROP_MSG", "0"},
      {"BYTEPS_ZMQ_MAX_SOCKET", "1024"}, {"BYTEPS_ZMQ_NTHREADS", "4"}, {"BYTEPS_ORDERED_HOSTS", "10.0.0.1,10.0.0.2"},
      {"BYTEPS_ENABLE_IPC", "1"}, {"BYTEPS_IPC_COPY_NUM_THREADS", "4"}, {"BYTEPS_IPC_ENABLE_ASYNC_COPY", "1"},
      {"BYTEPS_RDMA_START_DEPTH", "128"}, {"BYTEPS_RDMA_RX_DEPTH", "2048"}, {"BYTEPS_RDMA_MAX_CONCURR_WR", "4224"},
      {"BYTEPS_PRINT_RDMA_LOG", "0"}, {"BYTEPS_ADDRESS_POOL_SIZE", "1024"}, {"BYTEPS_UCX_SHORT_THRESH", "4096"},
      {"BYTEPS_UCX_FORCE_REQ_ORDER", "0"}, {"BYTEPS_UCX_QUEUE_SENDS", "0"}, {"BYTEPS_UCX_ERRH_ENABLE", "1"},
      {"BYTEPS_UCX_RECONNECT_TMO", "1000"}, {"DMLC_NUM_CPU_DEV", "1"}, {"DMLC_NUM_GPU_DEV", "0"},
      {"BYTEPS_ENABLE_GDB", "0"}, {"BYTEPS_NUMA_ON", "1"}, {"BYTEPS_VISIBLE_CPU_CORES", "0-3:4-7"},
      {"BYTEPS_NUMA_DEFAULT_QUOTA", "2"}, {"BYTEPS_NUMA_ROOT_QUOTA", "4"}, {"BYTEPS_CPU_BLACKLIST", "-1"},
      {"BYTEPS_MULTITHREADED_CPU", "1"}, {"BYTEPS_NCCL_HOME", "/usr/local/nccl"}, {"BYTEPS_NCCL_LINK", "SHARED"},
      {"BYTEPS_CUDA_HOME", "/usr/local/cuda"}, {"BYTEPS_CUDA_INCLUDE", "/usr/local/cuda/include"},
      {"BYTEPS_CUDA_LIB", "/usr/local/cuda/lib64"}, {"BYTEPS_WITH_TENSORFLOW", "0"},
      {"BYTEPS_WITHOUT_TENSORFLOW", "1"}, {"BYTEPS_WITH_PYTORCH", "1"}, {"BYTEPS_WITHOUT_PYTORCH", "0"},
      {"BYTEPS_WITH_MXNET", "0"}, {"BYTEPS_WITHOUT_MXNET", "1"}, {"BYTEPS_WITH_UCX", "0"},
      {"BYTEPS_UCX_HOME", "/opt/ucx"}, {"BYTEPS_UCX_PREFIX", "/opt/ucx"}, {"BYTEPS_WITHOUT_PRESETUP", "1"},
      {"BYTEPS_USE_MPI", "0"}};
  return vars;
}

std::map<std::string, SettingInfo> SettingsByName() {
  std::map<std::string, SettingInfo> out;
  for (const SettingInfo& s : Settings()) out[s.name] = s;
  return out;
}

TEST(ConfigCompat, EveryVariableOfTheOriginalRunsWithADisposition) {
  const auto settings = SettingsByName();
  for (const auto& [name, value] : OriginalVariables()) {
    auto it = settings.find(name);
    ASSERT_NE(it, settings.end()) << name << " is not in the settings table";
    const std::string& d = it->second.disposition;
    ASSERT_TRUE(d == "honoured" || d == "mapped" || d == "ignored" || d == "build-time") << name << ": " << d;
    // A process started with it set runs, and says what it does with it.
    auto c = Load(Environment{{name, value}});
    ASSERT_TRUE(c.ok()) << name << "=" << value << ": " << c.status().message();
    size_t naming = 0;
    for (const std::string& w : c->warnings) naming += w.find(name) != std::string::npos;
    if (d == "ignored") {
      ASSERT_EQ(c->warnings.size(), 1u) << name;
      EXPECT_EQ(naming, 1u) << name;
      EXPECT_NE(c->warnings[0].find(it->second.help), std::string::npos) << c->warnings[0];
      EXPECT_EQ(Describe(c.value(), {}), Describe(Config{}, {})) << name << ": no setting moved";
    } else if (d == "build-time") {
      EXPECT_TRUE(c->warnings.empty()) << name;
    } else {
      // Honoured and mapped values warn only when they ask for what this build cannot do.
      EXPECT_LE(c->warnings.size(), 1u) << name;
      EXPECT_EQ(naming, c->warnings.size()) << name;
    }
  }
}

TEST(ConfigCompat, MinCompressBytesIsHonoured) {
  EXPECT_EQ(Config{}.min_compress_bytes, 65536u);  // the original's default
  Config c = MustLoad({{"BYTEPS_MIN_COMPRESS_BYTES", "1K"}});
  EXPECT_EQ(c.min_compress_bytes, 1024u);
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(MustLoad({{"BYTEPS_MIN_COMPRESS_BYTES", "0"}}).min_compress_bytes, 0u);
  EXPECT_FALSE(Load(Environment{{"BYTEPS_MIN_COMPRESS_BYTES", "lots"}}).ok());
  // The thread pool's size stays accepted with a warning: the codecs run on one codec thread.
  Config t = MustLoad({{"BYTEPS_THREADPOOL_SIZE", "4"}});
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_NE(t.warnings[0].find("codec thread"), std::string::npos) << t.warnings[0];
}

TEST(ConfigCompat, WhatCannotBeHonouredWarnsLoudlyWithTheFallback) {
  // The original's RDMA switches select the UCX transport, silently (honoured), unless
  // BYTEPS_TRANSPORT says otherwise: then it wins, with one warning.
  for (const Environment& env : {Environment{{"DMLC_ENABLE_RDMA", "ibverbs"}}, Environment{{"DMLC_ENABLE_RDMA", "1"}},
                                 Environment{{"DMLC_ENABLE_UCX", "1"}}}) {
    Config c = MustLoad(env);
    EXPECT_EQ(c.transport, "ucx") << env.begin()->first;
    EXPECT_TRUE(c.warnings.empty()) << env.begin()->first;
  }
  for (const char* tcp : {"0", "zmq"}) {
    Config c = MustLoad({{"DMLC_ENABLE_RDMA", tcp}});
    EXPECT_TRUE(c.warnings.empty()) << tcp;
    EXPECT_EQ(c.transport, "auto") << tcp;
  }
  Config pinned = MustLoad({{"DMLC_ENABLE_RDMA", "1"}, {"BYTEPS_TRANSPORT", "tcp"}});
  EXPECT_EQ(pinned.transport, "tcp");
  ASSERT_EQ(pinned.warnings.size(), 1u);
  EXPECT_NE(pinned.warnings[0].find("DMLC_ENABLE_RDMA=1 asks for RDMA (the UCX transport), but BYTEPS_TRANSPORT=tcp "
                                    "is set and wins"), std::string::npos) << pinned.warnings[0];
  EXPECT_TRUE(MustLoad({{"DMLC_ENABLE_UCX", "1"}, {"BYTEPS_TRANSPORT", "ucx"}}).warnings.empty());
  for (const char* v : {"0", "false", "off", "no"}) EXPECT_TRUE(MustLoad({{"BYTEPS_ENABLE_ASYNC", v}}).warnings.empty());
  for (const char* v : {"1", "true"}) {
    auto async = Load({{"BYTEPS_ENABLE_ASYNC", v}});
    ASSERT_TRUE(async.ok()) << v;
    ASSERT_EQ(async->warnings.size(), 1u);
    EXPECT_NE(async->warnings[0].find("training runs SYNCHRONOUSLY"), std::string::npos) << async->warnings[0];
  }
  EXPECT_EQ(LoadError({{"BYTEPS_ENABLE_ASYNC", "sometimes"}}),
            "BYTEPS_ENABLE_ASYNC='sometimes': expected a boolean (0/1, true/false, yes/no, on/off)");
}

TEST(ConfigCompat, StrictConfigTurnsEveryWarningIntoAnError) {
  Environment env = {{"BYTEPS_STRICT_CONFIG", "1"}, {"BYTEPS_ENABLE_GDB", "1"}, {"DMLC_ENABLE_RDMA", "1"},
                     {"BYTEPS_TRANSPORT", "tcp"}, {"BYTEPS_CUDA_HOME", "/usr/local/cuda"}};
  const std::string m = LoadError(env);
  EXPECT_NE(m.find("BYTEPS_ENABLE_GDB=1 is accepted and ignored: bpslaunch does not wrap commands in gdb"),
            std::string::npos) << m;
  EXPECT_NE(m.find("DMLC_ENABLE_RDMA=1 asks for RDMA (the UCX transport), but BYTEPS_TRANSPORT=tcp is set"),
            std::string::npos) << m;
  EXPECT_NE(m.find("(an error with BYTEPS_STRICT_CONFIG=1)"), std::string::npos) << m;
  EXPECT_EQ(m.find("BYTEPS_CUDA_HOME"), std::string::npos) << "build-time names stay silent: " << m;
  env.erase("BYTEPS_ENABLE_GDB");
  env.erase("DMLC_ENABLE_RDMA");
  EXPECT_TRUE(MustLoad(env).strict_config);
}

TEST(ConfigCompat, TyposOfKnownNamesGetADidYouMean) {
  const std::map<std::string, std::string> typos = {
      {"BYTEPS_PARTITION_BYTE", "BYTEPS_PARTITION_BYTES"}, {"BYTEPS_PARTITON_BYTES", "BYTEPS_PARTITION_BYTES"},
      {"BYTEPS_SCHEDULING_CREDITS", "BYTEPS_SCHEDULING_CREDIT"}, {"DMLC_NUM_WORKERS", "DMLC_NUM_WORKER"},
      {"DMLC_PS_ROOT_PROT", "DMLC_PS_ROOT_PORT"}, {"BYTEPS_LOG_LEVL", "BYTEPS_LOG_LEVEL"},
      {"BYTEPS_TRACE_ONN", "BYTEPS_TRACE_ON"}};
  for (const auto& [typo, meant] : typos) {
    EXPECT_EQ(LoadError({{typo, "1"}}), "unknown setting " + typo + " (did you mean " + meant + "?)") << typo;
  }
  EXPECT_EQ(LoadError({{"BYTEPS_COMPLETELY_DIFFERENT", "1"}}), "unknown setting BYTEPS_COMPLETELY_DIFFERENT");
}

TEST(ConfigLoad, LauncherStringsAreAccepted) {
  MustLoad({{"BYTEPS_JOB_SECRET", "s3cr3t"}, {"BYTEPS_CORE_BINARY", "/opt/byteps/bin/byteps"}});
}

TEST(ConfigLoad, AllBadVariablesAreReportedTogether) {
  const std::string m = LoadError({{"DMLC_NUM_WORKER", "two"},
                                   {"BYTEPS_IO_THREADS", "99"},
                                   {"BYTEPS_PARTITON_BYTES", "1M"}});
  EXPECT_NE(m.find("DMLC_NUM_WORKER='two'"), std::string::npos) << m;
  EXPECT_NE(m.find("BYTEPS_IO_THREADS='99'"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown setting BYTEPS_PARTITON_BYTES"), std::string::npos) << m;
  EXPECT_NE(m.find("; "), std::string::npos) << m;
}

// ---------------------------------------------------------------------------------------------
// Validate.

Config DistConfig() {
  Config c;
  c.num_workers = 2;
  c.num_servers = 1;
  c.root_port = 9000;
  return c;
}

std::string ValidateError(const Config& c) {
  Status s = Validate(c);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  return s.message();
}

TEST(ConfigValidate, DefaultsAndMinimalDistributedPass) {
  EXPECT_TRUE(Validate(Config{}).ok());
  EXPECT_TRUE(Validate(DistConfig()).ok());
}

TEST(ConfigValidate, DistributedNeedsRootPort) {
  Config c = DistConfig();
  c.root_port = 0;
  EXPECT_EQ(ValidateError(c),
            "DMLC_PS_ROOT_PORT is not set: a distributed job needs the scheduler's port");
  // A single non-forced worker needs no scheduler at all.
  Config local;
  local.num_servers = 0;
  EXPECT_TRUE(Validate(local).ok());
}

TEST(ConfigValidate, ServerAndSchedulerAreAlwaysDistributed) {
  for (Role r : {Role::kServer, Role::kScheduler}) {
    Config c;
    c.role = r;
    EXPECT_EQ(ValidateError(c),
              "DMLC_PS_ROOT_PORT is not set: a distributed job needs the scheduler's port");
    c.root_port = 9000;
    EXPECT_EQ(ValidateError(c), "DMLC_NUM_SERVER=0: a distributed job needs at least one server");
    c.num_servers = 1;
    EXPECT_TRUE(Validate(c).ok());
  }
}

TEST(ConfigValidate, NeedsAServer) {
  Config c = DistConfig();
  c.num_servers = 0;
  EXPECT_EQ(ValidateError(c), "DMLC_NUM_SERVER=0: a distributed job needs at least one server");
  EXPECT_EQ(LoadError(With(Dist(), "DMLC_NUM_SERVER", "0")),
            "DMLC_NUM_SERVER=0: a distributed job needs at least one server");
}

TEST(ConfigValidate, WorkerIdInRange) {
  Config c = DistConfig();
  c.worker_id = 1;
  EXPECT_TRUE(Validate(c).ok());
  c.worker_id = 2;
  EXPECT_EQ(ValidateError(c), "DMLC_WORKER_ID=2 is out of range for DMLC_NUM_WORKER=2");
  EXPECT_EQ(LoadError(With(Dist(), "DMLC_WORKER_ID", "3")),
            "DMLC_WORKER_ID=3 is out of range for DMLC_NUM_WORKER=2");
  c.worker_id = -1;  // unset: the scheduler assigns
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ConfigValidate, HeartbeatTimeoutExceedsInterval) {
  Config c = DistConfig();
  c.heartbeat_interval_s = 5;
  c.heartbeat_timeout_s = 5;
  EXPECT_EQ(ValidateError(c),
            "PS_HEARTBEAT_TIMEOUT=5 must be greater than PS_HEARTBEAT_INTERVAL=5");
  c.heartbeat_timeout_s = 2.5;
  EXPECT_EQ(ValidateError(c),
            "PS_HEARTBEAT_TIMEOUT=2.5 must be greater than PS_HEARTBEAT_INTERVAL=5");
  c.heartbeat_timeout_s = 5.5;
  EXPECT_TRUE(Validate(c).ok());
  c.heartbeat_interval_s = 0;  // heartbeats off: the timeout is unused
  c.heartbeat_timeout_s = 0.1;
  EXPECT_TRUE(Validate(c).ok());
}

TEST(ConfigValidate, TraceStepsMustLeaveAStepToTrace) {
  EXPECT_EQ(LoadError({{"BYTEPS_TRACE_ON", "1"}, {"BYTEPS_TRACE_START_STEP", "5"}, {"BYTEPS_TRACE_END_STEP", "5"}}),
            "BYTEPS_TRACE_END_STEP=5 must be greater than BYTEPS_TRACE_START_STEP=5: no step would be traced");
  EXPECT_EQ(LoadError({{"BYTEPS_TRACE_START_STEP", "0"}}),
            "BYTEPS_TRACE_START_STEP='0': expected an integer >= 1");
  // Tracing off: the steps are not used, so a leftover pair does not stop the job.
  EXPECT_FALSE(MustLoad({{"BYTEPS_TRACE_START_STEP", "5"}, {"BYTEPS_TRACE_END_STEP", "3"}}).trace_on);
  const Config c = MustLoad({{"BYTEPS_TRACE_ON", "1"}, {"BYTEPS_TRACE_DIR", "/tmp/t"},
                             {"BYTEPS_TRACE_START_STEP", "2"}, {"BYTEPS_TRACE_END_STEP", "4"}});
  EXPECT_TRUE(c.trace_on);
  EXPECT_EQ(c.trace_dir, "/tmp/t");
  EXPECT_EQ(c.trace_start_step, 2);
  EXPECT_EQ(c.trace_end_step, 4);
  EXPECT_EQ(MustLoad({{"BYTEPS_TRACE_ON", "1"}, {"BYTEPS_TRACE_DIR", ""}}).trace_dir, "./trace")
      << "an empty value counts as unset: the default folder";
}

TEST(ConfigValidate, LocalRankBelowLocalSizeAlways) {
  Config c;  // not distributed: still checked
  c.local_rank = 4;
  c.local_size = 4;
  EXPECT_EQ(ValidateError(c), "BYTEPS_LOCAL_RANK=4 is out of range for BYTEPS_LOCAL_SIZE=4");
  c.local_rank = 3;
  EXPECT_TRUE(Validate(c).ok());
  EXPECT_EQ(LoadError({{"BYTEPS_LOCAL_RANK", "1"}}),
            "BYTEPS_LOCAL_RANK=1 is out of range for BYTEPS_LOCAL_SIZE=1");
}

TEST(ConfigValidate, MessageFitsAPartitionPlusHeader) {
  Config c;
  c.partition_bytes = 8192;
  c.max_message_bytes = 8192 + 4096;
  EXPECT_TRUE(Validate(c).ok());
  c.max_message_bytes = 8192 + 4095;
  EXPECT_EQ(ValidateError(c),
            "BYTEPS_MAX_MESSAGE_BYTES=12287 is too small for BYTEPS_PARTITION_BYTES=8192: it must "
            "be at least the partition size plus 4096 bytes");
  c.max_message_bytes = 100;  // below the overhead itself: no unsigned wrap-around
  EXPECT_FALSE(Validate(c).ok());
  const std::string m =
      LoadError({{"BYTEPS_PARTITION_BYTES", "1G"}});  // default max message is exactly 1G
  EXPECT_NE(m.find("BYTEPS_MAX_MESSAGE_BYTES="), std::string::npos) << m;
}

// ---------------------------------------------------------------------------------------------
// Settings and Describe.

TEST(ConfigSettings, TableIsWellFormed) {
  const std::set<std::string> types = {"int",    "bytes", "bool",  "seconds", "string",
                                       "role",   "level", "ignored", "Gbit/s"};
  std::set<std::string> names;
  for (const SettingInfo& s : Settings()) {
    EXPECT_TRUE(names.insert(s.name).second) << "duplicate " << s.name;
    EXPECT_TRUE(types.count(s.type)) << s.name << " has type " << s.type;
    EXPECT_FALSE(s.help.empty()) << s.name;
    const bool prefixed = s.name.rfind("BYTEPS_", 0) == 0 || s.name.rfind("DMLC_", 0) == 0 ||
                          s.name.rfind("PS_", 0) == 0;
    EXPECT_TRUE(prefixed) << s.name;
  }
  for (const char* n :
       {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER",
        "DMLC_WORKER_ID", "DMLC_INTERFACE", "DMLC_NODE_HOST", "DMLC_PORT", "BYTEPS_LOCAL_RANK",
        "BYTEPS_LOCAL_SIZE", "BYTEPS_GLOBAL_RANK", "BYTEPS_PARTITION_BYTES",
        "BYTEPS_SCHEDULING_CREDIT", "BYTEPS_FORCE_DISTRIBUTED", "BYTEPS_SERVER_ENGINE_THREAD",
        "BYTEPS_CONNECTIONS_PER_PEER", "BYTEPS_IO_THREADS", "BYTEPS_SOCKET_BUFFER_BYTES",
        "BYTEPS_MAX_MESSAGE_BYTES", "BYTEPS_START_TIMEOUT", "BYTEPS_TIMEOUT",
        "PS_HEARTBEAT_INTERVAL", "PS_HEARTBEAT_TIMEOUT", "BYTEPS_LOG_LEVEL",
        "BYTEPS_LOG_HIDE_TIME", "PS_VERBOSE", "BYTEPS_ENABLE_ASYNC", "BYTEPS_JOB_SECRET",
        "BYTEPS_CORE_BINARY"})
    EXPECT_TRUE(names.count(n)) << n;
}

TEST(ConfigSettings, DefaultsComeFromConfig) {
  std::map<std::string, SettingInfo> by_name;
  for (const SettingInfo& s : Settings()) by_name[s.name] = s;
  EXPECT_EQ(by_name["DMLC_ROLE"].default_value, "worker");
  EXPECT_EQ(by_name["DMLC_ROLE"].type, "role");
  EXPECT_EQ(by_name["DMLC_PS_ROOT_URI"].default_value, "127.0.0.1");
  EXPECT_EQ(by_name["DMLC_WORKER_ID"].default_value, "-1");
  EXPECT_EQ(by_name["DMLC_INTERFACE"].default_value, "");
  EXPECT_EQ(by_name["BYTEPS_PARTITION_BYTES"].default_value, "4096000");
  EXPECT_EQ(by_name["BYTEPS_PARTITION_BYTES"].type, "bytes");
  EXPECT_EQ(by_name["BYTEPS_SOCKET_BUFFER_BYTES"].default_value, "4M");
  EXPECT_EQ(by_name["BYTEPS_MAX_MESSAGE_BYTES"].default_value, "1G");
  EXPECT_EQ(by_name["BYTEPS_TIMEOUT"].default_value, "300");
  EXPECT_EQ(by_name["BYTEPS_TIMEOUT"].type, "seconds");
  EXPECT_EQ(by_name["BYTEPS_FORCE_DISTRIBUTED"].default_value, "0");
  EXPECT_EQ(by_name["BYTEPS_LOG_LEVEL"].default_value, "WARNING");
  EXPECT_EQ(by_name["BYTEPS_ENABLE_ASYNC"].default_value, "0");
  EXPECT_EQ(by_name["BYTEPS_JOB_SECRET"].default_value, "");
  EXPECT_NE(by_name["BYTEPS_JOB_SECRET"].help.find("HMAC-SHA256"), std::string::npos);
  EXPECT_EQ(by_name["BYTEPS_RECONNECT_TIMEOUT"].default_value, "5");
  EXPECT_EQ(by_name["BYTEPS_AUTH_TIMEOUT"].default_value, "10");
  EXPECT_EQ(by_name["BYTEPS_CHECKSUM"].default_value, "0");
  EXPECT_EQ(by_name["BYTEPS_MAX_CONNECTIONS"].default_value, "1024");
  EXPECT_EQ(by_name["BYTEPS_ADVERTISE_PORT"].default_value, "0");
  EXPECT_EQ(by_name["BYTEPS_CORE_BINARY"].type, "string");
}

TEST(ConfigSettings, NonEmptyDefaultsParseBack) {
  // Sentinel defaults (-1, port 0) mean "unset" and are deliberately not settable.
  const std::set<std::string> sentinels = {"DMLC_PS_ROOT_PORT", "DMLC_WORKER_ID",
                                           "BYTEPS_GLOBAL_RANK"};
  for (const SettingInfo& s : Settings()) {
    if (s.type == "ignored" || s.default_value.empty() || sentinels.count(s.name)) continue;
    auto c = Load({{s.name, s.default_value}});
    EXPECT_TRUE(c.ok()) << s.name << "=" << s.default_value << ": " << c.status().ToString();
  }
}

TEST(ConfigDescribe, ShowsEffectiveValuesAndSource) {
  Environment env = Dist();
  env["BYTEPS_PARTITION_BYTES"] = "4096k";
  env["BYTEPS_LOG_LEVEL"] = "debug";
  env["BYTEPS_ENABLE_GDB"] = "1";
  env["BYTEPS_JOB_SECRET"] = "hunter2";
  env["DMLC_INTERFACE"] = "";  // empty = unset
  Config c = MustLoad(env);
  const std::string text = Describe(c, env);
  const auto lines = Lines(text);

  const std::string* partition = FindLine(lines, "BYTEPS_PARTITION_BYTES");
  ASSERT_NE(partition, nullptr) << text;
  EXPECT_NE(partition->find(" 4M "), std::string::npos) << *partition;  // effective, not raw
  EXPECT_NE(partition->find("[env]"), std::string::npos);
  const std::string* level = FindLine(lines, "BYTEPS_LOG_LEVEL");
  ASSERT_NE(level, nullptr);
  EXPECT_NE(level->find(" DEBUG "), std::string::npos) << *level;
  const std::string* workers = FindLine(lines, "DMLC_NUM_WORKER");
  ASSERT_NE(workers, nullptr);
  EXPECT_NE(workers->find(" 2 "), std::string::npos);
  EXPECT_NE(workers->find("[env]"), std::string::npos);
  const std::string* timeout = FindLine(lines, "BYTEPS_TIMEOUT");
  ASSERT_NE(timeout, nullptr);
  EXPECT_NE(timeout->find(" 300 "), std::string::npos);
  EXPECT_NE(timeout->find("[default]"), std::string::npos);
  EXPECT_NE(timeout->find("deadline"), std::string::npos);  // help text
  const std::string* iface = FindLine(lines, "DMLC_INTERFACE");
  ASSERT_NE(iface, nullptr);
  EXPECT_NE(iface->find("\"\""), std::string::npos);
  EXPECT_NE(iface->find("[default]"), std::string::npos);

  // The secret is marked as set but never printed.
  EXPECT_EQ(text.find("hunter2"), std::string::npos);
  const std::string* secret = FindLine(lines, "BYTEPS_JOB_SECRET");
  ASSERT_NE(secret, nullptr);
  EXPECT_NE(secret->find("***"), std::string::npos);

  // Ignored names appear only when present, after the registered settings.
  const std::string* trace = FindLine(lines, "BYTEPS_ENABLE_GDB");
  ASSERT_NE(trace, nullptr);
  EXPECT_NE(trace->find("ignored"), std::string::npos);
  EXPECT_EQ(FindLine(lines, "BYTEPS_NUMA_ROOT_QUOTA"), nullptr);
  EXPECT_EQ(lines.back(), *trace);
}

TEST(ConfigDescribe, UsesConfigNotEnvironment) {
  Config c;
  c.num_workers = 7;
  const auto lines = Lines(Describe(c, {{"DMLC_NUM_WORKER", "3"}}));
  const std::string* workers = FindLine(lines, "DMLC_NUM_WORKER");
  ASSERT_NE(workers, nullptr);
  EXPECT_NE(workers->find(" 7 "), std::string::npos) << *workers;
  EXPECT_NE(workers->find("[env]"), std::string::npos);
}

TEST(ConfigDescribe, OneAlignedLinePerSettingInRegistryOrder) {
  const std::string text = Describe(Config{}, {});
  EXPECT_EQ(text, Describe(Config{}, {}));
  const auto lines = Lines(text);
  std::vector<std::string> registered;
  for (const SettingInfo& s : Settings())
    if (s.disposition != "ignored" && s.disposition != "build-time") registered.push_back(s.name);
  ASSERT_EQ(lines.size(), registered.size());
  // Columns: the value column and the source column start at the same offset on every line.
  size_t value_col = std::string::npos, source_col = std::string::npos;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(registered[i] + " ", 0), 0u) << lines[i];
    const size_t v = lines[i].find_first_not_of(' ', registered[i].size());
    const size_t s = lines[i].find("[default]");
    ASSERT_NE(s, std::string::npos) << lines[i];
    if (i == 0) {
      value_col = v;
      source_col = s;
    }
    EXPECT_EQ(v, value_col) << lines[i];
    EXPECT_EQ(s, source_col) << lines[i];
  }
}

// ---------------------------------------------------------------------------------------------
// The process environment.

TEST(ConfigEnvironment, ProcessEnvironmentFiltersByPrefix) {
  ASSERT_EQ(setenv("BYTEPS_CONFIG_TEST_PROBE", "42", 1), 0);
  ASSERT_EQ(setenv("DMLC_CONFIG_TEST_PROBE", "a=b", 1), 0);
  ASSERT_EQ(setenv("PS_CONFIG_TEST_PROBE", "", 1), 0);
  ASSERT_EQ(setenv("CONFIG_TEST_FOREIGN_PROBE", "x", 1), 0);
  const Environment env = ProcessEnvironment();
  unsetenv("BYTEPS_CONFIG_TEST_PROBE");
  unsetenv("DMLC_CONFIG_TEST_PROBE");
  unsetenv("PS_CONFIG_TEST_PROBE");
  unsetenv("CONFIG_TEST_FOREIGN_PROBE");

  ASSERT_TRUE(env.count("BYTEPS_CONFIG_TEST_PROBE"));
  EXPECT_EQ(env.at("BYTEPS_CONFIG_TEST_PROBE"), "42");
  EXPECT_EQ(env.at("DMLC_CONFIG_TEST_PROBE"), "a=b");  // split at the first '='
  EXPECT_EQ(env.at("PS_CONFIG_TEST_PROBE"), "");
  EXPECT_FALSE(env.count("CONFIG_TEST_FOREIGN_PROBE"));
  for (const auto& [name, value] : env) {
    // Ours, or the few foreign names byteps reads (which GPUs, where the GPU libraries are).
    const bool ours = name.rfind("BYTEPS_", 0) == 0 || name.rfind("DMLC_", 0) == 0 ||
                      name.rfind("PS_", 0) == 0 || name == "CUDA_VISIBLE_DEVICES" ||
                      name == "NVIDIA_VISIBLE_DEVICES" || name == "CUDA_HOME" || name == "NCCL_HOME";
    EXPECT_TRUE(ours) << name;
  }
  // And the unknown BYTEPS_ probe is then rejected by Load, as a typo would be.
  EXPECT_NE(LoadError({{"BYTEPS_CONFIG_TEST_PROBE", "42"}}).find("unknown setting"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Parse helpers.

TEST(ConfigParse, FormatBytesRoundTrips) {
  EXPECT_EQ(FormatBytes(0), "0");
  EXPECT_EQ(FormatBytes(1000), "1000");
  EXPECT_EQ(FormatBytes(4096), "4K");
  EXPECT_EQ(FormatBytes(4u << 20), "4M");
  EXPECT_EQ(FormatBytes(3ull << 30), "3G");
  EXPECT_EQ(FormatBytes(1536ull << 20), "1536M");
  for (uint64_t n : {4096000ull, 4096ull, 5ull << 20, 1ull << 30, 12345ull}) {
    auto p = ParseBytes(FormatBytes(n), 0, ~0ull);
    ASSERT_TRUE(p.value.has_value()) << n;
    EXPECT_EQ(*p.value, n);
  }
}

TEST(ConfigParse, EditDistance) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("abc", ""), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("BYTEPS_PARTITON_BYTES", "BYTEPS_PARTITION_BYTES"), 1u);
}

TEST(ConfigParse, Helpers) {
  EXPECT_EQ(*ParseInt("-5", -10, 10).value, -5);
  EXPECT_FALSE(ParseInt("", 0, 10).value);
  EXPECT_FALSE(ParseBytes("", 0, 10).value);
  EXPECT_FALSE(ParseBool("").value);
  EXPECT_FALSE(ParseSeconds("", true).value);
  EXPECT_EQ(*ParseLogLevel("warn").value, log::Level::kWarning);
}

TEST(ConfigCompat, GpuLibraryHomesComeFromBytepsNamesElseTheLibrariesOwn) {
  EXPECT_EQ(MustLoad({{"CUDA_HOME", "/opt/cuda"}, {"NCCL_HOME", "/opt/nccl"}}).cuda_home, "/opt/cuda");
  EXPECT_EQ(MustLoad({{"CUDA_HOME", "/opt/cuda"}, {"NCCL_HOME", "/opt/nccl"}}).nccl_home, "/opt/nccl");
  const Config both = MustLoad({{"CUDA_HOME", "/opt/cuda"}, {"BYTEPS_CUDA_HOME", "/usr/local/cuda"},
                                {"NCCL_HOME", "/opt/nccl"}, {"BYTEPS_NCCL_HOME", "/usr/local/nccl"}});
  EXPECT_EQ(both.cuda_home, "/usr/local/cuda");
  EXPECT_EQ(both.nccl_home, "/usr/local/nccl");
  EXPECT_TRUE(both.warnings.empty());
  EXPECT_TRUE(MustLoad({}).cuda_home.empty());
}

}  // namespace
}  // namespace byteps::config
