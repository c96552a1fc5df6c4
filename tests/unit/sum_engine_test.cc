// One summation shard against in-memory connections: exact sums for every dtype, rounds and double
// buffering, duplicates and resends, and the errors (declaration mismatch, push before InitKey,
// wrong round, wrong size, a payload that could not be received). The shard runs on its own
// thread; the test orders events by waiting for the frames it sends (and for a fence: an error
// reply to a task posted last, which the shard answers only after everything posted before it).
#include "tests/unit/sum_engine_fixture.h"

namespace byteps::server {
namespace {

using namespace test;  // NOLINT: the fixture and its helpers

TEST_F(SumEngineTest, SumsEveryDtypeExactly) {
  Start(3);
  const size_t n = 37;  // not a multiple of any vector width
  for (int code = 0; code < kNumDataTypes; ++code) {
    const DataType dt = *DataTypeFromCode(code);
    SCOPED_TRACE(DataTypeName(dt));
    const uint64_t key = 10 + code;
    Init(key, dt, n);
    for (int w = 0; w < 3; ++w) Push(key, 1, w, testing::Encode(dt, Values(w, n, 1)), dt);
    const std::string want = Bytes(testing::Encode(dt, Sum(3, n, 1)));
    for (int w = 0; w < 3; ++w) {
      SentFrame f = Next(conns_[w], Opcode::kPushPullReply);
      EXPECT_EQ(f.header.key, key);
      EXPECT_EQ(f.header.round, 1u);
      EXPECT_EQ(f.header.request_id, 1000u + w);
      EXPECT_EQ(f.header.dtype, code);
      EXPECT_EQ(f.payload, want);
    }
  }
}

// Each reduction policy for every dtype: 2 workers' small non-negative integers, so min, max and
// product are exact everywhere (bool: and / or / and of "non-zero").
TEST_F(SumEngineTest, MinMaxProductKeysReduceEveryDtype) {
  Start(2);
  const size_t n = 37;
  const std::pair<const char*, double (*)(double, double)> ops[] = {
      {protocol::kOpMin, [](double a, double b) { return std::min(a, b); }},
      {protocol::kOpMax, [](double a, double b) { return std::max(a, b); }},
      {protocol::kOpProduct, [](double a, double b) { return a * b; }},
  };
  uint64_t key = 100;
  for (const auto& [op, apply] : ops) {
    for (int code = 0; code < kNumDataTypes; ++code) {
      const DataType dt = *DataTypeFromCode(code);
      SCOPED_TRACE(std::string(op) + " " + DataTypeName(dt));
      ++key;
      Init(key, dt, n, "metric", op);
      std::vector<double> want(n);
      for (size_t i = 0; i < n; ++i) want[i] = apply(Value(0, i, 1), Value(1, i, 1));
      for (int w = 0; w < 2; ++w) Push(key, 1, w, testing::Encode(dt, Values(w, n, 1)), dt);
      for (int w = 0; w < 2; ++w) EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(dt, want)));
    }
  }
}

TEST_F(SumEngineTest, WorkersThatDisagreeOnTheOpOrAttributesAllGetAMismatch) {
  Start(2);
  const int f32 = static_cast<int>(DataType::kFloat32);
  Init(3, 0, KeyInit{"loss", 4, f32, 4, protocol::kOpMin, ""});
  Init(3, 1, KeyInit{"loss", 4, f32, 4, protocol::kOpMax, ""});
  Status op = NextError(conns_[1]);
  EXPECT_EQ(op.code(), StatusCode::kMismatch);
  EXPECT_TRUE(Has(op.message(), "tensor 'loss' (key 3) is a min on worker 0 but a max on worker 1")) << op.message();

  // Worker 0 waits on the key when worker 1's declaration arrives: both get the same error.
  Init(4, 0, KeyInit{"broadcast.w", 4, f32, 4, protocol::kOpConcat, "shape=1;root=0"});
  PushTask t;
  t.key = 4;
  t.round = 1;
  t.worker = 0;
  t.request_id = 77;
  t.dtype = static_cast<uint8_t>(f32);
  t.conn = conns_[0];
  t.data = pool_.Get(4).value();
  t.bytes = 4;
  engine_->Post(std::move(t));
  Init(4, 1, KeyInit{"broadcast.w", 4, f32, 4, protocol::kOpConcat, "shape=1;root=1;post=2"});
  Status waiter = NextError(conns_[0]), declarer = NextError(conns_[1]);
  EXPECT_EQ(waiter.code(), StatusCode::kMismatch);
  EXPECT_EQ(declarer.code(), StatusCode::kMismatch);
  EXPECT_EQ(waiter.message(), declarer.message());
  EXPECT_EQ(waiter.message(),
            "tensor 'broadcast.w' (key 4, a concat): root is 0 on worker 0 but 1 on worker 1; post is unset on "
            "worker 0 but 2 on worker 1");

  // The same attributes agree; so do identical redeclarations (a reconnect's).
  Init(5, DataType::kInt16, 3, "h", protocol::kOpProduct, "shape=3;scale=0.5");
  Init(5, 0, KeyInit{"h", 6, static_cast<int>(DataType::kInt16), 6, protocol::kOpProduct, "shape=3;scale=0.5"});
  for (int w = 0; w < 2; ++w) Push(5, 1, w, testing::Encode(DataType::kInt16, {2, -3, 4}), DataType::kInt16);
  for (int w = 0; w < 2; ++w)
    EXPECT_EQ(Next(conns_[w], Opcode::kPushPullReply).payload, Bytes(testing::Encode(DataType::kInt16, {4, 9, 16})));
}

TEST_F(SumEngineTest, NoReplyUntilEveryWorkerPushed) {
  Start(2);
  Init(1, DataType::kFloat32, 4);
  Push(1, 1, 0, testing::Encode(DataType::kFloat32, {1, 2, 3, 4}), DataType::kFloat32);
  Drain();
  EXPECT_TRUE(conns_[0]->TakeSent().empty());
  Push(1, 1, 1, testing::Encode(DataType::kFloat32, {10, 20, 30, 40}), DataType::kFloat32);
  EXPECT_EQ(Next(conns_[0], Opcode::kPushPullReply).payload,
            Bytes(testing::Encode(DataType::kFloat32, {11, 22, 33, 44})));
}

// The next round accumulates in a fresh buffer: a slow worker still pulling round r (its reply's
// bytes still borrowed by the transport) reads round r's sum even after the fast worker and then
// everyone pushed round r + 1.
TEST_F(SumEngineTest, TheNextRoundNeverTouchesABufferStillBeingSent) {
  Start(2);
  const DataType dt = DataType::kInt32;
  const size_t n = 1000;
  Init(7, dt, n);
  conns_[1]->HoldSends(true);  // worker 1's pull of round 1 is slow
  for (int w = 0; w < 2; ++w) Push(7, 1, w, testing::Encode(dt, Values(w, n, 1)), dt);
  const std::string round1 = Bytes(testing::Encode(dt, Sum(2, n, 1)));
  EXPECT_EQ(Next(conns_[0], Opcode::kPushPullReply).payload, round1);
  EXPECT_EQ(Next(conns_[1], Opcode::kPushPullReply).payload, round1);
  for (uint32_t r = 2; r <= 3; ++r) {
    for (int w = 0; w < 2; ++w) Push(7, r, w, testing::Encode(dt, Values(w, n, r)), dt);
    EXPECT_EQ(Next(conns_[0], Opcode::kPushPullReply).payload, Bytes(testing::Encode(dt, Sum(2, n, r))));
    EXPECT_EQ(Next(conns_[1], Opcode::kPushPullReply).header.round, r);
  }
  auto held = conns_[1]->HeldPayloads();
  ASSERT_EQ(held.size(), 3u);
  EXPECT_EQ(held[0], round1) << "round 1's result was overwritten while it was being sent";
  EXPECT_EQ(held[1], Bytes(testing::Encode(dt, Sum(2, n, 2))));
  conns_[1]->CompleteHeld();
}

TEST_F(SumEngineTest, ADuplicatePushCountsOnce) {
  Start(2);
  const DataType dt = DataType::kFloat64;
  Init(3, dt, 2);
  Push(3, 1, 0, testing::Encode(dt, {1, 1}), dt);
  Push(3, 1, 0, testing::Encode(dt, {1, 1}), dt);  // a resend of the same push
  Drain();
  EXPECT_TRUE(conns_[0]->TakeSent().empty()) << "the duplicate completed the round";
  Push(3, 1, 1, testing::Encode(dt, {5, 5}), dt);
  const std::string want = Bytes(testing::Encode(dt, {6, 6}));
  EXPECT_EQ(Next(conns_[0], Opcode::kPushPullReply).payload, want);
  EXPECT_EQ(Next(conns_[1], Opcode::kPushPullReply).payload, want);
  // Again after the round completed (its reply was lost on a dropped connection): answered again.
  Push(3, 1, 1, testing::Encode(dt, {5, 5}), dt, /*request_id=*/77);
  SentFrame again = Next(conns_[1], Opcode::kPushPullReply);
  EXPECT_EQ(again.header.request_id, 77u);
  EXPECT_EQ(again.payload, want);
}

TEST_F(SumEngineTest, AResendRepointsTheWaiterAtItsNewConnection) {
  Start(2);
  const DataType dt = DataType::kUint8;
  Init(4, dt, 3);
  Push(4, 1, 0, testing::Encode(dt, {1, 2, 3}), dt, /*request_id=*/10);
  Conn reconnected = NewConn("worker 0 (reconnected)");
  Push(4, 1, 0, testing::Encode(dt, {1, 2, 3}), dt, /*request_id=*/11, reconnected);
  Push(4, 1, 1, testing::Encode(dt, {1, 1, 1}), dt);
  SentFrame f = Next(reconnected, Opcode::kPushPullReply);
  EXPECT_EQ(f.header.request_id, 11u);
  EXPECT_EQ(f.payload, Bytes(testing::Encode(dt, {2, 3, 4})));
  Next(conns_[1], Opcode::kPushPullReply);
  Drain();
  EXPECT_TRUE(conns_[0]->TakeSent().empty()) << "the old connection was answered too";
}

// After a reconnect the resend can reach the server before the old connection's last bytes (two
// sockets, two I/O threads): the original push arriving late on the old connection must not
// take the waiting reply back to it (its worker closed it; the reply would be lost).
TEST_F(SumEngineTest, ALateOriginalOnTheOldConnectionKeepsTheReplyOnTheNewOne) {
  Start(2);
  const DataType dt = DataType::kUint8;
  Init(4, dt, 3);
  Conn reconnected = NewConn("worker 0 (reconnected)");
  Push(4, 1, 0, testing::Encode(dt, {1, 2, 3}), dt, /*request_id=*/10, reconnected, /*generation=*/2);
  Push(4, 1, 0, testing::Encode(dt, {1, 2, 3}), dt, /*request_id=*/10, conns_[0], /*generation=*/1);  // late
  Push(4, 1, 1, testing::Encode(dt, {1, 1, 1}), dt);
  SentFrame f = Next(reconnected, Opcode::kPushPullReply);
  EXPECT_EQ(f.payload, Bytes(testing::Encode(dt, {2, 3, 4})));
  Next(conns_[1], Opcode::kPushPullReply);
  Drain();
  EXPECT_TRUE(conns_[0]->TakeSent().empty()) << "the reply went back to the old connection";
}

TEST_F(SumEngineTest, ADeclarationMismatchFailsTheWaitersAndTheDeclarer) {
  Start(2);
  const DataType dt = DataType::kFloat32;
  Init(5, 0, KeyInit{"layer1.weight", 400, static_cast<int>(dt), 400, protocol::kOpSum, ""});
  Push(5, 1, 0, std::vector<uint8_t>(400, 0), dt, /*request_id=*/21);
  Init(5, 1, KeyInit{"layer1.weight", 800, static_cast<int>(dt), 800, protocol::kOpSum, ""});
  Status waiter = NextError(conns_[0]);
  EXPECT_EQ(waiter.code(), StatusCode::kMismatch);
  EXPECT_TRUE(Has(waiter.message(), "tensor 'layer1.weight' (key 5) has 400 bytes of float32 on worker 0 but 800 "
                                    "bytes of float32 on worker 1"))
      << waiter.message();
  Status declarer = NextError(conns_[1]);
  EXPECT_EQ(declarer.code(), StatusCode::kMismatch);
  EXPECT_EQ(declarer.message(), waiter.message());
  // The key stays poisoned.
  Push(5, 1, 1, std::vector<uint8_t>(400, 0), dt);
  EXPECT_EQ(NextError(conns_[1]).message(), waiter.message());

  Init(6, 0, KeyInit{"a", 4, static_cast<int>(dt), 4, protocol::kOpSum, ""});
  Init(6, 1, KeyInit{"b", 4, static_cast<int>(dt), 4, protocol::kOpSum, ""});
  Status order = NextError(conns_[1]);
  EXPECT_EQ(order.code(), StatusCode::kMismatch);
  EXPECT_TRUE(Has(order.message(), "worker 0 declared tensor 'a' but worker 1 declared 'b'")) << order.message();
}

TEST_F(SumEngineTest, APushBeforeItsDeclarationIsAProtocolError) {
  Start(1);
  Push(9, 1, 0, std::vector<uint8_t>(8, 0), DataType::kFloat32, /*request_id=*/5);
  SentFrame f = Next(conns_[0], Opcode::kError);
  EXPECT_EQ(f.header.request_id, 5u);
  EXPECT_EQ(f.header.key, 9u);
  Status st = protocol::StatusFromErrorFrame(f.header, f.payload);
  EXPECT_EQ(st.code(), StatusCode::kProtocol);
  EXPECT_TRUE(Has(st.message(), "before its declaration (InitKey)")) << st.message();
}

TEST_F(SumEngineTest, AWrongRoundIsAProtocolError) {
  Start(2);
  Init(2, DataType::kInt8, 4);
  Push(2, 3, 0, std::vector<uint8_t>(4, 1), DataType::kInt8);
  Status st = NextError(conns_[0]);
  EXPECT_EQ(st.code(), StatusCode::kProtocol);
  EXPECT_TRUE(Has(st.message(), "worker 0 pushed round 3 while the server is at round 1")) << st.message();
}

TEST_F(SumEngineTest, APushThatDisagreesWithTheDeclarationIsRefused) {
  Start(1);
  Init(8, DataType::kFloat32, 4);
  Push(8, 1, 0, std::vector<uint8_t>(12, 0), DataType::kFloat32);
  Status size = NextError(conns_[0]);
  EXPECT_EQ(size.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(size.message(), "push of 12 bytes")) << size.message();
  Push(8, 1, 0, std::vector<uint8_t>(16, 0), DataType::kInt32);
  EXPECT_EQ(NextError(conns_[0]).code(), StatusCode::kInvalidArgument);
}

TEST_F(SumEngineTest, APayloadThatCouldNotBeReceivedFailsThatPushNamingTheTensor) {
  Start(2);
  Init(12, DataType::kFloat32, 4, "embedding");
  PushTask t;
  t.key = 12;
  t.round = 1;
  t.worker = 1;
  t.request_id = 99;
  t.conn = conns_[1];
  t.failure = Unavailable("the server cannot allocate 16 bytes for it: out of memory");
  engine_->Post(std::move(t));
  SentFrame f = Next(conns_[1], Opcode::kError);
  EXPECT_EQ(f.header.request_id, 99u);
  Status st = protocol::StatusFromErrorFrame(f.header, f.payload);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(st.message(), "push of tensor 'embedding' key 12 round 1 from worker 1: the server cannot allocate"))
      << st.message();
  // It counted for nothing: the round completes with both workers' real pushes.
  for (int w = 0; w < 2; ++w) Push(12, 1, w, testing::Encode(DataType::kFloat32, {1, 1, 1, 1}), DataType::kFloat32);
  EXPECT_EQ(Next(conns_[0], Opcode::kPushPullReply).payload,
            Bytes(testing::Encode(DataType::kFloat32, {2, 2, 2, 2})));
}

// Uneven ends: once a worker has left (Leave), a round it never pushed can never complete. Whoever
// waits on one is answered at once, and so is whoever pushes one later, with a job-fatal error
// naming both workers, the tensor and both rounds; rounds the leaver did push still complete.
TEST_F(SumEngineTest, ARoundThatNeedsAWorkerThatLeftFailsAtOnceNamingBoth) {
  Start(3);
  Init(5, DataType::kFloat32, 2, "layer1.weight");
  Init(6, DataType::kFloat32, 2, "layer2.bias");
  const auto ones = testing::Encode(DataType::kFloat32, {1, 1});
  for (uint32_t round = 1; round <= 2; ++round)
    for (int w = 0; w < 3; ++w) Push(5, round, w, ones, DataType::kFloat32);
  for (int w = 0; w < 3; ++w)
    for (int r = 0; r < 2; ++r) Next(conns_[w], Opcode::kPushPullReply);
  // Key 6: worker 0 and worker 2 push round 1; worker 1 is at round 1 too but is slow.
  Push(6, 1, 0, ones, DataType::kFloat32);
  Push(6, 1, 1, ones, DataType::kFloat32);
  // Worker 2 leaves after round 2 of key 5, without ever pushing key 6.
  engine_->Post(LeaveTask{2});
  for (int w : {0, 1}) {
    SentFrame f = Next(conns_[w], Opcode::kError);
    EXPECT_TRUE(f.header.flags & protocol::kFlagJobFatal) << "not marked fatal to the job";
    EXPECT_EQ(f.header.request_id, 1000u + w);
    Status st = protocol::StatusFromErrorFrame(f.header, f.payload);
    EXPECT_TRUE(Has(st.message(), "tensor 'layer2.bias' (key 6): worker " + std::to_string(w) +
                                      " needs round 1, but worker 2 has shut down without pushing it once"))
        << st.message();
    EXPECT_TRUE(Has(st.message(), "join()")) << st.message();
  }
  // A later push of key 5's round 3 fails at once too, naming the leaver's last round.
  Push(5, 3, 1, ones, DataType::kFloat32, 77);
  SentFrame f = Next(conns_[1], Opcode::kError);
  EXPECT_TRUE(f.header.flags & protocol::kFlagJobFatal);
  EXPECT_EQ(f.header.request_id, 77u);
  EXPECT_TRUE(Has(f.payload, "tensor 'layer1.weight' (key 5): worker 1 needs round 3, but worker 2 has shut down "
                             "after round 2 of it, so the round can never complete"))
      << f.payload;
  // A second Leave of the same worker changes nothing; a duplicate push of a completed round
  // still gets its sum (the leaver had pushed that round).
  engine_->Post(LeaveTask{2});
  Push(5, 2, 0, ones, DataType::kFloat32, 88);
  SentFrame again = Next(conns_[0], Opcode::kPushPullReply);
  EXPECT_EQ(again.header.request_id, 88u);
  EXPECT_EQ(again.payload, Bytes(testing::Encode(DataType::kFloat32, {3, 3})));
}

// Only a round the leaver did not push is doomed: with every worker at the same round when one
// leaves, nothing fails, and errors other than this one are never marked fatal to the job.
TEST_F(SumEngineTest, ALeaveAfterAnEvenEndFailsNothing) {
  Start(2);
  Init(7, DataType::kFloat32, 1);
  for (int w = 0; w < 2; ++w) Push(7, 1, w, testing::Encode(DataType::kFloat32, {2}), DataType::kFloat32);
  for (int w = 0; w < 2; ++w) Next(conns_[w], Opcode::kPushPullReply);
  engine_->Post(LeaveTask{0});
  engine_->Post(LeaveTask{1});
  Drain();
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(conns_[w]->TakeSent().empty());
  Push(7, 2, 0, testing::Encode(DataType::kFloat32, {2}), DataType::kFloat32);  // after both left: doomed
  SentFrame f = Next(conns_[0], Opcode::kError);
  EXPECT_TRUE(f.header.flags & protocol::kFlagJobFatal) << f.payload;
  engine_.reset();
  conns_.clear();
  Start(2);
  Init(8, DataType::kFloat32, 1);
  Push(8, 2, 0, testing::Encode(DataType::kFloat32, {2}), DataType::kFloat32);  // wrong round, nobody left
  SentFrame wrong = Next(conns_[0], Opcode::kError);
  EXPECT_FALSE(wrong.header.flags & protocol::kFlagJobFatal) << wrong.payload;
}

// Releases (kRelease): a key every worker released, after its rounds completed, is freed; a push
// past a releaser's last round fails at once naming both workers and both rounds.
TEST_F(SumEngineTest, AKeyEveryWorkerReleasedIsFreed) {
  Start(2);
  Init(9, DataType::kFloat32, 2, "emb");
  const auto ones = testing::Encode(DataType::kFloat32, {1, 1});
  for (int w = 0; w < 2; ++w) Push(9, 1, w, ones, DataType::kFloat32);
  for (int w = 0; w < 2; ++w) Next(conns_[w], Opcode::kPushPullReply);
  // Worker 0 releases after round 2, which worker 1 has not pushed yet: the key stays.
  Push(9, 2, 0, ones, DataType::kFloat32);
  engine_->Post(ReleaseTask{9, 0, 2});
  Drain();
  EXPECT_EQ(engine_->keys_held(), 1u);
  engine_->Post(ReleaseTask{9, 1, 2});  // worker 1 says it is done after round 2 too, before its push lands
  Push(9, 2, 1, ones, DataType::kFloat32);
  for (int w = 0; w < 2; ++w) Next(conns_[w], Opcode::kPushPullReply);  // round 2 still completes
  Drain();
  EXPECT_EQ(engine_->keys_held(), 0u);
  EXPECT_EQ(engine_->keys_freed(), 1u);
  // A release of a key with nothing of one worker's is kept until the others release it too.
  engine_->Post(ReleaseTask{10, 0, 0});
  Drain();
  EXPECT_EQ(engine_->keys_held(), 1u);
  engine_->Post(LeaveTask{1});  // a worker that left counts as released
  Drain();
  EXPECT_EQ(engine_->keys_held(), 0u);
  EXPECT_EQ(engine_->keys_freed(), 2u);
}

TEST_F(SumEngineTest, APushPastAReleaseFailsNamingBothWorkers) {
  Start(2);
  Init(11, DataType::kFloat32, 2, "layer.w");
  const auto ones = testing::Encode(DataType::kFloat32, {1, 1});
  for (int w = 0; w < 2; ++w) Push(11, 1, w, ones, DataType::kFloat32);
  for (int w = 0; w < 2; ++w) Next(conns_[w], Opcode::kPushPullReply);
  Push(11, 2, 1, ones, DataType::kFloat32, 55);  // worker 1 waits on round 2 ...
  engine_->Post(ReleaseTask{11, 0, 1});          // ... which worker 0 will never push
  Status st = NextError(conns_[1]);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(st.message(), "tensor 'layer.w' (key 11): worker 0 moved the tensor")) << st.message();
  EXPECT_TRUE(Has(st.message(), "after round 1; worker 1 pushed round 2")) << st.message();
  Push(11, 3, 1, ones, DataType::kFloat32, 56);  // and so is a later push
  st = NextError(conns_[1]);
  EXPECT_TRUE(Has(st.message(), "worker 1 pushed round 3")) << st.message();
}

}  // namespace
}  // namespace byteps::server
