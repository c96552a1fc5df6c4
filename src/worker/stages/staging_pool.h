// The pinned host buffers of the device copy stages, pooled by size class and leased per partition
// round: copy-in leases one when the round starts, and it goes back when its copy-out finished on
// the device. Pinned memory is expensive to get (cudaHostAlloc pins pages in the call) and to give
// back (cudaFreeHost may wait for the device), so a returned buffer stays in the pool for the next
// partition of its size; pinned memory follows the working set (staging_stats.h), not the number
// of partition keys.
//
// Leases. A lease (the task's id) has holders: the pipeline (from Acquire until the copy-out
// completed, or until a partition that never reached copy-out was dropped) and each device copy
// queued with the buffer (Hold, released from the copy's completion callback). The buffer is free
// once nobody holds it, so the device is never still reading or writing a buffer that another
// partition gets. A copy whose completion never comes (a failed stream) keeps its buffer until
// shutdown.
//
// Size classes: four per power of two (2^k x 1, 1.25, 1.5, 1.75), at least 64 bytes. A partition of
// b bytes takes an idle buffer of the same device sized b .. Fit(b) = max(1.25 b, its class): for
// b >= 256, at most 1.25 b.
//
// Oversized leases. A miss whose allocation would take pinned bytes over the budget first takes
// the smallest idle buffer of the same device and the partition's key generation that holds its
// bytes (of any class, so above its Fit): no allocation, no free. Settled rounds whose partitions
// of different classes overlap differently then run on the buffers already pinned instead of
// freeing one class to allocate another (each costly with CUDA). The cost: a partition may hold a
// buffer larger than its Fit (memory pinned anyway). Another generation's buffers are not taken:
// they are what a new partition size replaces. stats: `reused` counts such a lease, `oversized` too.
//
// The bound. `budget` = the largest sum, over the partitions holding a buffer at one moment, of
// Fit(b) (at most 1.25 x the peak working set when partitions are >= 256 bytes). Pinned bytes grow
// only on an allocation; an oversized lease changes none. Before an allocation, idle buffers are
// freed, least recently used first, until it fits the budget or none is idle. Then every pinned
// buffer is leased: a lease's buffer is at most its charge, Fit(b), or its buffer's size for an
// oversized lease, so pinned bytes + the new buffer <= the sum of the charges = the sum of Fits
// (<= budget) + the oversized leases' excess (their bytes above their Fit). Hence pinned <= budget
// while no oversized lease is held (the proof of the pool without them), and at most their excess
// over it otherwise; an allocation that goes over raises `budget` to the pinned bytes, so pinned <=
// budget always holds. To keep that rare, an oversized lease is taken only while the charges, its
// own included, fit the budget: over, the miss frees and allocates as without them. (Charging only
// Fit would let several partitions take large idle buffers, and then partitions whose Fits fill the
// budget would find nothing idle to free: staging_churn_test.cc.) In the tests, unit and the
// tuner's pinned_staging_test, the budget stays the largest sum of Fits.
//
// Key generations (planning/key_assigner.h): each lease carries its partition's generation. Retire(g)
// frees g's idle buffers, and g's leases free theirs when they end: a partition size the tuner
// left behind holds no pinned memory once its last round is done.
//
// Threading: every method from any thread (one mutex, never held across a device call). Release may
// run inside a device callback: it never calls the device (what it frees waits for the next
// Acquire or Retire).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "device/device.h"
#include "worker/staging_stats.h"

namespace byteps::worker::stages {

class StagingPool {
 public:
  // The buffer size a partition of `bytes` gets when none is idle.
  static size_t SizeClass(size_t bytes);
  // The largest idle buffer a partition of `bytes` may take.
  static size_t Fit(size_t bytes);

  StagingPool() = default;
  // Frees the idle buffers; a buffer still leased stays allocated (a copy may still use it).
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer of at least `bytes` on `dev` (pinned through dev->AllocHost) for lease `lease`, held
  // by the pipeline. `dev` must outlive the pool's use of it (until FreeAll). Errors name the
  // device and the size.
  StatusOr<uint8_t*> Acquire(device::Device* dev, uint64_t lease, uint32_t generation, size_t bytes);
  // A device copy with the lease's buffer was queued: one more holder until Release.
  void Hold(uint64_t lease);
  // One holder is done with the lease (unknown leases: nothing). The last one returns the buffer.
  void Release(uint64_t lease);
  // Generation `g` gets no new rounds: its idle buffers are freed now, its leases' at their end.
  void Retire(uint32_t generation);
  StagingStats stats() const;

  // Shutdown, once nothing will call the pool again: frees every buffer, except those still leased
  // on a device in `busy` (its copies may still run: they stay allocated). Returns how many bytes
  // stayed.
  size_t FreeAll(const std::set<const device::Device*>& busy);

 private:
  struct Buffer {
    device::Device* dev = nullptr;
    void* ptr = nullptr;
    size_t size = 0;
  };
  struct Lease {
    Buffer buffer;
    size_t bytes = 0;   // the partition's
    size_t charge = 0;  // in charged_: Fit(bytes), or the buffer's size when that is larger (oversized)
    uint32_t generation = 0;
    int holders = 0;
  };
  struct Idle {
    void* ptr = nullptr;
    uint32_t generation = 0;  // of its last lease
    uint64_t returned = 0;    // when it came back (a sequence number): the least recent goes first
  };
  using IdleMap = std::multimap<std::pair<device::Device*, size_t>, Idle>;  // by device, then size

  // Under mu_: a new lease of `bytes` counted in the working set and the budget.
  void CountLease(size_t bytes);
  // Under mu_: moves idle buffers to `out` (least recently used first) until `need` more bytes fit
  // the budget or none is idle.
  void TrimFor(size_t need, std::vector<Buffer>* out);
  // Under mu_: takes the buffers waiting to be freed.
  std::vector<Buffer> TakeDoomed();
  // Without mu_: frees `buffers` and counts them.
  void Free(const std::vector<Buffer>& buffers);

  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Lease> leases_;
  IdleMap idle_;
  // Retired generations' buffers whose leases ended (with the generation): freed off callbacks.
  std::vector<std::pair<uint32_t, Buffer>> doomed_;
  std::set<uint32_t> retired_;
  uint64_t returns_ = 0;
  size_t fit_ = 0;               // sum of Fit(bytes) over the leases
  size_t charged_ = 0;           // sum of the leases' charges (Fit(bytes), or an oversized buffer's size)
  size_t budget_ = 0;            // the largest fit_ so far (or more: the bound, in the header comment)
  StagingStats stats_;           // pinned_bytes, working set, counters (the rest computed in stats())
};

}  // namespace byteps::worker::stages
