// The scheduler's server placement (protocol/server_placement.h): at the rendezvous it tells
// colocated servers from CPU-only ones by their registered hosts, sends every node each server's
// share, and its name service places partitions by those shares, the same plan for every asker
// (a reconnected worker asking again included) and in every partition generation;
// BYTEPS_ENABLE_MIXED_MODE=1 with a layout that cannot be mixed fails the job naming why.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol/error_frame.h"
#include "tests/unit/scheduler_fixture.h"

namespace byteps::cluster {
namespace {

class SchedulerPlacementTest : public SchedulerTest {
 protected:
  // n workers on 10.0.0.i; one server on each worker machine, then k on CPU machines 10.0.1.j.
  std::vector<Conn> StartMixed(int n, int k, SchedulerOptions o = {}, double worker_rate = 0, double cpu_rate = 0) {
    Start(n, n + k, 5, o);
    std::vector<Conn> conns;
    for (int i = 0; i < n + n + k; ++i) {
      const bool worker = i < n;
      RegisterRequest r = Request(worker ? "worker" : "server", -1, 100 + i);
      const int machine = worker ? i : i - n;
      r.host = machine < n ? "10.0.0." + std::to_string(machine + 1) : "10.0.1." + std::to_string(machine - n + 1);
      r.nic_rate = machine < n ? worker_rate : cpu_rate;
      conns.push_back(Register(r));
    }
    return conns;
  }

  // The name service's reply to `q` sent on c.
  protocol::NameReply Ask(const Conn& c, const protocol::NameRequest& q) {
    Header h = Hdr(Opcode::kNameRequest);
    h.request_id = 7;
    EXPECT_TRUE(c->Deliver(h, protocol::Encode(q)).ok());
    SentFrame f = Expect(c, Opcode::kNameReply);
    auto r = protocol::DecodeNameReply(f.payload);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : protocol::NameReply{};
  }

  // A worker's start-up probe report (NameRequest::probe_seconds) and the scheduler's answer.
  protocol::NameReply ReportProbe(const Conn& c, std::vector<double> seconds, uint64_t bytes) {
    protocol::NameRequest q;
    q.probe_seconds = std::move(seconds);
    q.probe_bytes = bytes;
    return Ask(c, q);
  }

  protocol::NamePlan AskName(const Conn& c, const std::string& name, uint32_t generation, uint64_t bytes,
                             uint64_t partition_bytes) {
    protocol::NameRequest q;
    q.name = name;
    q.generation = generation;
    q.sized = true;
    q.bytes = bytes;
    q.dtype = 0;
    q.partition_bytes = partition_bytes;
    const protocol::NameReply r = Ask(c, q);
    EXPECT_TRUE(r.error.empty()) << r.error;
    return r.plan;
  }
};

// Bytes per server of a plan.
std::vector<uint64_t> Loads(const protocol::NamePlan& p, int servers) {
  std::vector<uint64_t> loads(servers);
  for (const auto& part : p.partitions) loads[part.server] += part.length;
  return loads;
}

TEST_F(SchedulerPlacementTest, BothKindsOfServerShareTheBytesByTheOptimalSplit) {
  std::vector<Conn> conns = StartMixed(4, 2);
  std::vector<RegisterReply> replies;
  for (const Conn& c : conns) replies.push_back(Reply(c));
  for (const RegisterReply& r : replies) {
    ASSERT_EQ(r.shares.size(), 6u);
    EXPECT_EQ(r.shares, replies[0].shares);
    EXPECT_TRUE(Has(r.placement, "mixed placement")) << r.placement;
  }
  // n = 4, k = 2: colocated (4-2)/20 = 10% each, CPU 6/20 = 30% each.
  for (int s = 0; s < 6; ++s) EXPECT_NEAR(replies[0].shares[s], s < 4 ? 0.1 : 0.3, 1e-12);

  // 400 partitions of 1000 bytes: each server within one partition of its share, in both of the
  // tuner's generations (another partition size), and the same plan for a worker that asks again
  // (as one does after a reconnect) or asks second.
  constexpr uint64_t kBytes = 400'000;
  for (uint32_t generation : {0u, 1u}) {
    const uint64_t partition = generation == 0 ? 1000 : 4000;
    const protocol::NamePlan first = AskName(conns[0], "grad.w", generation, kBytes, partition);
    ASSERT_EQ(first.partitions.size(), kBytes / partition);
    const std::vector<uint64_t> loads = Loads(first, 6);
    for (int s = 0; s < 6; ++s) {
      const double want = (s < 4 ? 0.1 : 0.3) * kBytes;
      EXPECT_LE(std::abs(static_cast<double>(loads[s]) - want), static_cast<double>(partition))
          << "generation " << generation << " server " << s << ": " << loads[s] << " bytes, share " << want;
    }
    EXPECT_EQ(AskName(conns[3], "grad.w", generation, kBytes, partition), first);
    EXPECT_EQ(AskName(conns[0], "grad.w", generation, kBytes, partition), first);
  }
}

TEST_F(SchedulerPlacementTest, EqualSharesWhenMixedModeIsOff) {
  SchedulerOptions o;
  o.mixed_mode = protocol::MixedMode::kOff;
  std::vector<Conn> conns = StartMixed(4, 2, o);
  const RegisterReply r = Reply(conns[0]);
  ASSERT_EQ(r.shares.size(), 6u);
  for (double s : r.shares) EXPECT_DOUBLE_EQ(s, 1.0 / 6);
  const std::vector<uint64_t> loads = Loads(AskName(conns[0], "grad.w", 0, 600'000, 1000), 6);
  for (uint64_t l : loads) EXPECT_EQ(l, 100'000u);
}

TEST_F(SchedulerPlacementTest, FasterCpuMachinesGetMoreOfTheBytes) {
  std::vector<Conn> conns = StartMixed(4, 2, {}, /*worker_rate=*/1.25e8, /*cpu_rate=*/2.5e8);
  const RegisterReply r = Reply(conns[0]);
  ASSERT_EQ(r.shares.size(), 6u);
  EXPECT_GT(r.shares[4], 0.3);
  EXPECT_LT(r.shares[0], 0.1);
  EXPECT_TRUE(Has(r.placement, "NIC rates")) << r.placement;
}

TEST_F(SchedulerPlacementTest, MixedModeOnWithoutColocatedServersFailsTheJobSayingWhatToChange) {
  SchedulerOptions o;
  o.mixed_mode = protocol::MixedMode::kOn;
  Start(2, 2, 5, o);
  std::vector<Conn> conns;
  for (int i = 0; i < 4; ++i) {
    RegisterRequest r = Request(i < 2 ? "worker" : "server", -1, 100 + i);
    r.host = (i < 2 ? "10.0.0." : "10.0.1.") + std::to_string(i % 2 + 1);
    conns.push_back(Register(r));
  }
  for (const Conn& c : conns) {
    SentFrame f = Expect(c, Opcode::kJobError);
    EXPECT_TRUE(Has(f.payload, "BYTEPS_ENABLE_MIXED_MODE=1")) << f.payload;
    EXPECT_TRUE(Has(f.payload, "no server runs on a worker machine")) << f.payload;
  }
  EXPECT_FALSE(scheduler_->rendezvous_done());
  EXPECT_FALSE(scheduler_->Wait().ok());
}

TEST_F(SchedulerPlacementTest, TheStartUpProbesMeasuredRatesPlaceWhatIsPlannedFromThenOn) {
  std::vector<Conn> conns = StartMixed(4, 2);
  for (const Conn& c : conns) Reply(c);
  // Planned before the probe: the formula's split (10 % / 30 %).
  const protocol::NamePlan before = AskName(conns[0], "__byteps.tune.p256", 0, 400'000, 1000);
  // Worker machines move 3 x 1 MB in 30 ms (1e8 B/s), CPU machines 4 x 1 MB in 10 ms (4e8 B/s).
  const std::vector<double> seconds = {0.03, 0.03, 0.03, 0.03, 0.01, 0.01};
  const protocol::NameReply first = ReportProbe(conns[1], seconds, 1'000'000);
  ASSERT_TRUE(first.error.empty()) << first.error;
  ASSERT_EQ(first.shares.size(), 6u);
  EXPECT_GT(first.shares[4], 0.3);
  EXPECT_LT(first.shares[0], 0.1);
  EXPECT_TRUE(Has(first.placement, "measured NIC rates: CPU machines 0.4 GB/s, worker machines 0.1 GB/s"))
      << first.placement;
  // The first report decides: a later one (another worker's, other times) gets the same answer.
  const protocol::NameReply second = ReportProbe(conns[0], {0.01, 0.01, 0.01, 0.01, 0.01, 0.01}, 1'000'000);
  EXPECT_EQ(second.shares, first.shares);
  EXPECT_EQ(second.placement, first.placement);
  // What was planned before keeps its plan; what is planned now follows the measured shares.
  EXPECT_EQ(AskName(conns[2], "__byteps.tune.p256", 0, 400'000, 1000), before);
  const std::vector<uint64_t> loads = Loads(AskName(conns[0], "grad.w", 1, 400'000, 1000), 6);
  for (int s = 0; s < 6; ++s) {
    EXPECT_LE(std::abs(static_cast<double>(loads[s]) - first.shares[s] * 400'000), 1000.0) << "server " << s;
  }
}

TEST_F(SchedulerPlacementTest, AProbeReportThatDoesNotFitTheJobIsRefusedByName) {
  std::vector<Conn> conns = StartMixed(2, 1);
  for (const Conn& c : conns) Reply(c);
  const protocol::NameReply r = ReportProbe(conns[0], {0.01, 0.01}, 1'000'000);
  EXPECT_TRUE(Has(r.error, "reported 2 times of 1000000 bytes for 3 servers")) << r.error;
  EXPECT_TRUE(r.shares.empty());
  // The refusal decided nothing: a fitting report still places.
  const protocol::NameReply ok = ReportProbe(conns[0], {0.01, 0.01, 0.005}, 1'000'000);
  EXPECT_TRUE(ok.error.empty()) << ok.error;
  EXPECT_EQ(ok.shares.size(), 3u);
}

}  // namespace
}  // namespace byteps::cluster
