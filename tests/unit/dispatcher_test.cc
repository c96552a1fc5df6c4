// The dispatcher's rules, driven by hand on one thread with a fake clock: stage order, failures
// skipping the stages they did not reach, credit and priority, rounds of a partition in order,
// the stall guard, and failing everything.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <vector>

#include "worker/pipeline/dispatcher.h"
#include "worker/pipeline/observer_fanout.h"
#include "worker/pipeline/stage_metrics_observer.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using testing::MakeOp;
using testing::MakePlan;
using testing::ManualStage;
using Clock = pipeline::Dispatcher::Clock;
using std::chrono::milliseconds;

// Completions go straight into the dispatcher at the fake clock's time (as the dispatcher thread
// does for a stage completing inside Start).
class DirectSink : public pipeline::StageSink {
 public:
  void Complete(pipeline::PartitionTask* task, const Status& status) override {
    dispatcher->Complete(task, status, now);
  }
  pipeline::Dispatcher* dispatcher = nullptr;
  Clock::time_point now{};
};

class DispatcherTest : public ::testing::Test {
 protected:
  void Make(size_t credit_bytes) {
    pipeline::Dispatcher::Options o;
    o.credit_bytes = credit_bytes;
    o.stall_period = milliseconds(50);
    dispatcher_ = std::make_unique<pipeline::Dispatcher>(o, [this](pipeline::PartitionTask* t, const Status& st) {
      finished_.push_back({t, st});
    });
    sink_.dispatcher = dispatcher_.get();
  }
  std::optional<Clock::time_point> Run() { return dispatcher_->Run(sink_.now); }
  void Advance(milliseconds ms) { sink_.now += ms; }
  bool Finished(const pipeline::PartitionTask& t, StatusCode code = StatusCode::kOk) {
    for (auto& [task, st] : finished_)
      if (task == &t) return st.code() == code;
    return false;
  }

  DirectSink sink_;
  std::unique_ptr<pipeline::Dispatcher> dispatcher_;
  std::vector<std::pair<pipeline::PartitionTask*, Status>> finished_;
  std::vector<float> buf_ = std::vector<float>(1024, 1.f);
};

TEST_F(DispatcherTest, TasksPassTheirStagesInOrder) {
  Make(0);
  ManualStage a("a", &sink_), b("b", &sink_);
  dispatcher_->AddStage(&a);
  dispatcher_->AddStage(&b);
  pipeline::Pipeline p({&a, &b});
  auto plan = MakePlan("w", 0, 2, 16);
  auto op = MakeOp(*plan, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op.get());
  Run();
  ASSERT_EQ(a.started.size(), 2u);
  EXPECT_TRUE(b.started.empty());
  a.Finish(a.started[1]);
  Run();
  ASSERT_EQ(b.started.size(), 1u);
  EXPECT_EQ(b.started[0], &op->parts[1]);  // partition 1 moves on while partition 0 is still in a
  b.Finish(b.started[0]);
  EXPECT_TRUE(Finished(op->parts[1]));
  EXPECT_FALSE(Finished(op->parts[0]));
  a.Finish(a.started[0]);
  Run();
  b.Finish(b.started[1]);
  EXPECT_TRUE(Finished(op->parts[0]));
  EXPECT_EQ(op->parts[0].round, 1u);
}

// Counts what it hears.
struct CountingObserver : pipeline::Observer {
  void OperationSubmitted(const pipeline::Operation&) override { ++submitted; }
  void TaskQueued(const pipeline::PartitionTask&, size_t) override { ++queued; }
  void TaskStarted(const pipeline::PartitionTask&, size_t) override { ++started; }
  void TaskCompleted(const pipeline::PartitionTask&, size_t, const Status&) override { ++completed; }
  void OperationFinished(const pipeline::Operation&) override { ++finished; }
  int submitted = 0, queued = 0, started = 0, completed = 0, finished = 0;
};

uint64_t Observed(const pipeline::Stage& s) {
  const std::vector<uint64_t> c = s.latency()->counts();
  return std::accumulate(c.begin(), c.end(), uint64_t{0});
}

// The dispatcher has no metrics of its own: the stage latency is an observer, here behind a
// fan-out beside another one. It times each successful completion in its stage, never a failure;
// the other observer hears every event.
TEST_F(DispatcherTest, StageLatencyIsAnObserverBesideOthers) {
  Make(0);
  sink_.now = Clock::now();  // started_at is the dispatcher's clock; the observer reads the real one
  ManualStage a("observed-a", &sink_), b("observed-b", &sink_);
  dispatcher_->AddStage(&a);
  dispatcher_->AddStage(&b);
  pipeline::StageMetricsObserver metrics;
  CountingObserver other;
  pipeline::ObserverFanout fanout;
  fanout.Add(&metrics);
  fanout.Add(&other);
  dispatcher_->SetObserver(&fanout);
  pipeline::Pipeline p({&a, &b});
  auto plan = MakePlan("observed", 0, 2, 16);
  auto op = MakeOp(*plan, p, buf_.data(), buf_.data());
  const uint64_t a0 = Observed(a), b0 = Observed(b);
  dispatcher_->Submit(op.get());
  Run();
  ASSERT_EQ(a.started.size(), 2u);
  a.Finish(a.started[0]);
  a.Finish(a.started[1], Aborted("partition 1 failed in stage observed-a"));
  Run();
  ASSERT_EQ(b.started.size(), 1u);
  b.Finish(b.started[0]);
  EXPECT_EQ(Observed(a) - a0, 1u);  // the failure is not a latency
  EXPECT_EQ(Observed(b) - b0, 1u);
  EXPECT_EQ(other.submitted, 1);
  EXPECT_EQ(other.queued, 3);
  EXPECT_EQ(other.started, 3);
  EXPECT_EQ(other.completed, 3);
}

TEST_F(DispatcherTest, AStageIsFlushedOnceAfterEachBatchItStarted) {
  Make(0);
  ManualStage a("a", &sink_), b("b", &sink_);
  dispatcher_->AddStage(&a);
  dispatcher_->AddStage(&b);
  pipeline::Pipeline p({&a, &b});
  auto plan = MakePlan("w", 0, 5, 16);
  auto op = MakeOp(*plan, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op.get());
  Run();
  EXPECT_EQ(a.flushed_after, (std::vector<size_t>{5}));  // five starts, one flush (one system call's worth)
  EXPECT_TRUE(b.flushed_after.empty());
  Run();
  EXPECT_EQ(a.flushed_after.size(), 1u);  // nothing new started: no flush
}

TEST_F(DispatcherTest, EmptyPipelineFinishesAtOnce) {
  Make(0);
  pipeline::Pipeline none;
  auto plan = MakePlan("w", 0, 3, 16);
  auto op = MakeOp(*plan, none, buf_.data(), buf_.data());
  dispatcher_->Submit(op.get());
  EXPECT_EQ(finished_.size(), 3u);
}

TEST_F(DispatcherTest, AFailureSkipsTheStagesItDidNotReach) {
  Make(0);
  ManualStage a("a", &sink_), b("b", &sink_), c("c", &sink_);
  for (ManualStage* s : {&a, &b, &c}) dispatcher_->AddStage(s);
  pipeline::Pipeline p({&a, &b, &c});
  auto plan = MakePlan("w", 0, 1, 16);
  auto op = MakeOp(*plan, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op.get());
  Run();
  a.Finish(a.started[0], Unavailable("server 1 died"));
  ASSERT_EQ(b.skipped.size(), 1u);  // told, so a stage others wait on (a local broadcast) can pass it on
  ASSERT_EQ(c.skipped.size(), 1u);
  EXPECT_EQ(c.skipped[0].second.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(a.skipped.empty());
  EXPECT_TRUE(Finished(op->parts[0], StatusCode::kUnavailable));
  Run();
  EXPECT_TRUE(b.started.empty());
}

TEST_F(DispatcherTest, CreditCapsBytesInFlightAndPriorityPicksTheNext) {
  Make(100);
  ManualStage net("net", &sink_, /*credit=*/true);
  dispatcher_->AddStage(&net);
  pipeline::Pipeline p({&net});
  auto low = MakePlan("low", 0, 3, 40);
  auto high = MakePlan("high", 1, 1, 40);
  auto op_low = MakeOp(*low, p, buf_.data(), buf_.data(), /*priority=*/0);
  dispatcher_->Submit(op_low.get());
  Run();
  ASSERT_EQ(net.started.size(), 2u);  // 80 of 100 bytes; a third 40 would exceed the credit
  EXPECT_EQ(dispatcher_->credit_in_flight(), 80u);
  auto op_high = MakeOp(*high, p, buf_.data(), buf_.data(), /*priority=*/5);
  dispatcher_->Submit(op_high.get());
  Run();
  EXPECT_EQ(net.started.size(), 2u);
  net.Finish(net.started[0]);
  Run();
  ASSERT_EQ(net.started.size(), 3u);
  EXPECT_EQ(net.started[2], &op_high->parts[0]);  // the late urgent partition overtakes the backlog
  EXPECT_EQ(dispatcher_->credit_in_flight(), 80u);
}

TEST_F(DispatcherTest, EqualPriorityGoesByKeyThenArrival) {
  Make(0);
  ManualStage s("s", &sink_);
  dispatcher_->AddStage(&s);
  pipeline::Pipeline p({&s});
  auto later = MakePlan("later", 7, 1, 8);
  auto earlier = MakePlan("earlier", 2, 2, 8);
  auto op1 = MakeOp(*later, p, buf_.data(), buf_.data());
  auto op2 = MakeOp(*earlier, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op1.get());
  dispatcher_->Submit(op2.get());
  Run();
  ASSERT_EQ(s.started.size(), 3u);
  EXPECT_EQ(s.started[0], &op2->parts[0]);  // declared earlier: needed earlier by the next forward pass
  EXPECT_EQ(s.started[1], &op2->parts[1]);
  EXPECT_EQ(s.started[2], &op1->parts[0]);
}

TEST_F(DispatcherTest, OversizedTaskGoesWhenNothingIsInFlight) {
  Make(100);
  ManualStage net("net", &sink_, true);
  dispatcher_->AddStage(&net);
  pipeline::Pipeline p({&net});
  auto big = MakePlan("big", 0, 2, 300);
  auto op = MakeOp(*big, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op.get());
  Run();
  ASSERT_EQ(net.started.size(), 1u);  // would starve otherwise
  net.Finish(net.started[0]);
  Run();
  EXPECT_EQ(net.started.size(), 2u);
}

TEST_F(DispatcherTest, ARoundWaitsForThePreviousRoundOfItsPartition) {
  Make(0);
  ManualStage a("a", &sink_), b("b", &sink_);
  dispatcher_->AddStage(&a);
  dispatcher_->AddStage(&b);
  pipeline::Pipeline p({&a, &b});
  auto plan = MakePlan("w", 3, 2, 16);
  auto r1 = MakeOp(*plan, p, buf_.data(), buf_.data());
  auto r2 = MakeOp(*plan, p, buf_.data(), buf_.data());
  dispatcher_->Submit(r1.get());
  dispatcher_->Submit(r2.get());
  Run();
  ASSERT_EQ(a.started.size(), 2u);  // round 2 waits
  EXPECT_EQ(dispatcher_->waiting_for_round(), 2u);
  EXPECT_EQ(r2->parts[0].round, 2u);
  a.Finish(&r1->parts[0]);
  Run();
  EXPECT_EQ(a.started.size(), 2u);  // round 1 of partition 0 is still in the pipeline (stage b)
  b.Finish(&r1->parts[0]);
  Run();
  ASSERT_EQ(a.started.size(), 3u);
  EXPECT_EQ(a.started[2], &r2->parts[0]);  // only partition 0's next round
  EXPECT_EQ(dispatcher_->waiting_for_round(), 1u);
}

TEST_F(DispatcherTest, StallGuardTakesCreditBackAfterAQuietStallPeriod) {
  Make(100);
  ManualStage net("net", &sink_, true);
  dispatcher_->AddStage(&net);
  pipeline::Pipeline p({&net});
  auto a = MakePlan("a", 0, 1, 100);
  auto b = MakePlan("b", 1, 1, 100);
  auto op_a = MakeOp(*a, p, buf_.data(), buf_.data());
  auto op_b = MakeOp(*b, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op_a.get());
  dispatcher_->Submit(op_b.get());
  auto wake = Run();
  ASSERT_EQ(net.started.size(), 1u);
  ASSERT_TRUE(wake.has_value());
  EXPECT_EQ(*wake, sink_.now + milliseconds(50));  // the loop sleeps until then, not forever
  Advance(milliseconds(49));
  Run();
  EXPECT_EQ(net.started.size(), 1u);
  Advance(milliseconds(1));
  EXPECT_FALSE(Run().has_value());
  ASSERT_EQ(net.started.size(), 2u);  // a waits for other workers, not the network: b may go
  EXPECT_EQ(dispatcher_->credit_in_flight(), 100u);  // b's; a gave its credit back
  net.Finish(net.started[0]);
  EXPECT_EQ(dispatcher_->credit_in_flight(), 100u);  // a holds none any more: nothing to release
}

TEST_F(DispatcherTest, NoStallGuardWithoutCreditWaiters) {
  Make(100);
  ManualStage net("net", &sink_, true);
  dispatcher_->AddStage(&net);
  pipeline::Pipeline p({&net});
  auto a = MakePlan("a", 0, 1, 50);
  auto op = MakeOp(*a, p, buf_.data(), buf_.data());
  dispatcher_->Submit(op.get());
  EXPECT_FALSE(Run().has_value());
}

TEST_F(DispatcherTest, FailAllFailsQueuedWaitingAndStartedTasksAndLaterOnes) {
  Make(40);
  ManualStage net("net", &sink_, true), after("after", &sink_);
  dispatcher_->AddStage(&net);
  dispatcher_->AddStage(&after);
  pipeline::Pipeline p({&net, &after});
  auto plan = MakePlan("w", 0, 2, 40);
  auto r1 = MakeOp(*plan, p, buf_.data(), buf_.data());
  auto r2 = MakeOp(*plan, p, buf_.data(), buf_.data());
  dispatcher_->Submit(r1.get());
  dispatcher_->Submit(r2.get());
  Run();
  ASSERT_EQ(net.started.size(), 1u);  // r1 part 0 started, r1 part 1 queued, r2 waiting
  dispatcher_->FailAll(Aborted("the scheduler ended the job"));
  EXPECT_TRUE(Finished(r1->parts[1], StatusCode::kAborted));
  EXPECT_TRUE(Finished(r2->parts[0], StatusCode::kAborted));
  EXPECT_TRUE(Finished(r2->parts[1], StatusCode::kAborted));
  ASSERT_EQ(net.fail_all.size(), 1u);  // the stage fails what it holds...
  EXPECT_FALSE(Finished(r1->parts[0], StatusCode::kAborted));
  net.Finish(net.started[0], net.fail_all[0]);  // ...through the usual completion
  EXPECT_TRUE(Finished(r1->parts[0], StatusCode::kAborted));
  // A task that completes OK after the failure does not go on.
  auto x = MakePlan("x", 9, 1, 8);
  auto r3 = MakeOp(*x, p, buf_.data(), buf_.data());
  dispatcher_->Submit(r3.get());
  EXPECT_TRUE(Finished(r3->parts[0], StatusCode::kAborted));
  Run();
  EXPECT_TRUE(after.started.empty());
}

}  // namespace
}  // namespace byteps::worker
