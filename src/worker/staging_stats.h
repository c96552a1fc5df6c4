// Counters of a worker's pinned staging memory (stages/staging_pool.h), for tests and observability
// (Engine::staging_stats()).
//
// The working set: the bytes of the device-tensor partitions that hold a staging buffer at one
// moment. A partition holds one from the start of its copy-in until its copy-out finished on the
// device (or, for a partition that failed on the way, until the pipeline dropped it and the device
// finished every copy it had queued with the buffer). It is at most the bytes of the device tensors
// whose push_pull is in flight; the credit does not cap it (the credit caps the network stage only,
// and copy-in runs ahead of the network so that the bus and the network overlap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

namespace byteps::worker {

struct StagingStats {
  size_t pinned_bytes = 0;       // pinned host memory allocated now: in use, idle, or about to be freed
  size_t peak_pinned_bytes = 0;  // the most pinned_bytes ever was
  size_t working_set_bytes = 0;  // the working set now (partitions' own lengths)
  size_t peak_working_set_bytes = 0;
  // What pinned_bytes never exceeds: the largest sum, over the partitions holding a buffer at one
  // moment, of the buffer each may take (Fit: at most 1.25 x its bytes for partitions of >= 256
  // bytes); raised only by an allocation that found nothing idle to free while oversized leases
  // were held, to the pinned bytes then (stages/staging_pool.h, the bound).
  size_t budget_bytes = 0;
  size_t idle_bytes = 0;     // pinned, free for the next partition that fits
  size_t retired_bytes = 0;  // pinned, last used by a retired key generation (still in use, or about to go)
  size_t buffers = 0;        // pinned buffers allocated now
  // pinned_bytes by the key generation of the partition that last used (or uses) each buffer.
  std::map<uint32_t, size_t> pinned_bytes_by_generation;
  uint64_t allocated = 0;    // buffers ever allocated (Device::AllocHost)
  uint64_t reused = 0;       // partitions served from the pool without an allocation
  uint64_t oversized = 0;    // of those, served with an idle buffer above their Fit (not to free it)
  uint64_t freed = 0;        // buffers freed before shutdown (to make room, or a retired generation's)
};

}  // namespace byteps::worker
