// Horovod's join() on the summation shards: a "join" key's push marks its worker joined; the other
// keys' rounds then complete without it, its share counted as zeros (min/max/prod reduce with a
// zero), concatenations and "join=fail" keys fail that round (kMismatch), the joined worker's later
// rounds map past those it sat out (replies carry its own round), a "join=late" key answers its
// late push with the round the others completed, and the join round answers the last pusher's
// rank once every worker joined, then resets. Two shards share one board, as on a server.
#include <fmt/format.h>

#include "server/join_board.h"
#include "tests/unit/sum_engine_fixture.h"

namespace byteps::server {
namespace {

using namespace test;  // NOLINT: the fixture and its helpers

const DataType kF32 = DataType::kFloat32;
const DataType kI32 = DataType::kInt32;
constexpr uint64_t kJoinKey = 900;

KeyInit Decl(const std::string& name, DataType dt, size_t count, const std::string& op, const std::string& attrs = "") {
  const size_t bytes = count * DataTypeSize(dt);
  return KeyInit{name, bytes, static_cast<int>(dt), bytes, op, attrs};
}

class SumEngineJoinTest : public SumEngineTest {
 protected:
  // Shard 0 holds the join key; shard 1 (engine_) every other key, as a server's shards would.
  void StartShared(int n) {
    for (int w = 0; w < n; ++w) conns_.push_back(NewConn("worker " + std::to_string(w)));
    board_ = std::make_unique<JoinBoard>(n);
    join_shard_ = std::make_unique<SumEngine>(0, n, board_.get());
    engine_ = std::make_unique<SumEngine>(1, n, board_.get());
    board_->set_notify([this] {
      join_shard_->Post(JoinTask{});
      engine_->Post(JoinTask{});
    });
    for (int w = 0; w < n; ++w) {
      join_shard_->Post(InitTask{kJoinKey, w, conns_[w], Decl("__byteps.join", kI32, 1, protocol::kOpJoin)});
    }
  }
  void TearDown() override {
    board_->Close();
    engine_.reset();
    join_shard_.reset();
  }
  void JoinPush(int worker, uint32_t round) {
    PushTask t;
    t.key = kJoinKey;
    t.round = round;
    t.worker = worker;
    t.request_id = 50 + worker;
    t.dtype = static_cast<uint8_t>(kI32);
    t.conn = conns_[worker];
    auto bytes = testing::Encode(kI32, {static_cast<double>(worker)});
    t.data = pool_.Get(bytes.size()).value();
    std::memcpy(t.data.get(), bytes.data(), bytes.size());
    t.bytes = bytes.size();
    join_shard_->Post(std::move(t));
  }
  // Waits until both shards handled everything posted so far (the join shard's notices included).
  void DrainBoth() {
    Drain();
    std::swap(engine_, join_shard_);
    Drain();
    std::swap(engine_, join_shard_);
    Drain();
  }

  std::unique_ptr<JoinBoard> board_;
  std::unique_ptr<SumEngine> join_shard_;
};

TEST_F(SumEngineJoinTest, AJoinedWorkerCountsAsZerosUntilEveryWorkerJoined) {
  StartShared(3);
  for (int w = 0; w < 3; ++w) Init(1, w, Decl("g", kF32, 2, protocol::kOpSum));
  for (int w = 0; w < 3; ++w) Init(2, w, Decl("m", kI32, 2, protocol::kOpMin));
  // Round 1 of "g" with everyone.
  for (int w = 0; w < 3; ++w) Push(1, 1, w, testing::Encode(kF32, {1.0 + w, 1}), kF32);
  for (int w = 0; w < 3; ++w) EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kF32, {6, 3})));
  // Worker 2 joins; workers 0 and 1 push rounds 2 and 3 of "g" and round 1 of "m" without it.
  JoinPush(2, 1);
  DrainBoth();
  EXPECT_TRUE(conns_[2]->TakeSent().empty()) << "the join round completed before every worker joined";
  for (uint32_t round : {2u, 3u}) {
    for (int w : {0, 1}) Push(1, round, w, testing::Encode(kF32, {1.0 + w, static_cast<double>(round)}), kF32);
    for (int w : {0, 1}) {
      SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
      EXPECT_EQ(f.header.round, round);
      EXPECT_EQ(f.payload, Bytes(testing::Encode(kF32, {3, 2.0 * round})));
    }
  }
  // A round that was already waiting for the joiner completes when it joins.
  Push(2, 1, 0, testing::Encode(kI32, {4, 5}), kI32);
  Drain();
  EXPECT_TRUE(conns_[0]->TakeSent().empty());
  JoinPush(1, 1);  // worker 1 joins while worker 0's "m" round waits for it: zeros, the min is 0 where positive
  SentFrame m = Next(conns_[0], Opcode::kPushPullReply);
  EXPECT_EQ(m.payload, Bytes(testing::Encode(kI32, {0, 0})));
  // A concatenation while workers have joined fails on the worker that ran it, naming them.
  engine_->Post(InitTask{3, 0, conns_[0], Decl("byteps.allgather.x", kF32, 2, protocol::kOpConcat)});
  Push(3, 1, 0, std::vector<uint8_t>(8), kF32, 7);
  Status st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kMismatch) << st.message();
  EXPECT_NE(st.message().find("while workers 1, 2 had joined"), std::string::npos) << st.message();
  // Worker 0 joins last: everyone gets its rank, and the board is clear.
  JoinPush(0, 1);
  for (int w = 0; w < 3; ++w) {
    SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
    EXPECT_EQ(f.payload, Bytes(testing::Encode(kI32, {0}))) << "worker " << w;
  }
  EXPECT_FALSE(board_->any());
  // Worker 2's next round of "g" is its 2nd; it maps onto the key's 4th, and its reply says 2.
  for (int w = 0; w < 3; ++w) {
    const uint32_t own = w == 2 ? 2 : 4;
    Push(1, own, w, testing::Encode(kF32, {1, 1}), kF32);
  }
  for (int w = 0; w < 3; ++w) {
    SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
    EXPECT_EQ(f.header.round, w == 2 ? 2u : 4u);
    EXPECT_EQ(f.payload, Bytes(testing::Encode(kF32, {3, 3})));
  }
}

TEST_F(SumEngineJoinTest, ALateKeyAnswersTheJoinedWorkersOwnPushWithTheOthersRound) {
  StartShared(2);
  const std::string late = fmt::format("{}={}", protocol::kAttrJoin, protocol::kJoinLate);
  for (int w = 0; w < 2; ++w) Init(5, w, Decl("__byteps.tune.partition", kI32, 2, protocol::kOpSum, late));
  JoinPush(0, 1);
  DrainBoth();
  Push(5, 1, 1, testing::Encode(kI32, {0, 0}), kI32);
  EXPECT_EQ(Next(conns_[1], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kI32, {0, 0})));
  JoinPush(1, 1);
  for (int w = 0; w < 2; ++w) Next(conns_[w], Opcode::kPushPullReply);
  // Worker 0 issues it after joining: it gets the round the other completed, not a new one.
  Push(5, 1, 0, testing::Encode(kI32, {2, 9}), kI32);
  SentFrame f = Next(conns_[0], Opcode::kPushPullReply);
  EXPECT_EQ(f.header.round, 1u);
  EXPECT_EQ(f.payload, Bytes(testing::Encode(kI32, {0, 0})));
}

TEST_F(SumEngineJoinTest, AReducescatterKeyFailsWhileAWorkerHasJoined) {
  StartShared(2);
  const std::string fails = fmt::format("{}={}", protocol::kAttrJoin, protocol::kJoinFails);
  for (int w = 0; w < 2; ++w) Init(6, w, Decl("byteps.reducescatter.r", kF32, 2, protocol::kOpSum, fails));
  JoinPush(1, 1);
  DrainBoth();
  Push(6, 1, 0, testing::Encode(kF32, {1, 2}), kF32);
  Status st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kMismatch);
  EXPECT_NE(st.message().find("a reducescatter needs every worker's data"), std::string::npos) << st.message();
}

// A push that says a process behind it has joined (several processes per host): an allreduce's
// round goes on; a reducescatter's fails on every worker, naming that worker's host.
TEST_F(SumEngineJoinTest, APushWithAJoinedProcessBehindItFailsAReducescatterOnly) {
  StartShared(2);
  const std::string fails = fmt::format("{}={}", protocol::kAttrJoin, protocol::kJoinFails);
  for (int w = 0; w < 2; ++w) {
    Init(6, w, Decl("byteps.reducescatter.r", kF32, 2, protocol::kOpSum, fails));
    Init(7, w, Decl("byteps.allreduce.a", kF32, 2, protocol::kOpSum));
  }
  Push(7, 1, 0, testing::Encode(kF32, {1, 2}), kF32, 0, nullptr, 0, /*joined_share=*/true);
  Push(7, 1, 1, testing::Encode(kF32, {3, 4}), kF32);
  for (int w = 0; w < 2; ++w) EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kF32, {4, 6})));
  Push(6, 1, 0, testing::Encode(kF32, {1, 2}), kF32, 0, nullptr, 0, /*joined_share=*/true);
  Push(6, 1, 1, testing::Encode(kF32, {3, 4}), kF32);
  for (int w = 0; w < 2; ++w) {
    Status st = NextError(conns_[w]);
    EXPECT_EQ(st.code(), StatusCode::kMismatch);
    EXPECT_NE(st.message().find("a process on the host of worker 0 had joined"), std::string::npos) << st.message();
  }
  // The next round is a round like any other.
  Push(6, 2, 0, testing::Encode(kF32, {1, 2}), kF32);
  Push(6, 2, 1, testing::Encode(kF32, {3, 4}), kF32);
  for (int w = 0; w < 2; ++w) EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(kF32, {4, 6})));
}

}  // namespace
}  // namespace byteps::server
