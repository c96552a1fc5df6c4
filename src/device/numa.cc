#include "device/numa.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#ifdef BYTEPS_HAVE_NUMA
#include <numa.h>
#include <numaif.h>
#endif

namespace byteps::device {

#ifdef BYTEPS_HAVE_NUMA

namespace {
constexpr unsigned long kMaxNode = sizeof(unsigned long) * 8 * 16;

bool ValidNode(int node) { return node >= 0 && node <= numa_max_node(); }
}  // namespace

bool NumaAvailable() { return numa_available() >= 0; }

int NumaNodes() { return NumaAvailable() ? numa_max_node() + 1 : 1; }

Status PreferNode(void* ptr, size_t bytes, int node) {
  if (node < 0 || !NumaAvailable() || ptr == nullptr || bytes == 0) return Status::Ok();
  if (!ValidNode(node)) {
    return InvalidArgument(fmt::format("NUMA node {} does not exist (this machine has {})", node, NumaNodes()));
  }
  const uintptr_t page = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(ptr) + bytes;
  unsigned long mask[16] = {};
  mask[node / (sizeof(unsigned long) * 8)] = 1UL << (node % (sizeof(unsigned long) * 8));
  if (mbind(reinterpret_cast<void*>(begin), end - begin, MPOL_PREFERRED, mask, kMaxNode, 0) != 0) {
    return Unavailable(fmt::format("mbind of {} bytes to NUMA node {} failed: {}", bytes, node, std::strerror(errno)));
  }
  return Status::Ok();
}

Status RunOnNode(int node) {
  if (node < 0 || !NumaAvailable()) return Status::Ok();
  if (!ValidNode(node)) {
    return InvalidArgument(fmt::format("NUMA node {} does not exist (this machine has {})", node, NumaNodes()));
  }
  if (numa_run_on_node(node) != 0) {
    return Unavailable(fmt::format("cannot run on NUMA node {}: {}", node, std::strerror(errno)));
  }
  return Status::Ok();
}

namespace {
StatusOr<int> PolicyNode(void* ptr, int flags) {
  if (!NumaAvailable()) return -1;
  int mode = 0;
  unsigned long mask[16] = {};
  if (get_mempolicy(&mode, mask, kMaxNode, ptr, flags) != 0) {
    return Unavailable(fmt::format("get_mempolicy failed: {}", std::strerror(errno)));
  }
  if (mode == MPOL_DEFAULT) return -1;
  for (unsigned long n = 0; n < kMaxNode; ++n)
    if (mask[n / (sizeof(unsigned long) * 8)] & (1UL << (n % (sizeof(unsigned long) * 8)))) return static_cast<int>(n);
  return -1;
}
}  // namespace

StatusOr<int> PolicyNodeOf(const void* ptr) { return PolicyNode(const_cast<void*>(ptr), MPOL_F_ADDR); }
StatusOr<int> ThreadPolicyNode() { return PolicyNode(nullptr, 0); }

ScopedPreferredNode::ScopedPreferredNode(int node) {
  if (node < 0 || !NumaAvailable() || !ValidNode(node)) return;
  if (get_mempolicy(&mode_, mask_, kMaxNode, nullptr, 0) != 0) return;
  unsigned long mask[16] = {};
  mask[node / (sizeof(unsigned long) * 8)] = 1UL << (node % (sizeof(unsigned long) * 8));
  set_ = set_mempolicy(MPOL_PREFERRED, mask, kMaxNode) == 0;
}

ScopedPreferredNode::~ScopedPreferredNode() {
  if (set_) (void)set_mempolicy(mode_, mode_ == MPOL_DEFAULT ? nullptr : mask_, kMaxNode);
}

#else  // no libnuma in this build: placement is left to the kernel

bool NumaAvailable() { return false; }
int NumaNodes() { return 1; }
Status PreferNode(void*, size_t, int) { return Status::Ok(); }
Status RunOnNode(int) { return Status::Ok(); }
StatusOr<int> PolicyNodeOf(const void*) { return -1; }
StatusOr<int> ThreadPolicyNode() { return -1; }
ScopedPreferredNode::ScopedPreferredNode(int) {}
ScopedPreferredNode::~ScopedPreferredNode() {}

#endif

}  // namespace byteps::device
