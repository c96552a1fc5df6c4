// The group stages (the local reduce of device tensors over a device group) with three real local
// ranks in one process: their LocalReducers talk over the Unix socket, their fake devices form one
// fake group (each rank's collectives run on its own stream thread and must come in the same order
// on every rank, or the fake fails them). The root's middle stages (copy-in, push-pull, copy-out)
// are left out: its group-broadcast starts right after its group-reduce.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <mutex>
#include <thread>
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
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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
      k.groups =
          std::make_unique<stages::DeviceGroups>(k.local.get(), k.local.get(), k.staging.get(), 10, op_timeout_s_);
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
  // thread at once (forming the group blocks until every rank joins). `streams[r]`: rank r's
  // framework stream (its operation's ready event is recorded there), default when absent.
  void Admit(const planning::TensorPlan& plan, bool in_place, std::vector<device::StreamHandle> streams = {}) {
    const size_t n = plan.bytes / 4;
    std::vector<std::future<Status>> admits;
    for (int r = 0; r < kRanks; ++r) {
      Rank& k = ranks_[r];
      k.in.resize(n);
      for (size_t i = 0; i < n; ++i) k.in[i] = static_cast<float>(r + 1 + i);
      k.out.assign(n, -1.0f);
      k.op = MakeOp(plan, pipeline_, k.in.data(), in_place ? k.in.data() : k.out.data());
      device::StreamHandle framework = r < static_cast<int>(streams.size()) ? streams[r] : nullptr;
      k.op->request.device = {device::Kind::kFake, k.dev->index(), framework};
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
  double op_timeout_s_ = 10;  // each collective's deadline
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

// CUDA forbids a host function to wait: a collective's completion reaches the stages on the
// completions thread, so a host function never waits for the stages' lock, which other threads
// hold while they queue collectives. Here the test holds every rank's lock while the collectives
// run (their framework streams were held until then).
TEST_F(GroupStagesTest, NoHostFunctionWaitsForTheStagesLock) {
  auto plan = MakePlan("l", 7, 1, 64);
  std::vector<device::StreamHandle> framework;
  std::vector<std::shared_ptr<device::FakeGate>> gates;
  for (Rank& k : ranks_) {
    framework.push_back(k.dev->CreateStream().value());
    gates.push_back(k.dev->Hold(framework.back()));
  }
  Admit(*plan, /*in_place=*/false, framework);
  for (int r = 0; r < kRanks; ++r) ranks_[r].reduce->Start(&ranks_[r].op->parts[0]);
  std::this_thread::sleep_for(200ms);  // the collectives are queued behind the framework streams
  {
    std::vector<std::unique_lock<std::mutex>> held;
    for (Rank& k : ranks_) held.push_back(k.groups->LockForTest());
    for (auto& g : gates) g->Open();  // the collectives run, their host functions fire
    std::this_thread::sleep_for(300ms);
    for (Rank& k : ranks_) EXPECT_FALSE(k.reduced.completed(&k.op->parts[0]));  // waiting for the lock, elsewhere
  }
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(ranks_[r].reduced.WaitFor(&ranks_[r].op->parts[0]).ok()) << r;
  for (int r = 0; r < kRanks; ++r) EXPECT_LT(ranks_[r].dev->longest_host_function_s(), 0.1) << "rank " << r;
  for (size_t i = 0; i < 16; ++i) ASSERT_EQ(ranks_[kRanks - 1].out[i], Want(i)) << i;
  for (int r = 0; r < kRanks; ++r) ranks_[r].dev->DestroyStream(framework[r]);
}

class GroupStagesDeadlineTest : public GroupStagesTest {
 protected:
  GroupStagesDeadlineTest() { op_timeout_s_ = 0.5; }
};

// NCCL's missing peer: local rank 1's framework stream never reaches the push_pull, so its group
// stream never gets to its part of the Reduce, and the others' Reduce spins without an error.
// Every rank fails the round at the collective deadline, naming the tensor, the device and the
// local rank; every group is aborted (which ends what spins), and the teardown is prompt.
TEST_F(GroupStagesDeadlineTest, AMissingPeerFailsTheRoundAtTheDeadlineAbortsTheGroupsAndShutdownIsPrompt) {
  auto plan = MakePlan("m", 6, 1, 64);
  Rank& late = ranks_[1];
  auto framework = late.dev->CreateStream();
  ASSERT_TRUE(framework.ok());
  auto gate = late.dev->Hold(*framework);
  Admit(*plan, /*in_place=*/false, {nullptr, *framework, nullptr});
  const auto t0 = Clock::now();
  for (int r = 0; r < kRanks; ++r) ranks_[r].reduce->Start(&ranks_[r].op->parts[0]);
  for (int r = 0; r < kRanks; ++r) {
    Status st = ranks_[r].reduced.WaitFor(&ranks_[r].op->parts[0]);
    EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << "rank " << r << ": " << st.ToString();
    for (const std::string& part : {std::string("'m' partition 0"), ranks_[r].dev->name() + ": the group's reduce",
                                    "on local rank " + std::to_string(r) + " of 3", std::string("was aborted")}) {
      EXPECT_NE(st.message().find(part), std::string::npos) << "rank " << r << ": " << part << " in " << st.message();
    }
    EXPECT_TRUE(ranks_[r].groups->aborted()) << "rank " << r;
  }
  EXPECT_GE(SecondsSince(t0), op_timeout_s_);
  EXPECT_LT(SecondsSince(t0), op_timeout_s_ + 3);
  const auto t1 = Clock::now();  // the engine's teardown order: local sockets closed, then the stages
  for (Rank& k : ranks_) k.local->Close();
  for (Rank& k : ranks_) {
    k.bcast.reset();
    k.reduce.reset();
    k.groups.reset();
  }
  EXPECT_LT(SecondsSince(t1), op_timeout_s_ + 1);
  gate->Open();  // the late stream runs its part now: into an aborted group, which ends it
  EXPECT_TRUE(late.dev->Drain(*framework, 10).ok());
  late.dev->DestroyStream(*framework);
}

}  // namespace
}  // namespace byteps::worker
