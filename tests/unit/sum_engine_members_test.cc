// Process sets on one summation shard: a key declared with "members=<ranks>" completes a round when
// every member pushed (a worker outside the set never blocks it), refuses a push or declaration
// from a non-member naming it, compares the set across workers like any attribute, and counts only
// members when a worker leaves or releases.
#include <fmt/format.h>

#include "tests/unit/sum_engine_fixture.h"

namespace byteps::server {
namespace {

using namespace test;  // NOLINT: the fixture and its helpers

const DataType kF32 = DataType::kFloat32;

KeyInit F32(const std::string& name, size_t count, const std::string& attrs) {
  return KeyInit{name, count * 4, static_cast<int>(kF32), count * 4, protocol::kOpSum, attrs};
}

TEST_F(SumEngineTest, ARoundOfAProcessSetCompletesWhenEveryMemberPushed) {
  Start(3);
  for (int w : {0, 2}) Init(1, w, F32("ps1.allreduce.g", 3, "op=allreduce;members=0,2"));
  for (uint32_t round = 1; round <= 3; ++round) {
    Push(1, round, 0, testing::Encode(kF32, Values(0, 3, round)), kF32);
    Drain();
    EXPECT_TRUE(conns_[0]->TakeSent().empty()) << "round " << round << " completed without worker 2";
    Push(1, round, 2, testing::Encode(kF32, Values(2, 3, round)), kF32);
    std::vector<double> want(3);
    for (size_t i = 0; i < 3; ++i) want[i] = Value(0, i, round) + Value(2, i, round);
    for (int w : {0, 2}) {
      SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
      EXPECT_EQ(f.header.round, round);
      EXPECT_EQ(f.payload, Bytes(testing::Encode(kF32, want)));
    }
  }
  EXPECT_TRUE(conns_[1]->TakeSent().empty());
  // A set with one member completes each round on that member's push alone.
  Init(2, 1, F32("ps2.allreduce.g", 1, "members=1"));
  Push(2, 1, 1, testing::Encode(kF32, {5}), kF32);
  EXPECT_EQ(Next(conns_[1], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kF32, {5})));
}

TEST_F(SumEngineTest, ANonMemberIsRefusedNamingItAndTheSet) {
  Start(3);
  // A non-member's declaration, even the first, does not claim the key.
  Init(4, 1, F32("ps1.allreduce.x", 1, "members=0,2"));
  Status st = NextError(conns_[1]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "worker 1 declared tensor 'ps1.allreduce.x' (key 4) of process set [0, 2], which it is not a "
                          "member of");
  for (int w : {0, 2}) Init(4, w, F32("ps1.allreduce.x", 1, "members=0,2"));
  Init(4, 1, F32("ps1.allreduce.x", 1, "members=0,2"));
  EXPECT_TRUE(Has(NextError(conns_[1]).message(), "worker 1 declared tensor 'ps1.allreduce.x'"));
  Push(4, 1, 1, testing::Encode(kF32, {7}), kF32, 99);
  st = NextError(conns_[1]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "worker 1 pushed tensor 'ps1.allreduce.x' (key 4) of process set [0, 2], which it is not a "
                          "member of");
  // The members' round is untouched by the refused push.
  for (int w : {0, 2}) Push(4, 1, w, testing::Encode(kF32, {1.0 + w}), kF32);
  for (int w : {0, 2}) EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kF32, {4})));
}

TEST_F(SumEngineTest, WorkersThatDisagreeOnTheSetAllGetAMismatch) {
  Start(3);
  Init(5, 0, F32("ps1.allreduce.y", 1, "members=0,1"));
  Push(5, 1, 0, testing::Encode(kF32, {1}), kF32);
  Init(5, 1, F32("ps1.allreduce.y", 1, "members=0,1,2"));
  Status waiter = NextError(conns_[0]), declarer = NextError(conns_[1]);
  EXPECT_EQ(waiter.code(), StatusCode::kMismatch);
  EXPECT_EQ(waiter.message(), declarer.message());
  EXPECT_TRUE(Has(waiter.message(), "members is 0,1 on worker 0 but 0,1,2 on worker 1")) << waiter.message();
}

TEST_F(SumEngineTest, AMalformedSetFailsNamingTheTensor) {
  Start(2);
  const std::pair<const char*, const char*> cases[] = {
      {"members=0,x", "is not a list of ranks"},
      {"members=0,2", "names rank 2 of 2 workers"},
      {"members=1,0", "is not in ascending order without repeats"},
      {"members=", "is not a list of ranks"},
  };
  uint64_t key = 20;
  for (const auto& [attrs, why] : cases) {
    Init(++key, 0, F32("bad", 1, attrs));
    Status st = NextError(conns_[0]);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(Has(st.message(), fmt::format("tensor 'bad' (key {}) is declared for process set", key))) << st.message();
    EXPECT_TRUE(Has(st.message(), why)) << st.message();
  }
}

TEST_F(SumEngineTest, ALeaveOrReleaseCountsMembersOnly) {
  Start(3);
  for (int w : {0, 1}) Init(6, w, F32("ps1.allreduce.z", 1, "members=0,1"));
  Push(6, 1, 0, testing::Encode(kF32, {1}), kF32);
  engine_->Post(LeaveTask{2});  // outside the set: the round can still complete
  Drain();
  EXPECT_TRUE(conns_[0]->TakeSent().empty());
  Push(6, 1, 1, testing::Encode(kF32, {2}), kF32);
  for (int w : {0, 1}) EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kF32, {3})));
  // Released by both members (worker 2 never used it): freed.
  engine_->Post(ReleaseTask{6, 0, 1});
  engine_->Post(ReleaseTask{6, 1, 1});
  Drain();
  EXPECT_EQ(engine_->keys_freed(), 1u);
  // A member that leaves dooms the rounds it did not push.
  for (int w : {0, 1}) Init(7, w, F32("ps1.allreduce.w", 1, "members=0,1"));
  Push(7, 1, 0, testing::Encode(kF32, {1}), kF32);
  engine_->Post(LeaveTask{1});
  SentFrame f = Next(conns_[0], Opcode::kError);
  EXPECT_TRUE(f.header.flags & protocol::kFlagJobFatal);
  EXPECT_TRUE(Has(f.payload, "worker 0 needs round 1, but worker 1 has shut down")) << f.payload;
}

TEST_F(SumEngineTest, AScatterKeyAnswersEachMemberOnlyItsSlice) {
  // A 6-float tensor in two partitions of 3 floats (offsets 0 and 12 bytes) scattered over members
  // {0, 2}: member 0 owns bytes [0, 8), member 2 [8, 24).
  Start(3);
  for (uint64_t key : {8u, 9u}) {
    KeyInit k = F32("reducescatter.x", 3, "members=0,2;scatter=0,8,24");
    k.tensor_bytes = 24;
    k.offset = key == 8 ? 0 : 12;
    for (int w : {0, 2}) Init(key, w, k);
  }
  for (uint64_t key : {8u, 9u})
    for (int w : {0, 2}) Push(key, 1, w, testing::Encode(kF32, {1.0 + w, 2.0 + w, 3.0 + w}), kF32);
  const auto sums = testing::Encode(kF32, {4, 6, 8});  // each partition's sum
  const std::string all = Bytes(sums);
  SentFrame a = Next(conns_[0], Opcode::kPushPullReply);  // key 8, member 0: bytes [0, 8) of it
  EXPECT_EQ(a.header.arg, 0u);
  EXPECT_EQ(a.payload, all.substr(0, 8));
  SentFrame b = Next(conns_[2], Opcode::kPushPullReply);  // key 8, member 2: bytes [8, 12)
  EXPECT_EQ(b.header.arg, 8u);
  EXPECT_EQ(b.payload, all.substr(8, 4));
  SentFrame c = Next(conns_[0], Opcode::kPushPullReply);  // key 9 (tensor bytes [12, 24)): nothing for member 0
  EXPECT_EQ(c.header.payload_len, 0u);
  SentFrame d = Next(conns_[2], Opcode::kPushPullReply);  // key 9: all of it for member 2
  EXPECT_EQ(d.header.arg, 0u);
  EXPECT_EQ(d.payload, all);
  // Offsets that do not tile the tensor fail the declaration, naming the tensor.
  KeyInit bad = F32("reducescatter.y", 3, "scatter=0,4");
  Init(10, 0, bad);
  Status st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 'reducescatter.y' (key 10) is declared with scatter '0,4'"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace byteps::server
