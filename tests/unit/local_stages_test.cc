// The local reduce and local broadcast stages with a real local root (local rank 1) and non-root
// (local rank 0) in one process, talking over their Unix socket and shared memory, partition by
// partition: sums, results in either order of publish and await, and a root failure reaching the
// non-root with its code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "common/adasum.h"
#include "worker/stages/local_broadcast_stage.h"
#include "worker/stages/local_reduce_stage.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using testing::MakeOp;
using testing::MakePlan;
using testing::RecordingSink;

// Polls `done` for up to 5 s.
template <typename F>
bool WaitUntil(F done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

class LocalStagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_reduce::LocalOptions o;
    o.local_size = 2;
    o.job = "ls" + std::to_string(getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.start_timeout_s = 10;
    auto root_start = std::async(std::launch::async, [o]() mutable {
      o.local_rank = o.global_rank = 1;
      return local_reduce::LocalReducer::Start(o, nullptr);
    });
    o.local_rank = o.global_rank = 0;
    auto nr = local_reduce::LocalReducer::Start(o, nullptr);
    ASSERT_TRUE(nr.ok()) << nr.status().ToString();
    non_root_ = std::move(nr.value());
    auto r = root_start.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    root_ = std::move(r.value());
    root_reduce_ = std::make_unique<stages::LocalReduceStage>(&root_reduced_, root_.get(), true);
    root_bcast_ = std::make_unique<stages::LocalBroadcastStage>(&root_published_, root_.get());
    nr_reduce_ = std::make_unique<stages::LocalReduceStage>(&nr_contributed_, non_root_.get(), true);
    nr_bcast_ = std::make_unique<stages::LocalBroadcastStage>(&nr_received_, non_root_.get());
  }

  std::unique_ptr<local_reduce::LocalReducer> root_, non_root_;
  // One sink per stage: each records that stage's completions.
  RecordingSink root_reduced_, root_published_, nr_contributed_, nr_received_;
  std::unique_ptr<pipeline::Stage> root_reduce_, root_bcast_, nr_reduce_, nr_bcast_;
  pipeline::Pipeline pipeline_;
};

TEST_F(LocalStagesTest, PartitionsAreSummedAndBroadcastOneByOne) {
  auto plan = MakePlan("w", 2, 2, 16);  // two partitions of 4 floats
  std::vector<float> root_in = {1, 2, 3, 4, 5, 6, 7, 8}, root_out(8, 0.f);
  std::vector<float> nr_in = {10, 20, 30, 40, 50, 60, 70, 80}, nr_out(8, 0.f);
  auto root_op = MakeOp(*plan, pipeline_, root_in.data(), root_out.data());
  auto nr_op = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data());
  for (auto* op : {root_op.get(), nr_op.get()})
    for (auto& t : op->parts) t.round = 1;

  // Partition 1 first: the non-root contributes, the root gathers (the sum is ready at once).
  nr_reduce_->Start(&nr_op->parts[1]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op->parts[1]).ok());
  root_reduce_->Start(&root_op->parts[1]);
  ASSERT_TRUE(root_reduced_.WaitFor(&root_op->parts[1]).ok());
  EXPECT_EQ(std::vector<float>(root_out.begin() + 4, root_out.end()), (std::vector<float>{55, 66, 77, 88}));
  EXPECT_EQ(root_out[0], 0.f);  // partition 0 untouched so far
  // The non-root awaits before the root publishes...
  nr_bcast_->Start(&nr_op->parts[1]);
  EXPECT_FALSE(nr_received_.completed(&nr_op->parts[1]));  // nothing was published yet
  root_bcast_->Start(&root_op->parts[1]);
  ASSERT_TRUE(root_published_.WaitFor(&root_op->parts[1]).ok());
  ASSERT_TRUE(nr_received_.WaitFor(&nr_op->parts[1]).ok());
  EXPECT_EQ(std::vector<float>(nr_out.begin() + 4, nr_out.end()), (std::vector<float>{55, 66, 77, 88}));

  // Partition 0 the other way round: the root is in first, and publishes before the non-root awaits.
  root_reduce_->Start(&root_op->parts[0]);
  EXPECT_FALSE(root_reduced_.completed(&root_op->parts[0]));  // waits for local rank 0
  nr_reduce_->Start(&nr_op->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&root_op->parts[0]).ok());
  EXPECT_EQ(std::vector<float>(root_out.begin(), root_out.begin() + 4), (std::vector<float>{11, 22, 33, 44}));
  root_bcast_->Start(&root_op->parts[0]);
  ASSERT_TRUE(root_published_.WaitFor(&root_op->parts[0]).ok());
  nr_bcast_->Start(&nr_op->parts[0]);
  ASSERT_TRUE(nr_received_.WaitFor(&nr_op->parts[0]).ok());
  EXPECT_EQ(nr_out, root_out);
  EXPECT_EQ(nr_op->parts[0].src, nr_op->parts[0].dst);
}

// The partition's op reaches the root (its own, and the non-root's in LocalReady): a max here;
// processes that disagree on the op get a mismatch.
TEST_F(LocalStagesTest, TheRootAppliesTheOpAndRefusesDisagreement) {
  auto plan = MakePlan("m", 3, 1, 16);
  std::vector<float> root_in = {1, 20, -3, 4}, root_out(4, 0.f), nr_in = {10, 2, -30, 4}, nr_out(4, 0.f);
  auto root_op = MakeOp(*plan, pipeline_, root_in.data(), root_out.data());
  auto nr_op = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data());
  for (auto* op : {root_op.get(), nr_op.get()}) {
    op->request.op = ReduceOp::kMax;
    op->parts[0].round = 1;
  }
  nr_reduce_->Start(&nr_op->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op->parts[0]).ok());
  root_reduce_->Start(&root_op->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&root_op->parts[0]).ok());
  EXPECT_EQ(root_out, (std::vector<float>{10, 20, -3, 4}));

  // Round 2 (new operations: the sinks keep each task's first completion): the root reduces by min,
  // the non-root by max.
  auto root_op2 = MakeOp(*plan, pipeline_, root_in.data(), root_out.data());
  auto nr_op2 = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data());
  root_op2->request.op = ReduceOp::kMin;
  nr_op2->request.op = ReduceOp::kMax;
  root_op2->parts[0].round = nr_op2->parts[0].round = 2;
  nr_reduce_->Start(&nr_op2->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op2->parts[0]).ok());
  root_reduce_->Start(&root_op2->parts[0]);
  Status st = root_reduced_.WaitFor(&root_op2->parts[0]);
  EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.ToString();
  // Whichever of the two the root saw first, the message names the tensor, who does what.
  EXPECT_TRUE(st.message() == "tensor 'm': local rank 0 reduces it by max but the local root by min" ||
              st.message() == "tensor 'm': a local rank reduces it by max but the local root by min")
      << st.message();
}

// Adasum: the root combines the whole contributions in local-rank order (the non-root, local
// rank 0, first), as common/adasum.h's tree does; a process that sums the same tensor meanwhile
// gets a mismatch naming both.
TEST_F(LocalStagesTest, AdasumCombinesInLocalRankOrderAndRefusesASum) {
  auto plan = MakePlan("ada", 4, 1, 16, DataType::kFloat64);
  std::vector<double> root_in = {1, 0}, root_out(2, 0.0), nr_in = {1, 1}, nr_out(2, 0.0);
  auto root_op = MakeOp(*plan, pipeline_, root_in.data(), root_out.data());
  auto nr_op = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data());
  for (auto* op : {root_op.get(), nr_op.get()}) {
    op->request.op = ReduceOp::kAdasum;
    op->parts[0].round = 1;
  }
  nr_reduce_->Start(&nr_op->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op->parts[0]).ok());
  root_reduce_->Start(&root_op->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&root_op->parts[0]).ok());
  // a = (1, 1) (local rank 0), b = (1, 0): d = 1, |a|^2 = 2, |b|^2 = 1:
  // (1 - 1/4) a + (1 - 1/2) b = (1.25, 0.75); the sum would be (2, 1).
  std::vector<double> want = {1, 1};
  std::vector<double> b = {1, 0};
  AdasumInto(want.data(), b.data(), 2, DataType::kFloat64);
  EXPECT_EQ(root_out, want);
  EXPECT_EQ(root_out, (std::vector<double>{1.25, 0.75}));

  auto root_op2 = MakeOp(*plan, pipeline_, root_in.data(), root_out.data());
  auto nr_op2 = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data());
  root_op2->request.op = ReduceOp::kSum;
  nr_op2->request.op = ReduceOp::kAdasum;
  root_op2->parts[0].round = nr_op2->parts[0].round = 2;
  nr_reduce_->Start(&nr_op2->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op2->parts[0]).ok());
  root_reduce_->Start(&root_op2->parts[0]);
  Status st = root_reduced_.WaitFor(&root_op2->parts[0]);
  EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.ToString();
  EXPECT_TRUE(st.message() == "tensor 'ada': local rank 0 reduces it by adasum but the local root by sum" ||
              st.message() == "tensor 'ada': a local rank reduces it by adasum but the local root by sum")
      << st.message();
}

TEST_F(LocalStagesTest, ARootFailureReachesTheNonRootWithItsCode) {
  auto plan = MakePlan("w", 0, 1, 16);
  std::vector<float> a(4, 1.f), b(4, 1.f);
  auto root_op = MakeOp(*plan, pipeline_, a.data(), a.data());
  auto nr_op = MakeOp(*plan, pipeline_, b.data(), b.data());
  root_op->parts[0].round = nr_op->parts[0].round = 1;
  nr_reduce_->Start(&nr_op->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op->parts[0]).ok());
  nr_bcast_->Start(&nr_op->parts[0]);
  // The root's partition failed before its broadcast (say the server refused it): the stage it
  // skipped passes the failure on.
  root_bcast_->Skip(&root_op->parts[0], InvalidArgument("server 0: tensor 'w' has 16 bytes on worker 0"));
  Status st = nr_received_.WaitFor(&nr_op->parts[0]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("tensor 'w' has 16 bytes"), std::string::npos) << st.ToString();
}

// join(): once the non-root's join round came in, the root's rounds complete without it (a sum
// adds nothing, a min takes its zeros) and say so; the join round's result is the last one in;
// afterwards the non-root's rounds of a key map past the ones it sat out, both ways.
TEST_F(LocalStagesTest, AJoinedNonRootCountsAsZerosAndItsRoundsMapPastTheOnesItSatOut) {
  auto join_plan = MakePlan("__byteps.join", 9, 1, 4, DataType::kInt32);
  std::vector<int32_t> nr_rank = {0}, nr_last = {-1}, root_rank = {1}, root_last = {-1};
  auto nr_join = MakeOp(*join_plan, pipeline_, nr_rank.data(), nr_last.data());
  auto root_join = MakeOp(*join_plan, pipeline_, root_rank.data(), root_last.data());
  for (auto* op : {nr_join.get(), root_join.get()}) {
    op->request.op = ReduceOp::kJoin;
    op->parts[0].round = 1;
  }
  nr_reduce_->Start(&nr_join->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_join->parts[0]).ok());

  auto sum_plan = MakePlan("s", 5, 1, 8);
  std::vector<float> root_in = {1, 2}, out(2, 0.f);
  auto sum1 = MakeOp(*sum_plan, pipeline_, root_in.data(), out.data());
  sum1->parts[0].round = 1;
  root_reduce_->Start(&sum1->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&sum1->parts[0]).ok());
  EXPECT_EQ(out, root_in);
  EXPECT_TRUE(sum1->parts[0].joined_share);
  auto min_plan = MakePlan("m", 6, 1, 8);
  auto min1 = MakeOp(*min_plan, pipeline_, root_in.data(), out.data());
  min1->request.op = ReduceOp::kMin;
  min1->parts[0].round = 1;
  root_reduce_->Start(&min1->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&min1->parts[0]).ok());
  EXPECT_EQ(out, (std::vector<float>{0, 0}));

  root_reduce_->Start(&root_join->parts[0]);  // the root joins last: its rank is the result
  ASSERT_TRUE(root_reduced_.WaitFor(&root_join->parts[0]).ok());
  EXPECT_EQ(root_last, root_rank);
  EXPECT_FALSE(root_join->parts[0].joined_share);

  // Everyone again on "s": the non-root's round 1 is the root's round 2.
  std::vector<float> nr_in = {10, 20}, nr_out(2, 0.f);
  auto nr_sum = MakeOp(*sum_plan, pipeline_, nr_in.data(), nr_out.data());
  auto root_sum = MakeOp(*sum_plan, pipeline_, root_in.data(), out.data());
  nr_sum->parts[0].round = 1;
  root_sum->parts[0].round = 2;
  nr_reduce_->Start(&nr_sum->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_sum->parts[0]).ok());
  root_reduce_->Start(&root_sum->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&root_sum->parts[0]).ok());
  EXPECT_EQ(out, (std::vector<float>{11, 22}));
  EXPECT_FALSE(root_sum->parts[0].joined_share);
  nr_bcast_->Start(&nr_sum->parts[0]);
  root_bcast_->Start(&root_sum->parts[0]);
  ASSERT_TRUE(nr_received_.WaitFor(&nr_sum->parts[0]).ok());  // published as its own round 1
  EXPECT_EQ(nr_out, out);
}

// Once the root joined, a tensor round the non-root starts goes to the stand-in hook once (not
// once per partition), with what the root needs to run it; the root's round then completes.
TEST_F(LocalStagesTest, AJoinedRootStandsInOncePerTensorRound) {
  std::mutex mu;
  std::vector<local_reduce::LocalReducer::Part> asked;
  root_->SetStandIn([&](const local_reduce::LocalReducer::Part& p) {
    std::lock_guard<std::mutex> lock(mu);
    asked.push_back(p);
  });
  root_->RootJoins();
  auto plan = MakePlan("t", 7, 2, 8);
  std::vector<float> nr_in = {1, 2, 3, 4}, nr_out(4, 0.f), zeros(4, 0.f), out(4, 0.f);
  auto nr_op = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data(), 0, /*average=*/true);
  nr_op->request.attrs = "shape=4";
  for (auto& t : nr_op->parts) t.round = 3;
  for (auto& t : nr_op->parts) {
    nr_reduce_->Start(&t);
    ASSERT_TRUE(nr_contributed_.WaitFor(&t).ok());
  }
  // The stand-in exists because the hook asked for it: wait for that (the root's I/O thread).
  ASSERT_TRUE(WaitUntil([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !asked.empty();
  }));
  auto stand_in = MakeOp(*plan, pipeline_, zeros.data(), out.data());
  for (auto& t : stand_in->parts) t.round = 3;
  for (auto& t : stand_in->parts) {
    root_reduce_->Start(&t);
    ASSERT_TRUE(root_reduced_.WaitFor(&t).ok());
    EXPECT_TRUE(t.joined_share);  // the root's own share is a joined process's zeros
  }
  EXPECT_EQ(out, nr_in);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].name, "t");
  EXPECT_EQ(asked[0].round, 3u);
  EXPECT_EQ(asked[0].tensor_bytes, 16u);
  EXPECT_TRUE(asked[0].average);
  EXPECT_EQ(asked[0].attrs, "shape=4");
}

// A process set the root is outside of (members=0: the non-root only): the root stands in for the
// round without having joined, its zeros left out of the min, and the result goes to the member.
TEST_F(LocalStagesTest, TheRootStandsInForASetItIsNotAMemberOf) {
  std::atomic<int> asked{0};
  root_->SetStandIn([&](const local_reduce::LocalReducer::Part& p) {
    EXPECT_EQ(p.attrs, "members=0");
    ++asked;
  });
  auto plan = MakePlan("ps1.m", 8, 1, 8);
  std::vector<float> nr_in = {3, 4}, nr_out(2, 0.f), zeros(2, 0.f), out(2, 0.f);
  auto nr_op = MakeOp(*plan, pipeline_, nr_in.data(), nr_out.data());
  auto stand_in = MakeOp(*plan, pipeline_, zeros.data(), out.data());
  for (auto* op : {nr_op.get(), stand_in.get()}) {
    op->request.op = ReduceOp::kMin;
    op->request.attrs = "members=0";
    op->parts[0].round = 1;
  }
  nr_reduce_->Start(&nr_op->parts[0]);
  ASSERT_TRUE(nr_contributed_.WaitFor(&nr_op->parts[0]).ok());
  ASSERT_TRUE(WaitUntil([&] { return asked.load() > 0; }));  // the stand-in exists because the hook asked
  root_reduce_->Start(&stand_in->parts[0]);
  ASSERT_TRUE(root_reduced_.WaitFor(&stand_in->parts[0]).ok());
  EXPECT_EQ(out, nr_in);  // not min(3, 0)
  EXPECT_FALSE(stand_in->parts[0].joined_share);
  nr_bcast_->Start(&nr_op->parts[0]);
  root_bcast_->Start(&stand_in->parts[0]);
  ASSERT_TRUE(nr_received_.WaitFor(&nr_op->parts[0]).ok());
  EXPECT_EQ(nr_out, nr_in);
  EXPECT_EQ(asked.load(), 1);
}

}  // namespace
}  // namespace byteps::worker
