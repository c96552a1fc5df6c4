// The local reduce and local broadcast stages with a real local root (local rank 1) and non-root
// (local rank 0) in one process, talking over their Unix socket and shared memory, partition by
// partition: sums, results in either order of publish and await, and a root failure reaching the
// non-root with its code.
#include <gtest/gtest.h>
#include <unistd.h>

#include <future>
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

class LocalStagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    local_reduce::LocalOptions o;
    o.local_size = 2;
    o.job = "ls" + std::to_string(getpid()) + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.start_timeout_s = 10;
    auto root_start = std::async(std::launch::async, [o]() mutable {
      o.local_rank = 1;
      return local_reduce::LocalReducer::Start(o, nullptr);
    });
    o.local_rank = 0;
    auto nr = local_reduce::LocalReducer::Start(o, nullptr);
    ASSERT_TRUE(nr.ok()) << nr.status().ToString();
    non_root_ = std::move(nr.value());
    auto r = root_start.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    root_ = std::move(r.value());
    root_reduce_ = std::make_unique<stages::LocalReduceStage>(&root_reduced_, root_.get());
    root_bcast_ = std::make_unique<stages::LocalBroadcastStage>(&root_published_, root_.get());
    nr_reduce_ = std::make_unique<stages::LocalReduceStage>(&nr_contributed_, non_root_.get());
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

}  // namespace
}  // namespace byteps::worker
