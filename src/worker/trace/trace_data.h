// What a worker's timeline holds until it is written: one span per partition per stage, one
// total per traced operation, and the names both refer to. The recorder fills it on the
// dispatcher thread and hands it whole to the writer; nobody shares it.
// Times are steady-clock nanoseconds (0: the event did not happen); the writer turns them into
// microseconds since the epoch with `epoch_minus_steady_ns`, measured once when recording began.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace byteps::worker::trace {

// Memory for the chunks below, mapped with its pages already present: touching a fresh page of a
// plain allocation faults once per 4 KiB, which on a virtual machine costs microseconds each, on
// the dispatcher thread; one populated mapping per chunk costs one system call.
struct ChunkMemory {
  static void* Map(size_t bytes);  // nullptr when the system refuses
  static void Unmap(void* p, size_t bytes);
};

// An append-only array of trivially copyable T in fixed chunks: growing it never moves what is
// stored (an index stays valid) and maps memory once per kChunk elements, never per event.
template <typename T>
class ChunkedBuffer {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);

 public:
  static constexpr size_t kChunk = 8192;
  ChunkedBuffer() = default;
  ChunkedBuffer(const ChunkedBuffer&) = delete;
  ChunkedBuffer& operator=(const ChunkedBuffer&) = delete;
  ~ChunkedBuffer() {
    for (T* c : chunks_) ChunkMemory::Unmap(c, kChunk * sizeof(T));
  }
  // n default elements at the end; the index of the first. When the system has no memory left for
  // a chunk: npos, and nothing was added.
  static constexpr size_t npos = ~size_t{0};
  size_t Grow(size_t n) {
    while (chunks_.size() * kChunk < size_ + n) {
      void* m = ChunkMemory::Map(kChunk * sizeof(T));
      if (m == nullptr) return npos;
      chunks_.push_back(static_cast<T*>(m));
    }
    const size_t first = size_;
    size_ += n;
    for (size_t i = first; i < size_; ++i) (*this)[i] = T{};
    return first;
  }
  T& operator[](size_t i) { return chunks_[i / kChunk][i % kChunk]; }
  const T& operator[](size_t i) const { return chunks_[i / kChunk][i % kChunk]; }
  size_t size() const { return size_; }

 private:
  std::vector<T*> chunks_;
  size_t size_ = 0;
};

// One partition in one stage.
struct Span {
  uint32_t tensor = 0;  // index into TraceData::tensors
  uint32_t step = 0;    // the tensor's 1-based push_pull count
  uint16_t stage = 0;   // index into TraceData::stages
  bool credit = false;  // the stage held credit: queued..started was a wait for credit
  bool ok = true;
  int32_t server = 0;
  uint64_t key = 0;
  uint64_t bytes = 0;
  int64_t queued = 0, started = 0, ended = 0;
};

// One traced push_pull, submission to its last partition leaving the pipeline.
struct Total {
  uint32_t tensor = 0;
  uint32_t step = 0;
  bool ok = true;
  uint64_t bytes = 0;
  int64_t submitted = 0, finished = 0;
};

struct TraceMeta {
  int rank = 0;
  int local_rank = 0;
  int start_step = 0;
  int end_step = 0;
  std::string job;
  int64_t clock_offset_us = 0;
};

struct TraceData {
  std::vector<std::string> tensors;  // core names
  std::vector<std::string> stages;   // timeline names (PUSH_PULL, REDUCE, ...)
  ChunkedBuffer<Span> spans;
  ChunkedBuffer<Total> totals;
  int64_t epoch_minus_steady_ns = 0;
};

}  // namespace byteps::worker::trace
