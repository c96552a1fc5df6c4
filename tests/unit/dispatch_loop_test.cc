// The dispatcher thread with real stages and a test-only one: operations from several framework
// threads, completions from a stage's own thread, handles that complete with every partition
// through; the stall guard firing with nobody in Wait; and the handle table's poll / wait / error
// rules; the observer hearing every step. The test-only checksum stage shows that a new stage needs
// no change to the dispatcher.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "worker/pipeline/dispatch_loop.h"
#include "worker/pipeline/handle_table.h"
#include "worker/stages/copy_out_stage.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

using testing::MakeOp;
using testing::MakePlan;

// Test-only stage: records the CRC-32C of each partition's bytes where they are now, and
// completes from its own thread (like a stage whose work is asynchronous).
class ChecksumStage : public pipeline::Stage {
 public:
  explicit ChecksumStage(pipeline::StageSink* sink) : pipeline::Stage("checksum", sink), thread_([this] { Run(); }) {}
  ~ChecksumStage() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Start(pipeline::PartitionTask* t) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(t);
    cv_.notify_all();
  }
  uint64_t Sum() {
    std::lock_guard<std::mutex> lock(mu_);
    return sum_;
  }
  int NotInOutput() {
    std::lock_guard<std::mutex> lock(mu_);
    return not_in_output_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      pipeline::PartitionTask* t = queue_.front();
      queue_.pop_front();
      sum_ += Crc32c(0, t->src, t->len);
      if (t->src != t->dst) ++not_in_output_;
      lock.unlock();
      sink()->Complete(t, Status::Ok());
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<pipeline::PartitionTask*> queue_;
  uint64_t sum_ = 0;
  int not_in_output_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

TEST(DispatchLoopTest, ATestOnlyStagePlugsInWithoutChangingTheDispatcher) {
  pipeline::HandleTable handles;
  pipeline::DispatchLoop loop(
      {}, [&](pipeline::PartitionTask* t, const Status& st) { handles.PartDone(*t->op, t->part, st); });
  stages::CopyOutStage copy(&loop);
  ChecksumStage checksum(&loop);
  loop.AddStage(&copy);
  loop.AddStage(&checksum);
  loop.Start();
  pipeline::Pipeline p({&copy, &checksum});

  constexpr int kThreads = 3, kOps = 40, kFloats = 64;
  std::vector<std::unique_ptr<planning::TensorPlan>> plans;
  for (int i = 0; i < kThreads; ++i) plans.push_back(MakePlan("t" + std::to_string(i), i, 4, kFloats));
  std::vector<std::vector<float>> in(kThreads, std::vector<float>(kFloats)), out = in;
  uint64_t expected = 0;  // every partition's checksum, once per operation
  for (int i = 0; i < kThreads; ++i) {
    for (int j = 0; j < kFloats; ++j) in[i][j] = static_cast<float>(i * 1000 + j);
    for (int part = 0; part < 4; ++part) expected += uint64_t{kOps} * Crc32c(0, in[i].data() + part * 16, 64);
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kOps; ++n) {
        auto op = MakeOp(*plans[i], p, in[i].data(), out[i].data());
        HandleId h = handles.Add(op);
        loop.Submit(op);
        if (!handles.Wait(h, 10).ok()) ++failures;
        handles.Release(h);
      }
    });
  }
  for (auto& t : threads) t.join();
  loop.Stop();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(out, in);
  EXPECT_EQ(checksum.Sum(), expected);   // every partition passed the checksum stage once per call
  EXPECT_EQ(checksum.NotInOutput(), 0);  // and always after copy-out had moved it
  EXPECT_EQ(handles.running(), 0u);
}

// Records what the dispatcher reports, and from which thread.
class EventLog : public pipeline::Observer {
 public:
  void OperationSubmitted(const pipeline::Operation& op) override { Add(fmt::format("submit {}", op.request.name)); }
  void TaskQueued(const pipeline::PartitionTask& t, size_t stage) override { Add(fmt::format("queue {} {}", t.part, stage)); }
  void TaskStarted(const pipeline::PartitionTask& t, size_t stage) override { Add(fmt::format("start {} {}", t.part, stage)); }
  void TaskCompleted(const pipeline::PartitionTask& t, size_t stage, const Status& st) override {
    Add(fmt::format("done {} {} {}", t.part, stage, st.ok()));
  }
  void OperationFinished(const pipeline::Operation& op) override { Add(fmt::format("finish {}", op.request.name)); }
  std::vector<std::string> events;    // read after the loop stopped
  std::set<std::thread::id> threads;  // every thread that reported

 private:
  void Add(std::string e) {
    events.push_back(std::move(e));
    threads.insert(std::this_thread::get_id());
  }
};

TEST(DispatchLoopTest, TheObserverHearsEveryStepOnTheDispatcherThread) {
  pipeline::HandleTable handles;
  pipeline::DispatchLoop loop(
      {}, [&](pipeline::PartitionTask* t, const Status& st) { handles.PartDone(*t->op, t->part, st); });
  EventLog log;
  loop.AddObserver(&log);
  stages::CopyOutStage copy(&loop);
  ChecksumStage checksum(&loop);  // completes from a thread of its own
  loop.AddStage(&copy);
  loop.AddStage(&checksum);
  loop.Start();
  pipeline::Pipeline p({&copy, &checksum});
  auto plan = MakePlan("obs", 0, 2, 64);
  std::vector<float> in(32, 1.f), out(32);
  auto op = MakeOp(*plan, p, in.data(), out.data());
  HandleId h = handles.Add(op);
  loop.Submit(op);
  ASSERT_TRUE(handles.Wait(h, 10).ok());
  ASSERT_TRUE(handles.WaitIdle(10));
  loop.Stop();
  ASSERT_FALSE(log.events.empty());
  EXPECT_EQ(log.events.front(), "submit obs");
  EXPECT_EQ(log.events.back(), "finish obs");
  for (int part = 0; part < 2; ++part) {  // each partition's own events, in pipeline order
    std::vector<std::string> mine;
    for (const std::string& e : log.events)  // "<what> <part> ...": the second word is the part
      if (e.rfind("submit", 0) != 0 && e.rfind("finish", 0) != 0 && e[e.find(' ') + 1] == '0' + part) mine.push_back(e);
    const std::vector<std::string> want = {
        fmt::format("queue {} 0", part), fmt::format("start {} 0", part), fmt::format("done {} 0 true", part),
        fmt::format("queue {} 1", part), fmt::format("start {} 1", part), fmt::format("done {} 1 true", part)};
    EXPECT_EQ(mine, want);
  }
  EXPECT_EQ(log.events.size(), 2u + 2 * 6);
  ASSERT_EQ(log.threads.size(), 1u);  // the dispatcher thread only
  EXPECT_NE(*log.threads.begin(), std::this_thread::get_id());
}

TEST(DispatchLoopTest, TheStallGuardFiresWithNobodyWaiting) {
  pipeline::HandleTable handles;
  pipeline::Dispatcher::Options o;
  o.credit_bytes = 64;
  o.stall_period = std::chrono::milliseconds(20);
  pipeline::DispatchLoop loop(
      o, [&](pipeline::PartitionTask* t, const Status& st) { handles.PartDone(*t->op, t->part, st); });
  // A credit stage that never completes its first task (it waits for "other workers").
  class Stuck : public pipeline::Stage {
   public:
    explicit Stuck(pipeline::StageSink* s) : pipeline::Stage("stuck", s) {}
    size_t CreditFor(const pipeline::PartitionTask& t) const override { return t.len; }
    void Start(pipeline::PartitionTask* t) override {
      std::lock_guard<std::mutex> lock(mu);
      started.push_back(t);
      cv.notify_all();
    }
    std::mutex mu;
    std::condition_variable cv;
    std::vector<pipeline::PartitionTask*> started;
  } stuck(&loop);
  loop.AddStage(&stuck);
  loop.Start();
  pipeline::Pipeline p({&stuck});
  auto a = MakePlan("a", 0, 1, 64), b = MakePlan("b", 1, 1, 64);
  std::vector<float> buf(16);
  auto op_a = MakeOp(*a, p, buf.data(), buf.data()), op_b = MakeOp(*b, p, buf.data(), buf.data());
  handles.Add(op_a);
  handles.Add(op_b);
  loop.Submit(op_a);
  loop.Submit(op_b);
  {
    std::unique_lock<std::mutex> lock(stuck.mu);
    ASSERT_TRUE(stuck.cv.wait_for(lock, std::chrono::seconds(5), [&] { return stuck.started.size() == 2; }))
        << "b never got a's credit";
  }
  loop.FailAll(Aborted("done"));
  loop.Complete(stuck.started[0], Aborted("done"));
  loop.Complete(stuck.started[1], Aborted("done"));
  EXPECT_TRUE(handles.WaitIdle(5));
  loop.Stop();
}

TEST(DispatchLoopTest, TheSnapshotSaysWhereEveryPartitionIs) {
  // A credit of one partition: of b's two partitions one runs in the stage, one is queued for
  // credit; a second round of b waits behind the first; a has finished and is not listed.
  pipeline::HandleTable handles;
  pipeline::Dispatcher::Options o;
  o.credit_bytes = 16;
  o.stall_period = std::chrono::hours(1);
  pipeline::DispatchLoop loop(
      o, [&](pipeline::PartitionTask* t, const Status& st) { handles.PartDone(*t->op, t->part, st); });
  class Held : public pipeline::Stage {
   public:
    explicit Held(pipeline::StageSink* s) : pipeline::Stage("held", s) {}
    size_t CreditFor(const pipeline::PartitionTask& t) const override { return t.len; }
    void Start(pipeline::PartitionTask* t) override {
      if (t->op->request.name == "a") return sink()->Complete(t, Status::Ok());
      std::lock_guard<std::mutex> lock(mu);
      started.push_back(t);
    }
    std::mutex mu;
    std::vector<pipeline::PartitionTask*> started;
  } held(&loop);
  loop.AddStage(&held);
  loop.Start();
  pipeline::Pipeline p({&held});
  auto a = MakePlan("a", 0, 1, 8), b = MakePlan("b", 1, 2, 16, DataType::kFloat32, /*server=*/3);
  std::vector<float> buf(16);
  auto op_a = MakeOp(*a, p, buf.data(), buf.data());
  HandleId ha = handles.Add(op_a);
  loop.Submit(op_a);
  ASSERT_TRUE(handles.Wait(ha, 5).ok());
  auto b1 = MakeOp(*b, p, buf.data(), buf.data()), b2 = MakeOp(*b, p, buf.data(), buf.data());
  handles.Add(b1);
  handles.Add(b2);
  loop.Submit(b1);
  loop.Submit(b2);
  auto snap = loop.Snapshot(5);
  ASSERT_TRUE(snap.ok()) << snap.status().message();
  const pipeline::InFlight& f = snap.value();
  EXPECT_EQ(f.operations, 2u);
  EXPECT_EQ(f.credit_in_flight, 16u);
  EXPECT_EQ(f.credit_limit, 16u);
  ASSERT_EQ(f.tasks.size(), 4u);
  using W = pipeline::PartitionTask::Where;
  EXPECT_EQ(f.tasks[0].tensor, "b");
  EXPECT_EQ(f.tasks[0].stage, "held");
  EXPECT_EQ(f.tasks[0].server, 3);
  EXPECT_EQ(f.tasks[0].round, 1u);
  EXPECT_EQ(f.tasks[0].where, W::kRunning);
  EXPECT_EQ(f.tasks[1].where, W::kQueued);
  EXPECT_EQ(f.tasks[2].where, W::kWaitingRound);
  EXPECT_EQ(f.tasks[3].where, W::kWaitingRound);
  EXPECT_EQ(f.tasks[2].round, 2u);
  EXPECT_GE(f.tasks[0].age_s, 0.0);
  loop.FailAll(Aborted("done"));
  {
    std::lock_guard<std::mutex> lock(held.mu);
    for (auto* t : held.started) loop.Complete(t, Aborted("done"));
  }
  EXPECT_TRUE(handles.WaitIdle(5));
  loop.Stop();
  EXPECT_FALSE(loop.Snapshot(1).ok()) << "a stopped loop says so instead of waiting";
}

TEST(HandleTableTest, PollWaitAndTheFirstErrorWithTheTensorsName) {
  pipeline::HandleTable handles;
  pipeline::Pipeline p;
  auto plan = MakePlan("grad.w", 0, 3, 8, DataType::kFloat32, /*server=*/2);
  std::vector<float> buf(6);
  auto op = MakeOp(*plan, p, buf.data(), buf.data());
  op->parts[2].server = 5;
  HandleId h = handles.Add(op);
  EXPECT_EQ(handles.Poll(h).value(), false);
  EXPECT_FALSE(handles.PartDone(*op, 0, Status::Ok()));
  Status late = handles.Wait(h, 0.01);
  EXPECT_EQ(late.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.message().find("push_pull of tensor 'grad.w' did not complete within 0.0 s (BYTEPS_TIMEOUT): "
                                "2 partition(s) outstanding on server(s) 2, 5"),
            std::string::npos)
      << late.message();
  EXPECT_FALSE(handles.PartDone(*op, 1, Unavailable("server 2 died")));
  EXPECT_FALSE(handles.PartDone(*op, 1, Status::Ok()));  // a partition counts once
  EXPECT_TRUE(handles.PartDone(*op, 2, Aborted("later error")));
  Status st = handles.Wait(h, 1);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "push_pull of tensor 'grad.w': server 2 died");
  EXPECT_EQ(handles.Poll(h).status().code(), StatusCode::kUnavailable);
  handles.Release(h);
  EXPECT_EQ(handles.Poll(h).status().code(), StatusCode::kInvalidArgument);  // unknown handle
  EXPECT_TRUE(handles.WaitIdle(0));
}

// What a waiter may read right after Wait (the speed samples) is in place before it wakes: the
// completion hook runs once, for the part that completes the operation, before done is set.
TEST(HandleTableTest, TheCompletionHookRunsOnceBeforeAnyWaiterWakes) {
  pipeline::HandleTable handles;
  pipeline::Pipeline p;
  auto plan = MakePlan("grad.h", 0, 2, 8, DataType::kFloat32, /*server=*/0);
  std::vector<float> buf(4);
  auto op = MakeOp(*plan, p, buf.data(), buf.data());
  HandleId h = handles.Add(op);
  int calls = 0;
  auto hook = [&](const pipeline::Operation& o) {
    ++calls;
    EXPECT_FALSE(o.done);  // no waiter can have woken yet
  };
  EXPECT_FALSE(handles.PartDone(*op, 0, Status::Ok(), hook));
  EXPECT_EQ(calls, 0);
  EXPECT_TRUE(handles.PartDone(*op, 1, Status::Ok(), hook));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(handles.PartDone(*op, 1, Status::Ok(), hook));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(handles.Wait(h, 1).ok());
  handles.Release(h);
}

}  // namespace
}  // namespace byteps::worker
