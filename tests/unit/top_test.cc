// `byteps top`'s pieces without a job: the registry's readings and windows (common/metrics.h), a
// node's heartbeat summary (cluster/node_summary.h), the TopReply encoding, and what the view
// computes from two summaries: rates, the slowest tensor, the last to arrive, the stragglers.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "cli/top_view.h"
#include "cluster/node_summary.h"
#include "common/metrics.h"
#include "protocol/control.h"

namespace byteps {
namespace {

using nlohmann::json;

TEST(MetricsWindow, KeepsTheLargestWithWhatItWasUntilTaken) {
  metrics::WindowMax w;
  EXPECT_EQ(w.Take().what, "");
  w.Offer(0.2, "a");
  w.Offer(0.5, "b");
  w.Offer(0.3, "c");
  auto t = w.Take();
  EXPECT_EQ(t.value, 0.5);
  EXPECT_EQ(t.what, "b");
  w.Offer(0.1, "d");  // a new window: smaller values count again
  EXPECT_EQ(w.Take().what, "d");
  EXPECT_EQ(w.Take().value, 0);
}

TEST(MetricsRead, ReadsTheFamiliesOfAPrefixWithTheirLabels) {
  metrics::Registry r;
  r.AddCounter("byteps_worker_pushed_bytes_total", "h", metrics::Label("server", "0"))->Add(10);
  r.AddCounter("byteps_worker_pushed_bytes_total", "h", metrics::Label("server", "1"))->Add(5);
  r.AddGauge("byteps_worker_credit_bytes", "h")->Set(4096);
  auto* h = r.AddHistogram("byteps_worker_push_pull_seconds", "h", "", {0.1, 1});
  h->Observe(0.05);
  h->Observe(2);
  r.AddCounter("byteps_server_rounds_total", "h")->Add(7);
  // The same name and labels give the same metric, whichever Add made it first.
  EXPECT_EQ(r.AddCounter("byteps_worker_pushed_bytes_total", "h", metrics::Label("server", "0"))->value(), 10u);
  auto got = r.Read("byteps_worker_");
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].family, "byteps_worker_credit_bytes");
  EXPECT_EQ(got[0].value, 4096);
  EXPECT_EQ(got[1].family, "byteps_worker_push_pull_seconds");
  EXPECT_TRUE(got[1].histogram);
  EXPECT_EQ(got[1].count, 2u);
  EXPECT_DOUBLE_EQ(got[1].value, 2.05);
  EXPECT_EQ(got[2].labels, "server=\"0\"");
  EXPECT_EQ(got[3].value, 5);
  EXPECT_EQ(r.Read("byteps_server_").size(), 1u);
}

TEST(NodeSummary, CarriesTheRolesFamiliesAndTakesItsWindows) {
  metrics::Registry r;
  r.AddCounter("byteps_worker_pushed_bytes_total", "h", metrics::Label("server", "1"))->Add(100);
  r.AddHistogram("byteps_worker_push_pull_seconds", "h", "", {1})->Observe(0.5);
  r.AddWindowMax("byteps_worker_slowest_push_pull")->Offer(0.5, "grad \"x\"");
  r.AddCounter("byteps_server_rounds_total", "h")->Add(1);  // another role's: left out
  const json s = json::parse(cluster::NodeSummary(r, "worker"));
  EXPECT_EQ(s["role"], "worker");
  EXPECT_TRUE(s["t"].is_number());
  EXPECT_EQ(s["c"]["pushed_bytes_total"]["1"], 100);
  EXPECT_EQ(s["h"]["push_pull_seconds"][""], json::array({1, 0.5}));
  EXPECT_EQ(s["w"]["slowest_push_pull"], json::array({0.5, "grad \"x\""}));
  EXPECT_FALSE(s["c"].contains("rounds_total"));
  const json again = json::parse(cluster::NodeSummary(r, "worker"));
  EXPECT_EQ(again["w"]["slowest_push_pull"][0], 0);  // the window was taken
  EXPECT_EQ(cluster::LabelValue(metrics::Label("tensor", "a\"b\\c")), "a\"b\\c");
}

TEST(TopReplyCodec, RoundTripsAndRefusesBadNodes) {
  protocol::TopReply r;
  r.job = "00ff";
  r.num_workers = 1;
  r.num_servers = 1;
  r.started = true;
  r.uptime_s = 3.5;
  protocol::TopNode n;
  n.node = {"worker", 0, "10.0.0.1", 0, 77};
  n.heard_s = 0.25;
  n.summary = R"({"t":1})";
  r.nodes.push_back(n);
  auto back = protocol::DecodeTopReply(protocol::Encode(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job, "00ff");
  ASSERT_EQ(back->nodes.size(), 1u);
  EXPECT_EQ(back->nodes[0].node, n.node);
  EXPECT_EQ(back->nodes[0].summary, n.summary);
  EXPECT_EQ(back->nodes[0].heard_s, 0.25);
  auto bad = protocol::DecodeTopReply(R"({"job":"x","num_workers":1,"num_servers":1,"started":true,)"
                                      R"("placement":"","nodes":[{"node":{"role":"worker"}}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rank"), std::string::npos) << bad.status().message();
}

// A worker's summary at time t: `pushed` bytes to each of 2 servers, `ops` push_pulls.
std::string WorkerSummary(double t, double pushed, double ops, const std::string& slowest = "") {
  json w = json::object();
  if (!slowest.empty()) w["slowest_push_pull"] = json::array({0.25, slowest});
  return json{{"role", "worker"},
              {"t", t},
              {"c", {{"pushed_bytes_total", {{"0", pushed}, {"1", pushed}}},
                     {"pulled_bytes_total", {{"0", pushed}}},
                     {"partitions_in_flight", {{"", 3}}},
                     {"credit_bytes", {{"", 4 << 20}}}}},
              {"h", {{"push_pull_seconds", {{"", {ops, 1.0}}}}}},
              {"w", w}}
      .dump();
}

// A server's summary at time t: worker w's pushes arrived `lag[w]` seconds after each round's
// first, `rounds` rounds in all.
std::string ServerSummary(double t, double rounds, const std::vector<double>& lag) {
  json h = json::object();
  for (size_t w = 0; w < lag.size(); ++w) h[std::to_string(w)] = json::array({rounds, rounds * lag[w]});
  return json{{"role", "server"},
              {"t", t},
              {"c", {{"summed_bytes_total", {{"", rounds * 1e6}}}, {"rounds_total", {{"", rounds}}}}},
              {"h", {{"arrival_lag_seconds", h}}}}
      .dump();
}

protocol::TopNode Node(const std::string& role, int rank, const std::string& now, const std::string& before) {
  protocol::TopNode n;
  n.node = {role, rank, "10.0.0." + std::to_string(rank), 0, 100 + rank};
  n.summary = now;
  n.previous = before;
  return n;
}

TEST(TopView, RatesComeFromTheLastTwoSummaries) {
  protocol::TopReply r;
  r.num_workers = 2;
  r.num_servers = 1;
  r.nodes.push_back(Node("worker", 0, WorkerSummary(3, 3e6, 30, "grad.fc1"), WorkerSummary(1, 1e6, 10)));
  r.nodes.push_back(Node("worker", 1, WorkerSummary(1, 1e6, 10), ""));  // one summary: no rates yet
  r.nodes.push_back(Node("server", 0, ServerSummary(2, 40, {0, 0}), ServerSummary(1, 20, {0, 0})));
  const cli::TopView v = cli::BuildTopView(r);
  ASSERT_EQ(v.workers.size(), 2u);
  ASSERT_EQ(v.servers.size(), 1u);
  const cli::NodeRow& w0 = v.workers[0];
  ASSERT_TRUE(w0.out_rate.has_value());
  EXPECT_DOUBLE_EQ(*w0.out_rate, 2e6);  // (2 x 3e6 - 2 x 1e6) over 2 s
  EXPECT_DOUBLE_EQ(*w0.in_rate, 1e6);
  EXPECT_DOUBLE_EQ(*w0.ops_rate, 10);
  EXPECT_EQ(w0.in_flight, 3);
  EXPECT_EQ(w0.credit_bytes, 4 << 20);
  EXPECT_EQ(w0.slowest_tensor, "grad.fc1");
  EXPECT_FALSE(v.workers[1].out_rate.has_value());
  EXPECT_TRUE(v.workers[1].reporting);
  EXPECT_DOUBLE_EQ(*v.servers[0].ops_rate, 20);
  EXPECT_DOUBLE_EQ(*v.servers[0].sum_rate, 20e6);
  const std::string text = cli::RenderTopText(v);
  EXPECT_NE(text.find("grad.fc1"), std::string::npos) << text;
  EXPECT_NE(text.find("2.0"), std::string::npos) << text;  // MB/s
  const json j = json::parse(cli::TopViewJson(v));
  EXPECT_EQ(j["workers"][0]["push_bytes_per_s"], 2e6);
  EXPECT_TRUE(j["workers"][1]["push_bytes_per_s"].is_null());
  EXPECT_EQ(j["servers"][0]["rounds_per_s"], 20);
}

TEST(TopView, AWorkerThatArrivesLastEverywhereIsAStraggler) {
  protocol::TopReply r;
  r.num_workers = 3;
  r.num_servers = 2;
  for (int s = 0; s < 2; ++s) {
    r.nodes.push_back(Node("server", s, ServerSummary(2, 20, {0.0005, 0.020, 0.0}), ServerSummary(1, 10, {0.0005, 0.020, 0.0})));
  }
  cli::TopView v = cli::BuildTopView(r);
  ASSERT_EQ(v.lags.size(), 3u);
  EXPECT_EQ(v.lags[0].worker, 1);
  EXPECT_NEAR(v.lags[0].lag_s, 0.020, 1e-9);
  EXPECT_TRUE(v.lags[0].flagged);
  EXPECT_FALSE(v.lags[1].flagged);
  EXPECT_EQ(v.servers[0].laggard, 1);
  EXPECT_NE(cli::RenderTopText(v).find("stragglers: worker 1 (20.00 ms behind)"), std::string::npos)
      << cli::RenderTopText(v);
  // Workers that take turns being last are no stragglers: 2 workers, the same lag each.
  protocol::TopReply even;
  even.nodes.push_back(Node("server", 0, ServerSummary(2, 20, {0.004, 0.004}), ServerSummary(1, 10, {0.004, 0.004})));
  v = cli::BuildTopView(even);
  ASSERT_EQ(v.lags.size(), 2u);
  EXPECT_FALSE(v.lags[0].flagged || v.lags[1].flagged);
  EXPECT_NE(cli::RenderTopText(v).find("stragglers: none"), std::string::npos);
}

}  // namespace
}  // namespace byteps
