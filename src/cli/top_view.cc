#include "cli/top_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

namespace byteps::cli {

using nlohmann::json;

namespace {

json ParseSummary(const std::string& text) {
  if (text.empty()) return json();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json();
}

// Sum over the labels of counter/gauge family `f` ("c" section); 0 when absent.
double Total(const json& s, const char* f) {
  double t = 0;
  if (!s.is_object() || !s.contains("c") || !s["c"].contains(f)) return 0;
  for (const auto& [label, v] : s["c"][f].items()) t += v.is_number() ? v.get<double>() : 0;
  return t;
}

// [count, sum] of histogram family `f` at `label`; {0, 0} when absent.
std::pair<double, double> Hist(const json& s, const char* f, const std::string& label) {
  if (!s.is_object() || !s.contains("h") || !s["h"].contains(f) || !s["h"][f].contains(label)) return {0, 0};
  const json& v = s["h"][f][label];
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) return {0, 0};
  return {v[0].get<double>(), v[1].get<double>()};
}

// The two summaries of a node and the time between them.
struct Pair {
  json cur, prev;
  double dt = 0;  // 0: no rate
  std::optional<double> Rate(double now, double before) const {
    if (dt <= 0) return std::nullopt;
    return std::max(0.0, (now - before) / dt);
  }
  std::optional<double> CounterRate(const char* f) const { return Rate(Total(cur, f), Total(prev, f)); }
};

Pair PairOf(const protocol::TopNode& n) {
  Pair p{ParseSummary(n.summary), ParseSummary(n.previous)};
  if (p.cur.is_object() && p.prev.is_object() && p.cur.value("t", 0.0) > p.prev.value("t", 0.0)) {
    p.dt = p.cur.value("t", 0.0) - p.prev.value("t", 0.0);
  }
  return p;
}

NodeRow RowOf(const protocol::TopNode& n) {
  NodeRow r;
  r.role = n.node.role;
  r.rank = n.node.rank;
  r.host = n.node.host;
  r.pid = n.node.pid;
  r.heard_s = n.heard_s;
  r.finished = n.finished;
  r.away = n.away;
  return r;
}

std::string Rate(const std::optional<double>& bytes_per_s) {
  return bytes_per_s ? fmt::format("{:.1f}", *bytes_per_s / 1e6) : "-";
}

std::string PerSecond(const std::optional<double>& v) { return v ? fmt::format("{:.1f}", *v) : "-"; }

std::string Bytes(double b) {
  if (b <= 0) return "-";
  if (b >= (1 << 20)) return fmt::format("{:g}M", b / (1 << 20));
  if (b >= 1024) return fmt::format("{:g}K", b / 1024);
  return fmt::format("{:g}", b);
}

std::string State(const NodeRow& r) {
  if (r.away) return "away";
  if (r.finished) return "done";
  return fmt::format("{:.1f}s", r.heard_s);
}

json Optional(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

TopView BuildTopView(const protocol::TopReply& reply) {
  TopView v;
  v.job = reply.job;
  v.started = reply.started;
  v.uptime_s = reply.uptime_s;
  v.num_workers = reply.num_workers;
  v.num_servers = reply.num_servers;
  v.placement = reply.placement;
  std::map<int, std::pair<double, double>> lag;  // worker -> (lag seconds, arrivals) over the servers
  for (const protocol::TopNode& n : reply.nodes) {
    NodeRow r = RowOf(n);
    const Pair p = PairOf(n);
    r.reporting = p.cur.is_object();
    if (r.role == "worker") {
      r.out_rate = p.CounterRate("pushed_bytes_total");
      r.in_rate = p.CounterRate("pulled_bytes_total");
      r.ops_rate = p.Rate(Hist(p.cur, "push_pull_seconds", "").first, Hist(p.prev, "push_pull_seconds", "").first);
      r.in_flight = Total(p.cur, "partitions_in_flight");
      r.credit_bytes = Total(p.cur, "credit_bytes");
      r.partition_bytes = Total(p.cur, "partition_bytes");
      r.errors = Total(p.cur, "errors_total");
      r.reconnects = Total(p.cur, "reconnects_total");
      if (r.reporting && p.cur.contains("w") && p.cur["w"].contains("slowest_push_pull")) {
        const json& w = p.cur["w"]["slowest_push_pull"];
        if (w.is_array() && w.size() == 2 && w[0].is_number() && w[1].is_string() && w[0].get<double>() > 0) {
          r.slowest_s = w[0].get<double>();
          r.slowest_tensor = w[1].get<std::string>();
        }
      }
      v.workers.push_back(std::move(r));
    } else {
      r.in_rate = p.CounterRate("pushed_bytes_total");
      r.out_rate = p.CounterRate("replied_bytes_total");
      r.sum_rate = p.CounterRate("summed_bytes_total");
      r.ops_rate = p.CounterRate("rounds_total");
      if (p.dt > 0 && p.cur.contains("h") && p.cur["h"].contains("arrival_lag_seconds")) {
        for (const auto& [label, ignored] : p.cur["h"]["arrival_lag_seconds"].items()) {
          const auto [c1, s1] = Hist(p.cur, "arrival_lag_seconds", label);
          const auto [c0, s0] = Hist(p.prev, "arrival_lag_seconds", label);
          if (c1 <= c0) continue;
          const int worker = std::atoi(label.c_str());
          const double mean = (s1 - s0) / (c1 - c0);
          lag[worker].first += s1 - s0;
          lag[worker].second += c1 - c0;
          if (r.laggard < 0 || mean > r.laggard_lag_s) {
            r.laggard = worker;
            r.laggard_lag_s = mean;
          }
        }
      }
      v.servers.push_back(std::move(r));
    }
  }
  for (const auto& [worker, sc] : lag) v.lags.push_back({worker, sc.first / sc.second});
  for (Straggler& s : v.lags) {
    double others = 0;
    for (const Straggler& o : v.lags) others += o.worker == s.worker ? 0 : o.lag_s;
    if (v.lags.size() > 1) others /= static_cast<double>(v.lags.size() - 1);
    s.flagged = v.lags.size() > 1 && s.lag_s >= 1e-3 && s.lag_s > 3 * others;
  }
  std::sort(v.lags.begin(), v.lags.end(), [](const Straggler& a, const Straggler& b) { return a.lag_s > b.lag_s; });
  return v;
}

std::string RenderTopText(const TopView& v) {
  std::string out = fmt::format("byteps top - job {}: {} worker(s), {} server(s), {}, up {:.0f} s\n", v.job,
                                v.num_workers, v.num_servers, v.started ? "running" : "starting", v.uptime_s);
  if (!v.placement.empty()) out += fmt::format("servers placed: {}\n", v.placement);
  out += fmt::format("\n{:<8}{:<17}{:>10}{:>10}{:>9}{:>8}{:>9}{:>10}{:>7}  {:<28}{:>8}\n", "WORKER", "HOST",
                     "PUSH MB/s", "PULL MB/s", "OPS/s", "FLIGHT", "CREDIT", "PARTITION", "ERRORS", "SLOWEST TENSOR",
                     "HEARD");
  for (const NodeRow& r : v.workers) {
    const std::string slowest =
        r.slowest_tensor.empty() ? "-" : fmt::format("{} {:.3f}s", r.slowest_tensor.substr(0, 18), r.slowest_s);
    out += fmt::format("{:<8}{:<17}{:>10}{:>10}{:>9}{:>8}{:>9}{:>10}{:>7}  {:<28}{:>8}\n",
                       r.rank < 0 ? std::string("?") : std::to_string(r.rank), r.host.substr(0, 16), Rate(r.out_rate),
                       Rate(r.in_rate), PerSecond(r.ops_rate), r.reporting ? fmt::format("{:g}", r.in_flight) : "-",
                       Bytes(r.credit_bytes), Bytes(r.partition_bytes),
                       r.reporting ? fmt::format("{:g}", r.errors) : "-", slowest, State(r));
  }
  out += fmt::format("\n{:<8}{:<17}{:>10}{:>10}{:>10}{:>10}  {:<28}{:>8}\n", "SERVER", "HOST", "IN MB/s", "OUT MB/s",
                     "SUM MB/s", "ROUNDS/s", "LAST TO ARRIVE (mean lag)", "HEARD");
  for (const NodeRow& r : v.servers) {
    const std::string last =
        r.laggard < 0 ? "-" : fmt::format("worker {} ({:.2f} ms)", r.laggard, r.laggard_lag_s * 1e3);
    out += fmt::format("{:<8}{:<17}{:>10}{:>10}{:>10}{:>10}  {:<28}{:>8}\n",
                       r.rank < 0 ? std::string("?") : std::to_string(r.rank), r.host.substr(0, 16), Rate(r.in_rate),
                       Rate(r.out_rate), Rate(r.sum_rate), PerSecond(r.ops_rate), last, State(r));
  }
  std::string stragglers;
  for (const Straggler& s : v.lags) {
    if (s.flagged) stragglers += fmt::format("{}worker {} ({:.2f} ms behind)", stragglers.empty() ? "" : ", ", s.worker,
                                             s.lag_s * 1e3);
  }
  if (stragglers.empty() && !v.lags.empty()) {
    stragglers = fmt::format("none (the most behind: worker {}, {:.2f} ms)", v.lags[0].worker, v.lags[0].lag_s * 1e3);
  }
  out += fmt::format("\nstragglers: {}\n", stragglers.empty() ? "- (no rounds in the last interval)" : stragglers);
  return out;
}

std::string TopViewJson(const TopView& v) {
  auto node = [](const NodeRow& r) {
    json j{{"rank", r.rank}, {"host", r.host}, {"pid", r.pid}, {"heard_s", r.heard_s}, {"finished", r.finished},
           {"away", r.away}, {"reporting", r.reporting}};
    if (r.role == "worker") {
      j["push_bytes_per_s"] = Optional(r.out_rate);
      j["pull_bytes_per_s"] = Optional(r.in_rate);
      j["push_pulls_per_s"] = Optional(r.ops_rate);
      j["partitions_in_flight"] = r.in_flight;
      j["credit_bytes"] = r.credit_bytes;
      j["partition_bytes"] = r.partition_bytes;
      j["errors"] = r.errors;
      j["reconnects"] = r.reconnects;
      j["slowest"] = r.slowest_tensor.empty() ? json(nullptr)
                                              : json{{"tensor", r.slowest_tensor}, {"seconds", r.slowest_s}};
    } else {
      j["in_bytes_per_s"] = Optional(r.in_rate);
      j["out_bytes_per_s"] = Optional(r.out_rate);
      j["summed_bytes_per_s"] = Optional(r.sum_rate);
      j["rounds_per_s"] = Optional(r.ops_rate);
      j["last_to_arrive"] = r.laggard < 0 ? json(nullptr) : json{{"worker", r.laggard}, {"lag_s", r.laggard_lag_s}};
    }
    return j;
  };
  json workers = json::array(), servers = json::array(), lags = json::array();
  for (const NodeRow& r : v.workers) workers.push_back(node(r));
  for (const NodeRow& r : v.servers) servers.push_back(node(r));
  for (const Straggler& s : v.lags) lags.push_back({{"worker", s.worker}, {"lag_s", s.lag_s}, {"straggler", s.flagged}});
  return json{{"job", v.job},           {"started", v.started},         {"uptime_s", v.uptime_s},
              {"num_workers", v.num_workers}, {"num_servers", v.num_servers}, {"placement", v.placement},
              {"workers", workers},     {"servers", servers},           {"arrival_lag", lags}}
      .dump(2, ' ', false, json::error_handler_t::replace);
}

}  // namespace byteps::cli
