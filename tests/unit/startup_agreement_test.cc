// Start-up agreement (src/worker/tuning/startup_agreement.h): several workers, each on its own
// thread, run AgreeOnSettings against a fake collective that sums their contributions the way the
// servers do (per tensor name and round, released once every worker has contributed).
#include "worker/tuning/startup_agreement.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace byteps::worker::tuning {
namespace {

// The "servers": element-wise int64 / float32 sums per (name, round).
class FakeServers {
 public:
  explicit FakeServers(int workers) : workers_(workers) {}

  Status PushPull(int worker, const std::string& name, void* data, size_t bytes, DataType dtype) {
    std::unique_lock<std::mutex> lock(mu_);
    if (fail_name_ == name) return Unavailable("server 0 (fake) is gone");
    const int round = ++rounds_[{worker, name}];
    Slot& s = slots_[{name, round}];
    if (s.sum.empty()) s.sum.assign(bytes, 0);
    if (dtype == DataType::kInt64) {
      for (size_t i = 0; i < bytes / 8; ++i) {
        int64_t a, b;
        std::memcpy(&a, s.sum.data() + 8 * i, 8);
        std::memcpy(&b, static_cast<char*>(data) + 8 * i, 8);
        a += b;
        std::memcpy(s.sum.data() + 8 * i, &a, 8);
      }
    }  // float32 probes carry zeros; their sum stays zero
    ++s.arrived;
    names_.push_back(name);
    cv_.notify_all();
    cv_.wait(lock, [&] { return s.arrived == workers_; });
    std::memcpy(data, s.sum.data(), bytes);
    return Status::Ok();
  }

  std::vector<std::string> names() {
    std::lock_guard<std::mutex> lock(mu_);
    return names_;
  }
  void FailOn(const std::string& name) { fail_name_ = name; }

 private:
  struct Slot {
    std::vector<char> sum;
    int arrived = 0;
  };
  const int workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, std::string>, int> rounds_;
  std::map<std::pair<std::string, int>, Slot> slots_;
  std::vector<std::string> names_;
  std::string fail_name_;
};

class FakeCollective : public Collective {
 public:
  FakeCollective(FakeServers* servers, int worker) : servers_(servers), worker_(worker) {}
  Status PushPull(const std::string& name, void* data, size_t bytes, DataType dtype) override {
    return servers_->PushPull(worker_, name, data, bytes, dtype);
  }
  void SetPartitionBytes(size_t bytes) override { partitions.push_back(bytes); }
  Status PushPullOnServer(const std::string& name, void* data, size_t bytes, DataType dtype, int server) override {
    pinned.push_back(fmt::format("{}@{}", name, server));
    return servers_->PushPull(worker_, name, data, bytes, dtype);
  }
  // The scheduler's answer: server s gets a share growing with s.
  StatusOr<Placement> ReportServerProbe(const std::vector<double>& seconds, size_t bytes) override {
    reported = seconds;
    reported_bytes = bytes;
    Placement p;
    for (size_t s = 0; s < seconds.size(); ++s) p.shares.push_back(2.0 * (s + 1) / (seconds.size() * (seconds.size() + 1)));
    p.summary = "placed from the probe";
    return p;
  }
  std::vector<size_t> partitions;
  std::vector<std::string> pinned;
  std::vector<double> reported;
  size_t reported_bytes = 0;

 private:
  FakeServers* servers_;
  int worker_;
};

StartupOptions Defaults(int worker) {
  StartupOptions o;
  o.is_rank0 = worker == 0;
  o.partition_bytes = 4096000;
  o.model.num_workers = 3;
  o.model.num_servers = 3;
  return o;
}

struct JobRun {
  std::vector<StatusOr<StartupOutcome>> outcomes;
  std::vector<std::vector<size_t>> partitions;
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> pinned;  // per worker: "name@server"
  std::vector<std::vector<double>> reported;     // per worker: the wire times it reported
};

JobRun RunJob(std::vector<StartupOptions> options, const std::string& fail_on = "") {
  FakeServers servers(static_cast<int>(options.size()));
  servers.FailOn(fail_on);
  std::vector<FakeCollective> collectives;
  for (size_t w = 0; w < options.size(); ++w) collectives.emplace_back(&servers, static_cast<int>(w));
  JobRun run;
  run.outcomes.assign(options.size(), StatusOr<StartupOutcome>(Internal("not run")));
  std::vector<std::thread> threads;
  for (size_t w = 0; w < options.size(); ++w) {
    threads.emplace_back([&, w] { run.outcomes[w] = AgreeOnSettings(collectives[w], options[w]); });
  }
  for (auto& t : threads) t.join();
  for (auto& c : collectives) {
    run.partitions.push_back(c.partitions);
    run.pinned.push_back(c.pinned);
    run.reported.push_back(c.reported);
  }
  run.names = servers.names();
  return run;
}

TEST(StartupAgreementTest, EveryWorkerAppliesWorkerZerosDecision) {
  JobRun run = RunJob({Defaults(0), Defaults(1), Defaults(2)});
  ASSERT_TRUE(run.outcomes[0].ok()) << run.outcomes[0].status().message();
  const StartupOutcome& zero = run.outcomes[0].value();
  EXPECT_TRUE(zero.probed);
  EXPECT_GT(zero.link.goodput_Bps, 0);
  for (size_t w = 0; w < 3; ++w) {
    ASSERT_TRUE(run.outcomes[w].ok()) << w << ": " << run.outcomes[w].status().message();
    const StartupOutcome& o = run.outcomes[w].value();
    EXPECT_EQ(o.partition_bytes.value, zero.partition_bytes.value) << w;
    EXPECT_EQ(o.credit_bytes.value, zero.credit_bytes.value) << w;
    // Worker 0's measurement too (connections per server are each worker's own, from it).
    EXPECT_NEAR(o.link.goodput_Bps, zero.link.goodput_Bps, 1) << w;
    EXPECT_NEAR(o.link.rtt_s, zero.link.rtt_s, 1e-9) << w;
    // The probe's candidates (the first also for the round trips), then the agreed size.
    std::vector<size_t> expected = {kProbeCandidates[0]};
    for (int r = 0; r < kProbeRuns; ++r) expected.insert(expected.end(), kProbeCandidates.begin(), kProbeCandidates.end());
    expected.push_back(zero.partition_bytes.value);
    EXPECT_EQ(run.partitions[w], expected) << w;
  }
  EXPECT_EQ(zero.partition_bytes.reason.find("sqrt"), 0u) << zero.partition_bytes.reason;
  EXPECT_FALSE(zero.probe_times.empty());
  EXPECT_TRUE(run.outcomes[1].value().probe_times.empty());
  EXPECT_EQ(run.outcomes[1].value().partition_bytes.reason, "worker 0's start-up probe");
}

TEST(StartupAgreementTest, WorkerZeroWithAutotuneOffSkipsTheProbeForEveryone) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1), Defaults(2)};
  o[0].autotune = false;
  o[0].credit_partitions = 4;
  o[1].credit_partitions = 2;
  JobRun run = RunJob(o);
  std::vector<std::string> expected(3, "__byteps.tune.plan");
  expected.insert(expected.end(), 3, "__byteps.tune.explore");
  EXPECT_EQ(run.names, expected);
  for (size_t w = 0; w < 3; ++w) {
    ASSERT_TRUE(run.outcomes[w].ok()) << run.outcomes[w].status().message();
    EXPECT_FALSE(run.outcomes[w].value().probed);
    EXPECT_EQ(run.outcomes[w].value().partition_bytes.value, 4096000u);
  }
  EXPECT_EQ(run.outcomes[0].value().credit_bytes.value, 4u * 4096000);  // each its own credit
  EXPECT_EQ(run.outcomes[1].value().credit_bytes.value, 2u * 4096000);
}

TEST(StartupAgreementTest, APinnedPartitionIsNeverChanged) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1)};
  for (auto& x : o) {
    x.partition_bytes = 300000;
    x.partition_pinned = true;
  }
  JobRun run = RunJob(o);
  for (size_t w = 0; w < 2; ++w) {
    ASSERT_TRUE(run.outcomes[w].ok()) << run.outcomes[w].status().message();
    EXPECT_TRUE(run.outcomes[w].value().probed);  // the credit is still derived
    EXPECT_EQ(run.outcomes[w].value().partition_bytes.value, 300000u);
    EXPECT_EQ(run.partitions[w].back(), 300000u);
  }
  EXPECT_EQ(run.outcomes[0].value().partition_bytes.reason, "set by BYTEPS_PARTITION_BYTES");
}

TEST(StartupAgreementTest, APinnedCreditIsKeptByItsWorker) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1)};
  o[1].credit_partitions = 4;
  o[1].credit_pinned = true;
  JobRun run = RunJob(o);
  ASSERT_TRUE(run.outcomes[1].ok());
  const StartupOutcome& one = run.outcomes[1].value();
  EXPECT_EQ(one.credit_bytes.value, 4 * one.partition_bytes.value);
  EXPECT_NE(one.credit_bytes.reason.find("BYTEPS_SCHEDULING_CREDIT"), std::string::npos);
  EXPECT_NE(run.outcomes[0].value().credit_bytes.value, one.credit_bytes.value);
}

TEST(StartupAgreementTest, EverythingPinnedOnWorkerZeroMeansNoProbe) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1)};
  for (auto& x : o) {
    x.partition_bytes = 262144;
    x.partition_pinned = x.credit_pinned = true;
    x.credit_partitions = 8;
  }
  JobRun run = RunJob(o);
  EXPECT_EQ(run.names, (std::vector<std::string>{"__byteps.tune.plan", "__byteps.tune.plan", "__byteps.tune.explore",
                                                  "__byteps.tune.explore"}));  // no probe
  for (auto& r : run.outcomes) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.value().partition_bytes.value, 262144u);
    EXPECT_EQ(r.value().credit_bytes.value, 8u * 262144);
  }
}

TEST(StartupAgreementTest, ThePartitionIsExploredOnlineWhenEveryWorkerCan) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1), Defaults(2)};
  for (auto& x : o) x.explore_partition = true;
  JobRun run = RunJob(o);
  const size_t chosen = run.outcomes[0].value().partition_bytes.value;
  const size_t alt = PartitionAlternative(chosen, kMinPartitionBytes, o[0].model.max_partition_bytes);
  ASSERT_NE(alt, 0u);
  for (auto& r : run.outcomes) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r.value().partition_candidates, (std::vector<size_t>{chosen, alt}));
  }
  // One worker that cannot (BYTEPS_AUTOTUNE=0 there, a pinned size, local processes): nobody does.
  o[1].explore_partition = false;
  run = RunJob(o);
  for (auto& r : run.outcomes) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r.value().partition_candidates.empty());
  }
  // Workers whose limits give another second candidate (a smaller BYTEPS_MAX_MESSAGE_BYTES): nobody does.
  o[1].explore_partition = true;
  // (Its only size is the floor: whatever worker 0 picks, its alternative is another or none.)
  o[1].model.max_partition_bytes = kMinPartitionBytes;
  run = RunJob(o);
  for (auto& r : run.outcomes) {
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_TRUE(r.value().partition_candidates.empty());
  }
}

TEST(StartupAgreementTest, WorkersThatDisagreeOnThePartitionSizeFailWithBothValues) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1), Defaults(2)};
  o[2].partition_bytes = 65536;
  o[2].partition_pinned = true;
  JobRun run = RunJob(o);
  EXPECT_TRUE(run.outcomes[0].ok());
  ASSERT_FALSE(run.outcomes[2].ok());
  const std::string& m = run.outcomes[2].status().message();
  EXPECT_NE(m.find("BYTEPS_PARTITION_BYTES=65536"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(run.outcomes[0].value().partition_bytes.value)), std::string::npos) << m;
  EXPECT_TRUE(!run.partitions[2].empty() && run.partitions[2].back() == kProbeCandidates.back())
      << "the worker that disagrees never applies a partition size";
}

TEST(StartupAgreementTest, TwoWorkersActingAsWorkerZeroIsANamedError) {
  std::vector<StartupOptions> o = {Defaults(0), Defaults(0)};
  JobRun run = RunJob(o);
  for (auto& r : run.outcomes) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("several workers act as worker 0"), std::string::npos)
        << r.status().message();
  }
}

TEST(StartupAgreementTest, NoWorkerZeroIsANamedError) {
  JobRun run = RunJob({Defaults(1), Defaults(2)});
  for (auto& r : run.outcomes) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("no worker acts as worker 0"), std::string::npos) << r.status().message();
  }
}

TEST(StartupAgreementTest, AFailedProbeIsTheError) {
  JobRun run = RunJob({Defaults(0), Defaults(1)}, "__byteps.tune.p1024");
  for (auto& r : run.outcomes) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("server 0 (fake) is gone"), std::string::npos);
  }
}

TEST(StartupAgreementTest, WorkerZeroProbesEachServerAloneAndEveryWorkerReportsIt) {
  // Only worker 0's wish counts: the others probe with it.
  std::vector<StartupOptions> o = {Defaults(0), Defaults(1), Defaults(2)};
  for (auto& x : o) x.num_servers = 3;
  o[0].probe_servers = true;
  JobRun run = RunJob(o);
  for (size_t w = 0; w < 3; ++w) {
    ASSERT_TRUE(run.outcomes[w].ok()) << w << ": " << run.outcomes[w].status().message();
    const StartupOutcome& out = run.outcomes[w].value();
    std::vector<std::string> want;
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 3; ++i) want.push_back(fmt::format("__byteps.tune.at{}.rtt@{}", s, s));
      for (int i = 0; i < kServerProbeRuns; ++i) want.push_back(fmt::format("__byteps.tune.at{}@{}", s, s));
    }
    EXPECT_EQ(run.pinned[w], want) << w;
    ASSERT_EQ(run.reported[w].size(), 3u) << w;
    for (double t : run.reported[w]) EXPECT_GT(t, 0) << w;
    EXPECT_EQ(out.placement.shares, (std::vector<double>{1.0 / 6, 2.0 / 6, 3.0 / 6})) << w;
    EXPECT_EQ(out.placement.summary, "placed from the probe");
    EXPECT_TRUE(out.server_probe_times.find("server 2 ") != std::string::npos) << out.server_probe_times;
    // The probe ran at the agreed partition size, before the exploration's agreement.
    EXPECT_EQ(run.partitions[w].back(), out.partition_bytes.value) << w;
  }
  const auto last_pinned = std::find(run.names.begin(), run.names.end(), "__byteps.tune.at2");
  EXPECT_LT(last_pinned - run.names.begin(),
            std::find(run.names.begin(), run.names.end(), "__byteps.tune.explore") - run.names.begin());
}

TEST(StartupAgreementTest, NoServerProbeUnlessWorkerZeroAsksWithAutotuneOn) {
  for (bool autotune : {true, false}) {
    std::vector<StartupOptions> o = {Defaults(0), Defaults(1)};
    for (auto& x : o) x.num_servers = 2;
    o[0].autotune = autotune;
    o[0].probe_servers = !autotune;  // asked for, but autotune is off
    o[1].probe_servers = true;       // not worker 0: does not count
    JobRun run = RunJob(o);
    for (size_t w = 0; w < 2; ++w) {
      ASSERT_TRUE(run.outcomes[w].ok()) << run.outcomes[w].status().message();
      EXPECT_TRUE(run.pinned[w].empty()) << w;
      EXPECT_TRUE(run.outcomes[w].value().placement.shares.empty()) << w;
    }
  }
}

}  // namespace
}  // namespace byteps::worker::tuning
