// End-to-end sums through the in-process cluster: exact results for many tensors of mixed sizes
// and dtypes, repeated rounds, out-of-order arrival, and failures that must not hang.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "common/half.h"
#include "tests/integration/cluster_harness.h"

namespace byteps::testing {
namespace {

struct Case {
  std::string name;
  DataType dtype;
  size_t count;
};

// Worker w's value for element i in round r: small integers, so every sum is exact in every dtype.
double Value(int w, size_t i, int r) { return static_cast<double>((w + 1) * ((i + r) % 5) + (r % 3)); }

void Fill(std::vector<uint8_t>& buf, DataType dt, size_t n, int w, int r) {
  for (size_t i = 0; i < n; ++i) {
    double v = Value(w, i, r);
    switch (dt) {
      case DataType::kFloat32: reinterpret_cast<float*>(buf.data())[i] = static_cast<float>(v); break;
      case DataType::kFloat64: reinterpret_cast<double*>(buf.data())[i] = v; break;
      case DataType::kFloat16: reinterpret_cast<uint16_t*>(buf.data())[i] = FloatToHalf(static_cast<float>(v)); break;
      case DataType::kBFloat16: reinterpret_cast<uint16_t*>(buf.data())[i] = FloatToBFloat16(static_cast<float>(v)); break;
      case DataType::kInt32: reinterpret_cast<int32_t*>(buf.data())[i] = static_cast<int32_t>(v); break;
      case DataType::kInt64: reinterpret_cast<int64_t*>(buf.data())[i] = static_cast<int64_t>(v); break;
      case DataType::kInt8: reinterpret_cast<int8_t*>(buf.data())[i] = static_cast<int8_t>(v); break;
      case DataType::kUint8: reinterpret_cast<uint8_t*>(buf.data())[i] = static_cast<uint8_t>(v); break;
    }
  }
}

double Read(const std::vector<uint8_t>& buf, DataType dt, size_t i) {
  switch (dt) {
    case DataType::kFloat32: return reinterpret_cast<const float*>(buf.data())[i];
    case DataType::kFloat64: return reinterpret_cast<const double*>(buf.data())[i];
    case DataType::kFloat16: return HalfToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(reinterpret_cast<const uint16_t*>(buf.data())[i]);
    case DataType::kInt32: return reinterpret_cast<const int32_t*>(buf.data())[i];
    case DataType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(buf.data())[i]);
    case DataType::kInt8: return reinterpret_cast<const int8_t*>(buf.data())[i];
    case DataType::kUint8: return reinterpret_cast<const uint8_t*>(buf.data())[i];
  }
  return 0;
}

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

// Every worker runs `rounds` rounds over all cases, enqueueing in its own shuffled order.
void RunRounds(ClusterHarness& h, const std::vector<Case>& cases, int rounds, bool average) {
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
          Fill(in[idx], c.dtype, c.count, w, r);
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
            double got = Read(res, c.dtype, i);
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

TEST(ClusterTest, ExactSumsMixedSizesAndDtypes) {
  HarnessOptions o;
  o.num_workers = 3;
  o.num_servers = 2;
  o.partition_bytes = 8192;  // many partitions per tensor
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  RunRounds(h, MixedCases(), 4, /*average=*/false);
  EXPECT_TRUE(h.ShutdownAll().ok());
}

TEST(ClusterTest, AverageWithCreditAndOneServer) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  o.partition_bytes = 4096;
  o.scheduling_credit = 2;
  o.connections_per_peer = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  RunRounds(h, MixedCases(), 3, /*average=*/true);
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

TEST(ClusterTest, TensorReusedWithOtherSizeOnOneWorkerIsRejected) {
  HarnessOptions o;
  o.num_workers = 1;
  o.num_servers = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<float> a(10, 1), b(20, 1);
  worker::TensorRequest r{"x", a.data(), a.data(), 40, DataType::kFloat32, false, 0};
  auto h1 = h.worker(0).Enqueue(r);
  ASSERT_TRUE(h1.ok());
  ASSERT_TRUE(h.worker(0).Wait(h1.value(), 10).ok());
  EXPECT_EQ(a[3], 1.0f);
  r.input = r.output = b.data();
  r.bytes = 80;
  auto h2 = h.worker(0).Enqueue(r);
  ASSERT_FALSE(h2.ok());
  EXPECT_NE(h2.status().message().find("'x'"), std::string::npos);
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
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::atomic<bool> running{true};
  std::thread chaos([&] {
    for (int i = 0; i < 6 && running; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      h.relay(i % 2).ResetAll();
    }
  });
  RunRounds(h, MixedCases(), 12, /*average=*/false);
  running = false;
  chaos.join();
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
  h.scheduler_relay().ResetAll();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  h.scheduler_relay().ResetAll();  // twice, while heartbeats flow
  RunRounds(h, MixedCases(), 2, false);
  EXPECT_GT(h.scheduler_relay().resets(), 0);
  Status st = h.ShutdownAll();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Shutting down while a data connection is being re-established (the server unreachable for
// now) is clean: the reconnect thread stops, nothing touches the released cluster client.
TEST(ClusterFaultTest, ShutdownDuringAReconnectIsClean) {
  for (int delay_ms : {0, 5, 20, 60, 150}) {
    SCOPED_TRACE(fmt::format("shutdown {} ms after the reset", delay_ms));
    HarnessOptions o;
    o.num_workers = 1;
    o.num_servers = 1;
    o.relay_data = true;
    ClusterHarness h(o);
    ASSERT_TRUE(h.StartWorkers().ok());
    RunRounds(h, {{"t", DataType::kFloat32, 1000}}, 1, false);
    h.relay(0).Refuse(true);
    h.relay(0).ResetAll();
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    auto t0 = std::chrono::steady_clock::now();
    Status st = h.ShutdownAll();
    EXPECT_TRUE(st.ok()) << st.ToString();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  }
}

// Registers raw RegisterRequests with a scheduler and records its replies per connection.
class RegistrationProbe : public transport::Handler {
 public:
  StatusOr<transport::RecvBuffer> OnHeader(transport::Connection&, const protocol::Header&) override {
    return transport::RecvBuffer{};
  }
  void OnFrame(transport::Connection& c, const protocol::Header& h, transport::RecvBuffer b) override {
    if (h.opcode != protocol::Opcode::kRegisterReply) return;
    auto r = protocol::DecodeRegisterReply(std::string(reinterpret_cast<const char*>(b.data), b.size));
    std::lock_guard<std::mutex> lock(mu_);
    replies_[&c] = r.ok() ? r.value() : protocol::RegisterReply{.error = r.status().message(), .rank = -1, .nodes = {}};
    cv_.notify_all();
  }
  void OnClose(transport::Connection&, const Status&) override {}
  // The reply on `c`, waiting up to `wait`; nullopt if none came.
  std::optional<protocol::RegisterReply> Reply(transport::Connection* c,
                                               std::chrono::milliseconds wait = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, wait, [&] { return replies_.count(c) > 0; });
    auto it = replies_.find(c);
    return it == replies_.end() ? std::nullopt : std::optional(it->second);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<transport::Connection*, protocol::RegisterReply> replies_;
};

// A node whose registration is sent again on a new connection before the scheduler saw the old
// one close (a reset on the way) holds one slot, not two, and gets its rank on the new connection.
TEST(ClusterFaultTest, RegisteringAgainReplacesTheStaleRegistration) {
  cluster::SchedulerOptions so;
  so.host = "127.0.0.1";
  so.num_workers = 2;
  so.num_servers = 0;
  auto sched = cluster::Scheduler::Start(so);
  ASSERT_TRUE(sched.ok()) << sched.status().ToString();
  RegistrationProbe probe;
  auto transport = transport::CreateTcpTransport({});
  auto send_register = [&](const std::string& instance) {  // every node in this process: one pid
    auto c = transport->Connect("127.0.0.1", sched.value()->port(), &probe, 5.0);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    protocol::RegisterRequest r{.role = "worker", .host = "127.0.0.1", .pid = 4242, .num_workers = 2,
                                .num_servers = 0, .job_secret_hash = "", .instance = instance};
    protocol::Header h;
    h.opcode = protocol::Opcode::kRegister;
    EXPECT_TRUE(c.value()->SendCopy(h, protocol::Encode(r)).ok());
    return c.value();
  };
  auto stale = send_register("node-a");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // registered; the rendezvous waits
  auto again = send_register("node-a");  // the same node again, its old connection still open
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto other = send_register("node-b");  // another node of the same process
  auto mine = probe.Reply(again.get());
  auto theirs = probe.Reply(other.get());
  ASSERT_TRUE(mine && theirs) << "the rendezvous did not complete";
  EXPECT_EQ(mine->error, "");
  EXPECT_EQ(theirs->error, "");
  EXPECT_EQ(mine->nodes.size(), 2u);
  EXPECT_NE(mine->rank, theirs->rank) << "node-a holds both worker slots";
  EXPECT_FALSE(probe.Reply(stale.get(), std::chrono::milliseconds(300)).has_value())
      << "the stale connection was answered";
  sched.value()->Stop(Aborted("test over"));
  transport->Shutdown();
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
  std::vector<float> a(1 << 20, 1.0f);  // 4 MiB: partitions on both servers
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
