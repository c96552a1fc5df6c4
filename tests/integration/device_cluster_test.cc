// Device tensors through the whole job, on the fake device (real asynchrony on stream threads):
// copy-in waits for the framework's stream on the device, never on the CPU; sums are exact for
// every dtype, in place and out of place, averaged or not; copy-out leaves the framework's stream
// waiting for the result; and a CUDA tensor in a build or on a machine without CUDA is refused
// with a named error.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <unistd.h>

#include "device/fake_device.h"
#include "tests/integration/cluster_harness.h"
#include "tests/support/typed_values.h"

namespace byteps::testing {
namespace {

using namespace std::chrono_literals;
constexpr std::chrono::seconds kWait{20};

double Value(int w, size_t i, int r) { return static_cast<double>((w + 1) * ((i + r) % 5) + (r % 3)); }

struct DeviceCase {
  DataType dtype;
  size_t count;
  bool in_place;
  bool average;
};

std::vector<DeviceCase> Cases() {
  std::vector<DeviceCase> cases;
  const DataType dts[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUint8,
                          DataType::kBFloat16, DataType::kFloat64};
  const size_t counts[] = {1, 4097, 70001};
  int k = 0;
  for (DataType dt : dts)
    for (size_t c : counts) {
      cases.push_back({dt, c, k % 2 == 0, IsFloating(dt) && k % 3 == 0});
      ++k;
    }
  return cases;
}

// One worker's rounds: every tensor is written by a "kernel" on the framework's stream, which a
// closed gate holds back while the push_pulls are enqueued and polled: nothing may finish (copy-in
// waits for the kernel) and nothing may block (the calls return with the gate still closed).
void DeviceRounds(worker::Engine& e, int w, int n, int rounds) {
  auto fake = device::FakeDevice::Get(100 + w);
  fake->SetOptions({0.0002, 4e9});  // each copy takes a little while: completions really come later
  auto framework = fake->CreateStream();
  ASSERT_TRUE(framework.ok());
  const auto cases = Cases();
  for (int r = 0; r < rounds; ++r) {
    std::vector<void*> in(cases.size()), out(cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      const size_t bytes = cases[k].count * DataTypeSize(cases[k].dtype);
      in[k] = fake->AllocDevice(bytes).value();
      out[k] = cases[k].in_place ? in[k] : fake->AllocDevice(bytes).value();
      std::memset(in[k], 0, bytes);  // the kernel behind the gate writes the real values
    }
    auto gate = fake->Hold(*framework);
    ASSERT_TRUE(fake->Launch(*framework, [&, r] {
      for (size_t k = 0; k < cases.size(); ++k)
        for (size_t i = 0; i < cases[k].count; ++i) StoreValue(in[k], cases[k].dtype, i, Value(w, i, r));
    }).ok());
    auto enqueued = std::async(std::launch::async, [&] {
      std::vector<worker::HandleId> hs;
      for (size_t k = 0; k < cases.size(); ++k) {
        worker::TensorRequest req;
        req.name = fmt::format("dev{}.{}", k, DataTypeName(cases[k].dtype));
        req.input = in[k];
        req.output = out[k];
        req.bytes = cases[k].count * DataTypeSize(cases[k].dtype);
        req.dtype = cases[k].dtype;
        req.average = cases[k].average;
        req.priority = static_cast<int>(k % 3);
        req.device = {device::Kind::kFake, 100 + w, *framework};
        auto hd = e.Enqueue(req);
        EXPECT_TRUE(hd.ok()) << hd.status().ToString();
        if (hd.ok()) hs.push_back(*hd);
      }
      return hs;
    });
    if (enqueued.wait_for(kWait) != std::future_status::ready) {
      gate->Open();
      FAIL() << "worker " << w << ": Enqueue blocked on the framework's stream";
    }
    std::vector<worker::HandleId> hs = enqueued.get();
    ASSERT_EQ(hs.size(), cases.size());
    std::this_thread::sleep_for(30ms);
    for (worker::HandleId h : hs) {
      auto done = e.Poll(h);
      ASSERT_TRUE(done.ok());
      EXPECT_FALSE(*done) << "worker " << w << ": a push_pull finished before the framework wrote its tensor";
    }
    EXPECT_TRUE(gate->reached());
    gate->Open();
    for (size_t k = 0; k < cases.size(); ++k) {
      Status st = e.Wait(hs[k], 20);
      ASSERT_TRUE(st.ok()) << k << ": " << st.ToString();
      e.Release(hs[k]);
    }
    // Work the framework queues after completion sees the results (copy-out's stream wait).
    std::promise<void> seen;
    std::vector<std::vector<double>> results(cases.size());
    ASSERT_TRUE(fake->Launch(*framework, [&] {
      for (size_t k = 0; k < cases.size(); ++k)
        for (size_t i = 0; i < cases[k].count; ++i) results[k].push_back(LoadValue(out[k], cases[k].dtype, i));
      seen.set_value();
    }).ok());
    ASSERT_EQ(seen.get_future().wait_for(kWait), std::future_status::ready);
    for (size_t k = 0; k < cases.size(); ++k) {
      const DeviceCase& c = cases[k];
      for (size_t i = 0; i < c.count; ++i) {
        double sum = 0;
        for (int v = 0; v < n; ++v) sum += Value(v, i, r);
        const double want = c.average ? sum / n : sum;
        const double tol = (c.dtype == DataType::kFloat16 || c.dtype == DataType::kBFloat16) ? 0.01 * want + 1e-3
                                                                                               : 1e-6 * want;
        ASSERT_NEAR(results[k][i], want, tol) << DataTypeName(c.dtype) << "[" << i << "] round " << r << " worker " << w;
      }
    }
    for (size_t k = 0; k < cases.size(); ++k) {
      if (out[k] != in[k]) fake->FreeDevice(out[k]);
      fake->FreeDevice(in[k]);
    }
  }
  fake->DestroyStream(*framework);
  fake->SetOptions({});
}

TEST(DeviceClusterTest, FakeDeviceTensorsSumExactlyAndNothingWaitsOnTheFrameworkStream) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 2;
  o.partition_bytes = 8192;  // many partitions, each its own copies
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<std::future<void>> fs;
  for (int w = 0; w < 2; ++w) fs.push_back(std::async(std::launch::async, [&, w] { DeviceRounds(h.worker(w), w, 2, 3); }));
  for (auto& f : fs) f.get();
  EXPECT_TRUE(h.ShutdownAll().ok());
}

// Workers disagreeing on a device tensor's size (or dtype) fail alike, naming the tensor, as on
// the CPU path; nothing hangs, and the job goes on with other tensors.
TEST(DeviceClusterTest, MismatchedDeviceTensorsAcrossWorkersFailNamingTheTensor) {
  HarnessOptions o;
  o.num_workers = 2;
  o.num_servers = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<float> a(100, 1), b(200, 1);
  auto request = [](const char* name, std::vector<float>& v, int w, DataType dt) {
    worker::TensorRequest r;
    r.name = name;
    r.input = r.output = v.data();
    r.bytes = v.size() * 4;
    r.dtype = dt;
    r.device = {device::Kind::kFake, 200 + w, nullptr};
    return r;
  };
  for (const auto& [name, dt1] : {std::pair{"dev.size", DataType::kFloat32}, std::pair{"dev.dtype", DataType::kInt32}}) {
    auto& second = std::string(name) == "dev.size" ? b : a;
    auto h0 = h.worker(0).Enqueue(request(name, a, 0, DataType::kFloat32));
    auto h1 = h.worker(1).Enqueue(request(name, second, 1, dt1));
    ASSERT_TRUE(h0.ok() && h1.ok());
    Status s0 = h.worker(0).Wait(*h0, 10), s1 = h.worker(1).Wait(*h1, 10);
    ASSERT_FALSE(s0.ok()) << name;
    ASSERT_FALSE(s1.ok()) << name;
    EXPECT_NE(s0.code(), StatusCode::kDeadlineExceeded) << s0.message();
    EXPECT_NE(s0.message().find(name), std::string::npos) << s0.message();
    EXPECT_NE(s1.message().find(name), std::string::npos) << s1.message();
  }
}

// A kernel fails on the framework's stream before the push_pull: as on CUDA, that stream and the
// copy stream that waits for it are broken and run no host function again. The copy's completion
// comes from its event instead, so the push_pull fails at once (its deadline is far away), naming
// the tensor, the device and the error.
TEST(DeviceClusterTest, AStreamErrorFailsTheTensorNamingItThoughNoHostFunctionRuns) {
  HarnessOptions o;
  o.num_workers = 1;
  o.num_servers = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  auto fake = device::FakeDevice::Get(210);
  auto framework = fake->CreateStream();
  ASSERT_TRUE(framework.ok());
  const uint64_t dropped = fake->dropped_host_functions();
  ASSERT_TRUE(fake->Enqueue(*framework, [] { return Unavailable("an illegal address in the test's kernel"); }).ok());
  std::vector<float> x(5000, 1.0f);
  worker::TensorRequest req;
  req.name = "after.fault";
  req.input = req.output = x.data();
  req.bytes = x.size() * 4;
  req.device = {device::Kind::kFake, 210, *framework};
  const auto t0 = std::chrono::steady_clock::now();
  auto hd = h.worker(0).Enqueue(req);
  ASSERT_TRUE(hd.ok()) << hd.status().ToString();
  Status st = h.worker(0).Wait(*hd, 30);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  for (const char* part : {"'after.fault' partition 0 on fake:210", "illegal address"})
    EXPECT_NE(st.message().find(part), std::string::npos) << part << " in " << st.message();
  EXPECT_GT(fake->dropped_host_functions(), dropped);  // the copy's host function never ran
  EXPECT_TRUE(h.ShutdownAll().ok());
  fake->DestroyStream(*framework);
}

TEST(DeviceClusterTest, ACudaTensorWithoutAGpuIsRefusedNamingTheCause) {
  // Its premise is a machine without a usable GPU (a GPU machine runs scripts/gpu-check.sh's
  // CUDA tests instead): there, a host pointer named cuda:0 would be taken as device memory.
  if (device::Built(device::Kind::kCuda) && device::Open(device::Kind::kCuda, 0).ok()) {
    GTEST_SKIP() << "a CUDA GPU is usable here: this test checks the message on machines without one";
  }
  HarnessOptions o;
  o.num_workers = 1;
  o.num_servers = 1;
  ClusterHarness h(o);
  ASSERT_TRUE(h.StartWorkers().ok());
  std::vector<float> x(16, 1.0f);
  worker::TensorRequest req;
  req.name = "on.cuda";
  req.input = req.output = x.data();
  req.bytes = x.size() * 4;
  req.device = {device::Kind::kCuda, 0, nullptr};
  auto hd = h.worker(0).Enqueue(req);
  ASSERT_FALSE(hd.ok());
  const std::string& m = hd.status().message();
  EXPECT_NE(m.find("push_pull of 'on.cuda'"), std::string::npos) << m;
  EXPECT_TRUE(m.find("built without CUDA") != std::string::npos || m.find("cuda:0") != std::string::npos) << m;
  EXPECT_TRUE(h.ShutdownAll().ok());
}

}  // namespace
}  // namespace byteps::testing
