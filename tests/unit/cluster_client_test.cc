// The cluster client over an in-memory transport: the test thread plays the scheduler (it reads
// what the client sent and delivers the answers). Join, refusal, failure notices (NodeFailed,
// JobError with its status code, Terminate), barriers, finish, rejoining after a dropped
// connection, and the heartbeat on a fake clock.
#include "cluster/cluster_client.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/clock_offset.h"
#include "protocol/error_frame.h"
#include "tests/support/fake_clock.h"
#include "tests/support/fake_transport.h"

namespace byteps::cluster {
namespace {

using protocol::Header;
using protocol::Opcode;
using protocol::RegisterReply;
using protocol::RegisterRequest;
using testing::FakeClock;
using testing::FakeConnection;
using testing::FakeTransport;
using testing::kEventWait;
using testing::SentFrame;
using Conn = std::shared_ptr<FakeConnection>;

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Header Hdr(Opcode op, uint64_t key = 0, uint32_t arg = 0) {
  Header h;
  h.opcode = op;
  h.key = key;
  h.arg = arg;
  return h;
}

// The address table of a job with two workers and one server.
std::vector<protocol::NodeInfo> Table() {
  return {{"worker", 0, "10.0.0.1", 0, 11}, {"worker", 1, "10.0.0.2", 0, 12}, {"server", 0, "10.0.0.3", 9000, 13}};
}

// A call running on its own thread: the test plays the scheduler meanwhile.
template <typename T>
T Await(std::future<T>& f) {
  if (f.wait_for(kEventWait) != std::future_status::ready) {
    ADD_FAILURE() << "the call did not return";
    std::abort();  // a blocked call would otherwise hang the whole binary
  }
  return f.get();
}

class ClusterClientTest : public ::testing::Test {
 protected:
  ClientOptions Options() {
    ClientOptions o;
    o.role = "worker";
    o.host = "10.0.0.2";
    o.root_uri = "sched.example";
    o.root_port = 4000;
    o.num_workers = 2;
    o.num_servers = 1;
    o.start_timeout_s = 20;
    o.heartbeat_interval_s = 0;  // the heartbeat tests turn it on
    o.op_timeout_s = 20;
    o.reconnect_timeout_s = 5;
    o.clock = &clock_;
    return o;
  }

  // Starts Join on its own thread and reads its registration on the scheduler's side.
  void BeginJoin(const ClientOptions& o) {
    join_ = std::async(std::launch::async, [this, o] {
      return ClusterClient::Join(transport_, o, [this](const Status& st) { OnFailure(st); });
    });
    conn_ = transport_.NextConnect();
    ASSERT_NE(conn_, nullptr) << "Join did not connect";
    register_ = ReadRegister(conn_);
  }

  RegisterRequest ReadRegister(const Conn& c) {
    auto f = c->NextSent();
    if (!f || f->header.opcode != Opcode::kRegister) {
      ADD_FAILURE() << "no Register";
      return {};
    }
    auto r = protocol::DecodeRegisterRequest(f->payload);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : RegisterRequest{};
  }

  static void Answer(const Conn& c, const RegisterReply& r) {
    ASSERT_TRUE(c->Deliver(Hdr(Opcode::kRegisterReply), protocol::Encode(r)).ok());
  }

  // Joins as worker 1 of Table().
  void Join(const ClientOptions& o) {
    BeginJoin(o);
    Answer(conn_, RegisterReply{"", 1, Table()});
    auto c = Await(join_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c.value());
  }

  SentFrame Expect(const Conn& c, Opcode op) {
    auto f = c->NextSent();
    if (!f) {
      ADD_FAILURE() << "nothing sent (expected " << protocol::OpcodeName(op) << ")";
      return {};
    }
    EXPECT_EQ(f->header.opcode, op) << protocol::OpcodeName(f->header.opcode) << " instead";
    return *f;
  }

  void OnFailure(const Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_.push_back(st);
    cv_.notify_all();
  }
  // The first failure reported through the callback, waiting for it.
  Status Failure() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, kEventWait, [&] { return !failures_.empty(); })) return Status::Ok();
    return failures_.front();
  }
  size_t failures() {
    std::lock_guard<std::mutex> lock(mu_);
    return failures_.size();
  }

  FakeClock clock_;
  FakeTransport transport_;  // outlives client_
  std::future<StatusOr<std::unique_ptr<ClusterClient>>> join_;
  Conn conn_;
  RegisterRequest register_;
  std::unique_ptr<ClusterClient> client_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Status> failures_;  // guarded by mu_
};

TEST_F(ClusterClientTest, JoinRegistersAndLearnsItsRankAndTheTable) {
  ClientOptions o = Options();
  o.requested_rank = 1;
  o.port = 0;
  Join(o);
  EXPECT_EQ(register_.role, "worker");
  EXPECT_EQ(register_.requested_rank, 1);
  EXPECT_EQ(register_.host, "10.0.0.2");
  EXPECT_EQ(register_.num_workers, 2);
  EXPECT_EQ(register_.num_servers, 1);
  EXPECT_FALSE(register_.rejoin);
  EXPECT_FALSE(register_.instance.empty());
  EXPECT_EQ(client_->rank(), 1);
  EXPECT_EQ(client_->nodes(), Table());
  ASSERT_EQ(client_->servers().size(), 1u);
  EXPECT_EQ(client_->servers()[0].port, 9000);
  EXPECT_EQ(client_->workers().size(), 2u);
  EXPECT_TRUE(client_->failure().ok());
}

// The offset: the scheduler's clock at its reply, less this node's clock at the moment that reply
// left, which is half the wire time (the round trip less the hold) before it arrived.
TEST(ClockOffsetTest, HalfTheWireTimeBeforeTheReplyArrived) {
  // 10 ms round trip, no hold, the scheduler 5 s ahead: it replied at local 1'005'000.
  EXPECT_EQ(ClockOffsetUs(1'000'000, 1'010'000, 6'005'000, 0), 5'000'000);
  // A scheduler behind: a negative offset.
  EXPECT_EQ(ClockOffsetUs(1'000'000, 1'010'000, 605'000, 0), -400'000);
  // The request waited 9.998 s for the rest of the job: 2 ms on the wire, the reply left at
  // local 11'000'000 - 1'000.
  EXPECT_EQ(ClockOffsetUs(1'000'000, 11'000'000, 21'000'000, 9'998'000), 10'001'000);
  // A hold beyond the round trip (clocks that stepped) is the round trip: the reply left as it came.
  EXPECT_EQ(ClockOffsetUs(1'000'000, 1'010'000, 2'000'000, 50'000'000), 990'000);
  EXPECT_EQ(ClockOffsetUs(1'000'000, 1'010'000, 2'000'000, -7), ClockOffsetUs(1'000'000, 1'010'000, 2'000'000, 0));
}

// Join keeps the job id and the offset the reply gave: a scheduler 5 s ahead reads as +5 s, within
// half of the exchange's round trip.
TEST_F(ClusterClientTest, JoinLearnsTheJobIdAndTheClockOffset) {
  const int64_t before = SystemNowUs();
  BeginJoin(Options());
  RegisterReply r{"", 1, Table()};
  r.job = "00112233445566ff";
  r.clock_us = SystemNowUs() + 5'000'000;
  Answer(conn_, r);
  auto c = Await(join_);
  const int64_t round_trip = SystemNowUs() - before;
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value()->job_id(), "00112233445566ff");
  EXPECT_NEAR(static_cast<double>(c.value()->clock_offset_us()), 5e6, static_cast<double>(round_trip));
}

TEST_F(ClusterClientTest, AReplyWithoutAClockLeavesTheOffsetZero) {
  Join(Options());
  EXPECT_EQ(client_->job_id(), "");
  EXPECT_EQ(client_->clock_offset_us(), 0);
}

TEST_F(ClusterClientTest, ARefusalFailsJoinWithTheSchedulersReason) {
  BeginJoin(Options());
  Answer(conn_, RegisterReply{"worker rank 1 is already taken by pid 7", -1, {}});
  auto c = Await(join_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kAborted);
  EXPECT_TRUE(Has(c.status().message(), "the scheduler refused this worker: worker rank 1 is already taken"))
      << c.status().message();
}

TEST_F(ClusterClientTest, AnUnreachableSchedulerFailsJoinNamingIt) {
  transport_.RefuseConnects(true);
  auto c = ClusterClient::Join(transport_, Options(), nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(c.status().message(), "cannot reach the scheduler at sched.example:4000")) << c.status().message();
}

TEST_F(ClusterClientTest, AConnectionLostDuringRegistrationRegistersAgain) {
  BeginJoin(Options());
  conn_->Close(Unavailable("connection reset by peer"));
  Conn second = transport_.NextConnect();
  ASSERT_NE(second, nullptr) << "Join did not register again";
  RegisterRequest again = ReadRegister(second);
  EXPECT_FALSE(again.rejoin);
  EXPECT_EQ(again.instance, register_.instance);  // the same node: the scheduler replaces the stale entry
  Answer(second, RegisterReply{"", 0, Table()});
  auto c = Await(join_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value()->rank(), 0);
}

// A setting that differs from the job's (no secret here, another wire version: the transport
// closes with InvalidArgument) fails Join at once, naming the scheduler: no retry can fix it.
TEST_F(ClusterClientTest, ARefusedSettingFailsJoinAtOnceWithoutRegisteringAgain) {
  BeginJoin(Options());
  conn_->Close(InvalidArgument("scheduler requires authentication, but BYTEPS_JOB_SECRET is not set here"));
  auto c = Await(join_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << c.status().ToString();
  EXPECT_TRUE(Has(c.status().message(), "registration with the scheduler at sched.example:4000 "
                                        "(DMLC_PS_ROOT_URI/DMLC_PS_ROOT_PORT): scheduler requires authentication, "
                                        "but BYTEPS_JOB_SECRET is not set here"))
      << c.status().message();
  EXPECT_EQ(transport_.NextConnect(std::chrono::milliseconds(200)), nullptr) << "it registered again";
}

// Bytes that are no byteps frames (ProtocolError) may be a damaged frame: registering again is
// worth a few tries, not more (another service listening on the scheduler's port never changes).
TEST_F(ClusterClientTest, ProtocolErrorsDuringRegistrationGiveUpAfterAFewTries) {
  BeginJoin(Options());
  conn_->Close(ProtocolError("frame from sched.example:4000: bad magic 0x20485353 (expected 0x31535042)"));
  for (int attempt = 2; attempt <= 3; ++attempt) {
    Conn next = transport_.NextConnect();
    ASSERT_NE(next, nullptr) << "attempt " << attempt << " did not come";
    ReadRegister(next);
    next->Close(ProtocolError("frame from sched.example:4000: bad magic 0x20485353 (expected 0x31535042)"));
  }
  auto c = Await(join_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kProtocol);
  EXPECT_TRUE(Has(c.status().message(), "failed 3 times: frame from sched.example:4000: bad magic"))
      << c.status().message();
}

// Connections that keep dropping during registration (a reset on the way) register again, but
// only until the process's own start deadline.
TEST_F(ClusterClientTest, RegisteringAgainStopsAtTheStartDeadline) {
  ClientOptions o = Options();
  o.start_timeout_s = 0.6;
  BeginJoin(o);
  conn_->Close(Unavailable("connection reset by peer"));
  for (Conn next; (next = transport_.NextConnect(std::chrono::milliseconds(1500))) != nullptr;) {
    ReadRegister(next);
    next->Close(Unavailable("connection reset by peer"));
  }
  auto c = Await(join_);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_TRUE(Has(c.status().message(), "did not complete within BYTEPS_START_TIMEOUT=1 s; the last connection "
                                        "dropped: connection reset by peer"))
      << c.status().message();
}

TEST_F(ClusterClientTest, NodeFailedFailsTheClientThroughTheCallback) {
  Join(Options());
  protocol::NodeFailedNotice notice{Table()[2], "server 0 died: no heartbeat for 16.0 s"};
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kNodeFailed), protocol::Encode(notice)).ok());
  Status st = Failure();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "server 0 died: no heartbeat for 16.0 s");
  EXPECT_EQ(client_->failure().message(), st.message());
  // Later calls fail with it at once; the callback ran once.
  EXPECT_EQ(client_->Barrier(3, false).code(), StatusCode::kUnavailable);
  EXPECT_EQ(client_->Finish().message(), st.message());
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kTerminate, 0, 1)).ok());
  EXPECT_EQ(failures(), 1u);
}

TEST_F(ClusterClientTest, JobErrorKeepsItsStatusCode) {
  Join(Options());
  Header h = protocol::ErrorHeader(Opcode::kJobError, StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(conn_->Deliver(h, "rendezvous did not complete within 60 s").ok());
  Status st = Failure();
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(Has(st.message(), "the scheduler ended the job: rendezvous did not complete")) << st.message();
}

TEST_F(ClusterClientTest, TerminateZeroEndsTheJobCleanly) {
  ClientOptions o = Options();
  o.role = "server";
  Join(o);
  auto wait = std::async(std::launch::async, [&] { return client_->WaitTerminate(); });
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kTerminate, 0, 0)).ok());
  EXPECT_TRUE(Await(wait).ok());
  EXPECT_EQ(failures(), 0u);
}

TEST_F(ClusterClientTest, TerminateAfterAFailureIsAFailure) {
  ClientOptions o = Options();
  o.role = "server";
  Join(o);
  auto wait = std::async(std::launch::async, [&] { return client_->WaitTerminate(); });
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kTerminate, 0, 1)).ok());
  Status st = Await(wait);
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_TRUE(Has(st.message(), "terminated the job after a failure")) << st.message();
  EXPECT_EQ(Failure().message(), st.message());
}

TEST_F(ClusterClientTest, BarrierWaitsForItsRelease) {
  Join(Options());
  auto b = std::async(std::launch::async, [&] { return client_->Barrier(42, /*all_nodes=*/true); });
  SentFrame f = Expect(conn_, Opcode::kBarrier);
  EXPECT_EQ(f.header.key, 42u);
  EXPECT_EQ(f.header.flags, 1);
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kBarrierRelease, 42)).ok());
  EXPECT_TRUE(Await(b).ok());
}

TEST_F(ClusterClientTest, FinishWaitsForTheEndOfTheJob) {
  Join(Options());
  auto fin = std::async(std::launch::async, [&] { return client_->Finish(); });
  SentFrame f = Expect(conn_, Opcode::kFinish);
  EXPECT_EQ(f.header.arg, 0u);
  ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kTerminate, 0, 0)).ok());
  EXPECT_TRUE(Await(fin).ok());
}

TEST_F(ClusterClientTest, FinishWithALocalFailureTellsTheScheduler) {
  Join(Options());
  Status st = client_->Finish(Unavailable("server 0 reset the connection"));
  EXPECT_EQ(st.message(), "server 0 reset the connection");
  SentFrame f = Expect(conn_, Opcode::kFinish);
  EXPECT_EQ(f.header.arg, 1u);
  EXPECT_EQ(f.payload, "server 0 reset the connection");
}

TEST_F(ClusterClientTest, ADroppedConnectionRejoinsAndRepeatsThePendingBarrier) {
  Join(Options());
  auto b = std::async(std::launch::async, [&] { return client_->Barrier(5, false); });
  Expect(conn_, Opcode::kBarrier);
  conn_->Close(Unavailable("connection reset by peer"));
  Conn back = transport_.NextConnect();
  ASSERT_NE(back, nullptr) << "no rejoin";
  RegisterRequest r = ReadRegister(back);
  EXPECT_TRUE(r.rejoin);
  EXPECT_EQ(r.requested_rank, 1);  // its rank, not the one it asked for at first
  EXPECT_EQ(r.instance, register_.instance);
  Answer(back, RegisterReply{"", 1, Table()});
  SentFrame again = Expect(back, Opcode::kBarrier);  // what the scheduler may have missed
  EXPECT_EQ(again.header.key, 5u);
  ASSERT_TRUE(back->Deliver(Hdr(Opcode::kBarrierRelease, 5)).ok());
  EXPECT_TRUE(Await(b).ok());
  EXPECT_EQ(failures(), 0u);
}

TEST_F(ClusterClientTest, ARefusedRejoinFailsTheNode) {
  Join(Options());
  conn_->Close(Unavailable("connection reset by peer"));
  Conn back = transport_.NextConnect();
  ASSERT_NE(back, nullptr);
  ReadRegister(back);
  Answer(back, RegisterReply{"worker 1 (pid 12) is not a live node of this job; it cannot rejoin", -1, {}});
  Status st = Failure();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_TRUE(Has(st.message(), "refused this worker's rejoin: worker 1 (pid 12) is not a live node")) << st.message();
}

TEST_F(ClusterClientTest, HeartbeatsGoOutEveryInterval) {
  ClientOptions o = Options();
  o.heartbeat_interval_s = 1;
  o.heartbeat_timeout_s = 5;
  Join(o);
  ASSERT_TRUE(clock_.Settle());
  EXPECT_TRUE(conn_->TakeSent().empty()) << "a heartbeat before the interval";
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1.0);
    Expect(conn_, Opcode::kHeartbeat);
    ASSERT_TRUE(conn_->Deliver(Hdr(Opcode::kHeartbeat)).ok());  // the scheduler's echo
  }
  clock_.Advance(0.5);
  ASSERT_TRUE(clock_.Settle());
  EXPECT_TRUE(conn_->TakeSent().empty()) << "a heartbeat before the interval";
}

// A scheduler that has been silent (not even echoing heartbeats) for PS_HEARTBEAT_TIMEOUT is taken
// for unreachable: the client drops the connection and rejoins.
TEST_F(ClusterClientTest, ASilentSchedulerIsDroppedAndRejoined) {
  ClientOptions o = Options();
  o.heartbeat_interval_s = 1;
  o.heartbeat_timeout_s = 5;
  Join(o);
  ASSERT_TRUE(clock_.Settle());  // the heartbeat thread is waiting for its first interval
  for (int i = 0; i < 5; ++i) {  // 5 s of silence is not yet too long
    clock_.Advance(1.0);
    Expect(conn_, Opcode::kHeartbeat);
  }
  EXPECT_FALSE(conn_->closed());
  clock_.Advance(1.0);
  Conn back = transport_.NextConnect();
  ASSERT_NE(back, nullptr) << "the silent scheduler was not dropped";
  EXPECT_TRUE(conn_->closed());
  EXPECT_TRUE(ReadRegister(back).rejoin);
  Answer(back, RegisterReply{"", 1, Table()});
  clock_.Advance(1.0);
  Expect(back, Opcode::kHeartbeat);  // beating again, on the new connection
  EXPECT_EQ(failures(), 0u);
}

}  // namespace
}  // namespace byteps::cluster
