// Failures on the fake device behave as CUDA's and NCCL's do, and Completions sees them: a failed
// stream calls no host function after the failure (its events report it), a collective whose peer
// never queues its part never finishes until its group is aborted, a group refuses one device
// twice, and a watched completion is delivered on a thread of ours, never inside a host function.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "device/completions.h"
#include "device/fake_device.h"
#include "device/group.h"

namespace byteps::device {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Status Fault() { return Unavailable("an illegal address in the test's kernel"); }

TEST(FakeDeviceFailure, AFailedStreamRunsNoHostFunctionAfterItAndItsEventsReportIt) {
  auto fake = FakeDevice::Get(500);
  auto s = fake->CreateStream(), other = fake->CreateStream();
  ASSERT_TRUE(s.ok() && other.ok());
  const uint64_t dropped = fake->dropped_host_functions();
  std::atomic<int> ran{0};
  ASSERT_TRUE(fake->LaunchHostFunc(*s, [&] { ran += 1; }).ok());  // before the fault: runs
  ASSERT_TRUE(fake->Enqueue(*s, [] { return Fault(); }).ok());
  ASSERT_TRUE(fake->LaunchHostFunc(*s, [&] { ran += 100; }).ok());  // after it: never
  auto after = fake->RecordEvent(*s);
  ASSERT_TRUE(after.ok());
  // A stream that waits for the failed one fails too, and drops its host function as well.
  ASSERT_TRUE(fake->StreamWaitEvent(*other, *after).ok());
  ASSERT_TRUE(fake->LaunchHostFunc(*other, [&] { ran += 10000; }).ok());
  const auto t0 = Clock::now();
  Status drained = fake->Drain(*s, 10);  // sees the error through its event, not a host function
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_EQ(drained.code(), StatusCode::kUnavailable) << drained.ToString();
  EXPECT_NE(drained.message().find("illegal address"), std::string::npos) << drained.message();
  EXPECT_FALSE(fake->Drain(*other, 10).ok());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(fake->dropped_host_functions() - dropped, 4u);  // two of ours and the two Drains'
  auto queried = fake->QueryEvent(*after);
  ASSERT_FALSE(queried.ok());
  EXPECT_NE(queried.status().message().find("illegal address"), std::string::npos);
  fake->DestroyEvent(*after);
  fake->DestroyStream(*s);
  fake->DestroyStream(*other);
}

TEST(FakeDeviceFailure, DestroyingAStuckStreamReturnsAtOnceAsCudaDoes) {
  auto fake = FakeDevice::Get(501);
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  auto gate = fake->Hold(*s);
  std::atomic<bool> ran{false};
  ASSERT_TRUE(fake->LaunchHostFunc(*s, [&] { ran = true; }).ok());
  const auto t0 = Clock::now();
  fake->DestroyStream(*s);
  EXPECT_LT(SecondsSince(t0), 0.5);
  gate->Open();  // what was queued still runs
  for (int i = 0; i < 2000 && !ran.load(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(ran.load());
}

TEST(Completions, DeliversOnItsOwnThreadAfterTheHostFunctionReturned) {
  auto fake = FakeDevice::Get(502);
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  std::promise<std::thread::id> stream_thread;
  ASSERT_TRUE(fake->LaunchHostFunc(*s, [&] { stream_thread.set_value(std::this_thread::get_id()); }).ok());
  Completions c;
  std::promise<std::pair<Status, std::thread::id>> got;
  ASSERT_TRUE(c.Watch(fake, *s, 10, "the test's work", [&](const Status& st) {
    got.set_value({st, std::this_thread::get_id()});
  }).ok());
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  auto [st, thread] = f.get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(thread, stream_thread.get_future().get());
  EXPECT_EQ(c.pending(), 0u);
  fake->DestroyStream(*s);
}

TEST(Completions, AFailedStreamDeliversItsErrorSoonThoughNoHostFunctionRuns) {
  auto fake = FakeDevice::Get(503);
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(fake->Enqueue(*s, [] { return Fault(); }).ok());
  Completions c;
  std::promise<Status> got;
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.Watch(fake, *s, 60, "the test's copy", [&](const Status& st) { got.set_value(st); }).ok());
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  Status st = f.get();
  EXPECT_LT(SecondsSince(t0), 2.0);  // the deadline is a minute away: the error came from the event
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("illegal address"), std::string::npos) << st.message();
  fake->DestroyStream(*s);
}

TEST(Completions, StuckWorkFailsOnceAtItsDeadlineNamingTheDeviceAndTheWork) {
  auto fake = FakeDevice::Get(504);
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  auto gate = fake->Hold(*s);  // as a collective whose peer never comes
  Completions c;
  std::atomic<int> calls{0};
  std::promise<Status> got;
  const auto t0 = Clock::now();
  ASSERT_TRUE(c.Watch(fake, *s, 0.2, "the test's collective", [&](const Status& st) {
    if (calls.fetch_add(1) == 0) got.set_value(st);
  }).ok());
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  Status st = f.get();
  EXPECT_GE(SecondsSince(t0), 0.2);
  EXPECT_LT(SecondsSince(t0), 3.0);
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("fake:504: the test's collective did not finish within 0.2 s"), std::string::npos)
      << st.message();
  gate->Open();  // the work finishes after all: its host function finds the watch delivered
  EXPECT_TRUE(fake->Drain(*s, 10).ok());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), 1);
  fake->DestroyStream(*s);
}

// CUDA forbids a host function to wait: the one Completions queues only pushes a ticket, so a
// callback blocked on its owner's lock holds neither the stream nor the next host function.
TEST(Completions, ACallbackThatWaitsForALockHoldsNoStream) {
  auto fake = FakeDevice::Get(505);
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  std::mutex stage_lock;
  std::unique_lock<std::mutex> held(stage_lock);
  Completions c;
  std::atomic<bool> delivered{false}, next_ran{false};
  ASSERT_TRUE(c.Watch(fake, *s, 10, "the test's reduce", [&](const Status&) {
    std::lock_guard<std::mutex> lock(stage_lock);
    delivered = true;
  }).ok());
  ASSERT_TRUE(fake->LaunchHostFunc(*s, [&] { next_ran = true; }).ok());
  for (int i = 0; i < 2000 && !next_ran.load(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(next_ran.load());  // the stream went on while the callback waits for the lock
  EXPECT_FALSE(delivered.load());
  EXPECT_LT(fake->longest_host_function_s(), 0.1);
  held.unlock();
  for (int i = 0; i < 2000 && !delivered.load(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(delivered.load());
  fake->DestroyStream(*s);
}

TEST(Completions, WhatIsPendingWhenItGoesIsDropped) {
  auto fake = FakeDevice::Get(506);
  auto s = fake->CreateStream();
  ASSERT_TRUE(s.ok());
  auto gate = fake->Hold(*s);
  std::atomic<int> calls{0};
  {
    Completions c;
    ASSERT_TRUE(c.Watch(fake, *s, 60, "the test's copy", [&](const Status&) { ++calls; }).ok());
    EXPECT_EQ(c.pending(), 1u);
  }
  gate->Open();  // its host function runs after the Completions went: harmless
  EXPECT_TRUE(fake->Drain(*s, 10).ok());
  EXPECT_EQ(calls.load(), 0);
  fake->DestroyStream(*s);
}

std::vector<std::unique_ptr<Group>> JoinAll(const std::vector<int>& indices, std::vector<Status>* errors) {
  auto id = NewGroupId(Kind::kFake);
  EXPECT_TRUE(id.ok());
  const int n = static_cast<int>(indices.size());
  std::vector<std::future<StatusOr<std::unique_ptr<Group>>>> joins;
  for (int r = 0; r < n; ++r) {
    joins.push_back(
        std::async(std::launch::async, [&, r] { return JoinGroup(FakeDevice::Get(indices[r]), *id, r, n, 10); }));
  }
  std::vector<std::unique_ptr<Group>> groups;
  for (auto& j : joins) {
    auto g = j.get();
    errors->push_back(g.status());
    groups.push_back(g.ok() ? std::move(g).value() : nullptr);
  }
  return groups;
}

TEST(FakeGroupFailure, TwoRanksOnOneDeviceFailEveryRanksJoinAsNcclDoes) {
  std::vector<Status> errors;
  auto groups = JoinAll({510, 511, 510}, &errors);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r].code(), StatusCode::kInvalidArgument) << r << ": " << errors[r].ToString();
    EXPECT_NE(errors[r].message().find("use the same device (fake:510)"), std::string::npos) << errors[r].message();
    EXPECT_NE(errors[r].message().find("(rank " + std::to_string(r) + " of 3)"), std::string::npos)
        << errors[r].message();
  }
}

// NCCL: a collective whose peer never queues its part spins forever and reports nothing; only
// ncclCommAbort ends it, and nothing queued after it completes.
TEST(FakeGroupFailure, ACollectiveWithoutItsPeerNeverFinishesUntilTheGroupIsAborted) {
  std::vector<Status> errors;
  auto groups = JoinAll({512, 513}, &errors);
  ASSERT_TRUE(groups[0] && groups[1]);
  auto dev = FakeDevice::Get(512);
  auto s = dev->CreateStream();
  ASSERT_TRUE(s.ok());
  std::vector<float> x(16, 1.0f), sum(16, 0.0f);
  ASSERT_TRUE(groups[0]->Reduce(x.data(), sum.data(), 16, DataType::kFloat32, 0, *s).ok());  // rank 1 never does
  std::atomic<bool> ran{false};
  ASSERT_TRUE(dev->LaunchHostFunc(*s, [&] { ran = true; }).ok());
  Status stuck = dev->Drain(*s, 0.3);
  EXPECT_EQ(stuck.code(), StatusCode::kDeadlineExceeded) << stuck.ToString();  // no error: it just spins
  EXPECT_FALSE(groups[0]->aborted());
  groups[0]->Abort();
  EXPECT_TRUE(groups[0]->aborted());
  const auto t0 = Clock::now();
  Status ended = dev->Drain(*s, 10);
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_EQ(ended.code(), StatusCode::kAborted) << ended.ToString();
  EXPECT_NE(ended.message().find("fake group on fake:512 (rank 0 of 2)"), std::string::npos) << ended.message();
  EXPECT_FALSE(ran.load());  // no completion after the error
  EXPECT_EQ(sum[0], 0.0f);
  Status later = groups[0]->Broadcast(x.data(), 64, 0, *s);  // an aborted group queues nothing
  EXPECT_EQ(later.code(), StatusCode::kPrecondition) << later.ToString();
  groups[1]->Abort();
  dev->DestroyStream(*s);
}

}  // namespace
}  // namespace byteps::device
