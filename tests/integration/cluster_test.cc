// End-to-end sums through the in-process cluster: exact results for many tensors of mixed sizes
// and dtypes, repeated rounds, out-of-order arrival, and failures that must not hang.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <thread>
#include <numeric>
#include <random>

#include "protocol/partitioner.h"
#include "tests/integration/cluster_harness.h"
#include "tests/support/typed_values.h"

namespace byteps::testing {
namespace {

// How long a test waits for an event that normally takes milliseconds.
constexpr std::chrono::seconds kWait{20};

struct Case {
  std::string name;
  DataType dtype;
  size_t count;
};

// Worker w's value for element i in round r: small integers, so every sum is exact in every dtype.
double Value(int w, size_t i, int r) { return static_cast<double>((w + 1) * ((i + r) % 5) + (r % 3)); }

std::vector<Case> MixedCases() {
  std::vector<Case> cases;
  const DataType all[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                          DataType::kInt32,   DataType::kInt64,   DataType::kInt8,    DataType::kUint8};
  const size_t counts[] = {0, 1, 3, 17, 1000, 4097, 70001};
  int k = 0;
  for (DataType dt : all)
    for (size_t c : counts) cases.push_back({"t" + std::to_string(k++) + "." + DataTypeName(dt), dt, c});
  return cases;
}

// Called by worker w's thread once it has enqueued round r (its partitions are in flight).
using InFlightHook = std::function<void(int w, int r)>;

// Every worker runs `rounds` rounds over all cases, enqueueing in its own shuffled order.
void RunRounds(ClusterHarness& h, const std::vector<Case>& cases, int rounds, bool average,
               const InFlightHook& in_flight = nullptr) {
  const int n = h.num_workers();
  std::vector<std::future<void>> fs;
  for (int w = 0; w < n; ++w) {
    fs.push_back(std::async(std::launch::async, [&, w] {
      worker::Engine& e = h.worker(w);
      for (const Case& c : cases) {
        auto k = e.Declare(c.name, std::make_pair(c.count * DataTypeSize(c.dtype), c.dtype));
        ASSERT_TRUE(k.ok()) << k.status().ToString();
      }
      std::mt19937 rng(1234 + w);
      for (int r = 0; r < rounds; ++r) {
        std::vector<size_t> order(cases.size());
        std::iota(order.begin(), order.end(), 0);
        std::shuffle(order.begin(), order.end(), rng);
        std::vector<std::vector<uint8_t>> in(cases.size()), out(cases.size());
        std::vector<worker::HandleId> hs(cases.size());
        for (size_t idx : order) {
          const Case& c = cases[idx];
          size_t bytes = c.count * DataTypeSize(c.dtype);
          in[idx].assign(bytes, 0);
          out[idx].assign(bytes, 0xff);
          for (size_t i = 0; i < c.count; ++i) StoreValue(in[idx].data(), c.dtype, i, Value(w, i, r));
          worker::TensorRequest req;
          req.name = c.name;
          req.input = in[idx].data();
          req.output = (idx % 2) ? in[idx].data() : out[idx].data();  // half in place
          req.bytes = bytes;
          req.dtype = c.dtype;
          req.average = average;
          req.priority = static_cast<int>(idx % 3);
          auto hd = e.Enqueue(req);
          ASSERT_TRUE(hd.ok()) << hd.status().ToString();
          hs[idx] = hd.value();
        }
        if (in_flight) in_flight(w, r);
        for (size_t idx = 0; idx < cases.size(); ++idx) {
          Status st = e.Wait(hs[idx], 20);
          ASSERT_TRUE(st.ok()) << cases[idx].name << ": " << st.ToString();
          e.Release(hs[idx]);
          const Case& c = cases[idx];
          const auto& res = (idx % 2) ? in[idx] : out[idx];
          for (size_t i = 0; i < c.count; ++i) {
            double sum = 0;
            for (int v = 0; v < n; ++v) sum += Value(v, i, r);
            double expect = sum;
            if (average) expect = IsFloating(c.dtype) ? sum / n : std::floor(sum / n);
            double got = LoadValue(res.data(), c.dtype, i);
            if (c.dtype == DataType::kFloat16 || c.dtype == DataType::kBFloat16) {
              ASSERT_NEAR(got, expect, std::abs(expect) * 0.01 + 1e-3) << c.name << "[" << i << "] round " << r;
            } else if (c.dtype == DataType::kFloat32 && average) {
              ASSERT_NEAR(got, expect, 1e-5 * std::abs(expect)) << c.name << "[" << i << "] round " << r;
            } else {
              ASSERT_EQ(got, expect) << c.name << "[" << i << "] round " << r << " worker " << w;
            }
          }
        }
      }
    }));
  }
  for (auto& f : fs) f.get();
}

// A job of `o`'s shape runs `rounds` rounds of MixedCases and shuts down cleanly.
void RunMixedJob(const HarnessOptions& o, int rounds, bool average) {
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  RunRounds(h, MixedCases(), rounds, average);
  EXPECT_TRUE(h.ShutdownAll().ok());
}

TEST(ClusterTest, ExactSumsMixedSizesAndDtypes) {
  HarnessOptions o;
  o.num_workers = 3;
  o.num_servers = 2;
  o.partition_bytes = 8192;  // many partitions per tensor
  RunMixedJob(o, 4, /*average=*/false);
}

TEST(ClusterTest, AverageWithCreditAndOneServer) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  o.partition_bytes = 4096;
  o.scheduling_credit = 2;
  o.connections_per_peer = 1;
  RunMixedJob(o, 3, /*average=*/true);
}

// Start-up tuning opens more connections per server where one connection's window cannot cover
// the link's bandwidth-delay product (docs/performance.md): 10 ms each way through the relay and
// 64 KiB socket buffers ask for the most (16), and the sums over all of them stay exact.
TEST(ClusterTest, ALongRoundTripOpensMoreConnectionsPerServer) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  o.relay_data = true;
  o.relay_delay_ms = 10;
  o.socket_buffer_bytes = 64 * 1024;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  // Each worker connected with the configured 2, then widened: B R / W = B * 20 ms / 64 KiB is
  // over 2 for any B above 6.6 MB/s.
  // (The relay counts a connection on its own thread, after the worker's connect returned: wait.)
  EXPECT_TRUE(h.relay(0).WaitAccepted(2 * o.connections_per_peer + 1, kWait)) << h.relay(0).accepted();
  RunRounds(h, MixedCases(), 2, /*average=*/false);
  EXPECT_TRUE(h.ShutdownAll().ok());
}

TEST(ClusterTest, SameTensorQueuedTwiceKeepsRoundsApart) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  o.partition_bytes = 1024;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<std::future<void>> fs;
  for (int w = 0; w < 2; ++w) {
    fs.push_back(std::async(std::launch::async, [&, w] {
      worker::Engine& e = h.worker(w);
      const size_t n = 5000;
      std::vector<std::vector<float>> bufs(8, std::vector<float>(n));
      std::vector<worker::HandleId> hs;
      for (int r = 0; r < 8; ++r) {  // 8 rounds of one name in flight at once
        std::fill(bufs[r].begin(), bufs[r].end(), static_cast<float>((w + 1) * (r + 1)));
        worker::TensorRequest req{"same", bufs[r].data(), bufs[r].data(), n * 4, DataType::kFloat32, false, 0};
        auto hd = e.Enqueue(req);
        ASSERT_TRUE(hd.ok());
        hs.push_back(hd.value());
      }
      for (int r = 0; r < 8; ++r) {
        ASSERT_TRUE(e.Wait(hs[r], 20).ok());
        EXPECT_EQ(bufs[r][0], 3.0f * (r + 1));
        EXPECT_EQ(bufs[r][n - 1], 3.0f * (r + 1));
      }
    }));
  }
  for (auto& f : fs) f.get();
  EXPECT_TRUE(h.ShutdownAll().ok());
}

TEST(ClusterTest, SizeMismatchAcrossWorkersFailsEveryoneNamingTheTensor) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<float> a(100, 1), b(200, 1);
  worker::TensorRequest r0{"grad.w", a.data(), a.data(), a.size() * 4, DataType::kFloat32, false, 0};
  worker::TensorRequest r1{"grad.w", b.data(), b.data(), b.size() * 4, DataType::kFloat32, false, 0};
  auto h0 = h.worker(0).Enqueue(r0);
  ASSERT_TRUE(h0.ok());
  Status s0 = h.worker(0).Wait(h0.value(), 1.0);  // alone: still waiting for worker 1
  auto h1 = h.worker(1).Enqueue(r1);
  ASSERT_TRUE(h1.ok());
  Status s1 = h.worker(1).Wait(h1.value(), 10);
  if (s0.code() == StatusCode::kDeadlineExceeded) s0 = h.worker(0).Wait(h0.value(), 10);
  ASSERT_FALSE(s0.ok());
  ASSERT_FALSE(s1.ok());
  EXPECT_NE(s0.message().find("grad.w"), std::string::npos) << s0.message();
  EXPECT_NE(s1.message().find("grad.w"), std::string::npos) << s1.message();
  EXPECT_NE(s1.message().find("400"), std::string::npos) << s1.message();
}

TEST(ClusterTest, DeadWorkerFailsTheOthersNamingIt) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  o.heartbeat_timeout_s = 2;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<float> a(1000, 1);
  worker::TensorRequest r{"x", a.data(), a.data(), a.size() * 4, DataType::kFloat32, false, 0};
  h.KillWorker(1);  // closes its connections without Finish
  auto hd = h.worker(0).Enqueue(r);
  Status st = hd.ok() ? h.worker(0).Wait(hd.value(), 10) : hd.status();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().find("did not complete"), std::string::npos) << "timed out instead: " << st.message();
  EXPECT_NE(st.message().find("worker 1"), std::string::npos) << st.message();
}

// Names are order-free and scoped to operations in flight: each worker's 8 threads push_pull a
// tensor of their own, in another order on each worker and with no declarations; a name used
// again at another size and dtype takes a new key (exact sums), the servers free the old one, and
// a reuse at another size while the name is in flight is refused naming it.
TEST(ClusterTest, OrderFreeNamesAndReuseAtANewSize) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  o.partition_bytes = 1024;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  constexpr int kThreads = 8;
  std::vector<std::future<void>> fs;
  for (int w = 0; w < 2; ++w) {
    for (int t = 0; t < kThreads; ++t) {
      fs.push_back(std::async(std::launch::async, [&, w, t] {
        const int mine = w == 0 ? t : kThreads - 1 - t;  // the other order on worker 1
        worker::Engine& e = h.worker(w);
        const size_t n = 300 + 97 * mine;
        std::vector<float> buf(n);
        for (int r = 0; r < 3; ++r) {
          std::fill(buf.begin(), buf.end(), static_cast<float>((w + 1) * (mine + r)));
          worker::TensorRequest req{"thread." + std::to_string(mine), buf.data(), buf.data(), n * 4,
                                    DataType::kFloat32, false, 0};
          auto hd = e.Enqueue(req);
          ASSERT_TRUE(hd.ok()) << hd.status().ToString();
          ASSERT_TRUE(e.Wait(hd.value(), 20).ok()) << req.name;
          e.Release(hd.value());
          ASSERT_EQ(buf[0], 3.0f * (mine + r)) << req.name;
          ASSERT_EQ(buf[n - 1], 3.0f * (mine + r)) << req.name;
        }
      }));
    }
  }
  for (auto& f : fs) f.get();
  size_t held = h.server(0).keys_held() + h.server(1).keys_held();
  EXPECT_EQ(h.server(0).keys_freed() + h.server(1).keys_freed(), 0u);

  // "thread.0" again at another size and dtype on both workers: a new key, exact results. Worker
  // 0's is in flight until worker 1 pushes: meanwhile another size is refused, naming the tensor.
  std::vector<std::vector<int64_t>> v(2, std::vector<int64_t>(5000));
  std::vector<worker::HandleId> hs;
  for (int w = 0; w < 2; ++w) {
    std::fill(v[w].begin(), v[w].end(), w + 1);
    worker::TensorRequest req{"thread.0", v[w].data(), v[w].data(), 5000 * 8, DataType::kInt64, false, 0};
    auto hd = h.worker(w).Enqueue(req);
    ASSERT_TRUE(hd.ok()) << hd.status().ToString();
    hs.push_back(hd.value());
    if (w == 1) break;
    std::vector<int64_t> other(10);
    worker::TensorRequest bad{"thread.0", other.data(), other.data(), 80, DataType::kInt64, false, 0};
    auto refused = h.worker(0).Enqueue(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("'thread.0'"), std::string::npos) << refused.status().message();
  }
  for (int w = 0; w < 2; ++w) {
    ASSERT_TRUE(h.worker(w).Wait(hs[w], 20).ok());
    EXPECT_EQ(v[w][0], 3);
    EXPECT_EQ(v[w][4999], 3);
  }
  // The old incarnation's partitions (300 floats) are freed once both workers released them; the
  // release goes out with the next push (here: the new incarnation's).
  const size_t partition = h.worker(0).partition_bytes();  // the start-up tuning may have moved it
  const size_t old_parts = protocol::SplitIntoPartitions(300 * 4, partition, 4).size();
  const size_t new_parts = protocol::SplitIntoPartitions(5000 * 8, partition, 8).size();
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (h.server(0).keys_freed() + h.server(1).keys_freed() < old_parts &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(h.server(0).keys_freed() + h.server(1).keys_freed(), old_parts);
  EXPECT_EQ(h.server(0).keys_held() + h.server(1).keys_held(), held - old_parts + new_parts);
  EXPECT_TRUE(h.ShutdownAll().ok());
}

// Allgather through the servers (op "concat"): each worker pushes only its slice, of a different
// size on each worker and spanning partition boundaries; every worker gets the concatenation in
// rank order, round after round. A broadcast is the same with only the root's slice.
TEST(ClusterTest, AllgatherAndBroadcastConcatenateOnTheServers) {
  HarnessOptions o;
  o.num_workers = 3;
  o.num_servers = 2;
  o.partition_bytes = 64 * 1024;  // slices straddle partitions
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  const int n = o.num_workers;
  std::vector<size_t> rows = {10007, 0, 30011};  // worker 1 contributes nothing
  size_t total = 0;
  for (size_t r : rows) total += r;
  auto value = [](int w, size_t i, int round) { return static_cast<int64_t>(w) * 1000003 + static_cast<int64_t>(i) + round; };
  std::vector<std::future<void>> fs;
  for (int w = 0; w < n; ++w) {
    fs.push_back(std::async(std::launch::async, [&, w] {
      worker::Engine& e = h.worker(w);
      size_t offset = 0;
      for (int v = 0; v < w; ++v) offset += rows[v];
      for (int round = 0; round < 3; ++round) {
        std::vector<int64_t> mine(rows[w]), out(total, -1);
        for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(w, i, round);
        worker::TensorRequest r;
        r.name = "gather";
        r.input = mine.data();
        r.output = out.data();
        r.bytes = total * 8;
        r.dtype = DataType::kInt64;
        r.op = worker::ReduceOp::kConcat;
        r.slice_offset = offset * 8;
        r.slice_bytes = rows[w] * 8;
        auto hd = e.Enqueue(r);
        ASSERT_TRUE(hd.ok()) << hd.status().ToString();
        ASSERT_TRUE(e.Wait(hd.value(), 20).ok());
        e.Release(hd.value());
        size_t at = 0;
        for (int v = 0; v < n; ++v)
          for (size_t i = 0; i < rows[v]; ++i, ++at) ASSERT_EQ(out[at], value(v, i, round)) << "worker " << w << " at " << at;
        // Broadcast from worker 2 in place: the others' buffers start as garbage.
        std::vector<int64_t> b(50000, w == 2 ? 7 + round : -99);
        worker::TensorRequest br;
        br.name = "bcast";
        br.input = br.output = b.data();
        br.bytes = b.size() * 8;
        br.dtype = DataType::kInt64;
        br.op = worker::ReduceOp::kConcat;
        br.slice_bytes = w == 2 ? br.bytes : 0;
        auto hb = e.Enqueue(br);
        ASSERT_TRUE(hb.ok()) << hb.status().ToString();
        ASSERT_TRUE(e.Wait(hb.value(), 20).ok());
        e.Release(hb.value());
        for (int64_t x : b) ASSERT_EQ(x, 7 + round) << "worker " << w;
      }
      // A name is scoped to its operations: "gather" used for a sum now is a new key (a sum).
      std::vector<int64_t> s(total, 1);
      worker::TensorRequest sr{"gather", s.data(), s.data(), total * 8, DataType::kInt64, false, 0};
      auto hs = e.Enqueue(sr);
      Status st = hs.ok() ? e.Wait(hs.value(), 20) : hs.status();
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ(s[0], n);
      EXPECT_EQ(s[total - 1], n);
    }));
  }
  for (auto& f : fs) f.get();
  EXPECT_TRUE(h.ShutdownAll().ok());
}

// Reconnect-and-resend: data connections reset mid-run (by a relay between workers and servers)
// are re-established and the partitions in flight re-sent; every sum stays exact.
TEST(ClusterFaultTest, DataConnectionResetsKeepSumsExact) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  o.partition_bytes = 64 * 1024;  // many partitions in flight when the resets hit
  o.relay_data = true;
  // Drops of one connection that follow each other within BYTEPS_RECONNECT_TIMEOUT are one outage,
  // which must end within it: the resets below span six rounds, several seconds under sanitizers.
  o.reconnect_timeout_s = 30;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  // Worker 0 resets a server's connections right after enqueueing each of the first six rounds,
  // while that round's partitions are in flight.
  RunRounds(h, MixedCases(), 12, /*average=*/false, [&](int w, int r) {
    if (w == 0 && r < 6) h.relay(r % 2).ResetAll();
  });
  EXPECT_GT(h.relay(0).resets() + h.relay(1).resets(), 0);
  EXPECT_TRUE(h.ShutdownAll().ok());
}

// A scheduler connection that drops is re-established (the node rejoins); the job goes on and
// ends cleanly.
TEST(ClusterFaultTest, SchedulerConnectionResetRejoins) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  o.relay_scheduler = true;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  RunRounds(h, MixedCases(), 1, false);
  for (int i = 0; i < 2; ++i) {  // twice, while heartbeats flow: the second reset hits rejoined nodes
    const int before = h.scheduler_relay().accepted();
    h.scheduler_relay().ResetAll();
    // Every node (two workers, one server) reconnects through the relay to rejoin.
    ASSERT_TRUE(h.scheduler_relay().WaitAccepted(before + 3, kWait)) << "the nodes did not reconnect";
  }
  RunRounds(h, MixedCases(), 2, false);
  EXPECT_GT(h.scheduler_relay().resets(), 0);
  Status st = h.ShutdownAll();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Shutting down while a data connection is being re-established (the server unreachable for
// now) is clean: the reconnect thread stops, nothing touches the released cluster client. The
// shutdown comes at different points of the reconnect: right after the reset, and after the
// worker's first, second and fourth refused attempt.
TEST(ClusterFaultTest, ShutdownDuringAReconnectIsClean) {
  for (int attempts : {0, 1, 2, 4}) {
    SCOPED_TRACE(fmt::format("shutdown after {} refused reconnect attempts", attempts));
    HarnessOptions o;
    o.num_workers = 1;
    o.num_servers = 1;
    o.relay_data = true;
    ClusterHarness h(o);
    ASSERT_TRUE(h.StartWorkers().ok());
    RunRounds(h, {{"t", DataType::kFloat32, 1000}}, 1, false);
    h.relay(0).Refuse(true);
    h.relay(0).ResetAll();
    ASSERT_TRUE(h.relay(0).WaitRefused(attempts, kWait));
    auto t0 = std::chrono::steady_clock::now();
    Status st = h.ShutdownAll();
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  }
}

// A server that stays unreachable fails every operation within BYTEPS_RECONNECT_TIMEOUT, naming
// it, instead of hanging until BYTEPS_TIMEOUT.
TEST(ClusterFaultTest, UnreachableServerFailsWithinTheReconnectTimeout) {
  HarnessOptions o;
  o.num_workers = 1;
  o.num_servers = 2;
  o.relay_data = true;
  o.reconnect_timeout_s = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  h.relay(1).Refuse(true);
  h.relay(1).ResetAll();
  // 16 MiB: 5 partitions, byte-balanced over both servers whatever the start-up tuning left on them.
  std::vector<float> a(4 << 20, 1.0f);
  worker::TensorRequest r{"big", a.data(), a.data(), a.size() * 4, DataType::kFloat32, false, 0};
  auto t0 = std::chrono::steady_clock::now();
  Status st;
  for (int i = 0; i < 5 && st.ok(); ++i) {  // the first may still complete if it raced the reset
    auto hd = h.worker(0).Enqueue(r);
    st = hd.ok() ? h.worker(0).Wait(hd.value(), 15) : hd.status();
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(st.ok());
  // Ranks follow arrival order, so name the server by the address workers dial (its relay).
  auto names = [&](int rank) {
    return st.message().find(fmt::format("server {} (127.0.0.1:{}", rank, h.relay(1).port())) != std::string::npos;
  };
  EXPECT_TRUE(names(0) || names(1)) << st.message();
  EXPECT_NE(st.message().find("BYTEPS_RECONNECT_TIMEOUT"), std::string::npos) << st.message();
  EXPECT_LT(took, 10.0) << st.message();  // far below BYTEPS_TIMEOUT (20 s) even under sanitizers
}

}  // namespace
}  // namespace byteps::testing
