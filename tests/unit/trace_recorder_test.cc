// The worker's timeline: a recorder driven through a real Dispatcher with hand-completed stages
// (the step window, the stage names, the credit wait, the file parsed back), the directory check,
// and what is not traced.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "worker/pipeline/dispatcher.h"
#include "worker/trace/trace_recorder.h"
#include "worker/trace/trace_writer.h"
#include "worker_test_util.h"

namespace byteps::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::MakeOp;
using testing::MakePlan;
using testing::ManualStage;
using Clock = pipeline::Dispatcher::Clock;

class DirectSink : public pipeline::StageSink {
 public:
  void Complete(pipeline::PartitionTask* task, const Status& status) override {
    dispatcher->Complete(task, status, Clock::now());
  }
  pipeline::Dispatcher* dispatcher = nullptr;
};

class TraceRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("byteps-trace-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<trace::TraceRecorder> MakeRecorder(int start, int end) {
    trace::TraceOptions o;
    o.dir = dir_.string();
    o.rank = 3;
    o.local_rank = 1;
    o.start_step = start;
    o.end_step = end;
    auto r = trace::TraceRecorder::Create(o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(r.value());
  }
  // A dispatcher whose finished callback tells `rec` when an operation's last partition left (as
  // DispatchLoop does), with a credit of `credit` bytes.
  void MakeDispatcher(trace::TraceRecorder* rec, size_t credit) {
    pipeline::Dispatcher::Options o;
    o.credit_bytes = credit;
    dispatcher_ = std::make_unique<pipeline::Dispatcher>(o, [this, rec](pipeline::PartitionTask* t, const Status&) {
      if (++left_[t->op] == t->op->parts.size()) rec->OperationFinished(*t->op);
    });
    dispatcher_->SetObserver(rec);
    sink_.dispatcher = dispatcher_.get();
  }
  // One push_pull of `plan` through the three stages, each partition finished stage by stage.
  void RunRound(const planning::TensorPlan& plan, const pipeline::Pipeline& p, ManualStage* stages[3]) {
    auto op = MakeOp(plan, p, buf_.data(), buf_.data());
    ops_.push_back(op);
    dispatcher_->Submit(op.get());
    for (int guard = 0; guard < 100; ++guard) {
      dispatcher_->Run(Clock::now());
      bool any = false;
      for (int s = 0; s < 3; ++s) {
        std::vector<pipeline::PartitionTask*> started;
        started.swap(stages[s]->started);
        for (auto* t : started) stages[s]->Finish(t);
        any = any || !started.empty();
      }
      if (!any) break;
    }
    ASSERT_EQ(left_[op.get()], op->parts.size()) << "round of " << plan.name << " did not finish";
  }
  json ReadTrace() {
    std::ifstream in(dir_ / "1" / "comm.json");
    EXPECT_TRUE(in.good()) << "no timeline at " << (dir_ / "1" / "comm.json");
    return json::parse(in);
  }

  fs::path dir_;
  DirectSink sink_;
  std::unique_ptr<pipeline::Dispatcher> dispatcher_;
  std::map<pipeline::Operation*, size_t> left_;
  std::vector<std::shared_ptr<pipeline::Operation>> ops_;
  std::vector<float> buf_ = std::vector<float>(1024, 1.f);
};

TEST_F(TraceRecorderTest, RecordsTheStepWindowWithStageNamesAndCreditWait) {
  auto rec = MakeRecorder(2, 3);
  rec->SetClock("job-7", -42);
  MakeDispatcher(rec.get(), 64);  // one 64-byte partition in push-pull at a time: the other waits
  ManualStage reduce("local-reduce", &sink_), net("push-pull", &sink_, true), out("copy-out", &sink_);
  for (auto* s : {&reduce, &net, &out}) dispatcher_->AddStage(s);
  ManualStage* stages[3] = {&reduce, &net, &out};
  pipeline::Pipeline p({&reduce, &net, &out});
  const std::string odd = "grad \"q\"\\\n\x01";
  auto a = MakePlan(odd, 1, 2, 64);
  auto b = MakePlan("b", 2, 1, 64);
  for (int round = 1; round <= 5; ++round) {
    RunRound(*a, p, stages);
    RunRound(*b, p, stages);
  }
  rec->Close();
  json doc = ReadTrace();
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  const json& other = doc["otherData"];
  EXPECT_EQ(other["role"], "worker");
  EXPECT_EQ(other["rank"], 3);
  EXPECT_EQ(other["local_rank"], 1);
  EXPECT_EQ(other["job"], "job-7");
  EXPECT_EQ(other["clock_offset_us"], -42);
  EXPECT_EQ(other["start_step"], 2);
  EXPECT_EQ(other["end_step"], 3);

  std::map<std::string, std::set<int>> total_steps;
  // (tensor, key, step) -> stage name -> [ts, ts + dur]
  std::map<std::tuple<std::string, std::string, int>, std::map<std::string, std::pair<int64_t, int64_t>>> parts;
  for (const json& e : doc["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["cat"], "Comm");
    const std::string pid = e["pid"];
    EXPECT_EQ(e["args"]["name"], pid);
    ASSERT_GE(e["dur"].get<int64_t>(), 0);
    const int step = e["args"]["step"];
    if (e["tid"] == "total") {
      EXPECT_EQ(e["name"], pid);
      total_steps[pid].insert(step);
      continue;
    }
    const std::string name = e["name"];
    ASSERT_EQ(name.rfind(pid + ".", 0), 0u) << name;
    EXPECT_EQ(e["args"]["server"], 0);
    EXPECT_EQ(e["args"]["bytes"], 64);
    parts[{pid, e["tid"], step}][name.substr(pid.size() + 1)] = {e["ts"], e["ts"].get<int64_t>() + e["dur"].get<int64_t>()};
  }
  const std::set<int> window{2, 3};
  EXPECT_EQ(total_steps["Comm." + odd], window);  // the odd name survived escaping exactly
  EXPECT_EQ(total_steps["Comm.b"], window);
  EXPECT_EQ(parts.size(), 3u * 2u);  // 3 partitions (2 of a, 1 of b) x 2 steps
  for (const auto& [id, stages_seen] : parts) {
    std::vector<std::string> order{"CREDIT_WAIT", "REDUCE", "PUSH_PULL", "COPYH2D"};
    for (const std::string& s : order) ASSERT_TRUE(stages_seen.count(s)) << std::get<0>(id) << " lacks " << s;
    EXPECT_LE(stages_seen.at("REDUCE").second, stages_seen.at("CREDIT_WAIT").first);
    EXPECT_EQ(stages_seen.at("CREDIT_WAIT").second, stages_seen.at("PUSH_PULL").first);
    EXPECT_LE(stages_seen.at("PUSH_PULL").second, stages_seen.at("COPYH2D").first);
  }
}

TEST_F(TraceRecorderTest, CloseWritesAWindowTheJobNeverFinished) {
  auto rec = MakeRecorder(1, 5);
  MakeDispatcher(rec.get(), 0);
  ManualStage a("push-pull", &sink_, true), b("group-reduce", &sink_), c("copy-in", &sink_);
  for (auto* s : {&a, &b, &c}) dispatcher_->AddStage(s);
  ManualStage* stages[3] = {&a, &b, &c};
  pipeline::Pipeline p({&c, &b, &a});
  auto plan = MakePlan("t", 1, 1, 16);
  RunRound(*plan, p, stages);
  RunRound(*plan, p, stages);
  EXPECT_FALSE(fs::exists(dir_ / "1" / "comm.json"));  // the window is not over: nothing written yet
  rec->Close();
  json doc = ReadTrace();
  std::set<std::string> names;
  std::set<int> steps;
  for (const json& e : doc["traceEvents"]) {
    names.insert(e["name"].get<std::string>());
    steps.insert(e["args"]["step"].get<int>());
  }
  EXPECT_EQ(steps, (std::set<int>{1, 2}));
  EXPECT_EQ(names, (std::set<std::string>{"Comm.t", "Comm.t.COPYD2H", "Comm.t.GROUP_REDUCE", "Comm.t.PUSH_PULL",
                                          "Comm.t.CREDIT_WAIT"}));
}

TEST_F(TraceRecorderTest, TheCoresOwnTensorsAreNotTraced) {
  auto rec = MakeRecorder(1, 2);
  MakeDispatcher(rec.get(), 0);
  ManualStage a("push-pull", &sink_, true), b("x", &sink_), c("y", &sink_);
  for (auto* s : {&a, &b, &c}) dispatcher_->AddStage(s);
  ManualStage* stages[3] = {&a, &b, &c};
  pipeline::Pipeline p({&a});
  auto plan = MakePlan(std::string(kInternalPrefix) + "probe", 1, 1, 16);
  for (int i = 0; i < 3; ++i) RunRound(*plan, p, stages);
  rec->Close();
  EXPECT_FALSE(fs::exists(dir_ / "1" / "comm.json"));  // nothing recorded: no file
}

TEST_F(TraceRecorderTest, AnUnwritableDirectoryIsANamedError) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "plain-file") << "x";
  trace::TraceOptions o;
  o.dir = (dir_ / "plain-file" / "trace").string();
  auto r = trace::TraceRecorder::Create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("BYTEPS_TRACE_DIR=" + o.dir), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("Not a directory"), std::string::npos) << r.status().ToString();
}

TEST(TimelineStageNameTest, BytePSQueueNamesWhereTheyCorrespond) {
  EXPECT_EQ(trace::TimelineStageName("local-reduce"), "REDUCE");
  EXPECT_EQ(trace::TimelineStageName("local-broadcast"), "BROADCAST");
  EXPECT_EQ(trace::TimelineStageName("copy-in"), "COPYD2H");
  EXPECT_EQ(trace::TimelineStageName("copy-out"), "COPYH2D");
  EXPECT_EQ(trace::TimelineStageName("push-pull"), "PUSH_PULL");
  EXPECT_EQ(trace::TimelineStageName("cross-switch-reduce"), "CROSS_SWITCH_REDUCE");
}

}  // namespace
}  // namespace byteps::worker
