// BufferPool: same-size buffers come back, alignment, and the cap on idle memory.
#include "server/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace byteps::server {
namespace {

bool Aligned64(const uint8_t* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(BufferPoolTest, ReleasedBufferIsReusedForTheSameSize) {
  BufferPool pool;
  uint8_t* first;
  {
    auto b = pool.Get(1000);
    first = b.get();
    std::memset(first, 0xab, 1000);  // the whole requested size is writable
    EXPECT_EQ(pool.cached_bytes(), 0u);
  }
  EXPECT_EQ(pool.cached_bytes(), 1000u);
  auto again = pool.Get(1000);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool.cached_bytes(), 0u);

  auto other = pool.Get(1001);  // another size never gets the cached one
  EXPECT_NE(other.get(), first);
}

TEST(BufferPoolTest, BuffersAre64ByteAligned) {
  BufferPool pool;
  std::vector<std::shared_ptr<uint8_t>> held;
  for (size_t size : {0, 1, 3, 63, 64, 65, 100, 4097, 1 << 20}) {
    held.push_back(pool.Get(size));
    ASSERT_NE(held.back(), nullptr) << size;
    EXPECT_TRUE(Aligned64(held.back().get())) << size;
  }
  // Distinct live buffers never alias.
  std::set<uint8_t*> distinct;
  for (auto& b : held) distinct.insert(b.get());
  EXPECT_EQ(distinct.size(), held.size());
  held.clear();
  auto reused = pool.Get(65);
  EXPECT_TRUE(Aligned64(reused.get()));
}

TEST(BufferPoolTest, CachedBytesAreCapped) {
  BufferPool pool(/*max_cached_bytes=*/2500);
  {
    std::vector<std::shared_ptr<uint8_t>> held;
    for (int i = 0; i < 4; ++i) held.push_back(pool.Get(1000));
  }  // four released, only two fit under the cap
  EXPECT_EQ(pool.cached_bytes(), 2000u);
  auto a = pool.Get(1000), b = pool.Get(1000);
  EXPECT_EQ(pool.cached_bytes(), 0u);
  auto c = pool.Get(1000);  // freshly allocated
  a.reset();
  b.reset();
  c.reset();
  EXPECT_EQ(pool.cached_bytes(), 2000u);

  BufferPool none(0);
  { auto x = none.Get(64); }
  EXPECT_EQ(none.cached_bytes(), 0u);
}

TEST(BufferPoolTest, ReleaseFromOtherThreads) {
  BufferPool pool;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 1000; ++i) {
        auto b = pool.Get(static_cast<size_t>(64 * (1 + (i + t) % 4)));
        b.get()[0] = static_cast<uint8_t>(i);
      }
    });
  }
  for (auto& th : threads) th.join();
  // At most one idle buffer per size per thread.
  EXPECT_LE(pool.cached_bytes(), 4u * (64 + 128 + 192 + 256));
  EXPECT_GT(pool.cached_bytes(), 0u);
}

}  // namespace
}  // namespace byteps::server
