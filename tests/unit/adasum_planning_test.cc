// Adasum tensors are planned whole: the name service never splits a `whole` request (an Adasum
// tensor: its dot products span the tensor), whatever the partition size, in every generation;
// the worker's KeyAssigner asks for it by the signature's op; the flag survives the wire.
#include <gtest/gtest.h>

#include "protocol/control.h"
#include "protocol/name_planner.h"
#include "worker/planning/key_assigner.h"

namespace byteps::worker {
namespace {

protocol::NameRequest Whole(const std::string& name, uint64_t bytes, uint32_t gen, uint64_t partition) {
  protocol::NameRequest r;
  r.name = name;
  r.generation = gen;
  r.sized = true;
  r.bytes = bytes;
  r.dtype = static_cast<int>(DataType::kFloat32);
  r.partition_bytes = partition;
  r.whole = true;
  return r;
}

TEST(AdasumPlanningTest, AWholeRequestIsOnePartitionInEveryGeneration) {
  protocol::NamePlanner p(3);
  for (uint32_t gen : {0u, 1u}) {
    auto plan = p.Plan(Whole("adasum.w", 40000, gen, 1024 * (gen + 1)));
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ASSERT_EQ(plan->partitions.size(), 1u);
    EXPECT_EQ(plan->partitions[0].offset, 0u);
    EXPECT_EQ(plan->partitions[0].length, 40000u);
  }
  // More bytes than kMaxPartitionsPerTensor small partitions would hold: still one.
  auto big = p.Plan(Whole("adasum.big", 4 * (protocol::kMaxPartitionsPerTensor + 5), 0, 4));
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  EXPECT_EQ(big->partitions.size(), 1u);
  // Empty: one empty partition (it still takes part in rounds).
  auto empty = p.Plan(Whole("adasum.empty", 0, 0, 1024));
  ASSERT_TRUE(empty.ok());
  ASSERT_EQ(empty->partitions.size(), 1u);
  EXPECT_EQ(empty->partitions[0].length, 0u);
  // Not whole: split as before.
  protocol::NameRequest split = Whole("sum.w", 40000, 0, 1024);
  split.whole = false;
  EXPECT_EQ(p.Plan(split)->partitions.size(), 40u);
}

TEST(AdasumPlanningTest, TheWholeFlagCrossesTheWireAndDefaultsToFalse) {
  auto back = protocol::DecodeNameRequest(protocol::Encode(Whole("x", 8, 0, 4)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->whole);
  auto old = protocol::DecodeNameRequest(
      R"({"name":"x","incarnation":0,"generation":0,"sized":true,"bytes":8,"dtype":0,"partition_bytes":4})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_FALSE(old->whole);
  // The servers accept the op in a declaration; an unknown op is still refused.
  protocol::KeyInit ki{"g", 8, 0, 8, protocol::kOpAdasum, ""};
  auto init = protocol::DecodeKeyInit(protocol::Encode(ki));
  ASSERT_TRUE(init.ok()) << init.status().ToString();
  EXPECT_EQ(init->op, "adasum");
  ki.op = "adasum2";
  EXPECT_FALSE(protocol::DecodeKeyInit(protocol::Encode(ki)).ok());
}

TEST(AdasumPlanningTest, TheKeyAssignerAsksForAWholePlanForAnAdasumSignature) {
  auto local = planning::KeyAssigner::LocalResolver(2);
  std::vector<bool> asked_whole;
  planning::KeyAssigner ka(
      [&](const protocol::NameRequest& r) {
        asked_whole.push_back(r.whole);
        return local(r);
      },
      1024);
  planning::Signature sig;
  sig.bytes = 10000;
  sig.op = protocol::kOpAdasum;
  auto a = ka.Begin("adasum.g", sig);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->plan->partitions.size(), 1u);
  ka.End(*a->plan, Status::Ok());
  sig.op = protocol::kOpSum;
  auto s = ka.Begin("sum.g", sig);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->plan->partitions.size(), 10u);
  ka.End(*s->plan, Status::Ok());
  EXPECT_EQ(asked_whole, (std::vector<bool>{true, false}));
}

}  // namespace
}  // namespace byteps::worker
