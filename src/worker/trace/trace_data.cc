#include "worker/trace/trace_data.h"

#include <sys/mman.h>

namespace byteps::worker::trace {

void* ChunkMemory::Map(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void ChunkMemory::Unmap(void* p, size_t bytes) { ::munmap(p, bytes); }

}  // namespace byteps::worker::trace
