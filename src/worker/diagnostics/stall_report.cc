#include "worker/diagnostics/stall_report.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <map>

namespace byteps::worker::diagnostics {
namespace {

const char* WhereName(pipeline::PartitionTask::Where w) {
  switch (w) {
    case pipeline::PartitionTask::Where::kWaitingRound: return "waits for its tensor's previous round";
    case pipeline::PartitionTask::Where::kQueued: return "queued";
    case pipeline::PartitionTask::Where::kRunning: return "running";
    case pipeline::PartitionTask::Where::kFinished: return "finished";
  }
  return "?";
}

}  // namespace

std::string FormatStallReport(const pipeline::InFlight& f, const std::string& who, const std::string& reason) {
  std::string out = fmt::format("byteps stall report of {} (pid {}) at {:%Y-%m-%d %H:%M:%S} UTC\nreason: {}\n", who,
                                getpid(), fmt::gmtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())),
                                reason);
  out += fmt::format("in flight: {} operation(s), {} partition(s); credit: {} bytes in flight of {}\n", f.operations,
                     f.tasks.size(), f.credit_in_flight,
                     f.credit_limit == 0 ? std::string("no cap") : fmt::format("{} bytes", f.credit_limit));
  // Where the partitions are, per stage and server: the first lines to read.
  std::map<std::string, size_t> where;
  for (const auto& t : f.tasks) {
    const std::string stage = t.stage.empty() ? "-" : t.stage;
    ++where[fmt::format("{} {} on server {}", stage, WhereName(t.where), t.server)];
  }
  for (const auto& [what, n] : where) out += fmt::format("  {} partition(s): {}\n", n, what);
  out += "partitions (oldest operation first): tensor, partition, key, round, server, bytes, stage, state, age\n";
  for (const auto& t : f.tasks) {
    out += fmt::format("  '{}' {}/{} key {} round {} server {} {} bytes: {} {}, {:.1f} s\n", t.tensor, t.part,
                       t.parts, t.key, t.round, t.server, t.bytes, t.stage.empty() ? "-" : t.stage,
                       WhereName(t.where), t.age_s);
  }
  if (f.tasks.empty()) out += "  (none)\n";
  return out;
}

}  // namespace byteps::worker::diagnostics
