#include "server/buffer_pool.h"

#include <fmt/format.h>

#include <cstdlib>
#include <limits>

namespace byteps::server {
namespace {
constexpr size_t kAlign = 64;

void* SystemAllocate(size_t alignment, size_t size) { return std::aligned_alloc(alignment, size); }
}  // namespace

BufferPool::BufferPool(size_t max_cached_bytes, Allocator allocate)
    : max_cached_(max_cached_bytes), allocate_(allocate != nullptr ? allocate : &SystemAllocate) {}

BufferPool::~BufferPool() {
  for (auto& [size, v] : free_)
    for (uint8_t* p : v) std::free(p);
}

StatusOr<std::shared_ptr<uint8_t>> BufferPool::Get(size_t size) {
  uint8_t* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
    }
  }
  if (p == nullptr) {
    // aligned_alloc wants a multiple of the alignment; a size that cannot be rounded up to one
    // cannot be had either.
    if (size > std::numeric_limits<size_t>::max() - (kAlign - 1)) {
      return Unavailable(fmt::format("cannot allocate a buffer of {} bytes: too large", size));
    }
    size_t rounded = (size + kAlign - 1) / kAlign * kAlign;
    p = static_cast<uint8_t*>(allocate_(kAlign, rounded == 0 ? kAlign : rounded));
    if (p == nullptr) return Unavailable(fmt::format("cannot allocate a buffer of {} bytes: out of memory", size));
  }
  return std::shared_ptr<uint8_t>(p, [this, size](uint8_t* q) { Put(q, size); });
}

void BufferPool::Put(uint8_t* p, size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + size <= max_cached_) {
      free_[size].push_back(p);
      cached_ += size;
      return;
    }
  }
  std::free(p);
}

size_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace byteps::server
