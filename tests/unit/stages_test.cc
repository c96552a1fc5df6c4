// Each pipeline stage on its own: copy-out, average, push-pull (against a fake data plane and
// hand-fed replies), and the local reduce and broadcast stages (a local root and a non-root in one
// process, over a real Unix socket and shared memory). No sleeps: completions are waited for with
// deadlines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "protocol/control.h"
#include "protocol/error_frame.h"
#include "worker/stages/average_stage.h"
#include "worker/stages/copy_out_stage.h"
#include "worker/stages/push_pull_stage.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using protocol::Header;
using protocol::Opcode;
using testing::MakeOp;
using testing::MakePlan;
using testing::RecordingSink;

TEST(CopyOutStageTest, MovesTheResultIntoTheOutput) {
  RecordingSink sink;
  stages::CopyOutStage stage(&sink);
  std::vector<float> in(8), out(8, 0.f);
  std::iota(in.begin(), in.end(), 1.f);
  auto plan = MakePlan("w", 0, 2, 16);
  pipeline::Pipeline p({&stage});
  auto op = MakeOp(*plan, p, in.data(), out.data());
  stage.Start(&op->parts[1]);
  ASSERT_TRUE(sink.WaitFor(&op->parts[1]).ok());
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 0, 5, 6, 7, 8}));  // only its partition
  EXPECT_EQ(op->parts[1].src, op->parts[1].dst);
}

// Several processes per host: a process set's members (global ranks) reach the servers as the
// hosts they run on; the other attributes stay as they were.
TEST(PushPullStageHostMembers, RanksBecomeTheirHosts) {
  EXPECT_EQ(stages::PushPullStage::HostMembers("shape=4;members=0,2,3,6;join=fail", 2), "shape=4;members=0,1,3;join=fail");
  EXPECT_EQ(stages::PushPullStage::HostMembers("members=1,2", 4), "members=0");
  EXPECT_EQ(stages::PushPullStage::HostMembers("members=1,2", 1), "members=1,2");
  EXPECT_EQ(stages::PushPullStage::HostMembers("shape=4", 2), "shape=4");
}

TEST(AverageStageTest, DividesThePartitionWhereItIs) {
  RecordingSink sink;
  stages::AverageStage stage(&sink, 4);
  std::vector<int32_t> buf = {8, 9, -8, 4};
  auto plan = MakePlan("w", 0, 1, 16, DataType::kInt32);
  pipeline::Pipeline p({&stage});
  auto op = MakeOp(*plan, p, buf.data(), buf.data());
  stage.Start(&op->parts[0]);
  ASSERT_TRUE(sink.WaitFor(&op->parts[0]).ok());
  EXPECT_EQ(buf, (std::vector<int32_t>{2, 2, -2, 1}));  // floor division, like torch
}

// ---- push-pull ----------------------------------------------------------------------------

class FakeConnection : public transport::Connection {
 public:
  Status Send(const Header&, const std::vector<iovec>&, transport::SendCallback) override { return Status::Ok(); }
  void Close(const Status&) override {}
  bool closed() const override { return false; }
  std::string peer_name() const override { return "server 0 (127.0.0.1:9, pid 5)"; }
  void set_peer_name(std::string) override {}
};

// Captures what the stage sends; Send's result can be set per test.
class FakePlane : public server_links::DataPlane {
 public:
  size_t ConnIndex(int server, uint64_t key) const override { return key % 2; }
  Status Send(int server, const server_links::OutFrame& f) override {
    std::lock_guard<std::mutex> lock(mu);
    sent.push_back({server, f});
    return result;
  }
  void Flush() override { ++flushes; }
  std::vector<Opcode> Opcodes() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<Opcode> ops;
    for (auto& [s, f] : sent) ops.push_back(f.header.opcode);
    return ops;
  }
  std::mutex mu;
  std::vector<std::pair<int, server_links::OutFrame>> sent;
  Status result;
  int flushes = 0;
};

class PushPullStageTest : public ::testing::Test {
 protected:
  // The server's reply to `t`: its header is handed to the stage, `sum` written where the stage
  // said, then the frame completes.
  Status Reply(pipeline::PartitionTask* t, const std::vector<float>& sum) {
    Header h;
    h.opcode = Opcode::kPushPullReply;
    h.key = t->key;
    h.round = t->round;
    h.request_id = t->id;
    h.payload_len = sum.size() * 4;
    auto b = stage.OnReplyHeader(conn, h);
    if (!b.ok()) return b.status();
    std::memcpy(b->data, sum.data(), h.payload_len);
    stage.OnReplyFrame(conn, h, *b);
    return sink.WaitFor(t);
  }
  void ErrorFrame(uint64_t request_id, uint64_t key, StatusCode code, const std::string& msg) {
    Header h = protocol::ErrorHeader(Opcode::kError, code, key, request_id);
    h.payload_len = msg.size();
    auto b = stage.OnReplyHeader(conn, h);
    ASSERT_TRUE(b.ok());
    transport::RecvBuffer rb;
    rb.data = reinterpret_cast<uint8_t*>(const_cast<char*>(msg.data()));
    rb.size = msg.size();
    stage.OnReplyFrame(conn, h, rb);
  }

  RecordingSink sink;
  FakePlane plane;
  FakeConnection conn;
  stages::PushPullStage stage{&sink, &plane, /*host_rank=*/3, /*size=*/2};
  pipeline::Pipeline pipeline{{&stage}};
  std::vector<float> in = std::vector<float>(8, 1.f), out = std::vector<float>(8, 0.f);
};

TEST_F(PushPullStageTest, DeclaresTheTensorOnceThenPushesStraightFromTheInput) {
  auto plan = MakePlan("grad.w", 4, 2, 16);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  op->parts[0].round = op->parts[1].round = 1;
  stage.Start(&op->parts[0]);
  stage.Start(&op->parts[1]);
  EXPECT_EQ(plane.Opcodes(), (std::vector<Opcode>{Opcode::kInitKey, Opcode::kInitKey, Opcode::kPushPull,
                                                  Opcode::kPushPull}));
  const server_links::OutFrame& push = plane.sent[3].second;
  EXPECT_EQ(push.header.sender, 3u);
  EXPECT_EQ(push.header.request_id, op->parts[1].id);
  EXPECT_EQ(push.header.key, protocol::MakeKey(4, 1));
  EXPECT_EQ(push.data, reinterpret_cast<const uint8_t*>(in.data() + 4));  // no copy
  auto ki = protocol::DecodeKeyInit(plane.sent[0].second.owned);
  ASSERT_TRUE(ki.ok());
  EXPECT_EQ(ki->name, "grad.w");
  EXPECT_EQ(ki->tensor_bytes, 32u);
  EXPECT_FALSE(stage.idle());
  EXPECT_EQ(stage.CreditFor(op->parts[0]), 16u);
  stage.Flush();
  EXPECT_EQ(plane.flushes, 1);  // the stage's Flush writes what its Starts queued
}

TEST_F(PushPullStageTest, TheReplyLandsInTheOutputAveragedWhenAsked) {
  auto plan = MakePlan("w", 0, 1, 32);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data(), 0, /*average=*/true);
  stage.Start(&op->parts[0]);
  ASSERT_TRUE(Reply(&op->parts[0], std::vector<float>(8, 6.f)).ok());
  EXPECT_EQ(out, std::vector<float>(8, 3.f));  // sum / size (2)
  EXPECT_EQ(op->parts[0].src, op->parts[0].dst);
  EXPECT_TRUE(stage.idle());
}

TEST_F(PushPullStageTest, AServerErrorKeepsItsCodeAndNamesTheServer) {
  auto plan = MakePlan("w", 0, 2, 16);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  stage.Start(&op->parts[0]);
  stage.Start(&op->parts[1]);
  ErrorFrame(op->parts[1].id, op->parts[1].key, StatusCode::kProtocol, "pushed round 3 while at round 1");
  Status st = sink.WaitFor(&op->parts[1]);
  EXPECT_EQ(st.code(), StatusCode::kProtocol) << st.ToString();
  EXPECT_EQ(st.message(), "server 0 (127.0.0.1:9, pid 5): pushed round 3 while at round 1");
  EXPECT_FALSE(sink.completed(&op->parts[0]));
}

TEST_F(PushPullStageTest, ARefusedDeclarationFailsTheTensorNowAndLater) {
  auto plan = MakePlan("w", 6, 2, 16);
  auto other = MakePlan("v", 7, 1, 16);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  auto op_other = MakeOp(*other, pipeline, in.data(), out.data());
  stage.Start(&op->parts[0]);
  stage.Start(&op_other->parts[0]);
  ErrorFrame(0, protocol::MakeKey(6, 1), StatusCode::kInvalidArgument, "tensor 'w' has 32 bytes on worker 0");
  EXPECT_EQ(sink.WaitFor(&op->parts[0]).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(sink.completed(&op_other->parts[0]));  // another tensor goes on
  stage.Start(&op->parts[1]);  // a later partition of the refused tensor fails at once
  EXPECT_EQ(sink.WaitFor(&op->parts[1]).code(), StatusCode::kInvalidArgument);
}

TEST_F(PushPullStageTest, AFailureWaitsWhileTheReplyIsBeingWritten) {
  auto plan = MakePlan("w", 0, 1, 32);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  pipeline::PartitionTask* t = &op->parts[0];
  stage.Start(t);
  Header h;
  h.opcode = Opcode::kPushPullReply;
  h.key = t->key;
  h.request_id = t->id;
  h.payload_len = 32;
  auto b = stage.OnReplyHeader(conn, h);  // the transport now writes into the output
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data, reinterpret_cast<uint8_t*>(out.data()));
  stage.FailAll(Aborted("the job failed"));
  EXPECT_FALSE(sink.completed(t));  // the user could free the output while we still write it
  stage.OnConnectionLost(conn);     // the transport stopped writing: now it may complete
  EXPECT_EQ(sink.WaitFor(t).code(), StatusCode::kAborted);
}

TEST_F(PushPullStageTest, AReplyOfTheWrongSizeIsAProtocolError) {
  auto plan = MakePlan("w", 0, 1, 32);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  stage.Start(&op->parts[0]);
  Header h;
  h.opcode = Opcode::kPushPullReply;
  h.key = op->parts[0].key;
  h.request_id = op->parts[0].id;
  h.payload_len = 64;
  auto b = stage.OnReplyHeader(conn, h);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kProtocol);
  h.request_id = 999999;  // nobody waits for it: read and dropped
  auto d = stage.OnReplyHeader(conn, h);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->discard);
}

TEST_F(PushPullStageTest, ResendIsDeclarationsThenInFlightOldestFirstForThatConnection) {
  auto plan = MakePlan("w", 0, 4, 8);  // keys 0..3: ConnIndex = key % 2
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  for (int i = 3; i >= 0; --i) stage.Start(&op->parts[i]);
  ASSERT_TRUE(Reply(&op->parts[2], std::vector<float>(2, 1.f)).ok());  // no longer in flight
  auto frames = stage.CollectResend(0, 0);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].header.opcode, Opcode::kInitKey);
  EXPECT_EQ(frames[1].header.opcode, Opcode::kInitKey);
  EXPECT_EQ(frames[2].header.request_id, op->parts[0].id);
  EXPECT_EQ(stage.CollectResend(0, 1).size(), 4u);  // keys 1 and 3: two declarations, two pushes
  EXPECT_LT(stage.CollectResend(0, 1)[2].header.request_id, stage.CollectResend(0, 1)[3].header.request_id);
}

TEST_F(PushPullStageTest, ASendFailureOtherThanAClosedLinkFailsThePartition) {
  auto plan = MakePlan("w", 0, 2, 16);
  auto op = MakeOp(*plan, pipeline, in.data(), out.data());
  plane.result = Unavailable("connection closed");  // the reconnect re-sends it: stays in flight
  stage.Start(&op->parts[0]);
  EXPECT_FALSE(sink.completed(&op->parts[0]));
  plane.result = Internal("header says 16 payload bytes but 8 were given");
  stage.Start(&op->parts[1]);
  EXPECT_EQ(sink.WaitFor(&op->parts[1]).code(), StatusCode::kInternal);
  stage.FailServer(0, Aborted("byteps was shut down"));
  EXPECT_EQ(sink.WaitFor(&op->parts[0]).code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace byteps::worker
