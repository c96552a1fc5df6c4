#include "server/buffer_pool.h"

#include <cstdlib>
#include <new>

namespace byteps::server {

BufferPool::~BufferPool() {
  for (auto& [size, v] : free_)
    for (uint8_t* p : v) std::free(p);
}

std::shared_ptr<uint8_t> BufferPool::Get(size_t size) {
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
    size_t rounded = (size + 63) / 64 * 64;
    p = static_cast<uint8_t*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
    if (p == nullptr) throw std::bad_alloc();
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
