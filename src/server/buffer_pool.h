// Recycles receive/accumulation buffers by size so the steady state of a training loop allocates
// nothing. A buffer handed out is a shared_ptr whose deleter returns the memory to the pool.
// Threading: Get is thread-safe; buffers may be released on any thread. The pool must outlive
// every buffer it handed out (the Server owns both and drains engines first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace byteps::server {

class BufferPool {
 public:
  // max_cached_bytes bounds the idle memory kept for reuse.
  explicit BufferPool(size_t max_cached_bytes = 1ull << 31) : max_cached_(max_cached_bytes) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A 64-byte aligned buffer of exactly `size` bytes (contents unspecified).
  std::shared_ptr<uint8_t> Get(size_t size);
  size_t cached_bytes() const;

 private:
  void Put(uint8_t* p, size_t size);

  size_t max_cached_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<uint8_t*>> free_;  // guarded by mu_
  size_t cached_ = 0;                               // guarded by mu_
};

}  // namespace byteps::server
