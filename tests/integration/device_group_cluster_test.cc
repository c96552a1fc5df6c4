// Device tensors of several processes of one host (BYTEPS_LOCAL_SIZE > 1) on the fake device,
// whose groups model NCCL's: the host's processes reduce over their device group (per PCIe switch,
// then across switches on the CPU), exactly; a group that cannot form fails within the start
// timeout naming the device and the local rank; processes that share a device form no group and
// reduce on the CPU through pinned staging; a collective whose peer never queues its part fails
// at the deadline, the group is aborted, and shutdown stays within its deadline.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>

#include "device/fake_device.h"
#include "device/group.h"
#include "tests/integration/cluster_harness.h"

namespace byteps::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Every engine (engines[g]: global rank g, host g / local_size) runs 3 rounds of 3 device tensors
// on its own fake device (fake_base + g; all on fake_base when `one_device`), declared in one order
// everywhere and enqueued in opposite orders on odd and even ranks; one tensor in place, one
// averaged. Sums and averages over every engine are exact.
void GroupRounds(std::vector<worker::Engine*> engines, int fake_base, bool one_device = false) {
  const int n = static_cast<int>(engines.size());
  const size_t counts[] = {5, 3000, 70001};
  std::vector<std::future<void>> fs;
  for (int r = 0; r < n; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r] {
      worker::Engine& e = *engines[r];
      for (int k = 0; k < 3; ++k) {
        auto key = e.Declare(fmt::format("grp.{}", k), std::make_pair(counts[k] * 4, DataType::kFloat32));
        ASSERT_TRUE(key.ok()) << key.status().ToString();
      }
      for (int round = 0; round < 3; ++round) {
        std::vector<std::vector<float>> in(3), out(3);
        std::vector<worker::HandleId> hs(3);
        for (int j = 0; j < 3; ++j) {
          const int k = r % 2 == 0 ? j : 2 - j;
          in[k].resize(counts[k]);
          out[k].assign(counts[k], -1.0f);
          for (size_t i = 0; i < counts[k]; ++i) in[k][i] = static_cast<float>((r + 1) * (i % 7) + round);
          worker::TensorRequest req;
          req.name = fmt::format("grp.{}", k);
          req.input = in[k].data();
          req.output = k == 1 ? in[k].data() : out[k].data();
          req.bytes = counts[k] * 4;
          req.average = k == 2;
          req.device = {device::Kind::kFake, one_device ? fake_base : fake_base + r, nullptr};
          auto h = e.Enqueue(req);
          ASSERT_TRUE(h.ok()) << h.status().ToString();
          hs[k] = *h;
        }
        for (int k = 0; k < 3; ++k) {
          Status st = e.Wait(hs[k], 20);
          ASSERT_TRUE(st.ok()) << st.ToString();
          e.Release(hs[k]);
          const auto& res = k == 1 ? in[k] : out[k];
          for (size_t i = 0; i < counts[k]; ++i) {
            const double sum = n * (n + 1) / 2.0 * (i % 7) + n * round;
            ASSERT_EQ(res[i], static_cast<float>(k == 2 ? sum / n : sum)) << k << "[" << i << "] rank " << r;
          }
        }
      }
    }));
  }
  for (auto& f : fs) f.get();
}

std::vector<worker::Engine*> EnginesOf(ClusterHarness& h, int count) {
  std::vector<worker::Engine*> out;
  for (int i = 0; i < count; ++i) out.push_back(&h.worker(i));
  return out;
}

// Processes of one host (engines here, BYTEPS_LOCAL_SIZE=local_size, one worker host, no servers).
std::vector<std::unique_ptr<worker::Engine>> StartLocalEngines(int local_size, int pcie_switch_size,
                                                               double start_timeout_s = 10,
                                                               double op_timeout_s = 300) {
  std::vector<std::unique_ptr<worker::Engine>> engines(local_size);
  std::vector<std::future<StatusOr<std::unique_ptr<worker::Engine>>>> starts;
  for (int r = 0; r < local_size; ++r) {
    config::Config c;
    c.role = config::Role::kWorker;
    c.num_workers = 1;
    c.local_size = local_size;
    c.local_rank = r;
    c.pcie_switch_size = pcie_switch_size;
    c.job_secret = fmt::format("group-test-{}-{}-{}", getpid(), local_size, pcie_switch_size);
    c.start_timeout_s = start_timeout_s;
    c.op_timeout_s = op_timeout_s;
    starts.push_back(std::async(std::launch::async, [c] { return worker::Engine::Start(c); }));
  }
  for (int r = 0; r < local_size; ++r) {
    auto e = starts[r].get();
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) engines[r] = std::move(e).value();
  }
  return engines;
}

void ShutdownEngines(std::vector<std::unique_ptr<worker::Engine>>& engines) {
  std::vector<std::future<Status>> downs;
  for (auto& e : engines) downs.push_back(std::async(std::launch::async, [&e] { return e->Shutdown(); }));
  for (auto& d : downs) EXPECT_TRUE(d.get().ok());
}

// Two processes of one host whose fake devices form a group: device tensors take group-reduce ->
// copy-in -> [average] -> copy-out -> group-broadcast on the root and group-reduce ->
// group-broadcast on the other.
TEST(DeviceClusterTest, AHostsDevicesReduceThroughTheirGroup) {
  device::EnableFakeGroups(true);
  auto engines = StartLocalEngines(2, 0);
  ASSERT_TRUE(engines[0] && engines[1]);
  GroupRounds({engines[0].get(), engines[1].get()}, 300);
  // The group moved the non-root's bytes: it copied nothing to or from the host (the shared-memory
  // path would have); the root copied its sums out and back for the average.
  EXPECT_EQ(device::FakeDevice::Get(300)->copies(), 0u);
  EXPECT_GT(device::FakeDevice::Get(301)->copies(), 0u);
  ShutdownEngines(engines);
  device::EnableFakeGroups(false);
}

// A device group that cannot form (here: the other process never uses a device tensor; with NCCL,
// an init failure) fails the call within the start timeout, naming the device and the local rank.
TEST(DeviceClusterTest, AGroupThatCannotFormFailsNamingTheDeviceAndTheLocalRank) {
  device::EnableFakeGroups(true);
  auto engines = StartLocalEngines(2, 0, 1.0);
  ASSERT_TRUE(engines[0] && engines[1]);
  std::vector<float> x(64, 1.0f);
  worker::TensorRequest req;
  req.name = "lonely";
  req.input = req.output = x.data();
  req.bytes = x.size() * 4;
  req.device = {device::Kind::kFake, 360, nullptr};
  const auto t0 = std::chrono::steady_clock::now();
  auto hd = engines[1]->Enqueue(req);  // the local root forms the group; local rank 0 never joins
  Status st = hd.ok() ? engines[1]->Wait(*hd, 10) : hd.status();
  ASSERT_FALSE(st.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s);
  EXPECT_NE(st.message().find("fake:360"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("BYTEPS_LOCAL_RANK=1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("lonely"), std::string::npos) << st.message();
  ShutdownEngines(engines);
  device::EnableFakeGroups(false);
}

// BYTEPS_PCIE_SWITCH_SIZE=2 on a host of 4: local ranks {0,1} and {2,3} each reduce in their own
// device group to their switch's root (1 and 3), which stage the switch's sum in host memory and
// add them on the CPU (the cross-switch circle, root 3), then everything flows back.
TEST(DeviceClusterTest, PcieSwitchesReduceInTheirGroupsThenAcrossOnTheCpu) {
  device::EnableFakeGroups(true);
  auto engines = StartLocalEngines(4, 2);
  for (auto& e : engines) ASSERT_TRUE(e);
  std::vector<worker::Engine*> raw;
  for (auto& e : engines) raw.push_back(e.get());
  GroupRounds(raw, 320);
  for (int r : {0, 2}) EXPECT_EQ(device::FakeDevice::Get(320 + r)->copies(), 0u) << "rank " << r;
  for (int r : {1, 3}) EXPECT_GT(device::FakeDevice::Get(320 + r)->copies(), 0u) << "switch root " << r;
  ShutdownEngines(engines);
  device::EnableFakeGroups(false);
}

// The distributed case: 2 worker hosts of 4 GPU processes each in 2 PCIe switches, 2 servers.
// Every process gets the sum over all 8; only the switches' roots touch host memory.
TEST(DeviceClusterTest, SeveralHostsWithSeveralDevicesEachSumExactly) {
  device::EnableFakeGroups(true);
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  o.local_size = 4;
  o.pcie_switch_size = 2;
  o.partition_bytes = 65536;  // several partitions per tensor
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  GroupRounds(EnginesOf(h, 8), 340);
  for (int g = 0; g < 8; ++g) {
    if (g % 2 == 0) EXPECT_EQ(device::FakeDevice::Get(340 + g)->copies(), 0u) << "rank " << g;
    else EXPECT_GT(device::FakeDevice::Get(340 + g)->copies(), 0u) << "switch root " << g;
  }
  EXPECT_TRUE(h.ShutdownAll().ok());
  device::EnableFakeGroups(false);
}

// Two processes of a host on one device: NCCL would refuse their group, so they form none (the
// local root says why, once) and reduce on the CPU through pinned staging, exactly: both copy
// every partition in and out (with a group the non-root would copy nothing).
TEST(DeviceClusterTest, ProcessesSharingADeviceFormNoGroupAndReduceOnTheCpu) {
  device::EnableFakeGroups(true);
  auto engines = StartLocalEngines(2, 0);
  ASSERT_TRUE(engines[0] && engines[1]);
  ::testing::internal::CaptureStderr();
  GroupRounds({engines[0].get(), engines[1].get()}, 380, /*one_device=*/true);
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string why = "local ranks 0 and 1 use the same device (fake:380): they form no device group";
  size_t said = 0;
  for (size_t at = log.find(why); at != std::string::npos; at = log.find(why, at + 1)) ++said;
  EXPECT_EQ(said, 1u) << log;
  // 3 tensors of one partition, 3 rounds, a copy in and a copy out on each of the two processes.
  EXPECT_EQ(device::FakeDevice::Get(380)->copies(), 2u * 3 * 3 * 2);
  ShutdownEngines(engines);
  device::EnableFakeGroups(false);
}

// NCCL's missing peer across processes: local rank 0's framework stream never reaches its
// push_pull (a gate holds it), so its part of the group's Reduce never comes and the local root's
// spins with no error. Both fail the tensor at BYTEPS_TIMEOUT naming it, the device and the local
// rank; the group is aborted (a later device tensor fails at once with the cause); and shutdown
// takes no longer than the deadline.
TEST(DeviceClusterTest, AMissingPeerFailsAtTheDeadlineAbortsTheGroupAndShutdownIsPrompt) {
  device::EnableFakeGroups(true);
  constexpr double kDeadline = 1.0;
  auto engines = StartLocalEngines(2, 0, 10, kDeadline);
  ASSERT_TRUE(engines[0] && engines[1]);
  GroupRounds({engines[0].get(), engines[1].get()}, 390);  // the group forms and works
  auto late = device::FakeDevice::Get(390);
  auto framework = late->CreateStream();
  ASSERT_TRUE(framework.ok());
  auto gate = late->Hold(*framework);
  std::vector<float> x0(1000, 1.0f), x1(1000, 2.0f);
  auto request = [](const char* name, std::vector<float>& x, int index, device::StreamHandle stream) {
    worker::TensorRequest r;
    r.name = name;
    r.input = r.output = x.data();
    r.bytes = x.size() * 4;
    r.device = {device::Kind::kFake, index, stream};
    return r;
  };
  const auto t0 = Clock::now();
  auto h0 = engines[0]->Enqueue(request("stuck", x0, 390, *framework));
  auto h1 = engines[1]->Enqueue(request("stuck", x1, 391, nullptr));
  ASSERT_TRUE(h0.ok() && h1.ok());
  const Status failed[] = {engines[0]->Wait(*h0, 10), engines[1]->Wait(*h1, 10)};
  EXPECT_GE(SecondsSince(t0), kDeadline);
  EXPECT_LT(SecondsSince(t0), kDeadline + 4);
  for (int r = 0; r < 2; ++r) {
    const Status& st = failed[r];
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << "local rank " << r << ": " << st.ToString();
    for (const std::string& part : {std::string("'stuck' partition 0"), std::string("was aborted"),
                                    fmt::format("fake:{}: the group's reduce on local rank {} of 2", 390 + r, r)}) {
      EXPECT_NE(st.message().find(part), std::string::npos) << part << " in " << st.message();
    }
  }
  auto after = engines[1]->Enqueue(request("after", x1, 391, nullptr));
  Status st = after.ok() ? engines[1]->Wait(*after, 10) : after.status();
  EXPECT_NE(st.message().find("push_pull of 'after': the device group of local rank 1 was aborted"),
            std::string::npos) << st.ToString();
  const auto t1 = Clock::now();
  ShutdownEngines(engines);
  engines.clear();
  EXPECT_LT(SecondsSince(t1), kDeadline + 2);
  gate->Open();
  late->DestroyStream(*framework);
  device::EnableFakeGroups(false);
}

}  // namespace
}  // namespace byteps::testing
