// BufferPool: same-size buffers come back, alignment, the cap on idle memory, and running out of
// memory as an error value.
#include "server/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace byteps::server {
namespace {

bool Aligned64(const uint8_t* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

// Allocators for the exhaustion tests: memory up to kBudget bytes a call, nothing beyond.
constexpr size_t kBudget = 4096;
int g_calls = 0;  // touched by the test thread only
void* Limited(size_t alignment, size_t size) {
  ++g_calls;
  return size <= kBudget ? std::aligned_alloc(alignment, size) : nullptr;
}

TEST(BufferPoolTest, ReleasedBufferIsReusedForTheSameSize) {
  BufferPool pool;
  uint8_t* first;
  {
    auto b = *pool.Get(1000);
    first = b.get();
    std::memset(first, 0xab, 1000);  // the whole requested size is writable
    EXPECT_EQ(pool.cached_bytes(), 0u);
  }
  EXPECT_EQ(pool.cached_bytes(), 1000u);
  auto again = *pool.Get(1000);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool.cached_bytes(), 0u);

  auto other = *pool.Get(1001);  // another size never gets the cached one
  EXPECT_NE(other.get(), first);
}

TEST(BufferPoolTest, BuffersAre64ByteAligned) {
  BufferPool pool;
  std::vector<std::shared_ptr<uint8_t>> held;
  for (size_t size : {0, 1, 3, 63, 64, 65, 100, 4097, 1 << 20}) {
    held.push_back(*pool.Get(size));
    ASSERT_NE(held.back(), nullptr) << size;
    EXPECT_TRUE(Aligned64(held.back().get())) << size;
  }
  // Distinct live buffers never alias.
  std::set<uint8_t*> distinct;
  for (auto& b : held) distinct.insert(b.get());
  EXPECT_EQ(distinct.size(), held.size());
  held.clear();
  auto reused = *pool.Get(65);
  EXPECT_TRUE(Aligned64(reused.get()));
}

TEST(BufferPoolTest, CachedBytesAreCapped) {
  BufferPool pool(/*max_cached_bytes=*/2500);
  {
    std::vector<std::shared_ptr<uint8_t>> held;
    for (int i = 0; i < 4; ++i) held.push_back(*pool.Get(1000));
  }  // four released, only two fit under the cap
  EXPECT_EQ(pool.cached_bytes(), 2000u);
  auto a = *pool.Get(1000), b = *pool.Get(1000);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  auto c = *pool.Get(1000);  // freshly allocated
  a.reset();
  b.reset();
  c.reset();
  EXPECT_EQ(pool.cached_bytes(), 2000u);

  BufferPool none(0);
  { auto x = *none.Get(64); }
  EXPECT_EQ(none.cached_bytes(), 0u);
}

TEST(BufferPoolTest, ReleaseFromOtherThreads) {
  BufferPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 1000; ++i) {
        auto b = *pool.Get(static_cast<size_t>(64 * (1 + (i + t) % 4)));
        b.get()[0] = static_cast<uint8_t>(i);
      }
    });
  }
  for (auto& th : threads) th.join();
  // At most one idle buffer per size per thread.
  EXPECT_LE(pool.cached_bytes(), 4u * (64 + 128 + 192 + 256));
  EXPECT_GT(pool.cached_bytes(), 0u);
}

TEST(BufferPoolTest, FailedAllocationIsAnErrorNamingTheSize) {
  BufferPool pool(1ull << 20, Limited);
  g_calls = 0;
  auto big = pool.Get(kBudget + 1);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(big.status().message().find("4097 bytes"), std::string::npos) << big.status().message();
  EXPECT_EQ(g_calls, 1);
  // The pool is unharmed: what fits is still handed out, and recycled without the allocator.
  { auto small = pool.Get(kBudget); ASSERT_TRUE(small.ok()); }
  EXPECT_EQ(pool.cached_bytes(), kBudget);
  auto again = pool.Get(kBudget);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(g_calls, 2);
}

TEST(BufferPoolTest, SizeThatCannotBeRoundedUpIsRefusedWithoutAllocating) {
  BufferPool pool(1ull << 20, Limited);
  g_calls = 0;
  for (size_t size : {std::numeric_limits<size_t>::max(), std::numeric_limits<size_t>::max() - 62}) {
    auto b = pool.Get(size);
    ASSERT_FALSE(b.ok()) << size;  // (size + 63) would wrap to a tiny buffer
    EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(b.status().message().find("too large"), std::string::npos) << b.status().message();
  }
  EXPECT_EQ(g_calls, 0);
}

}  // namespace
}  // namespace byteps::server
