// The worker's pure logic: partitioning, key/server assignment, priority + credit scheduling, and
// the per-dtype division that turns a sum into an average; removing a lost peer's shared memory.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/half.h"
#include "worker/average.h"
#include "worker/local_reduce/local_reducer.h"
#include "worker/local_reduce/shm_segment.h"
#include "worker/planning/key_assigner.h"
#include "protocol/name_planner.h"
#include "protocol/partitioner.h"

namespace byteps::worker {
namespace {

// ---- SplitIntoPartitions ---------------------------------------------------------------------

// Invariants that hold for every whole-element tensor.
void CheckPartitions(size_t bytes, size_t pbytes, size_t elem) {
  SCOPED_TRACE("bytes=" + std::to_string(bytes) + " partition=" + std::to_string(pbytes) +
               " elem=" + std::to_string(elem));
  auto parts = protocol::SplitIntoPartitions(bytes, pbytes, elem);
  ASSERT_FALSE(parts.empty());
  const size_t step = std::max(elem, pbytes / elem * elem);
  EXPECT_EQ(parts.size(), bytes == 0 ? 1 : (bytes + step - 1) / step);  // as few as the cap allows
  size_t offset = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].offset, offset) << "partition " << i;  // contiguous, in order
    EXPECT_EQ(parts[i].length % elem, 0u) << "partition " << i;
    EXPECT_LE(parts[i].length, step) << "partition " << i;
    if (bytes > 0) {
      EXPECT_GT(parts[i].length, 0u) << "partition " << i;
    }
    // Equal sizes; only the last one may be shorter.
    if (i + 1 < parts.size()) {
      EXPECT_EQ(parts[i].length, parts[0].length);
    }
    offset += parts[i].length;
  }
  EXPECT_EQ(offset, bytes);
}

TEST(PartitionerTest, EmptyTensorHasOneEmptyPartition) {
  auto parts = protocol::SplitIntoPartitions(0, 4096, 4);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].offset, 0u);
  EXPECT_EQ(parts[0].length, 0u);
}

TEST(PartitionerTest, ExactMultiples) {
  auto parts = protocol::SplitIntoPartitions(4 * 4096, 4096, 4);
  ASSERT_EQ(parts.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].offset, i * 4096);
    EXPECT_EQ(parts[i].length, 4096u);
  }
  parts = protocol::SplitIntoPartitions(4096, 4096, 8);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].length, 4096u);
}

TEST(PartitionerTest, RemainderIsSpreadEvenly) {
  // Just over two partitions: three nearly equal parts instead of two full ones and a sliver.
  auto parts = protocol::SplitIntoPartitions(2 * 4096 + 8, 4096, 4);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].length, 2736u);
  EXPECT_EQ(parts[1].length, 2736u);
  EXPECT_EQ(parts[2].length, 2728u);
  EXPECT_EQ(parts[2].offset, 2 * 2736u);
}

TEST(PartitionerTest, PartitionSmallerThanOneElement) {
  auto parts = protocol::SplitIntoPartitions(40, 3, 8);  // 3-byte partitions of 8-byte elements
  ASSERT_EQ(parts.size(), 5u);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].offset, i * 8);
    EXPECT_EQ(parts[i].length, 8u);
  }
  EXPECT_EQ(protocol::SplitIntoPartitions(40, 0, 4).size(), 10u);
}

TEST(PartitionerTest, InvariantsOverASweep) {
  for (size_t elem : {1, 2, 4, 8}) {
    for (size_t pbytes : {1, 3, 4, 7, 8, 64, 100, 4096, 4099}) {
      for (size_t elems : {0, 1, 2, 3, 5, 16, 17, 100, 1023, 1024, 1025, 4097, 100003}) {
        CheckPartitions(elems * elem, pbytes, elem);
      }
    }
  }
}

// ---- NamePlanner (the name service) ----------------------------------------------------------

protocol::NameRequest Sized(const std::string& name, size_t bytes, uint32_t inc = 0, uint32_t gen = 0,
                            size_t partition = 1024, DataType dt = DataType::kFloat32) {
  protocol::NameRequest r;
  r.name = name;
  r.incarnation = inc;
  r.generation = gen;
  r.sized = true;
  r.bytes = bytes;
  r.dtype = static_cast<int>(dt);
  r.partition_bytes = partition;
  return r;
}

TEST(NamePlannerTest, FirstRequestWinsAndAnswersAreIdempotent) {
  protocol::NamePlanner p(3);
  auto a = p.Plan(Sized("a", 4000));
  auto b = p.Plan(Sized("b", 100));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->index, 0u);
  EXPECT_EQ(b->index, 1u);
  // Asked again (another worker, another partition size): the same plan.
  auto a2 = p.Plan(Sized("a", 4000, 0, 0, 64));
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(*a2, *a);
  EXPECT_EQ(a->partitions.size(), 4u);
  // A new incarnation is a new index; a new generation keeps the index under new keys.
  auto a1 = p.Plan(Sized("a", 8, 1));
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(a1->index, 2u);
  auto ag = p.Plan(Sized("a", 4000, 0, 1, 2000));
  ASSERT_TRUE(ag.ok());
  EXPECT_EQ(ag->index, 0u);
  EXPECT_EQ(ag->declared_key, protocol::MakeDeclaredKey(1, 0));
  EXPECT_EQ(protocol::GenerationOf(ag->declared_key), 1u);
  EXPECT_EQ(ag->partitions.size(), 2u);
  EXPECT_EQ(protocol::DeclaredKeyOf(ag->partitions[1].key), ag->declared_key);
  // Unsized: only the index.
  protocol::NameRequest bare;
  bare.name = "b";
  EXPECT_EQ(p.Plan(bare)->index, 1u);
  EXPECT_EQ(p.tensors(), 3u);
}

TEST(NamePlannerTest, ByteBalancedAndTheSameWhateverTheOrderOfOtherNames) {
  constexpr size_t kPart = 4096;
  for (int servers : {1, 2, 3, 7}) {
    protocol::NamePlanner p(servers);
    std::mt19937 rng(servers);
    std::vector<uint64_t> loads(servers, 0);
    for (int t = 0; t < 300; ++t) {
      size_t elems = rng() % (5 * kPart / 4);
      auto plan = p.Plan(Sized("t" + std::to_string(t), elems * 4, 0, 0, kPart));
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      for (const auto& x : plan->partitions) loads[x.server] += std::max<uint64_t>(x.length, 1);
    }
    auto [mn, mx] = std::minmax_element(loads.begin(), loads.end());
    EXPECT_LE(*mx - *mn, kPart) << servers << " servers";
  }
}

// The start-up tuning's probes are placed but not counted: after a probe that left one server 4 KiB
// ahead, a model of two equal tensors still gets one tensor per server.
TEST(NamePlannerTest, TheTuningsProbesLeaveTheLoadsAsTheyWere) {
  protocol::NamePlanner p(2);
  auto probe = p.Plan(Sized(std::string(protocol::kUncountedPrefix) + "p4096", 4096, 0, 0, 4096));
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->partitions[0].server, 0);
  auto a = p.Plan(Sized("a", 1024));
  auto b = p.Plan(Sized("b", 1024));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->partitions[0].server, 0);
  EXPECT_EQ(b->partitions[0].server, 1);
  // A counted tensor of the same size does move the next ones.
  protocol::NamePlanner q(2);
  ASSERT_TRUE(q.Plan(Sized("big", 4096, 0, 0, 4096)).ok());
  EXPECT_EQ(q.Plan(Sized("a", 1024))->partitions[0].server, 1);
  EXPECT_EQ(q.Plan(Sized("b", 1024))->partitions[0].server, 1);
}

TEST(NamePlannerTest, DisagreeingSizeGetsItsOwnPlanUnderTheSameKeys) {
  protocol::NamePlanner p(2);
  auto first = p.Plan(Sized("w", 400));
  auto other = p.Plan(Sized("w", 800));
  ASSERT_TRUE(first.ok() && other.ok());
  EXPECT_EQ(other->declared_key, first->declared_key);
  EXPECT_EQ(other->bytes, 800u);
  EXPECT_EQ(*p.Plan(Sized("w", 400)), *first);  // the first plan stays everyone's
}

TEST(NamePlannerTest, LimitsAreErrorsNamingTheTensor) {
  protocol::NamePlanner p(1);
  auto many = p.Plan(Sized("huge", protocol::kMaxPartitionsPerTensor + 1, 0, 0, 1, DataType::kUint8));
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find("'huge'"), std::string::npos);
  EXPECT_TRUE(p.Plan(Sized("fits", protocol::kMaxPartitionsPerTensor, 0, 0, 1, DataType::kUint8)).ok());
  auto gen = p.Plan(Sized("g", 4, 0, protocol::kMaxGenerations));
  ASSERT_FALSE(gen.ok());
  EXPECT_NE(gen.status().message().find("'g'"), std::string::npos);
}

TEST(NamePlannerTest, RequestAndReplyRoundTrip) {
  protocol::NamePlanner p(3);
  protocol::NameRequest r = Sized("layer.\"w\"", 5000, 2, 1, 1000, DataType::kFloat16);
  auto back = protocol::DecodeNameRequest(protocol::Encode(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, r.name);
  EXPECT_EQ(back->incarnation, 2u);
  EXPECT_EQ(back->partition_bytes, 1000u);
  protocol::NameReply reply;
  reply.plan = p.Plan(r).value();
  auto rb = protocol::DecodeNameReply(protocol::Encode(reply));
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(rb->plan, reply.plan);
  EXPECT_FALSE(protocol::DecodeNameReply("{\"error\": 3}").ok());
}

// ---- KeyAssigner (the worker's cache and the incarnation rules) --------------------------------

planning::Signature Sig(size_t bytes, DataType dt = DataType::kFloat32, const char* op = protocol::kOpSum) {
  planning::Signature s;
  s.bytes = bytes;
  s.dtype = dt;
  s.op = op;
  return s;
}

TEST(KeyAssignerTest, AsksOncePerNameIncarnationAndGeneration) {
  int asked = 0;
  auto local = planning::KeyAssigner::LocalResolver(3);
  planning::KeyAssigner ka([&](const protocol::NameRequest& r) { ++asked; return local(r); }, 1024);
  auto a = ka.Begin("a", Sig(4000));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ka.End(*a->plan, Status::Ok());
  auto again = ka.Begin("a", Sig(4000));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->plan, a->plan);  // the cache: same plan object, no round trip
  ka.End(*again->plan, Status::Ok());
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(ka.Declare("b", std::nullopt, nullptr).value(), 1u);
  EXPECT_EQ(ka.Declare("a", std::nullopt, nullptr).value(), 0u);
  EXPECT_EQ(ka.LocalIndex("a"), 0u);
  EXPECT_EQ(ka.LocalIndex("b"), 1u);
  ASSERT_TRUE(ka.UseGeneration(1, 2000).ok());
  auto g1 = ka.Begin("a", Sig(4000));
  ASSERT_TRUE(g1.ok());
  EXPECT_EQ(protocol::GenerationOf(g1->plan->declared_key), 1u);
  EXPECT_EQ(g1->plan->partitions.size(), 2u);
  ka.End(*g1->plan, Status::Ok());
  EXPECT_FALSE(ka.UseGeneration(1, 4000).ok());  // an existing generation keeps its size
  EXPECT_FALSE(ka.UseGeneration(3, 1000).ok());  // not the next one
  auto retired = ka.RetireGeneration(0);
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].plan, a->plan);
  EXPECT_EQ(retired[0].last_round, 2u);
}

TEST(KeyAssignerTest, ANewSignatureWhenIdleIsANewIncarnation) {
  planning::KeyAssigner ka(planning::KeyAssigner::LocalResolver(2), 1024);
  auto a = ka.Begin("x", Sig(400));
  ASSERT_TRUE(a.ok());
  const planning::TensorPlan* first = a->plan;
  ka.End(*first, Status::Ok());
  ASSERT_TRUE(ka.Begin("x", Sig(400)).ok());
  ka.End(*first, Status::Ok());
  auto b = ka.Begin("x", Sig(800, DataType::kFloat64));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->plan->incarnation, 1u);
  EXPECT_NE(b->plan->declared_key, first->declared_key);
  EXPECT_EQ(b->plan->bytes, 800u);
  ASSERT_EQ(b->retired.size(), 1u);
  EXPECT_EQ(b->retired[0].plan, first);
  EXPECT_EQ(b->retired[0].last_round, 2u);  // two operations of the first incarnation
  EXPECT_EQ(first->bytes, 400u);            // an old plan never changes
  ka.End(*b->plan, Status::Ok());
  auto c = ka.Begin("x", Sig(800, DataType::kFloat64, protocol::kOpConcat));  // another op
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->plan->incarnation, 2u);
  ka.End(*c->plan, Status::Ok());
}

TEST(KeyAssignerTest, ANewSignatureWhileInFlightNamesTheTensorAndBoth) {
  planning::KeyAssigner ka(planning::KeyAssigner::LocalResolver(2), 1024);
  auto a = ka.Begin("layer.w", Sig(400));
  ASSERT_TRUE(a.ok());
  auto bad = ka.Begin("layer.w", Sig(800));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'layer.w'"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("400 bytes"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("800 bytes"), std::string::npos) << bad.status().message();
  ka.Abandon(*a->plan);  // never submitted: no longer in flight
  auto ok = ka.Begin("layer.w", Sig(800));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->plan->incarnation, 1u);
  ASSERT_EQ(ok->retired.size(), 1u);
  EXPECT_EQ(ok->retired[0].last_round, 0u);  // the abandoned one took no round
}

TEST(KeyAssignerTest, AnAgreedFailureMovesTheNextUseToANewIncarnation) {
  planning::KeyAssigner ka(planning::KeyAssigner::LocalResolver(2), 1024);
  auto a = ka.Begin("t", Sig(64));
  ASSERT_TRUE(a.ok());
  ka.End(*a->plan, Unavailable("server 0 unreachable"));  // not agreed: the name stays
  auto b = ka.Begin("t", Sig(64));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->plan, a->plan);
  ka.End(*b->plan, InvalidArgument("server 1: tensor 't' has 64 bytes on worker 0 but 32 on worker 1"));
  EXPECT_TRUE(planning::IsAgreedFailure(InvalidArgument("x")));
  EXPECT_FALSE(planning::IsAgreedFailure(Aborted("x")));
  auto c = ka.Begin("t", Sig(64));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->plan->incarnation, 1u);
  EXPECT_NE(c->plan->declared_key, a->plan->declared_key);
  ka.End(*c->plan, Status::Ok());
}

TEST(KeyAssignerTest, ResolverErrorsNameTheTensorAndCountNothing) {
  bool fail = true;
  auto local = planning::KeyAssigner::LocalResolver(1);
  planning::KeyAssigner ka(
      [&](const protocol::NameRequest& r) -> StatusOr<protocol::NamePlan> {
        if (fail) return DeadlineExceeded("no answer");
        return local(r);
      },
      1024);
  auto a = ka.Begin("late", Sig(16));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("'late'"), std::string::npos) << a.status().message();
  fail = false;
  auto b = ka.Begin("late", Sig(32));  // not in flight after the failure: a new signature is fine
  ASSERT_TRUE(b.ok()) << b.status().ToString();
}

TEST(KeyAssignerTest, ConcurrentFirstUsesAgree) {
  auto local = planning::KeyAssigner::LocalResolver(3);
  planning::KeyAssigner ka(local, 256);
  std::vector<std::thread> threads;
  std::vector<const planning::TensorPlan*> plans(16);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      auto b = ka.Begin("n" + std::to_string(i % 4), Sig(1024));
      ASSERT_TRUE(b.ok());
      plans[i] = b->plan;
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 4; i < 16; ++i) EXPECT_EQ(plans[i], plans[i % 4]);
}

// ---- DivideInPlace ---------------------------------------------------------------------------

constexpr int kDivisors[] = {2, 3, 7, 8, 127, 128, 200, 255, 256, 1000, 65537};

// Floor division computed independently of average.cc (via the non-negative remainder).
template <typename T>
T FloorDiv(T x, int d) {
  __int128 r = ((static_cast<__int128>(x) % d) + d) % d;
  return static_cast<T>((static_cast<__int128>(x) - r) / d);
}

template <typename T>
void CheckIntDivision(DataType dt, std::vector<T> values) {
  for (int d : kDivisors) {
    std::vector<T> v = values;
    DivideInPlace(v.data(), v.size(), dt, d);
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], FloorDiv<T>(values[i], d)) << +values[i] << " / " << d << " (" << DataTypeName(dt) << ")";
    }
  }
}

TEST(AverageTest, IntegersUseFloorDivision) {
  int32_t a[] = {-7, 7, -8, -1, 0, 1};
  DivideInPlace(a, 6, DataType::kInt32, 2);
  EXPECT_EQ(std::vector<int32_t>(a, a + 6), (std::vector<int32_t>{-4, 3, -4, -1, 0, 0}));

  std::vector<int8_t> i8;
  std::vector<uint8_t> u8;
  for (int x = -128; x < 128; ++x) i8.push_back(static_cast<int8_t>(x));
  for (int x = 0; x < 256; ++x) u8.push_back(static_cast<uint8_t>(x));
  CheckIntDivision(DataType::kInt8, i8);
  CheckIntDivision(DataType::kUint8, u8);
  std::vector<int16_t> i16;
  for (int x = -32768; x < 32768; x += 7) i16.push_back(static_cast<int16_t>(x));
  i16.push_back(32767);
  CheckIntDivision(DataType::kInt16, i16);
  std::vector<int32_t> i32 = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), -7, 7, 0};
  std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), -7, 7,
                              -(int64_t{1} << 53) - 1};
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    i32.push_back(static_cast<int32_t>(rng()));
    i64.push_back(static_cast<int64_t>(rng()));
  }
  CheckIntDivision(DataType::kInt32, i32);
  CheckIntDivision(DataType::kInt64, i64);
}

template <typename T>
void CheckFloatDivision(DataType dt) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<T> dist(-1e6, 1e6);
  std::vector<T> values = {0, -0.0, 1, -1, std::numeric_limits<T>::max(), std::numeric_limits<T>::denorm_min(),
                           std::numeric_limits<T>::infinity()};
  for (int i = 0; i < 1000; ++i) values.push_back(dist(rng));
  for (int d : kDivisors) {
    std::vector<T> v = values;
    DivideInPlace(v.data(), v.size(), dt, d);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], values[i] / static_cast<T>(d)) << values[i] << " / " << d;
  }
}

TEST(AverageTest, FloatsMatchPlainDivision) {
  CheckFloatDivision<float>(DataType::kFloat32);
  CheckFloatDivision<double>(DataType::kFloat64);
  float nan = std::numeric_limits<float>::quiet_NaN();
  DivideInPlace(&nan, 1, DataType::kFloat32, 4);
  EXPECT_TRUE(std::isnan(nan));
}

TEST(AverageTest, HalfTypesRoundThroughFloat) {
  for (DataType dt : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool fp16 = dt == DataType::kFloat16;
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
    for (int d : {2, 3, 7, 1000}) {
      std::vector<uint16_t> v = all;
      DivideInPlace(v.data(), v.size(), dt, d);
      for (uint32_t h = 0; h < 65536; ++h) {
        float x = fp16 ? HalfToFloat(all[h]) : BFloat16ToFloat(all[h]);
        float got = fp16 ? HalfToFloat(v[h]) : BFloat16ToFloat(v[h]);
        if (std::isnan(x)) {
          ASSERT_TRUE(std::isnan(got)) << std::hex << h;
          continue;
        }
        uint16_t want = fp16 ? FloatToHalf(x / static_cast<float>(d)) : FloatToBFloat16(x / static_cast<float>(d));
        ASSERT_EQ(v[h], want) << DataTypeName(dt) << " 0x" << std::hex << h << " / " << std::dec << d;
      }
    }
  }
}

TEST(AverageTest, DivisorOneAndEmptyAreNoOps) {
  int64_t x[] = {-7, 9};
  DivideInPlace(x, 2, DataType::kInt64, 1);
  EXPECT_EQ(x[0], -7);
  EXPECT_EQ(x[1], 9);
  DivideInPlace(nullptr, 0, DataType::kFloat32, 3);
}

// ---- ShmSegment -------------------------------------------------------------------------------

bool ShmExists(const std::string& name) {
  struct stat st{};
  return ::stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(ShmSegmentTest, RemoveCreatedByTakesOnlyThatProcessesSegmentsOfThatJob) {
  const int pid = static_cast<int>(getpid());
  const std::string job = "wl" + std::to_string(pid), other = job + "x";
  auto a = local_reduce::ShmSegment::Create(local_reduce::ShmSegment::Name(pid, job, "a"), 64);
  auto b = local_reduce::ShmSegment::Create(local_reduce::ShmSegment::Name(pid, job, "b"), 0);
  auto c = local_reduce::ShmSegment::Create(local_reduce::ShmSegment::Name(pid, other, "a"), 64);  // another job: kept
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  a.value()->data()[0] = 42;
  EXPECT_EQ(local_reduce::ShmSegment::RemoveCreatedBy(pid, job), 2);
  EXPECT_FALSE(ShmExists(a.value()->name()));
  EXPECT_FALSE(ShmExists(b.value()->name()));
  EXPECT_TRUE(ShmExists(c.value()->name()));
  EXPECT_EQ(a.value()->data()[0], 42);  // an existing mapping stays valid
  EXPECT_EQ(local_reduce::ShmSegment::RemoveCreatedBy(pid, job), 0);
  EXPECT_FALSE(local_reduce::ShmSegment::Open(local_reduce::ShmSegment::Name(pid, job, "a"), 64).ok());
}

// A killed process counts as gone while it waits for its parent (a zombie), and after; a live one
// never does.
TEST(ShmSegmentTest, AProcessIsGoneOnceItExitedEvenBeforeItIsReaped) {
  EXPECT_FALSE(local_reduce::ShmSegment::ProcessGone(static_cast<int>(getpid())));
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {  // exits at once; not reaped yet: a zombie
    gone = local_reduce::ShmSegment::ProcessGone(child);
    if (!gone) usleep(10000);
  }
  EXPECT_TRUE(gone) << "an exited, unreaped child is not seen as gone";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(local_reduce::ShmSegment::ProcessGone(child));
}

// ---- LocalReducer ------------------------------------------------------------------------------

// The root fails (e.g. a server died): each non-root learns that cause, with its kind, before the
// root goes away, instead of only "lost the local root".
TEST(LocalReducerTest, RootFailureReachesTheNonRootsWithItsCause) {
  local_reduce::LocalOptions o;
  o.local_size = 2;
  o.job = "lr" + std::to_string(getpid());
  o.start_timeout_s = 10;
  auto root_start = std::async(std::launch::async, [o]() mutable {
    o.local_rank = 1;
    return local_reduce::LocalReducer::Start(o, nullptr);
  });
  std::promise<Status> heard;
  std::atomic<bool> once{false};
  o.local_rank = 0;
  auto non_root = local_reduce::LocalReducer::Start(o, [&](const Status& st) {
    if (!once.exchange(true)) heard.set_value(st);
  });
  ASSERT_TRUE(non_root.ok()) << non_root.status().ToString();
  auto root = root_start.get();
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  root.value()->FailAll(Unavailable("server 0 (127.0.0.1:1234, pid 77) died"));
  auto f = heard.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "the non-root never heard";
  Status st = f.get();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("local root (local rank 1) failed: server 0 (127.0.0.1:1234, pid 77) died"),
            std::string::npos) << st.ToString();
}

// A local process that never connects (it died before, or never started) is named by its local
// rank, singular or plural as it is.
TEST(LocalReducerTest, ARootWhoseLocalRankNeverConnectsNamesIt) {
  local_reduce::LocalOptions o;
  o.local_size = 2;
  o.local_rank = 1;
  o.job = "lonely" + std::to_string(getpid());
  o.start_timeout_s = 0.2;
  auto root = local_reduce::LocalReducer::Start(o, nullptr);
  ASSERT_FALSE(root.ok());
  EXPECT_EQ(root.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(root.status().message().find("for local rank 0 of BYTEPS_LOCAL_SIZE=2 on this host, which never connected"),
            std::string::npos)
      << root.status().message();
  o.local_size = 3;
  o.local_rank = 2;
  auto root3 = local_reduce::LocalReducer::Start(o, nullptr);
  ASSERT_FALSE(root3.ok());
  EXPECT_NE(root3.status().message().find("for local ranks 0, 1 of BYTEPS_LOCAL_SIZE=3"), std::string::npos)
      << root3.status().message();
}

}  // namespace
}  // namespace byteps::worker
