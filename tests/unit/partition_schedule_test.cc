// The online tuner's partition phase as a function of each tensor's own uses: the schedule (use
// count -> generation), worker 0's agreements waited for without a lock, and the KeyAssigner
// placing each use by the schedule (and retiring the generation left behind, tensor by tensor).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "protocol/key_layout.h"
#include "worker/planning/key_assigner.h"
#include "worker/tuning/online_tuner.h"
#include "worker/tuning/partition_schedule.h"
#include "worker/tuning/worker0_agreement.h"

namespace byteps::worker {
namespace {

using tuning::PartitionSchedule;

TEST(PartitionScheduleTest, GenerationIsAFunctionOfTheUseAndTheAgreedWords) {
  const PartitionSchedule s(tuning::kPartitionWarmup, tuning::kPartitionPerVisit, tuning::kPartitionVerdictLag);
  EXPECT_EQ(s.explore_issue(), 2u);
  EXPECT_EQ(s.candidate_from(), 6u);
  EXPECT_EQ(s.verdict_issue(), 10u);
  EXPECT_EQ(s.verdict_from(), 11u);
  // Worker 0's tuner has measured both blocks when a tensor reaches the verdict's issuing use.
  EXPECT_EQ(static_cast<int>(s.verdict_issue()), tuning::kPartitionSettleIterations);
  for (uint32_t u = 0; u < 20; ++u) {
    const auto needs = s.NeedsAt(u);
    EXPECT_EQ(needs, u < 6 ? PartitionSchedule::Needs::kNothing
                     : u < 11 ? PartitionSchedule::Needs::kExplore
                              : PartitionSchedule::Needs::kVerdict)
        << u;
    // Warm-up and the start-up size's block, then the candidate's block (and the lag), then the verdict.
    EXPECT_EQ(s.GenerationAt(u, true, 1), u < 6 ? 0u : 1u) << u;
    EXPECT_EQ(s.GenerationAt(u, true, 0), u >= 6 && u < 11 ? 1u : 0u) << u;
    EXPECT_EQ(s.GenerationAt(u, false, 1), 0u) << u;  // not explored: generation 0 throughout
  }
  const PartitionSchedule one(0, 1, 0);  // no lag: the issuing use waits itself
  EXPECT_EQ(one.verdict_issue(), one.verdict_from());
  EXPECT_EQ(one.NeedsAt(2), PartitionSchedule::Needs::kVerdict);
  EXPECT_EQ(one.GenerationAt(0, true, 0), 0u);
  EXPECT_EQ(one.GenerationAt(1, true, 0), 1u);
  EXPECT_EQ(one.GenerationAt(2, true, 0), 0u);
}

// An in-place push_pull of `workers` threads of one test, summed once all have started it.
class FakeJob {
 public:
  explicit FakeJob(int workers) : workers_(workers) {}
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Free() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  int started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

  class Member : public tuning::AsyncCollective {
   public:
    explicit Member(FakeJob* job) : job_(job) {}
    StatusOr<int64_t> Start(const std::string&, void* data, size_t bytes, DataType) override {
      std::lock_guard<std::mutex> lock(job_->mu_);
      ++job_->started_;
      job_->parts_.push_back({static_cast<int64_t*>(data), bytes / 8});
      if (static_cast<int>(job_->parts_.size()) == job_->workers_) {
        std::vector<int64_t> sum(job_->parts_[0].second, 0);
        for (auto& [p, n] : job_->parts_) {
          for (size_t i = 0; i < n; ++i) sum[i] += p[i];
        }
        for (auto& [p, n] : job_->parts_) {
          for (size_t i = 0; i < n; ++i) p[i] = sum[i];
        }
        job_->summed_ = true;
        job_->cv_.notify_all();
      }
      return ++handles_;
    }
    Status Wait(int64_t, double timeout_s) override {
      std::unique_lock<std::mutex> lock(job_->mu_);
      ++waits;
      if (!job_->cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                              [&] { return job_->summed_ && !job_->held_; })) {
        return DeadlineExceeded(fmt::format("push_pull did not complete within {:.1f} s", timeout_s));
      }
      return Status::Ok();
    }
    void Release(int64_t) override { ++releases; }
    std::atomic<int> waits{0};
    std::atomic<int> releases{0};

   private:
    FakeJob* job_;
    int64_t handles_ = 0;
  };

 private:
  const int workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<int64_t*, size_t>> parts_;
  int started_ = 0;
  bool summed_ = false;
  bool held_ = false;
};

TEST(Worker0AgreementTest, EveryWorkerLearnsWorker0sValuesIssuedOnceAndWaitedForByManyThreads) {
  FakeJob job(2);
  FakeJob::Member m0(&job), m1(&job);
  tuning::Worker0Agreement a0("__byteps.tune.x", true, 10), a1("__byteps.tune.x", false, 10);
  int asked = 0;
  a0.Issue(m0, [&] { ++asked; return tuning::SharedVector{0, 7, 8, 9, 10}; });
  a0.Issue(m0, [&] { ++asked; return tuning::SharedVector{0, 1, 1, 1, 1}; });  // started already
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(a0.issued());
  EXPECT_FALSE(a1.issued());
  EXPECT_FALSE(a0.peek().has_value());
  job.Hold();
  // Four threads of worker 1 need the value; one of them issues it; none holds a lock meanwhile
  // (worker 1's peek answers while they wait).
  a1.Issue(m1, [&] { ADD_FAILURE() << "only worker 0 is asked"; return tuning::SharedVector{}; });
  std::vector<std::future<StatusOr<tuning::SharedVector>>> fs;
  for (int t = 0; t < 4; ++t) fs.push_back(std::async(std::launch::async, [&, t] {
    return a1.Get(m1, "grad." + std::to_string(t));
  }));
  while (m1.waits.load() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE(a1.peek().has_value());
  job.Free();
  for (auto& f : fs) {
    auto v = f.get();
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, (tuning::SharedVector{tuning::kSettingsVersion, 7, 8, 9, 10}));
  }
  EXPECT_EQ(job.started(), 2);
  EXPECT_EQ(m1.releases.load(), 1);
  auto again = a1.Get(m1, "grad.9");  // kept: no wait
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(m1.waits.load(), 4);
  ASSERT_TRUE(a0.Get(m0, "grad.0").ok());
}

TEST(Worker0AgreementTest, AWaitPastTheDeadlineNamesTheTensorAndTheAgreementAndIsKept) {
  FakeJob job(2);  // the other worker never issues
  FakeJob::Member m0(&job);
  tuning::Worker0Agreement a("__byteps.tune.partition", true, 0.2);
  a.Issue(m0, [] { return tuning::SharedVector{0, 1, 0, 0, 0}; });
  const auto t0 = std::chrono::steady_clock::now();
  auto v = a.Get(m0, "grad.3");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("'grad.3'"), std::string::npos) << v.status().message();
  EXPECT_NE(v.status().message().find("__byteps.tune.partition"), std::string::npos) << v.status().message();
  auto later = a.Get(m0, "grad.4");
  ASSERT_FALSE(later.ok());
  EXPECT_NE(later.status().message().find("'grad.4'"), std::string::npos);
  // A use that needs an agreement this worker never started is our own bug, named.
  tuning::Worker0Agreement never("__byteps.tune.y", false, 1);
  auto v2 = never.Get(m0, "grad.5");
  ASSERT_FALSE(v2.ok());
  EXPECT_EQ(v2.status().code(), StatusCode::kInternal);
}

TEST(Worker0AgreementTest, ASumWithoutWorker0IsAnError) {
  FakeJob job(2);
  FakeJob::Member m0(&job), m1(&job);
  tuning::Worker0Agreement a("__byteps.tune.z", false, 5), b("__byteps.tune.z", false, 5);
  a.Issue(m0, [] { return tuning::SharedVector{}; });
  b.Issue(m1, [] { return tuning::SharedVector{}; });
  auto v = a.Get(m0, "w");
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("no worker acts as worker 0"), std::string::npos) << v.status().message();
}

planning::Signature Sig(size_t bytes) {
  planning::Signature s;
  s.bytes = bytes;
  return s;
}

// Two workers' KeyAssigners placing uses by the schedule, each in its own order: the same use of a
// tensor gets the same key on both, and the generation left behind retires tensor by tensor.
TEST(KeyAssignerScheduleTest, EachUseGoesWhereItsUseCountSaysOnEveryWorkerAndTheLoserRetires) {
  auto resolver = planning::KeyAssigner::LocalResolver(2);  // one name service for both workers
  const PartitionSchedule s(2, 4, 1);
  for (uint32_t verdict : {0u, 1u}) {
    std::map<std::pair<std::string, uint32_t>, uint64_t> keys;  // (name, use) -> first key
    for (int w = 0; w < 2; ++w) {
      planning::KeyAssigner ka(resolver, 4096);
      ASSERT_TRUE(ka.AddGeneration(1, 1024).ok());
      std::vector<std::pair<std::string, uint32_t>> asked;
      ka.set_scheduler([&](const std::string& name, uint32_t use) -> StatusOr<planning::Placement> {
        asked.emplace_back(name, use);
        return planning::Placement{s.GenerationAt(use, true, verdict), use >= s.verdict_from()};
      });
      const std::vector<std::string> names = w == 0 ? std::vector<std::string>{"v" + std::to_string(verdict) + ".a",
                                                                                "v" + std::to_string(verdict) + ".b"}
                                                    : std::vector<std::string>{"v" + std::to_string(verdict) + ".b",
                                                                                "v" + std::to_string(verdict) + ".a"};
      std::map<std::string, std::vector<planning::Retired>> retired;
      for (uint32_t u = 0; u < 13; ++u) {
        for (const std::string& name : names) {
          if (w == 1 && name.back() == 'a' && u % 3 == 0 && u > 0) continue;  // 'a' lags on worker 1 ...
          auto b = ka.Begin(name, Sig(3000));
          ASSERT_TRUE(b.ok()) << b.status().ToString();
          const uint32_t use = asked.back().second;
          EXPECT_EQ(protocol::GenerationOf(b->plan->declared_key), s.GenerationAt(use, true, verdict)) << name << use;
          EXPECT_EQ(b->plan->partitions.size(), s.GenerationAt(use, true, verdict) == 0 ? 1u : 3u);
          auto [it, added] = keys.emplace(std::make_pair(name, use), b->plan->partitions[0].key);
          if (!added) {
            EXPECT_EQ(it->second, b->plan->partitions[0].key) << name << " use " << use;
          }
          for (const auto& r : b->retired) retired[name].push_back(r);
          ka.End(*b->plan, Status::Ok());
        }
      }
      if (w == 1) {  // ... and catches up: the same uses in the end
        for (int k = 0; k < 4; ++k) {
          auto b = ka.Begin(names[1], Sig(3000));
          ASSERT_TRUE(b.ok());
          for (const auto& r : b->retired) retired[names[1]].push_back(r);
          ka.End(*b->plan, Status::Ok());
        }
      }
      for (const std::string& name : names) {
        // Its use 11 (the first final one) retired the other generation's plan, with this
        // worker's last round there: 6 uses in generation 0 (0-5), 5 in generation 1 (6-10);
        // the verdict's own generation stays.
        ASSERT_EQ(retired[name].size(), 1u) << name;
        const planning::Retired& r = retired[name][0];
        EXPECT_EQ(r.plan->generation, 1 - verdict) << name;
        EXPECT_EQ(r.last_round, verdict == 1 ? 6u : 5u) << name;
      }
    }
  }
}

TEST(KeyAssignerScheduleTest, UsesCountPerIncarnationAndASchedulerErrorCountsNothing) {
  planning::KeyAssigner ka(planning::KeyAssigner::LocalResolver(1), 4096);
  ASSERT_TRUE(ka.AddGeneration(1, 1024).ok());
  EXPECT_EQ(ka.generation(), 0u);  // defined, not current
  std::vector<uint32_t> uses;
  bool fail = false;
  ka.set_scheduler([&](const std::string& name, uint32_t use) -> StatusOr<planning::Placement> {
    if (fail) return DeadlineExceeded("worker 0's word did not come");
    uses.push_back(use);
    return planning::Placement{use % 2, false};
  });
  for (int i = 0; i < 3; ++i) {
    auto b = ka.Begin("x", Sig(400));
    ASSERT_TRUE(b.ok());
    ka.End(*b->plan, Status::Ok());
  }
  fail = true;
  auto bad = ka.Begin("x", Sig(400));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos) << bad.status().message();
  fail = false;
  // Not in flight after the failure: another size moves it to a new incarnation, counted from 0.
  auto moved = ka.Begin("x", Sig(800));
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(moved->plan->incarnation, 1u);
  ka.End(*moved->plan, Status::Ok());
  EXPECT_EQ(uses, (std::vector<uint32_t>{0, 1, 2, 0}));
  // A placement in a generation nobody defined is refused, naming the tensor.
  ka.set_scheduler([](const std::string&, uint32_t) -> StatusOr<planning::Placement> {
    return planning::Placement{5, false};
  });
  auto nowhere = ka.Begin("y", Sig(40));
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.status().message().find("'y'"), std::string::npos) << nowhere.status().message();
}

}  // namespace
}  // namespace byteps::worker
