// The device layer: the cpu and fake backends here (real asynchrony on the fake's stream threads),
// the cuda backend where this build has it and a GPU is present (skipped with the reason otherwise).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "device/device.h"
#include "device/fake_device.h"
#include "device/group.h"

namespace byteps::device {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<Device> OpenOrSkip(Kind kind, int index, std::string* why) {
  auto d = Open(kind, index);
  if (!d.ok()) {
    *why = d.status().message();
    return nullptr;
  }
  return *d;
}

class DeviceTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    std::string why;
    dev_ = OpenOrSkip(GetParam(), 0, &why);
    if (!dev_) GTEST_SKIP() << why;
  }
  std::shared_ptr<Device> dev_;
};

// Host -> device -> host through two streams, the second waiting on the first's event.
TEST_P(DeviceTest, CopiesRoundTripInStreamOrder) {
  constexpr size_t kBytes = 1 << 20;
  auto host_in = dev_->AllocHost(kBytes), host_out = dev_->AllocHost(kBytes), gpu = dev_->AllocDevice(kBytes);
  ASSERT_TRUE(host_in.ok() && host_out.ok() && gpu.ok());
  auto* in = static_cast<uint8_t*>(*host_in);
  auto* out = static_cast<uint8_t*>(*host_out);
  for (size_t i = 0; i < kBytes; ++i) in[i] = static_cast<uint8_t>(i * 7 + 3);
  std::memset(out, 0, kBytes);
  auto up = dev_->CreateStream(), down = dev_->CreateStream();
  ASSERT_TRUE(up.ok() && down.ok());
  ASSERT_TRUE(dev_->CopyAsync(*gpu, in, kBytes, CopyKind::kHostToDevice, *up).ok());
  auto uploaded = dev_->RecordEvent(*up);
  ASSERT_TRUE(uploaded.ok());
  ASSERT_TRUE(dev_->StreamWaitEvent(*down, *uploaded).ok());
  ASSERT_TRUE(dev_->CopyAsync(out, *gpu, kBytes, CopyKind::kDeviceToHost, *down).ok());
  std::promise<void> done;
  ASSERT_TRUE(dev_->LaunchHostFunc(*down, [&] { done.set_value(); }).ok());
  auto fut = done.get_future();
  ASSERT_EQ(fut.wait_for(30s), std::future_status::ready);
  EXPECT_EQ(std::memcmp(in, out, kBytes), 0);
  auto finished = dev_->RecordEvent(*down);
  ASSERT_TRUE(finished.ok());
  EXPECT_TRUE(dev_->Drain(*down, 30).ok());
  EXPECT_TRUE(*dev_->QueryEvent(*finished));
  dev_->DestroyEvent(*uploaded);
  dev_->DestroyEvent(*finished);
  dev_->DestroyStream(*up);
  dev_->DestroyStream(*down);
  dev_->FreeDevice(*gpu);
  dev_->FreeHost(in);
  dev_->FreeHost(out);
}

TEST_P(DeviceTest, HostFunctionsRunInQueueOrder) {
  auto s = dev_->CreateStream();
  ASSERT_TRUE(s.ok());
  std::vector<int> order;
  std::mutex mu;
  std::promise<void> last;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(dev_->LaunchHostFunc(*s, [&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      if (i == 19) last.set_value();
    }).ok());
  }
  ASSERT_EQ(last.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(dev_->Drain(*s, 30).ok());  // the last host function has returned (it holds `mu`)
  std::vector<int> want(20);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(order, want);
  dev_->DestroyStream(*s);
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceTest, ::testing::Values(Kind::kCpu, Kind::kFake, Kind::kCuda),
                         [](const auto& info) { return std::string(KindName(info.param)); });

TEST(Device, NamesAndMissingBackends) {
  auto cpu = Open(Kind::kCpu, 0);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->name(), "cpu:0");
  EXPECT_EQ(Open(Kind::kFake, 3).value()->name(), "fake:3");
  EXPECT_EQ(Open(Kind::kFake, 3).value(), Open(Kind::kFake, 3).value());  // one device per index
  EXPECT_FALSE(Open(Kind::kFake, -1).ok());
  if (!Built(Kind::kCuda)) {
    auto cuda = Open(Kind::kCuda, 0);
    ASSERT_FALSE(cuda.ok());
    EXPECT_NE(cuda.status().message().find("this byteps was built without CUDA: rebuild with"), std::string::npos)
        << cuda.status().message();
  }
}

// The fake's streams are truly asynchronous: work queued behind a closed gate waits for it, the
// caller never does, and a stream that waits on another's event waits on its own thread.
TEST(FakeDevice, NobodyBlocksOnAHeldStream) {
  auto fake = FakeDevice::Get(7);
  auto framework = fake->CreateStream(), copies = fake->CreateStream();
  ASSERT_TRUE(framework.ok() && copies.ok());
  std::vector<float> device_data(1000, 0.0f), host(1000, -1.0f);
  auto gate = fake->Hold(*framework);
  // A "kernel" on the framework stream, behind the gate, writes the tensor.
  ASSERT_TRUE(fake->Launch(*framework, [&] { std::fill(device_data.begin(), device_data.end(), 2.5f); }).ok());
  auto produced = fake->RecordEvent(*framework);
  ASSERT_TRUE(produced.ok());
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(fake->StreamWaitEvent(*copies, *produced).ok());
  fake->DestroyEvent(*produced);  // the queued wait keeps what it needs
  ASSERT_TRUE(fake->CopyAsync(host.data(), device_data.data(), 4000, CopyKind::kDeviceToHost, *copies).ok());
  std::atomic<bool> copied{false};
  ASSERT_TRUE(fake->LaunchHostFunc(*copies, [&] { copied = true; }).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);  // none of these calls waited
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(copied.load());  // the copy stream waits for the framework's kernel...
  EXPECT_EQ(host[0], -1.0f);
  EXPECT_TRUE(gate->reached());
  gate->Open();
  for (int i = 0; i < 3000 && !copied.load(); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(copied.load());  // ...and copies what it wrote
  EXPECT_EQ(host[0], 2.5f);
  EXPECT_EQ(host[999], 2.5f);
  fake->DestroyStream(*framework);
  fake->DestroyStream(*copies);
}

TEST(FakeDevice, CopiesTakeTheirConfiguredTimeAndEventsReportIt) {
  auto fake = FakeDevice::Get(8);
  fake->SetOptions({0.05, 0});
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  std::vector<uint8_t> a(64, 1), b(64, 0);
  ASSERT_TRUE(fake->CopyAsync(b.data(), a.data(), 64, CopyKind::kHostToDevice, *s).ok());
  auto e = fake->RecordEvent(*s);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(*fake->QueryEvent(*e));  // still copying
  Status timed_out = fake->Drain(*s, 0.001);
  EXPECT_EQ(timed_out.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(timed_out.message().find("fake:8"), std::string::npos) << timed_out.message();
  EXPECT_TRUE(fake->Drain(*s, 30).ok());
  EXPECT_TRUE(*fake->QueryEvent(*e));
  EXPECT_EQ(b[63], 1);
  fake->DestroyEvent(*e);
  fake->DestroyStream(*s);
  fake->SetOptions({});
}

}  // namespace
}  // namespace byteps::device

// Groups: the fake backend's ranks meet in this process; the NCCL backend needs GPUs (skipped).
namespace byteps::device {
namespace {

struct Ranks {
  std::vector<std::shared_ptr<FakeDevice>> devs;
  std::vector<StreamHandle> streams;
  std::vector<std::unique_ptr<Group>> groups;
};

Ranks JoinFake(int n, int first_index) {
  Ranks r;
  auto id = NewGroupId(Kind::kFake);
  EXPECT_TRUE(id.ok());
  std::vector<std::future<StatusOr<std::unique_ptr<Group>>>> joins;
  for (int i = 0; i < n; ++i) {  // every rank's device and stream first: the joins read them
    r.devs.push_back(FakeDevice::Get(first_index + i));
    r.streams.push_back(r.devs.back()->CreateStream().value());
  }
  for (int i = 0; i < n; ++i) {
    joins.push_back(std::async(std::launch::async, [&, i] { return JoinGroup(r.devs[i], *id, i, n, 10); }));
  }
  for (auto& j : joins) {
    auto g = j.get();
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    r.groups.push_back(g.ok() ? std::move(g).value() : nullptr);
  }
  return r;
}

Status Drain(Device& d, StreamHandle s) { return d.Drain(s, 30); }

TEST(FakeGroup, ReduceToTheRootAndBroadcastBackInQueueOrder) {
  Ranks r = JoinFake(3, 20);
  ASSERT_EQ(r.groups.size(), 3u);
  std::vector<std::vector<float>> x(3), sum(3);
  std::vector<std::vector<int64_t>> y(3);
  for (int i = 0; i < 3; ++i) {
    x[i].assign(1000, static_cast<float>(i + 1));
    sum[i].assign(1000, -1.0f);
    y[i].assign(10, i == 2 ? 42 : 0);
  }
  // Each rank queues the same two collectives, from its own thread, in the same order.
  std::vector<std::future<void>> fs;
  for (int i = 0; i < 3; ++i) {
    fs.push_back(std::async(std::launch::async, [&, i] {
      ASSERT_TRUE(r.groups[i]->Reduce(x[i].data(), sum[i].data(), 1000, DataType::kFloat32, 1, r.streams[i]).ok());
      ASSERT_TRUE(r.groups[i]->Broadcast(y[i].data(), 80, 2, r.streams[i]).ok());
      EXPECT_TRUE(Drain(*r.devs[i], r.streams[i]).ok());
    }));
  }
  for (auto& f : fs) f.get();
  EXPECT_EQ(sum[1][0], 6.0f);  // 1 + 2 + 3 on the root
  EXPECT_EQ(sum[1][999], 6.0f);
  EXPECT_EQ(sum[0][0], -1.0f);  // recv ignored elsewhere
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i][9], 42) << i;
  for (int i = 0; i < 3; ++i) r.devs[i]->DestroyStream(r.streams[i]);
}

TEST(FakeGroup, RanksQueueingDifferentCollectivesFailTheirStreamsInsteadOfSummingWrong) {
  Ranks r = JoinFake(2, 30);
  std::vector<float> a(8, 1), b(16, 1), out(16, 0);
  ASSERT_TRUE(r.groups[0]->Reduce(a.data(), out.data(), 8, DataType::kFloat32, 0, r.streams[0]).ok());
  ASSERT_TRUE(r.groups[1]->Reduce(b.data(), out.data(), 16, DataType::kFloat32, 0, r.streams[1]).ok());
  for (int i = 0; i < 2; ++i) {
    Status st = Drain(*r.devs[i], r.streams[i]);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("queued different collectives"), std::string::npos) << st.message();
  }
  EXPECT_EQ(out[0], 0.0f);
  for (int i = 0; i < 2; ++i) r.devs[i]->DestroyStream(r.streams[i]);
}

TEST(FakeGroup, AJoinThatNobodyAnswersFailsNamingTheDeviceAndRank) {
  auto id = NewGroupId(Kind::kFake);
  ASSERT_TRUE(id.ok());
  auto g = JoinGroup(FakeDevice::Get(40), *id, 1, 2, 0.05);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("group init on fake:40 (rank 1 of 2) failed"), std::string::npos)
      << g.status().message();
  EXPECT_FALSE(NewGroupId(Kind::kCpu).ok());
  EXPECT_FALSE(JoinGroup(FakeDevice::Get(40), *id, 2, 2, 1).ok());  // rank out of range
}

TEST(NcclGroup, NeedsGpus) {
  auto dev = Open(Kind::kCuda, 0);
  if (!dev.ok()) GTEST_SKIP() << dev.status().message();
  // No nccl.h at build time, or no libnccl to load: nothing to test (scripts/gpu-check.sh treats a
  // GPU machine where this skips as a failure, with this reason).
  if (Status groups = GroupsStatus(Kind::kCuda); !groups.ok()) GTEST_SKIP() << groups.message();
  // One GPU here at most: a group of one still exercises init, reduce and broadcast.
  auto id = NewGroupId(Kind::kCuda);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto g = JoinGroup(*dev, *id, 0, 1, 30);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto buf = (*dev)->AllocDevice(4096);
  auto host = (*dev)->AllocHost(4096);
  ASSERT_TRUE(buf.ok() && host.ok());
  std::vector<float> ones(1024, 1.0f);
  auto s = (*dev)->CreateStream();
  ASSERT_TRUE((*dev)->CopyAsync(*buf, ones.data(), 4096, CopyKind::kHostToDevice, *s).ok());
  ASSERT_TRUE((*g)->Reduce(*buf, *buf, 1024, DataType::kFloat32, 0, *s).ok());
  ASSERT_TRUE((*g)->Broadcast(*buf, 4096, 0, *s).ok());
  ASSERT_TRUE((*dev)->CopyAsync(*host, *buf, 4096, CopyKind::kDeviceToHost, *s).ok());
  ASSERT_TRUE(Drain(**dev, *s).ok());
  EXPECT_EQ(static_cast<float*>(*host)[1023], 1.0f);
  (*dev)->DestroyStream(*s);
  (*dev)->FreeDevice(*buf);
  (*dev)->FreeHost(*host);
}

}  // namespace
}  // namespace byteps::device
