// The pinned staging pool (stages/staging_pool.h) on its own, then under the copy stages on the fake
// device: size classes, reuse, the budget (pinned bytes <= the largest sum of fits in use), a
// retired key generation's buffers, and a buffer that goes back only once the device is done with
// it (never while a copy-in or copy-out still runs on it).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

#include "device/fake_device.h"
#include "worker/stages/device_copy_stages.h"
#include "worker/stages/device_staging.h"
#include "worker/stages/staging_pool.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using stages::StagingPool;
using testing::MakeOp;
using testing::MakePlan;
using testing::RecordingSink;

TEST(StagingSizeClassTest, FourSizeClassesPerPowerOfTwoEachUnderAQuarterAboveItsBytes) {
  EXPECT_EQ(StagingPool::SizeClass(0), 64u);
  EXPECT_EQ(StagingPool::SizeClass(1), 64u);
  EXPECT_EQ(StagingPool::SizeClass(65), 128u);
  EXPECT_EQ(StagingPool::SizeClass(257), 320u);
  EXPECT_EQ(StagingPool::SizeClass(1u << 20), 1u << 20);
  EXPECT_EQ(StagingPool::SizeClass((1u << 20) + 1), 5u << 18);  // 1.25 MiB
  EXPECT_EQ(StagingPool::SizeClass((3u << 19) + 1), 7u << 18);  // just over 1.5 MiB: 1.75 MiB
  for (size_t b = 1; b < (1u << 22); b = b * 3 / 2 + 1) {
    for (size_t x : {b - 1, b, b + 1}) {
      const size_t c = StagingPool::SizeClass(x);
      ASSERT_GE(c, x);
      ASSERT_EQ(c % 64, 0u) << x;
      ASSERT_LE(c, StagingPool::Fit(x)) << x;
      if (x >= 256) ASSERT_LE(StagingPool::Fit(x), x + x / 4) << x;
      else ASSERT_LE(StagingPool::Fit(x), x + 64) << x;
    }
  }
}

class StagingPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { dev_ = device::FakeDevice::Get(500 + next_++); }
  void TearDown() override { EXPECT_EQ(pool_.FreeAll({}), 0u); }

  std::shared_ptr<device::FakeDevice> dev_;
  StagingPool pool_;
  static inline int next_ = 0;
};

TEST_F(StagingPoolTest, AReturnedBufferServesTheNextPartitionThatFitsIt) {
  auto a = pool_.Acquire(dev_.get(), 1, 0, 1000);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  pool_.Release(1);
  auto b = pool_.Acquire(dev_.get(), 2, 0, 900);  // 1024-byte class: within 900's fit (1125)
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, *a);
  auto c = pool_.Acquire(dev_.get(), 3, 0, 1000);  // a's buffer is taken: a new one
  ASSERT_TRUE(c.ok());
  EXPECT_NE(*c, *a);
  pool_.Release(2);
  auto d = pool_.Acquire(dev_.get(), 4, 0, 4000);  // too small for 4000 bytes: a new one
  ASSERT_TRUE(d.ok());
  EXPECT_NE(*d, *a);
  std::memset(*d, 1, 4000);  // (ASan: really that long)
  auto e = pool_.Acquire(dev_.get(), 5, 0, 100);  // 1024 is more than 100's fit (128): a new one
  ASSERT_TRUE(e.ok());
  EXPECT_NE(*e, *a);
  const StagingStats s = pool_.stats();
  EXPECT_EQ(s.allocated, 4u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.buffers, 4u);
  EXPECT_EQ(s.working_set_bytes, 1000u + 4000 + 100);
  EXPECT_EQ(s.pinned_bytes, 1024u + 1024 + 4096 + 128);
  EXPECT_EQ(s.idle_bytes, 1024u);
  for (uint64_t l : {3, 4, 5}) pool_.Release(l);
  EXPECT_EQ(pool_.stats().working_set_bytes, 0u);
}

TEST_F(StagingPoolTest, ABufferGoesBackOnlyWhenEveryHolderIsDone) {
  auto a = pool_.Acquire(dev_.get(), 1, 0, 4096);
  ASSERT_TRUE(a.ok());
  pool_.Hold(1);     // a device copy queued with it
  pool_.Release(1);  // the pipeline is done; the copy is not
  auto b = pool_.Acquire(dev_.get(), 2, 0, 4096);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(*b, *a);
  EXPECT_EQ(pool_.stats().working_set_bytes, 2 * 4096u);
  pool_.Release(1);  // the copy finished
  auto c = pool_.Acquire(dev_.get(), 3, 0, 4096);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *a);
  pool_.Release(7);  // an unknown lease (a partition that never got a buffer): nothing
  pool_.Release(2);
  pool_.Release(3);
  EXPECT_EQ(pool_.stats().idle_bytes, 2 * 4096u);
}

// A partition size the tuner leaves: the new size's buffers fit none of the old ones, and pinned
// bytes stay within the budget (idle old buffers go, least recently used first), never the sum of
// both sizes.
TEST_F(StagingPoolTest, ANewPartitionSizeReplacesTheOldBuffersWithinTheBudget) {
  constexpr size_t kOld = 256u << 10, kNew = 1u << 20;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(pool_.Acquire(dev_.get(), 100 * round + i, 0, kOld).ok());
    for (uint64_t i = 0; i < 16; ++i) pool_.Release(100 * round + i);
  }
  StagingStats s = pool_.stats();
  EXPECT_EQ(s.allocated, 16u);
  EXPECT_EQ(s.reused, 32u);
  EXPECT_EQ(s.pinned_bytes, 16 * kOld);
  for (int round = 3; round < 6; ++round) {
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(pool_.Acquire(dev_.get(), 100 * round + i, 1, kNew).ok());
    for (uint64_t i = 0; i < 4; ++i) pool_.Release(100 * round + i);
  }
  s = pool_.stats();
  EXPECT_EQ(s.peak_working_set_bytes, 16 * kOld);
  EXPECT_LE(s.peak_pinned_bytes, s.budget_bytes);
  EXPECT_LE(s.budget_bytes, s.peak_working_set_bytes + s.peak_working_set_bytes / 4);
  EXPECT_EQ(s.allocated, 16u + 4);  // the new size's four, then reused
  EXPECT_GE(s.freed, 4u);           // at least the 1 MiB of old buffers each new one needed
  EXPECT_EQ(s.pinned_bytes, s.idle_bytes);
  std::printf("[ pool     ] 256 KiB -> 1 MiB partitions: peak pinned %zu bytes, peak working set %zu (x%.3f), "
              "%llu allocated, %llu reused, %llu freed\n",
              s.peak_pinned_bytes, s.peak_working_set_bytes,
              static_cast<double>(s.peak_pinned_bytes) / static_cast<double>(s.peak_working_set_bytes),
              static_cast<unsigned long long>(s.allocated), static_cast<unsigned long long>(s.reused),
              static_cast<unsigned long long>(s.freed));
}

TEST_F(StagingPoolTest, ARetiredGenerationsBuffersAreFreedNowOrWhenTheirLeasesEnd) {
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(pool_.Acquire(dev_.get(), i, 0, 8192).ok());
  for (uint64_t i = 0; i < 3; ++i) pool_.Release(i);  // lease 3 is still in flight
  pool_.Retire(0);
  StagingStats s = pool_.stats();
  EXPECT_EQ(s.freed, 3u);  // the idle ones at once
  EXPECT_EQ(s.pinned_bytes, 8192u);
  EXPECT_EQ(s.retired_bytes, 8192u);
  EXPECT_EQ(s.pinned_bytes_by_generation, (std::map<uint32_t, size_t>{{0, 8192}}));
  pool_.Release(3);  // its last round ends (perhaps on a device callback: nothing freed there)
  EXPECT_EQ(pool_.stats().idle_bytes, 0u);  // never handed out again
  ASSERT_TRUE(pool_.Acquire(dev_.get(), 10, 1, 8192).ok());  // freed on the next acquisition
  s = pool_.stats();
  EXPECT_EQ(s.freed, 4u);
  EXPECT_EQ(s.retired_bytes, 0u);
  EXPECT_EQ(s.pinned_bytes, 8192u);
  EXPECT_EQ(s.pinned_bytes_by_generation, (std::map<uint32_t, size_t>{{1, 8192}}));
  pool_.Release(10);
}

TEST_F(StagingPoolTest, AtShutdownABusyDevicesLeasedBuffersStay) {
  ASSERT_TRUE(pool_.Acquire(dev_.get(), 1, 0, 4096).ok());
  ASSERT_TRUE(pool_.Acquire(dev_.get(), 2, 0, 4096).ok());
  pool_.Release(2);
  EXPECT_EQ(pool_.FreeAll({dev_.get()}), 4096u);  // the idle one went; the leased one stays
  EXPECT_EQ(pool_.stats().pinned_bytes, 4096u);
  pool_.Release(1);  // (its copy finished after all: the pool's last FreeAll frees it)
}

// The copy stages on the fake device: a partition's buffer is not handed to another partition
// while its copy-out (or, for a partition failed meanwhile, its copy-in) still runs on the device.
class StagedCopiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = device::FakeDevice::Get(540 + next_++);
    slot_ = staging_.For(device::Kind::kFake, dev_->index()).value();
  }
  std::shared_ptr<pipeline::Operation> Op(std::vector<float>& in, std::vector<float>& out) {
    auto op = MakeOp(*plan_, pipeline_, in.data(), out.data());
    op->request.device = {device::Kind::kFake, dev_->index(), nullptr};
    return op;
  }

  std::shared_ptr<device::FakeDevice> dev_;
  stages::DeviceStaging staging_;
  stages::DeviceStaging::Slot* slot_ = nullptr;
  RecordingSink copied_in_, copied_out_;
  stages::DeviceCopyInStage in_{&copied_in_, &staging_, 30.0};
  stages::DeviceCopyOutStage out_{&copied_out_, &staging_, 30.0};
  std::unique_ptr<planning::TensorPlan> plan_ = MakePlan("staged", 0, 1, 4096);
  pipeline::Pipeline pipeline_{{&in_, &out_}};
  static inline int next_ = 0;
};

TEST_F(StagedCopiesTest, NoBufferIsReusedBeforeItsCopyOutFinishedOnTheDevice) {
  std::vector<float> a(1024), a_out(1024, -1), b(1024, 2), b_out(1024), c(1024, 3), c_out(1024);
  std::iota(a.begin(), a.end(), 1.0f);
  auto op_a = Op(a, a_out), op_b = Op(b, b_out), op_c = Op(c, c_out);
  pipeline::PartitionTask* ta = &op_a->parts[0];
  in_.Start(ta);
  ASSERT_TRUE(copied_in_.WaitFor(ta).ok());
  const uint8_t* buffer_a = ta->src;
  auto gate = dev_->Hold(slot_->out);  // the copy-out stream stalls: its copy stays queued
  out_.Start(ta);
  pipeline::PartitionTask* tb = &op_b->parts[0];
  in_.Start(tb);
  ASSERT_TRUE(copied_in_.WaitFor(tb).ok());
  EXPECT_NE(tb->src, buffer_a) << "a buffer was handed out while its copy-out was still queued";
  EXPECT_FALSE(copied_out_.completed(ta));
  EXPECT_EQ(staging_.stats().idle_bytes, 0u);
  gate->Open();
  ASSERT_TRUE(copied_out_.WaitFor(ta).ok());
  EXPECT_EQ(a_out, a);
  EXPECT_EQ(staging_.stats().working_set_bytes, 4096u);  // b's
  pipeline::PartitionTask* tc = &op_c->parts[0];
  in_.Start(tc);
  ASSERT_TRUE(copied_in_.WaitFor(tc).ok());
  EXPECT_EQ(tc->src, buffer_a);  // a's buffer, now that its copy-out is done
  for (pipeline::PartitionTask* t : {tb, tc}) {
    out_.Start(t);
    ASSERT_TRUE(copied_out_.WaitFor(t).ok());
  }
  EXPECT_EQ(b_out, b);
  EXPECT_EQ(c_out, c);
  const StagingStats s = staging_.stats();
  EXPECT_EQ(s.allocated, 2u);
  EXPECT_EQ(s.reused, 1u);
  EXPECT_EQ(s.working_set_bytes, 0u);
}

TEST_F(StagedCopiesTest, APartitionFailedDuringItsCopyInKeepsItsBufferUntilTheDeviceIsDone) {
  std::vector<float> a(1024, 1), a_out(1024), b(1024, 2), b_out(1024);
  auto op_a = Op(a, a_out), op_b = Op(b, b_out);
  pipeline::PartitionTask* ta = &op_a->parts[0];
  auto gate = dev_->Hold(slot_->in);  // the copy-in stays queued
  in_.Start(ta);
  in_.FailAll(Aborted("job failed"));  // completes it now, with the copy still queued
  ASSERT_FALSE(copied_in_.WaitFor(ta).ok());
  out_.Skip(ta, Aborted("job failed"));  // the dispatcher: the pipeline is done with it
  EXPECT_EQ(staging_.stats().working_set_bytes, 4096u) << "the device still writes the buffer";
  gate->Open();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (staging_.stats().idle_bytes == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(staging_.stats().idle_bytes, 4096u);
  EXPECT_EQ(staging_.stats().working_set_bytes, 0u);
  pipeline::PartitionTask* tb = &op_b->parts[0];
  in_.Start(tb);
  ASSERT_TRUE(copied_in_.WaitFor(tb).ok());
  EXPECT_EQ(staging_.stats().reused, 1u);
  out_.Start(tb);
  ASSERT_TRUE(copied_out_.WaitFor(tb).ok());
  EXPECT_EQ(b_out, b);
}

}  // namespace
}  // namespace byteps::worker
