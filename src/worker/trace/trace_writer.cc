#include "worker/trace/trace_writer.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace byteps::worker::trace {

namespace {

using nlohmann::json;

// Steady nanoseconds as whole microseconds since the epoch. Both ends of every event go through
// here, so an event that starts where another ends starts exactly at its end (no overlap).
int64_t EpochUs(const TraceData& d, int64_t steady_ns) { return (steady_ns + d.epoch_minus_steady_ns) / 1000; }

// Invalid UTF-8 in a tensor name is replaced, never a reason to lose the file (escaping of
// quotes, backslashes and control characters is the library's).
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json Event(const TraceData& d, const std::string& tensor, const std::string& name, const std::string& tid,
           int64_t from_ns, int64_t to_ns) {
  const int64_t ts = EpochUs(d, from_ns);
  return json{{"name", name}, {"ph", "X"},   {"ts", ts},   {"dur", EpochUs(d, to_ns) - ts},
              {"cat", "Comm"}, {"pid", "Comm." + tensor}, {"tid", tid}};
}

}  // namespace

std::string TimelineStageName(const std::string& stage) {
  if (stage == "local-reduce") return "REDUCE";
  if (stage == "local-broadcast") return "BROADCAST";
  if (stage == "copy-in") return "COPYD2H";
  if (stage == "copy-out") return "COPYH2D";
  std::string s = stage;
  for (char& c : s) c = c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;  // push-pull: PUSH_PULL
}

void WriteTimeline(const TraceData& d, const TraceMeta& meta, std::ostream& out) {
  out << "{\"traceEvents\":[";
  const char* sep = "\n";
  auto emit = [&](const json& e) {
    out << sep << Dump(e);
    sep = ",\n";
  };
  for (size_t i = 0; i < d.totals.size(); ++i) {
    const Total& t = d.totals[i];
    if (t.finished == 0) continue;  // still running when the timeline was written
    const std::string& tensor = d.tensors[t.tensor];
    json e = Event(d, tensor, "Comm." + tensor, "total", t.submitted, t.finished);
    e["args"] = {{"name", "Comm." + tensor}, {"step", t.step}, {"bytes", t.bytes}, {"ok", t.ok}};
    emit(e);
  }
  for (size_t i = 0; i < d.spans.size(); ++i) {
    const Span& s = d.spans[i];
    if (s.started == 0 || s.ended == 0) continue;  // never started (failed before) or still running
    const std::string& tensor = d.tensors[s.tensor];
    const std::string tid = std::to_string(s.key);
    json args = {{"name", "Comm." + tensor}, {"step", s.step}, {"server", s.server}, {"bytes", s.bytes}};
    if (s.credit && s.queued != 0) {
      json w = Event(d, tensor, "Comm." + tensor + ".CREDIT_WAIT", tid, s.queued, s.started);
      w["args"] = args;
      emit(w);
    }
    json e = Event(d, tensor, "Comm." + tensor + "." + d.stages[s.stage], tid, s.started, s.ended);
    args["ok"] = s.ok;
    e["args"] = std::move(args);
    emit(e);
  }
  json other = {{"role", "worker"},
                {"rank", meta.rank},
                {"local_rank", meta.local_rank},
                {"job", meta.job},
                {"clock_offset_us", meta.clock_offset_us},
                {"start_step", meta.start_step},
                {"end_step", meta.end_step}};
  out << "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" << Dump(other) << "}\n";
}

Status WriteTimelineFile(const TraceData& data, const TraceMeta& meta, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Unavailable(fmt::format("cannot open the timeline file {}: {}", tmp, std::strerror(errno)));
    WriteTimeline(data, meta, out);
    out.flush();
    if (!out) return Unavailable(fmt::format("cannot write the timeline file {}: {}", tmp, std::strerror(errno)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return Unavailable(fmt::format("cannot rename the timeline file {} to {}: {}", tmp, path, std::strerror(err)));
  }
  return Status::Ok();
}

}  // namespace byteps::worker::trace
