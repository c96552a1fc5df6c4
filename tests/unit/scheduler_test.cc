// The scheduler service over an in-memory transport and a fake clock: registration and rank
// assignment, refusals, barriers, finish and terminate, failure announcements, the start deadline,
// heartbeat silence and rejoining. The test thread plays every node (it delivers their frames and
// reads what the scheduler sent back); the watchdog's deadlines move only with the fake clock.
#include "cluster/scheduler.h"

#include <gtest/gtest.h>

#include <chrono>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cluster/clock_offset.h"
#include "protocol/error_frame.h"
#include "tests/unit/scheduler_fixture.h"

namespace byteps::cluster {
namespace {

TEST_F(SchedulerTest, RendezvousSendsEveryNodeItsRankAndTheTable) {
  Start(2, 1);
  Conn w0 = Register("worker", -1, 101);
  Conn s0 = Register("server", -1, 201);
  EXPECT_TRUE(w0->TakeSent().empty()) << "answered before the job was complete";
  Conn w1 = Register("worker", -1, 102);
  RegisterReply r0 = Reply(w0), r1 = Reply(w1), rs = Reply(s0);
  EXPECT_EQ(r0.error, "");
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r1.rank, 1);
  EXPECT_EQ(rs.rank, 0);
  ASSERT_EQ(r0.nodes.size(), 3u);  // workers then servers, in rank order
  EXPECT_EQ(r0.nodes[0].pid, 101);
  EXPECT_EQ(r0.nodes[1].pid, 102);
  EXPECT_EQ(r0.nodes[2].role, "server");
  EXPECT_EQ(r0.nodes[2].port, 9201);
  EXPECT_EQ(r0.nodes, rs.nodes);
  EXPECT_EQ(r1.nodes, rs.nodes);
}

// Every reply carries the job's id and the scheduler's clock, read while it answered, with how long
// it held that node's request (real time: at most the time since the test began registering).
TEST_F(SchedulerTest, RepliesCarryTheJobIdAndTheSchedulersClock) {
  Start(2, 1);
  const int64_t before = SystemNowUs();
  Conn w0 = Register("worker", -1, 101);
  Conn s0 = Register("server", -1, 201);
  Conn w1 = Register("worker", -1, 102);
  RegisterReply r0 = Reply(w0), r1 = Reply(w1), rs = Reply(s0);
  const int64_t after = SystemNowUs();
  const std::string job = scheduler_->job_id();
  ASSERT_EQ(job.size(), 16u);
  EXPECT_EQ(job.find_first_not_of("0123456789abcdef"), std::string::npos) << job;
  for (const RegisterReply* r : {&r0, &r1, &rs}) {
    EXPECT_EQ(r->job, job);
    EXPECT_GE(r->clock_us, before);
    EXPECT_LE(r->clock_us, after);
    EXPECT_GE(r->held_us, 0);
    EXPECT_LE(r->held_us, after - before);
  }
  // A refusal names the job too; another scheduler is another job.
  EXPECT_EQ(Reply(Register("worker", -1, 103)).job, job);
  auto other = Scheduler::Start(SchedulerOptions{}, std::make_unique<FakeTransport>());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_NE(other.value()->job_id(), job);
}

TEST_F(SchedulerTest, RequestedRanksFirstThenArrivalOrder) {
  Start(4, 1);
  Conn a = Register("worker", -1, 101);
  Conn b = Register("worker", 0, 102);
  Conn c = Register("worker", -1, 103);
  Conn d = Register("worker", 2, 104);
  Conn s = Register("server", -1, 201);
  EXPECT_EQ(Reply(b).rank, 0);
  EXPECT_EQ(Reply(a).rank, 1);  // the first free rank, by arrival
  EXPECT_EQ(Reply(d).rank, 2);
  EXPECT_EQ(Reply(c).rank, 3);
  EXPECT_EQ(Reply(s).rank, 0);
}

TEST_F(SchedulerTest, RefusesAnExtraNodeBeforeAndAfterTheRendezvous) {
  Start(2, 1);
  Register("worker", -1, 101);
  Register("worker", -1, 102);
  RegisterReply early = Reply(Register("worker", -1, 103));
  EXPECT_TRUE(Has(early.error, "one too many")) << early.error;
  EXPECT_TRUE(Has(early.error, "DMLC_NUM_WORKER")) << early.error;
  Register("server", -1, 201);
  RegisterReply late = Reply(Register("server", -1, 202));
  EXPECT_TRUE(Has(late.error, "already has all 2 workers and 1 servers")) << late.error;
}

// A node whose settings contradict the job's is refused, and since the job as configured can
// never form, every node already registered hears why at once (JobError, then Terminate(1)),
// not at the start deadline; a node arriving afterwards is told the job has ended, and why.
TEST_F(SchedulerTest, AContradictingNodeEndsTheJobAtOnceNamingWhy) {
  struct Case {
    const char* what;
    std::function<RegisterRequest()> request;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"duplicate rank", [this] { return Request("worker", 1, 102); },
       {"worker rank 1 is already taken by pid 101", "pid 102", "duplicate DMLC_WORKER_ID"}},
      {"rank out of range", [this] { return Request("worker", 2, 103); },
       {"asked for rank 2, out of range for a job of 2 workers", "DMLC_NUM_WORKER"}},
      {"another job size", [this] {
         RegisterRequest r = Request("server", -1, 201);
         r.num_workers = 3;
         return r;
       },
       {"DMLC_NUM_WORKER=3", "started with 2 and 1", "pid 201"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    scheduler_.reset();
    Start(2, 1);
    Conn holder = Register("worker", 1, 101);
    Conn server = Register("server", -1, 200);
    RegisterReply refused = Reply(Register(c.request()));
    for (const auto& part : c.says) EXPECT_TRUE(Has(refused.error, part)) << refused.error;
    for (const Conn& member : {holder, server}) {
      SentFrame e = Expect(member, Opcode::kJobError);
      EXPECT_EQ(protocol::StatusCodeFromWire(e.header.arg), StatusCode::kInvalidArgument);
      EXPECT_TRUE(Has(e.payload, "the job cannot start: " + refused.error)) << e.payload;
      EXPECT_EQ(Expect(member, Opcode::kTerminate).header.arg, 1u);
    }
    EXPECT_EQ(scheduler_->Wait().code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(scheduler_->rendezvous_done());
    RegisterReply late = Reply(Register("worker", 0, 104));
    EXPECT_TRUE(Has(late.error, "the job has already ended: the job cannot start")) << late.error;
  }
}

// After a contradicting node ended the job, the scheduler process lingers (role_main.cc) until
// every node has been answered, at most for the timeout: it ends early once the job's nodes (or
// as many as a node claimed the job has) have all heard, and waits out the timeout otherwise.
TEST_F(SchedulerTest, TheLingerAfterAFailedStartEndsWhenEveryNodeWasAnswered) {
  using Seconds = std::chrono::duration<double>;
  const auto timed_wait = [this](double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    scheduler_->WaitEveryRegistrationAnswered(timeout_s);
    return Seconds(std::chrono::steady_clock::now() - t0).count();
  };
  Start(2, 1);
  Register("worker", 1, 101);
  Register("worker", 1, 102);  // duplicate rank: the job cannot start
  ASSERT_EQ(scheduler_->Wait().code(), StatusCode::kInvalidArgument);
  EXPECT_GE(timed_wait(0.3), 0.29);  // 2 of 3 nodes answered: the whole timeout
  Register("server", -1, 200);       // refused (the job has ended): 3 of 3
  EXPECT_LT(timed_wait(30), 5.0);

  scheduler_.reset();
  Start(2, 1);
  RegisterRequest big = Request("worker", -1, 103);
  big.num_workers = 3;  // this node's launch had 3 workers and 1 server: 4 nodes to tell
  Register(big);
  ASSERT_EQ(scheduler_->Wait().code(), StatusCode::kInvalidArgument);
  Register("worker", 0, 104);
  Register("server", -1, 201);
  Register("server", -1, 201);  // the same node again counts once
  EXPECT_GE(timed_wait(0.3), 0.29);
  Register("worker", 1, 105);
  EXPECT_LT(timed_wait(30), 5.0);
}

// What does not make the job impossible is refused alone: an unknown role, bytes that are no
// registration, one node more than the job has (the job may still form without it), and any
// stray node once the job runs.
TEST_F(SchedulerTest, RefusalsThatLeaveTheJobPossibleEndNothing) {
  Start(2, 1);
  Conn w0 = Register("worker", -1, 101);
  RegisterReply role = Reply(Register("observer", -1, 301));
  EXPECT_TRUE(Has(role.error, "unknown role 'observer'")) << role.error;
  Conn garbage = transport_->Accept("garbage");
  ASSERT_TRUE(garbage->Deliver(Hdr(Opcode::kRegister), "{not json").ok());
  EXPECT_FALSE(Reply(garbage).error.empty());
  Register("worker", -1, 102);
  EXPECT_TRUE(Has(Reply(Register("worker", -1, 103)).error, "one too many"));
  EXPECT_TRUE(w0->TakeSent().empty()) << "the job was failed by a refusal that leaves it possible";
  Conn s0 = Register("server", -1, 201);
  EXPECT_EQ(Reply(w0).error, "");  // the rendezvous completes
  RegisterRequest wrong = Request("worker", 1, 104);
  wrong.num_workers = 5;
  EXPECT_TRUE(Has(Reply(Register(wrong)).error, "DMLC_NUM_WORKER=5"));
  EXPECT_TRUE(w0->TakeSent().empty()) << "a stray node failed a running job";
  EXPECT_TRUE(scheduler_->rendezvous_done());
}

// A node whose registration is sent again on a new connection before the scheduler saw the old
// one close (a reset on the way) holds one slot, not two, and gets its rank on the new connection.
TEST_F(SchedulerTest, RegisteringAgainReplacesTheStaleRegistration) {
  Start(2, 0);
  auto node = [&](const std::string& instance) {  // every node in this process: one pid
    RegisterRequest r = Request("worker", -1, 4242);
    r.instance = instance;
    return r;
  };
  Conn stale = Register(node("node-a"));
  Conn again = Register(node("node-a"));  // the same node again, its old connection still open
  Conn other = Register(node("node-b"));  // another node of the same process
  RegisterReply mine = Reply(again), theirs = Reply(other);
  EXPECT_EQ(mine.error, "");
  EXPECT_EQ(theirs.error, "");
  EXPECT_EQ(mine.nodes.size(), 2u);
  EXPECT_NE(mine.rank, theirs.rank) << "node-a holds both worker slots";
  EXPECT_TRUE(stale->TakeSent().empty()) << "the stale connection was answered";
  stale->Close(Unavailable("reset"));  // seen closing at last: ignored, the job goes on
  ASSERT_TRUE(again->Deliver(Hdr(Opcode::kHeartbeat)).ok());
  Expect(again, Opcode::kHeartbeat);
  EXPECT_TRUE(other->TakeSent().empty());
}

TEST_F(SchedulerTest, FramesBeforeRegisteringCloseTheConnection) {
  Start(1, 1);
  Conn c = transport_->Accept("stranger");
  ASSERT_TRUE(c->Deliver(Hdr(Opcode::kHeartbeat)).ok());
  EXPECT_TRUE(c->closed());
  Conn d = transport_->Accept("pusher");
  EXPECT_EQ(d->Deliver(Hdr(Opcode::kPushPull), "x").code(), StatusCode::kProtocol);  // not a control frame
  EXPECT_TRUE(d->closed());
}

TEST_F(SchedulerTest, HeartbeatsAreEchoed) {
  Start(1, 1);
  auto nodes = StartJob();
  ASSERT_TRUE(nodes[0]->Deliver(Hdr(Opcode::kHeartbeat)).ok());
  Expect(nodes[0], Opcode::kHeartbeat);
}

// `byteps top`: a heartbeat's summary is kept (with the one before it), and a TopRequest on any
// connection, registered or not, is answered with every node, workers first, by rank.
TEST_F(SchedulerTest, TopRequestsAreAnsweredWithEveryNodesLastTwoSummaries) {
  Start(2, 1);
  auto nodes = StartJob();  // w0, w1, s0
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kHeartbeat), R"({"t":1})").ok());
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kHeartbeat), R"({"t":2})").ok());
  ASSERT_TRUE(nodes[2]->Deliver(Hdr(Opcode::kHeartbeat), R"({"t":5})").ok());
  ASSERT_TRUE(nodes[0]->Deliver(Hdr(Opcode::kHeartbeat)).ok());  // an empty one keeps nothing
  clock_.Advance(std::chrono::seconds(3));
  Conn top = transport_->Accept("top");
  Header ask = Hdr(Opcode::kTopRequest);
  ask.request_id = 42;
  ASSERT_TRUE(top->Deliver(ask).ok());
  SentFrame f = Expect(top, Opcode::kTopReply);
  EXPECT_EQ(f.header.request_id, 42u);
  auto r = protocol::DecodeTopReply(f.payload);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->job, scheduler_->job_id());
  EXPECT_TRUE(r->started);
  EXPECT_EQ(r->num_workers, 2);
  ASSERT_EQ(r->nodes.size(), 3u);
  EXPECT_EQ(r->nodes[0].node.role, "worker");
  EXPECT_EQ(r->nodes[0].node.rank, 0);
  EXPECT_EQ(r->nodes[0].summary, "");
  EXPECT_EQ(r->nodes[1].node.rank, 1);
  EXPECT_EQ(r->nodes[1].summary, R"({"t":2})");
  EXPECT_EQ(r->nodes[1].previous, R"({"t":1})");
  EXPECT_NEAR(r->nodes[1].heard_s, 3, 1e-6);
  EXPECT_EQ(r->nodes[2].node.role, "server");
  EXPECT_EQ(r->nodes[2].summary, R"({"t":5})");
  EXPECT_EQ(r->nodes[2].previous, "");
  EXPECT_FALSE(top->closed());  // asking registers nothing and closes nothing
}

TEST_F(SchedulerTest, BarriersReleaseWhenTheirMembersAreIn) {
  Start(2, 1);
  auto nodes = StartJob();  // w0, w1, s0
  ASSERT_TRUE(nodes[0]->Deliver(Hdr(Opcode::kBarrier, 7)).ok());
  EXPECT_TRUE(nodes[0]->TakeSent().empty());
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kBarrier, 7)).ok());  // workers only: complete
  EXPECT_EQ(Expect(nodes[0], Opcode::kBarrierRelease).header.key, 7u);
  EXPECT_EQ(Expect(nodes[1], Opcode::kBarrierRelease).header.key, 7u);

  for (int i : {0, 1}) ASSERT_TRUE(nodes[i]->Deliver(Hdr(Opcode::kBarrier, 8, /*flags=*/1)).ok());
  EXPECT_TRUE(nodes[0]->TakeSent().empty()) << "an all-nodes barrier released without the server";
  ASSERT_TRUE(nodes[2]->Deliver(Hdr(Opcode::kBarrier, 8, 1)).ok());
  for (auto& n : nodes) EXPECT_EQ(Expect(n, Opcode::kBarrierRelease).header.key, 8u);

  // Asked again (a node that rejoined and missed the release): released at once.
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kBarrier, 7)).ok());
  EXPECT_EQ(Expect(nodes[1], Opcode::kBarrierRelease).header.key, 7u);
}

TEST_F(SchedulerTest, TerminatesCleanlyWhenEveryWorkerFinished) {
  Start(2, 1);
  auto nodes = StartJob();
  ASSERT_TRUE(nodes[0]->Deliver(Hdr(Opcode::kFinish)).ok());
  EXPECT_TRUE(nodes[2]->TakeSent().empty());
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kFinish)).ok());
  for (auto& n : nodes) EXPECT_EQ(Expect(n, Opcode::kTerminate).header.arg, 0u);
  EXPECT_TRUE(scheduler_->Wait().ok());
}

TEST_F(SchedulerTest, AWorkerFinishingWithAFailureEndsTheJobNamingIt) {
  Start(2, 1);
  auto nodes = StartJob();
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kFinish, 0, 0, /*arg=*/1), "server 0 reset the connection").ok());
  for (auto& n : nodes) {
    SentFrame e = Expect(n, Opcode::kJobError);
    EXPECT_TRUE(Has(e.payload, "worker 1")) << e.payload;
    EXPECT_TRUE(Has(e.payload, "server 0 reset the connection")) << e.payload;
    EXPECT_EQ(protocol::StatusCodeFromWire(e.header.arg), StatusCode::kAborted);
    EXPECT_EQ(Expect(n, Opcode::kTerminate).header.arg, 1u);
  }
  Status st = scheduler_->Wait();
  EXPECT_EQ(st.code(), StatusCode::kAborted);
  EXPECT_TRUE(Has(st.message(), "worker 1")) << st.message();
}

TEST_F(SchedulerTest, ALostNodeIsAnnouncedToEveryoneWithoutAReconnectWindow) {
  Start(2, 1, /*reconnect_timeout_s=*/0);
  auto nodes = StartJob();
  nodes[1]->Close(Unavailable("connection reset by peer"));
  for (int i : {0, 2}) {
    SentFrame f = Expect(nodes[i], Opcode::kNodeFailed);
    auto notice = protocol::DecodeNodeFailedNotice(f.payload);
    ASSERT_TRUE(notice.ok()) << notice.status().ToString();
    EXPECT_EQ(notice->node.role, "worker");
    EXPECT_EQ(notice->node.rank, 1);
    EXPECT_TRUE(Has(notice->reason, "connection reset by peer")) << notice->reason;
    EXPECT_EQ(Expect(nodes[i], Opcode::kTerminate).header.arg, 1u);
  }
  Status st = scheduler_->Wait();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Has(st.message(), "worker 1 (10.0.0.101:0, pid 101) died")) << st.message();
}

TEST_F(SchedulerTest, ALostNodeThatDoesNotRejoinInTimeIsAnnounced) {
  Start(2, 1, /*reconnect_timeout_s=*/5);
  auto nodes = StartJob();
  nodes[0]->Close(Unavailable("connection reset by peer"));
  clock_.Advance(4.0);
  ASSERT_TRUE(clock_.Settle());
  EXPECT_TRUE(nodes[1]->TakeSent().empty()) << "announced before BYTEPS_RECONNECT_TIMEOUT";
  clock_.Advance(1.5);
  SentFrame f = Expect(nodes[1], Opcode::kNodeFailed);
  EXPECT_TRUE(Has(f.payload, "worker 0")) << f.payload;
  EXPECT_TRUE(Has(f.payload, "not re-established within 5 s")) << f.payload;
  EXPECT_EQ(Expect(nodes[2], Opcode::kNodeFailed).payload, f.payload);
}

TEST_F(SchedulerTest, ANodeRejoinsWithinTheReconnectWindow) {
  Start(2, 1, /*reconnect_timeout_s=*/5);
  auto nodes = StartJob();
  ASSERT_TRUE(nodes[0]->Deliver(Hdr(Opcode::kBarrier, 1)).ok());  // in a barrier when it drops
  nodes[0]->Close(Unavailable("connection reset by peer"));
  clock_.Advance(2.0);
  RegisterRequest again = Request("worker", /*rank=*/0, 100);
  again.rejoin = true;
  Conn back = Register(again);
  RegisterReply r = Reply(back);
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.nodes.size(), 3u);
  // The deadline it beat does not fire later; it takes part in barriers again.
  clock_.Advance(10.0);
  ASSERT_TRUE(back->Deliver(Hdr(Opcode::kHeartbeat)).ok());
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kHeartbeat)).ok());
  ASSERT_TRUE(nodes[2]->Deliver(Hdr(Opcode::kHeartbeat)).ok());
  ASSERT_TRUE(clock_.Settle());
  for (auto& c : {back, nodes[1], nodes[2]}) {
    auto sent = c->TakeSent();
    ASSERT_EQ(sent.size(), 1u) << c->peer_name();
    EXPECT_EQ(sent[0].header.opcode, Opcode::kHeartbeat);
  }
  ASSERT_TRUE(back->Deliver(Hdr(Opcode::kBarrier, 1)).ok());
  ASSERT_TRUE(nodes[1]->Deliver(Hdr(Opcode::kBarrier, 1)).ok());
  Expect(back, Opcode::kBarrierRelease);
  Expect(nodes[1], Opcode::kBarrierRelease);
}

TEST_F(SchedulerTest, RejoinIsRefusedForAStrangerAndBeforeTheJobStarted) {
  Start(1, 1);
  RegisterRequest early = Request("worker", 0, 100);
  early.rejoin = true;
  EXPECT_TRUE(Has(Reply(Register(early)).error, "cannot rejoin before the job started"));
  auto nodes = StartJob();
  RegisterRequest stranger = Request("worker", 0, 999);
  stranger.rejoin = true;
  EXPECT_TRUE(Has(Reply(Register(stranger)).error, "is not a live node of this job"));
}

TEST_F(SchedulerTest, StartTimeoutNamesTheMissingRanks) {
  Start(3, 1);
  Conn w0 = Register("worker", 0, 100);
  Conn w2 = Register("worker", 2, 102);
  clock_.Advance(59.0);
  ASSERT_TRUE(clock_.Settle());
  EXPECT_TRUE(w0->TakeSent().empty()) << "failed before BYTEPS_START_TIMEOUT";
  clock_.Advance(1.5);
  for (auto& c : {w0, w2}) {
    SentFrame e = Expect(c, Opcode::kJobError);
    EXPECT_EQ(protocol::StatusCodeFromWire(e.header.arg), StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(Has(e.payload, "rendezvous did not complete within 60 s")) << e.payload;
    EXPECT_TRUE(Has(e.payload, "2 of 3 workers registered (ranks 1 missing)")) << e.payload;
    EXPECT_TRUE(Has(e.payload, "0 of 1 servers registered")) << e.payload;
    EXPECT_EQ(Expect(c, Opcode::kTerminate).header.arg, 1u);
  }
  EXPECT_EQ(scheduler_->Wait().code(), StatusCode::kDeadlineExceeded);
}

TEST_F(SchedulerTest, ASilentNodeIsDeclaredDead) {
  Start(2, 1);
  auto nodes = StartJob();
  for (int step = 0; step < 3; ++step) {  // worker 0 and the server keep beating; worker 1 is silent
    clock_.Advance(4.0);
    ASSERT_TRUE(nodes[0]->Deliver(Hdr(Opcode::kHeartbeat)).ok());
    ASSERT_TRUE(nodes[2]->Deliver(Hdr(Opcode::kHeartbeat)).ok());
    Expect(nodes[0], Opcode::kHeartbeat);
    Expect(nodes[2], Opcode::kHeartbeat);
  }
  ASSERT_TRUE(clock_.Settle());
  EXPECT_TRUE(nodes[1]->TakeSent().empty()) << "declared dead after 12 s";
  clock_.Advance(4.0);  // 16 s of silence > PS_HEARTBEAT_TIMEOUT (15 s); the others 4 s
  SentFrame f = Expect(nodes[0], Opcode::kNodeFailed);
  EXPECT_TRUE(Has(f.payload, "worker 1")) << f.payload;
  EXPECT_TRUE(Has(f.payload, "no heartbeat for 16.0 s")) << f.payload;
  EXPECT_EQ(scheduler_->Wait().code(), StatusCode::kUnavailable);
}

// Regression: the silence clock starts when the rendezvous completes, not at registration. A node
// that registered early and waited longer than PS_HEARTBEAT_TIMEOUT for the last one (nodes only
// beat once they have the table) was declared dead the moment the job started.
TEST_F(SchedulerTest, SilenceIsCountedFromTheRendezvousNotFromRegistration) {
  Start(1, 1);
  Conn w = Register("worker", -1, 100);
  clock_.Advance(20.0);  // > PS_HEARTBEAT_TIMEOUT, < BYTEPS_START_TIMEOUT
  ASSERT_TRUE(clock_.Settle());
  Conn s = Register("server", -1, 200);
  EXPECT_EQ(Reply(w).error, "");
  EXPECT_EQ(Reply(s).error, "");
  clock_.Advance(10.0);  // 30 s since the worker registered, 10 s since the rendezvous
  ASSERT_TRUE(clock_.Settle()) << "the watchdog ended the job";
  EXPECT_TRUE(w->TakeSent().empty());
  EXPECT_TRUE(s->TakeSent().empty());
  clock_.Advance(6.0);  // 16 s since the rendezvous
  SentFrame f = Expect(s, Opcode::kNodeFailed);
  EXPECT_TRUE(Has(f.payload, "no heartbeat for 16.0 s")) << f.payload;
}

TEST_F(SchedulerTest, StopEndsTheJobWithTheReason) {
  Start(1, 1);
  auto nodes = StartJob();
  scheduler_->Stop(Aborted("SIGTERM"));
  for (auto& n : nodes) {
    EXPECT_EQ(Expect(n, Opcode::kJobError).payload, "SIGTERM");
    EXPECT_EQ(Expect(n, Opcode::kTerminate).header.arg, 1u);
  }
  EXPECT_EQ(scheduler_->Wait().message(), "SIGTERM");
}

}  // namespace
}  // namespace byteps::cluster
