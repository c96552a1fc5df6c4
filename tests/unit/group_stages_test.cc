// The group stages (the local reduce of device tensors over a device group) with three real local
// ranks in one process: their LocalReducers talk over the Unix socket, their fake devices form one
// fake group (each rank's collectives run on its own stream thread and must come in the same order
// on every rank, or the fake fails them). The root's middle stages (copy-in, push-pull, copy-out)
// are left out: its group-broadcast starts right after its group-reduce.
#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
#include <vector>

#include "device/fake_device.h"
#include "worker/stages/device_staging.h"
#include "worker/stages/group_stages.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using testing::MakeOp;
using testing::MakePlan;
using testing::RecordingSink;

constexpr int kRanks = 3;  // local rank 2 is the root

struct Rank {
  std::unique_ptr<local_reduce::LocalReducer> local;
  std::unique_ptr<stages::DeviceStaging> staging;
  std::unique_ptr<stages::DeviceGroups> groups;
  RecordingSink reduced, broadcast;
  std::unique_ptr<pipeline::Stage> reduce, bcast;
  std::shared_ptr<device::FakeDevice> dev;
  std::vector<float> in, out;
  std::shared_ptr<pipeline::Operation> op;
};

class GroupStagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_reduce::LocalOptions o;
    o.local_size = kRanks;
    o.job = "gs" + std::to_string(getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.start_timeout_s = 10;
    std::vector<std::future<StatusOr<std::unique_ptr<local_reduce::LocalReducer>>>> starts;
    for (int r = 0; r < kRanks; ++r) {
      starts.push_back(std::async(std::launch::async, [o, r]() mutable {
        o.local_rank = r;
        return local_reduce::LocalReducer::Start(o, nullptr);
      }));
    }
    for (int r = 0; r < kRanks; ++r) {
      auto lr = starts[r].get();
      ASSERT_TRUE(lr.ok()) << lr.status().ToString();
      Rank& k = ranks_[r];
      k.local = std::move(lr.value());
      k.staging = std::make_unique<stages::DeviceStaging>();
      k.groups = std::make_unique<stages::DeviceGroups>(k.local.get(), k.local.get(), k.staging.get(), 10, 10);
      k.reduce = std::make_unique<stages::GroupReduceStage>(&k.reduced, k.groups.get());
      k.bcast = std::make_unique<stages::GroupBroadcastStage>(&k.broadcast, k.groups.get());
      k.dev = device::FakeDevice::Get(60 + r + 10 * next_++);
    }
  }
  void TearDown() override {
    for (Rank& k : ranks_)
      if (k.local) k.local->Close();  // no local frame reaches the groups while they go (as in the engine)
    for (Rank& k : ranks_) {
      k.bcast.reset();
      k.reduce.reset();
      k.groups.reset();
      k.staging.reset();
    }
  }

  // Each rank's operation over `plan` (its values: rank + 1 + element index), admitted from its own
  // thread at once (forming the group blocks until every rank joins).
  void Admit(const planning::TensorPlan& plan, bool in_place) {
    const size_t n = plan.bytes / 4;
    std::vector<std::future<Status>> admits;
    for (int r = 0; r < kRanks; ++r) {
      Rank& k = ranks_[r];
      k.in.resize(n);
      for (size_t i = 0; i < n; ++i) k.in[i] = static_cast<float>(r + 1 + i);
      k.out.assign(n, -1.0f);
      k.op = MakeOp(plan, pipeline_, k.in.data(), in_place ? k.in.data() : k.out.data());
      k.op->request.device = {device::Kind::kFake, k.dev->index(), nullptr};
      for (auto& t : k.op->parts) t.round = round_;
      admits.push_back(std::async(std::launch::async, [&k] { return k.reduce->Admit(*k.op); }));
    }
    for (auto& a : admits) {
      Status st = a.get();
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
    ++round_;
  }
  float Want(size_t i) const { return static_cast<float>(1 + 2 + 3 + 3 * i); }

  Rank ranks_[kRanks];
  pipeline::Pipeline pipeline_;
  uint32_t round_ = 1;
  static inline int next_ = 0;
};

TEST_F(GroupStagesTest, PartitionsStartedInDifferentOrdersSumOnTheRootAndBroadcastBack) {
  auto plan = MakePlan("g", 3, 3, 64);  // three partitions of 16 floats
  Admit(*plan, /*in_place=*/false);
  // Every rank starts its partitions in its own order; the root's order decides the collectives'.
  const std::vector<std::vector<size_t>> orders = {{2, 0, 1}, {1, 2, 0}, {0, 1, 2}};
  for (int r = 0; r < kRanks; ++r)
    for (size_t p : orders[r]) ranks_[r].reduce->Start(&ranks_[r].op->parts[p]);
  Rank& root = ranks_[kRanks - 1];
  for (size_t p = 0; p < 3; ++p) ASSERT_TRUE(root.reduced.WaitFor(&root.op->parts[p]).ok());
  for (size_t i = 0; i < 48; ++i) ASSERT_EQ(root.out[i], Want(i)) << i;
  for (int r = 0; r < kRanks - 1; ++r)
    for (size_t p = 0; p < 3; ++p) ASSERT_TRUE(ranks_[r].reduced.WaitFor(&ranks_[r].op->parts[p]).ok());
  // Non-root 0 starts its broadcast stage before the root's Go, non-root 1 after the result is in.
  for (size_t p = 0; p < 3; ++p) ranks_[0].bcast->Start(&ranks_[0].op->parts[p]);
  for (size_t p : {1, 0, 2}) root.bcast->Start(&root.op->parts[p]);
  for (size_t p = 0; p < 3; ++p) ASSERT_TRUE(root.broadcast.WaitFor(&root.op->parts[p]).ok());
  for (size_t p = 0; p < 3; ++p) ASSERT_TRUE(ranks_[0].broadcast.WaitFor(&ranks_[0].op->parts[p]).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (size_t p = 0; p < 3; ++p) ranks_[1].bcast->Start(&ranks_[1].op->parts[p]);
  for (size_t p = 0; p < 3; ++p) ASSERT_TRUE(ranks_[1].broadcast.WaitFor(&ranks_[1].op->parts[p]).ok());
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < 48; ++i) ASSERT_EQ(ranks_[r].out[i], Want(i)) << "rank " << r << " [" << i << "]";
  for (int r = 0; r < kRanks - 1; ++r) EXPECT_EQ(ranks_[r].in[0], static_cast<float>(r + 1));  // inputs untouched
}

TEST_F(GroupStagesTest, InPlaceRoundsOneAfterAnother) {
  auto plan = MakePlan("h", 4, 1, 4096);
  for (int round = 0; round < 3; ++round) {
    Admit(*plan, /*in_place=*/true);
    for (int r = 0; r < kRanks; ++r) ranks_[r].reduce->Start(&ranks_[r].op->parts[0]);
    for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(ranks_[r].reduced.WaitFor(&ranks_[r].op->parts[0]).ok());
    for (int r = kRanks - 1; r >= 0; --r) ranks_[r].bcast->Start(&ranks_[r].op->parts[0]);
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(ranks_[r].broadcast.WaitFor(&ranks_[r].op->parts[0]).ok());
      for (size_t i = 0; i < 1024; ++i) ASSERT_EQ(ranks_[r].in[i], Want(i)) << "round " << round << " rank " << r;
    }
  }
}

TEST_F(GroupStagesTest, ARoundTheRootFailsFailsOnEveryRankWithItsCode) {
  auto plan = MakePlan("f", 5, 1, 64);
  Admit(*plan, /*in_place=*/false);
  for (int r = 0; r < kRanks; ++r) ranks_[r].reduce->Start(&ranks_[r].op->parts[0]);
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(ranks_[r].reduced.WaitFor(&ranks_[r].op->parts[0]).ok());
  // The root's push-pull failed (say): its broadcast stage is skipped, and the others learn why.
  ranks_[0].bcast->Start(&ranks_[0].op->parts[0]);
  Rank& root = ranks_[kRanks - 1];
  root.bcast->Skip(&root.op->parts[0], Unavailable("server 1 died"));
  for (int r = 0; r < kRanks - 1; ++r) {
    if (r == 1) ranks_[1].bcast->Start(&ranks_[1].op->parts[0]);  // after the failure came in
    Status st = ranks_[r].broadcast.WaitFor(&ranks_[r].op->parts[0]);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("server 1 died"), std::string::npos) << st.message();
  }
  // The group goes on: the next round sums.
  Admit(*plan, /*in_place=*/false);
  for (int r = 0; r < kRanks; ++r) ranks_[r].reduce->Start(&ranks_[r].op->parts[0]);
  ASSERT_TRUE(root.reduced.WaitFor(&root.op->parts[0]).ok());
  EXPECT_EQ(root.out[15], Want(15));
}

}  // namespace
}  // namespace byteps::worker
