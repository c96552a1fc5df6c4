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
#include <vector>

#include "common/half.h"
#include "worker/average.h"
#include "worker/local_reduce/local_reducer.h"
#include "worker/local_reduce/shm_segment.h"
#include "worker/planning/key_assigner.h"
#include "worker/planning/partitioner.h"

namespace byteps::worker {
namespace {

// ---- SplitIntoPartitions ---------------------------------------------------------------------

// Invariants that hold for every whole-element tensor.
void CheckPartitions(size_t bytes, size_t pbytes, size_t elem) {
  SCOPED_TRACE("bytes=" + std::to_string(bytes) + " partition=" + std::to_string(pbytes) +
               " elem=" + std::to_string(elem));
  auto parts = planning::SplitIntoPartitions(bytes, pbytes, elem);
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
  auto parts = planning::SplitIntoPartitions(0, 4096, 4);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].offset, 0u);
  EXPECT_EQ(parts[0].length, 0u);
}

TEST(PartitionerTest, ExactMultiples) {
  auto parts = planning::SplitIntoPartitions(4 * 4096, 4096, 4);
  ASSERT_EQ(parts.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].offset, i * 4096);
    EXPECT_EQ(parts[i].length, 4096u);
  }
  parts = planning::SplitIntoPartitions(4096, 4096, 8);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].length, 4096u);
}

TEST(PartitionerTest, RemainderIsSpreadEvenly) {
  // Just over two partitions: three nearly equal parts instead of two full ones and a sliver.
  auto parts = planning::SplitIntoPartitions(2 * 4096 + 8, 4096, 4);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].length, 2736u);
  EXPECT_EQ(parts[1].length, 2736u);
  EXPECT_EQ(parts[2].length, 2728u);
  EXPECT_EQ(parts[2].offset, 2 * 2736u);
}

TEST(PartitionerTest, PartitionSmallerThanOneElement) {
  auto parts = planning::SplitIntoPartitions(40, 3, 8);  // 3-byte partitions of 8-byte elements
  ASSERT_EQ(parts.size(), 5u);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].offset, i * 8);
    EXPECT_EQ(parts[i].length, 8u);
  }
  EXPECT_EQ(planning::SplitIntoPartitions(40, 0, 4).size(), 10u);
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

// ---- KeyAssigner -----------------------------------------------------------------------------

using SizedDecl = std::optional<std::pair<size_t, DataType>>;

TEST(KeyAssignerTest, SequentialKeysAndStableNames) {
  planning::KeyAssigner ka(3, 1024);
  EXPECT_EQ(ka.Declare("a").value(), 0u);
  EXPECT_EQ(ka.Declare("b").value(), 1u);
  EXPECT_EQ(ka.Declare("a").value(), 0u);
  EXPECT_EQ(ka.Declare("c", SizedDecl({100, DataType::kFloat32})).value(), 2u);
  EXPECT_EQ(ka.Declare("b", SizedDecl({8, DataType::kInt64})).value(), 1u);  // plans the known name
  auto plan = ka.Plan("c", 100, DataType::kFloat32);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan.value()->declared_key, 2u);
  EXPECT_EQ(plan.value()->name, "c");
  EXPECT_EQ(ka.Plan("c", 100, DataType::kFloat32).value(), plan.value());  // same plan object
}

TEST(KeyAssignerTest, PartitionKeys) {
  planning::KeyAssigner ka(2, 64);
  ka.Declare("x").value();
  ka.Declare("y").value();
  auto plan = ka.Plan("y", 64 * 5 + 8, DataType::kFloat64);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto& parts = plan.value()->partitions;
  ASSERT_EQ(parts.size(), 6u);
  for (size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(parts[i].key, (uint64_t{1} << 16) + i);
}

TEST(KeyAssignerTest, MismatchedSizeOrDtypeNamesTheTensor) {
  planning::KeyAssigner ka(2, 1024);
  ASSERT_TRUE(ka.Plan("layer.w", 400, DataType::kFloat32).ok());
  auto bad = ka.Plan("layer.w", 800, DataType::kFloat32);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'layer.w'"), std::string::npos) << bad.status().message();
  bad = ka.Plan("layer.w", 400, DataType::kInt32);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("layer.w"), std::string::npos);
  auto decl = ka.Declare("layer.w", SizedDecl({400, DataType::kFloat16}));
  ASSERT_FALSE(decl.ok());
  EXPECT_EQ(decl.status().code(), StatusCode::kInvalidArgument);
}

TEST(KeyAssignerTest, LimitsAreErrors) {
  planning::KeyAssigner ka(1, 1);
  auto many = ka.Plan("huge", planning::kMaxPartitionsPerTensor + 1, DataType::kUint8);
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(many.status().message().find("'huge'"), std::string::npos);
  EXPECT_TRUE(ka.Plan("fits", planning::kMaxPartitionsPerTensor, DataType::kUint8).ok());

  planning::KeyAssigner names(1, 1024);
  for (uint32_t i = 0; i < planning::kMaxTensors; ++i) ASSERT_TRUE(names.Declare("t" + std::to_string(i)).ok());
  auto over = names.Declare("one-too-many");
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("'one-too-many'"), std::string::npos);
}

TEST(KeyAssignerTest, SizedPlacementIsByteBalanced) {
  constexpr size_t kPart = 4096;
  for (int servers : {1, 2, 3, 7}) {
    planning::KeyAssigner ka(servers, kPart);
    std::mt19937 rng(servers);
    for (int t = 0; t < 300; ++t) {
      size_t elems = rng() % (5 * kPart / 4);
      ASSERT_TRUE(ka.Declare("t" + std::to_string(t), SizedDecl({elems * 4, DataType::kFloat32})).ok());
    }
    const auto& loads = ka.server_loads();
    ASSERT_EQ(loads.size(), static_cast<size_t>(servers));
    auto [mn, mx] = std::minmax_element(loads.begin(), loads.end());
    EXPECT_LE(*mx - *mn, kPart) << servers << " servers";
  }
}

TEST(KeyAssignerTest, SamePlansForSameDeclarationSequence) {
  planning::KeyAssigner a(5, 1000), b(5, 1000);
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, size_t>> seq;
  std::map<std::string, size_t> first_bytes;  // the size each name's plan keeps
  for (int i = 0; i < 300; ++i) {
    std::string name = "p" + std::to_string(rng() % 150);
    size_t bytes = (rng() % 5000) * 2;
    if (i % 3 != 1) first_bytes.emplace(name, bytes);  // the first sized use makes the plan
    seq.emplace_back(name, bytes);
  }
  for (planning::KeyAssigner* ka : {&a, &b}) {
    for (size_t i = 0; i < seq.size(); ++i) {
      const auto& [name, bytes] = seq[i];
      // A mix of sized declarations, bare declarations and unsized first uses; reuses with another
      // size fail identically on both.
      if (i % 3 == 0) {
        (void)ka->Declare(name, SizedDecl({bytes, DataType::kFloat16}));
      } else if (i % 3 == 1) {
        (void)ka->Declare(name);
      } else {
        (void)ka->Plan(name, bytes, DataType::kFloat16);
      }
    }
  }
  EXPECT_EQ(a.server_loads(), b.server_loads());
  for (const auto& [name, bytes] : first_bytes) {
    ASSERT_EQ(a.Declare(name).value(), b.Declare(name).value());
    auto pa = a.Plan(name, bytes, DataType::kFloat16);
    auto pb = b.Plan(name, bytes, DataType::kFloat16);
    ASSERT_TRUE(pa.ok() && pb.ok()) << name;
    ASSERT_EQ(pa.value()->partitions.size(), pb.value()->partitions.size());
    for (size_t i = 0; i < pa.value()->partitions.size(); ++i) {
      const planning::PartitionPlan &x = pa.value()->partitions[i], &y = pb.value()->partitions[i];
      EXPECT_EQ(x.key, y.key);
      EXPECT_EQ(x.server, y.server);
      EXPECT_EQ(x.range.offset, y.range.offset);
      EXPECT_EQ(x.range.length, y.range.length);
    }
  }
}

TEST(KeyAssignerTest, UnsizedPlacementIsRoundRobinFromHash) {
  constexpr int kServers = 4;
  planning::KeyAssigner ka(kServers, 100);
  for (int i = 0; i < 5; ++i) ka.Declare("pad" + std::to_string(i)).value();
  auto plan = ka.Plan("w", 100 * 9, DataType::kUint8);  // declared key 5, 9 partitions
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const size_t start = protocol::PlaceKey(protocol::MakeKey(5, 0), kServers);
  const auto& parts = plan.value()->partitions;
  ASSERT_EQ(parts.size(), 9u);
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i].server, static_cast<int>((start + i) % kServers)) << "partition " << i;
  }
  EXPECT_EQ(ka.server_loads(), std::vector<uint64_t>(kServers, 0));  // unsized does not count
}

TEST(KeyAssignerTest, AGenerationRePlansEveryTensorUnderKeysOfItsOwn) {
  planning::KeyAssigner ka(3, 1000);
  ASSERT_TRUE(ka.Declare("a", SizedDecl({4000, DataType::kUint8})).ok());
  ASSERT_TRUE(ka.Declare("b", SizedDecl({2500, DataType::kUint8})).ok());
  ASSERT_TRUE(ka.Plan("c", 3000, DataType::kUint8).ok());  // unsized first use
  const planning::TensorPlan* a0 = ka.Plan("a", 4000, DataType::kUint8).value();
  const uint64_t a0_first_key = a0->partitions[0].key;
  ASSERT_TRUE(ka.UseGeneration(1, 2000).ok());
  EXPECT_EQ(ka.generation(), 1u);
  EXPECT_EQ(ka.partition_bytes(), 2000u);
  // Every known tensor is planned in the new generation, balanced where it was declared with its size.
  EXPECT_EQ(ka.server_loads(), (std::vector<uint64_t>{2000, 2000, 2500}));
  const planning::TensorPlan* a1 = ka.Plan("a", 4000, DataType::kUint8).value();
  EXPECT_EQ(a1->index, 0u);
  EXPECT_EQ(a1->declared_key, (1u << 16) | 0u);
  ASSERT_EQ(a1->partitions.size(), 2u);
  EXPECT_EQ(protocol::DeclaredKeyOf(a1->partitions[1].key), (1u << 16) | 0u);
  const planning::TensorPlan* c1 = ka.Plan("c", 3000, DataType::kUint8).value();
  EXPECT_EQ(c1->partitions.size(), 2u);
  EXPECT_EQ(c1->partitions[0].server,
            static_cast<int>(protocol::PlaceKey(protocol::MakeKey((1u << 16) | 2u, 0), 3)));
  // The old plan is untouched (an operation in flight keeps it) and comes back with its generation.
  EXPECT_EQ(a0->partitions.size(), 4u);
  EXPECT_EQ(a0->partitions[0].key, a0_first_key);
  ASSERT_TRUE(ka.UseGeneration(0, 1000).ok());
  EXPECT_EQ(ka.Plan("a", 4000, DataType::kUint8).value(), a0);
  // A tensor new in generation 0 is planned lazily in generation 1 too, and its size is kept.
  ASSERT_TRUE(ka.Plan("d", 1500, DataType::kUint8).ok());
  ASSERT_TRUE(ka.UseGeneration(1, 2000).ok());
  EXPECT_EQ(ka.Plan("d", 1500, DataType::kUint8).value()->partitions.size(), 1u);
  EXPECT_FALSE(ka.Plan("d", 1600, DataType::kUint8).ok());
  EXPECT_EQ(ka.Declare("d").value(), 3u);  // the index stays the declaration order
}

TEST(KeyAssignerTest, GenerationErrorsChangeNothing) {
  planning::KeyAssigner ka(2, 1000);
  ASSERT_TRUE(ka.Declare("big", SizedDecl({size_t{70000}, DataType::kUint8})).ok());
  EXPECT_FALSE(ka.UseGeneration(2, 1000).ok());  // not the next one
  auto tiny = ka.UseGeneration(1, 1);  // 70000 partitions of one byte: over the limit
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.message().find("'big'"), std::string::npos) << tiny.message();
  EXPECT_EQ(ka.generation(), 0u);
  ASSERT_TRUE(ka.UseGeneration(1, 2000).ok());
  EXPECT_FALSE(ka.UseGeneration(1, 4000).ok());  // an existing generation keeps its size
  EXPECT_FALSE(ka.UseGeneration(planning::kMaxGenerations, 1000).ok());
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
