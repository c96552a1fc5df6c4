// The server's timeline (server_trace.h): a shard records the traced rounds of its keys (the step
// window, the arrival order of the pushes, the last worker), the JSON it becomes, and the file
// and directory checks.
#include "server/server_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "tests/unit/sum_engine_fixture.h"

namespace byteps::server::test {
namespace {

using nlohmann::json;

class ServerTraceTest : public SumEngineTest {
 protected:
  void StartTraced(int num_workers, TraceWindow window) {
    buffer_ = std::make_unique<TraceBuffer>(window);
    for (int w = 0; w < num_workers; ++w) conns_.push_back(NewConn("worker " + std::to_string(w)));
    engine_ = std::make_unique<SumEngine>(0, num_workers, nullptr, buffer_.get());
  }
  // A push of one float that arrived at `arrived_ns`.
  void PushAt(uint64_t key, uint32_t round, int worker, int64_t arrived_ns) {
    PushTask t;
    t.key = key;
    t.round = round;
    t.worker = worker;
    t.request_id = 1000 * round + worker;
    t.dtype = static_cast<uint8_t>(DataType::kFloat32);
    t.conn = conns_[worker];
    t.data = pool_.Get(4).value();
    std::memset(t.data.get(), 0, 4);
    t.bytes = 4;
    t.arrived_ns = arrived_ns;
    engine_->Post(std::move(t));
  }
  // The rounds recorded, once the shard has stopped.
  std::vector<RoundTrace> Stop() {
    engine_.reset();
    return buffer_->rounds();
  }
  std::unique_ptr<TraceBuffer> buffer_;  // outlives engine_ (reset in Stop / TearDown first)
  void TearDown() override { engine_.reset(); }
};

TEST_F(ServerTraceTest, RecordsOnlyTheRoundsOfTheWindowWithTheLastWorker) {
  StartTraced(2, TraceWindow{2, 4});  // steps 2, 3 and 4
  Init(7, DataType::kFloat32, 1);
  for (uint32_t round = 1; round <= 5; ++round) {
    // Worker 1's push reaches the shard first but arrived later in rounds 2 and 4: the arrival
    // times, not the shard's order, say who was last.
    const bool late1 = round % 2 == 0;
    PushAt(7, round, 1, round * 10'000 + (late1 ? 500 : 100));
    PushAt(7, round, 0, round * 10'000 + (late1 ? 100 : 500));
  }
  Drain();
  auto rounds = Stop();
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[0].key, 7u);
  EXPECT_EQ(rounds[0].round, 2u);
  EXPECT_EQ(rounds[0].last_worker, 1);
  EXPECT_EQ(rounds[0].first_push_ns, 20'100);
  EXPECT_EQ(rounds[0].last_push_ns, 20'500);
  EXPECT_EQ(rounds[1].round, 3u);
  EXPECT_EQ(rounds[1].last_worker, 0);
  EXPECT_EQ(rounds[2].round, 4u);
  EXPECT_EQ(rounds[2].last_worker, 1);
  for (const auto& r : rounds) {
    EXPECT_LE(r.last_push_ns, r.summed_ns);  // summed on the real clock, long after the fake arrivals
    EXPECT_LE(r.summed_ns, r.replied_ns);
  }
}

TEST_F(ServerTraceTest, EveryKeyCountsItsOwnRounds) {
  StartTraced(1, TraceWindow{1, 2});
  Init(1, DataType::kFloat32, 1);
  PushAt(1, 1, 0, 5);
  PushAt(1, 2, 0, 6);
  Init(2, DataType::kFloat32, 1);  // a key declared later starts at its own round 1
  PushAt(2, 1, 0, 7);
  Drain();
  auto rounds = Stop();
  ASSERT_EQ(rounds.size(), 3u);  // steps 1 and 2 of key 1, step 1 of key 2
  EXPECT_EQ(rounds[0].key, 1u);
  EXPECT_EQ(rounds[1].key, 1u);
  EXPECT_EQ(rounds[1].round, 2u);
  EXPECT_EQ(rounds[2].key, 2u);
  EXPECT_EQ(rounds[2].round, 1u);
  EXPECT_EQ(rounds[2].last_worker, 0);
}

TEST(ServerTraceJsonTest, ThreeEventsPerRoundOnThisHostsClock) {
  RoundTrace r{42, 3, 1, 1'000'000, 3'000'000, 3'500'000, 4'000'000};  // ns
  TraceIdentity who{1, "0123456789abcdef", -250};
  json doc = json::parse(ServerTraceJson({r}, who, TraceWindow{2, 4}, 1'000'000'000));
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["role"], "server");
  EXPECT_EQ(doc["otherData"]["rank"], 1);
  EXPECT_EQ(doc["otherData"]["job"], "0123456789abcdef");
  EXPECT_EQ(doc["otherData"]["clock_offset_us"], -250);
  EXPECT_EQ(doc["otherData"]["start_step"], 2);
  EXPECT_EQ(doc["otherData"]["end_step"], 4);
  const json& ev = doc["traceEvents"];
  ASSERT_EQ(ev.size(), 3u);
  const char* names[] = {"Server.42.RECV", "Server.42.SUM", "Server.42.REPLY"};
  const int64_t ts[] = {1'000'001'000, 1'000'003'000, 1'000'003'500};
  const int64_t dur[] = {2'000, 500, 500};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(ev[i]["name"], names[i]);
    EXPECT_EQ(ev[i]["ph"], "X");
    EXPECT_EQ(ev[i]["cat"], "Comm");
    EXPECT_EQ(ev[i]["pid"], "Server 1");
    EXPECT_EQ(ev[i]["tid"], "42");
    EXPECT_EQ(ev[i]["ts"], ts[i]);
    EXPECT_EQ(ev[i]["dur"], dur[i]);
    EXPECT_EQ(ev[i]["args"]["step"], 3);
    EXPECT_EQ(ev[i]["args"]["last_worker"], 1);
  }
}

class ServerTraceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("bps_server_trace_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ServerTraceFileTest, WritesServerRankCommJson) {
  const std::string dir = (dir_ / "nested" / "trace").string();
  ASSERT_TRUE(ServerTrace::CheckDir(dir).ok());  // created, and left without the probe file
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  ServerTrace trace(dir, TraceWindow{1, 3});
  trace.NewBuffer()->Add(RoundTrace{5, 1, 0, 1, 2, 3, 4});
  trace.NewBuffer()->Add(RoundTrace{6, 2, 1, 1, 2, 3, 4});
  EXPECT_EQ(trace.rounds(), 2u);
  auto path = trace.Write(TraceIdentity{3, "job", 0});
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(path.value(), dir + "/server_3/comm.json");
  std::ifstream in(path.value());
  json doc = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  EXPECT_EQ(doc["traceEvents"].size(), 6u);
  EXPECT_FALSE(std::filesystem::exists(path.value() + ".tmp"));
}

TEST_F(ServerTraceFileTest, AnUnusableDirectoryIsANamedError) {
  std::filesystem::create_directories(dir_);
  const std::string file = (dir_ / "plain").string();
  std::ofstream(file) << "x";
  Status st = ServerTrace::CheckDir(file + "/trace");  // under a regular file
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Has(st.message(), "BYTEPS_TRACE_DIR=" + file + "/trace: cannot create the trace directory"))
      << st.message();

  ServerTrace trace(file, TraceWindow{1, 2});  // the file where the directory should be
  auto path = trace.Write(TraceIdentity{0, "", 0});
  ASSERT_FALSE(path.ok());
  EXPECT_TRUE(Has(path.status().message(), "cannot write the server's trace " + file + "/server_0/comm.json"))
      << path.status().message();
}

}  // namespace
}  // namespace byteps::server::test
