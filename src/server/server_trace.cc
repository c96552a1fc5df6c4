#include "server/server_trace.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

namespace byteps::server {

namespace {

using nlohmann::json;

int64_t SystemMinusSteadyUs() {
  using namespace std::chrono;
  const int64_t sys = duration_cast<microseconds>(system_clock::now().time_since_epoch()).count();
  return sys - TraceNowNs() / 1000;
}

// Writes `text` to `path` whole, or says why not (strerror).
Status WriteFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Unavailable(std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return Unavailable(std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) return Unavailable(std::strerror(errno));
  return Status::Ok();
}

json Event(const std::string& pid, const std::string& tid, const std::string& name, int64_t ts_us, int64_t end_us,
           json args) {
  return json{{"ph", "X"},  {"cat", "Comm"},           {"pid", pid},  {"tid", tid},
              {"name", name}, {"ts", ts_us}, {"dur", std::max<int64_t>(end_us - ts_us, 0)}, {"args", std::move(args)}};
}

}  // namespace

std::string ServerTraceJson(const std::vector<RoundTrace>& rounds, const TraceIdentity& who, TraceWindow window,
                            int64_t system_minus_steady_us) {
  const std::string pid = fmt::format("Server {}", who.rank);
  const auto us = [&](int64_t ns) { return ns / 1000 + system_minus_steady_us; };
  json events = json::array();
  for (const RoundTrace& r : rounds) {
    const std::string tid = std::to_string(r.key);
    const std::string base = fmt::format("Server.{}.", r.key);
    const json args{{"step", r.round}, {"key", r.key}, {"last_worker", r.last_worker}};
    events.push_back(Event(pid, tid, base + "RECV", us(r.first_push_ns), us(r.last_push_ns), args));
    events.push_back(Event(pid, tid, base + "SUM", us(r.last_push_ns), us(r.summed_ns), args));
    events.push_back(Event(pid, tid, base + "REPLY", us(r.summed_ns), us(r.replied_ns), args));
  }
  json other{{"role", "server"},
             {"rank", who.rank},
             {"job", who.job},
             {"clock_offset_us", who.clock_offset_us},
             {"start_step", window.start_step},
             {"end_step", window.end_step}};
  json doc{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", std::move(other)}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

Status ServerTrace::CheckDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return InvalidArgument(fmt::format("BYTEPS_TRACE_DIR={}: cannot create the trace directory: {}", dir,
                                       ec.message()));
  }
  const std::string probe = fmt::format("{}/.byteps_probe.{}", dir, ::getpid());
  Status st = WriteFile(probe, "");
  if (!st.ok()) {
    return InvalidArgument(fmt::format("BYTEPS_TRACE_DIR={}: cannot write in the trace directory: {}", dir,
                                       st.message()));
  }
  std::filesystem::remove(probe, ec);
  return Status::Ok();
}

ServerTrace::ServerTrace(std::string dir, TraceWindow window)
    : dir_(std::move(dir)), window_(window), system_minus_steady_us_(SystemMinusSteadyUs()) {}

TraceBuffer* ServerTrace::NewBuffer() {
  buffers_.push_back(std::make_unique<TraceBuffer>(window_));
  return buffers_.back().get();
}

size_t ServerTrace::rounds() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b->rounds().size();
  return n;
}

StatusOr<std::string> ServerTrace::Write(const TraceIdentity& who) const {
  std::vector<RoundTrace> all;
  for (const auto& b : buffers_) all.insert(all.end(), b->rounds().begin(), b->rounds().end());
  const std::string dir = fmt::format("{}/server_{}", dir_, who.rank);
  const std::string path = dir + "/comm.json";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Unavailable(fmt::format("cannot write the server's trace {}: {}", path, ec.message()));
  const std::string tmp = path + ".tmp";
  Status st = WriteFile(tmp, ServerTraceJson(all, who, window_, system_minus_steady_us_));
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) st = Unavailable(std::strerror(errno));
  if (!st.ok()) {
    std::filesystem::remove(tmp, ec);
    return Unavailable(fmt::format("cannot write the server's trace {}: {}", path, st.message()));
  }
  return path;
}

}  // namespace byteps::server
