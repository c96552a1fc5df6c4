// Recycles receive/accumulation buffers by size so the steady state of a training loop allocates
// nothing. A buffer handed out is a shared_ptr whose deleter returns the memory to the pool.
// Running out of memory is an error value (the request that needed the buffer fails), never an
// exception or an abort.
// Threading: Get is thread-safe; buffers may be released on any thread. The pool must outlive
// every buffer it handed out (the Server owns both and drains engines first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace byteps::server {

class BufferPool {
 public:
  // Where fresh memory comes from: aligned_alloc's contract (nullptr when it cannot be had);
  // the pool releases it with std::free. A seam for tests that simulate exhaustion.
  using Allocator = void* (*)(size_t alignment, size_t size);

  // max_cached_bytes bounds the idle memory kept for reuse.
  explicit BufferPool(size_t max_cached_bytes = 1ull << 31, Allocator allocate = nullptr);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A 64-byte aligned buffer of exactly `size` bytes (contents unspecified), or Unavailable
  // naming the size when that much memory cannot be had.
  StatusOr<std::shared_ptr<uint8_t>> Get(size_t size);
  size_t cached_bytes() const;

 private:
  void Put(uint8_t* p, size_t size);

  const size_t max_cached_;
  const Allocator allocate_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<uint8_t*>> free_;  // guarded by mu_
  size_t cached_ = 0;                               // guarded by mu_
};

}  // namespace byteps::server
