// NUMA placement of the GPU path's host memory and threads: staging buffers live on the memory of
// the GPU's NUMA node, and the threads that copy through them run on its cores, so a device-to-host
// copy does not cross the socket interconnect. libnuma where the build found it (BYTEPS_HAVE_NUMA);
// without it, or on a machine with one node, every call is a no-op that says so.
// Threading: every function is thread-safe; ScopedPreferredNode affects the calling thread only.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace byteps::device {

// Whether placement is possible here (built with libnuma and the kernel has NUMA support).
bool NumaAvailable();
// The NUMA nodes of this machine (1 where unknown).
int NumaNodes();
// Pages of [ptr, ptr + bytes) not yet touched will be taken from `node` where it has memory
// (MPOL_PREFERRED). A no-op for node < 0 or without NUMA.
Status PreferNode(void* ptr, size_t bytes, int node);
// The calling thread runs on `node`'s cores from now on (no-op for node < 0 or without NUMA).
Status RunOnNode(int node);
// The node whose memory the policy of the page at `ptr` prefers or binds to (-1: the default
// policy). For tests and diagnostics.
StatusOr<int> PolicyNodeOf(const void* ptr);
// The same for the calling thread's own policy (where its new allocations go).
StatusOr<int> ThreadPolicyNode();

// While alive, the calling thread's allocations prefer `node` (memory a driver allocates and pins
// inside a call, like cudaHostAlloc's); the thread's previous policy comes back at the end.
class ScopedPreferredNode {
 public:
  explicit ScopedPreferredNode(int node);
  ~ScopedPreferredNode();
  ScopedPreferredNode(const ScopedPreferredNode&) = delete;
  ScopedPreferredNode& operator=(const ScopedPreferredNode&) = delete;

 private:
  bool set_ = false;
  int mode_ = 0;
  unsigned long mask_[16] = {};
};

}  // namespace byteps::device
