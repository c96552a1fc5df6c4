// Memory registrations for rendezvous sends, cached by (address, length): a tensor sent every
// iteration is registered once. An entry is dropped the moment any part of its range is unmapped
// (munmap, shrinking brk, mremap, madvise(DONTNEED): UCX's memory events, libucm), so memory freed
// and mapped again at the same address is never sent through a stale registration; an operation
// that still uses a dropped entry keeps it until it finishes. Without memory events (libucm could
// not install its hooks) nothing is cached: every send registers its own memory.
// Threading: Get on the worker's loop thread; the unmap notifications come from any thread and
// neither allocate nor take a lock that is held while calling UCX.
#pragma once

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace byteps::transport::ucx {

class Registration {
 public:
  Registration(ucp_context_h context, ucp_mem_h memh) : context_(context), memh_(memh) {}
  ~Registration() { ucp_mem_unmap(context_, memh_); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  ucp_mem_h memh() const { return memh_; }

 private:
  ucp_context_h context_;
  ucp_mem_h memh_;
};

class RegistrationCache {
 public:
  struct Stats {
    uint64_t hits = 0, misses = 0, invalidated = 0, evicted = 0;
  };

  explicit RegistrationCache(ucp_context_h context, size_t capacity = 256);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  // The registration of exactly [addr, addr + len); nullptr when UCX cannot register it (the send
  // then lets UCX register by itself).
  std::shared_ptr<Registration> Get(void* addr, size_t len);
  bool watching() const { return watching_; }
  Stats stats() const { return stats_; }
  size_t size() const { return entries_.size(); }

  // What a memory event reports: [addr, addr + len) is going away. Any thread; no allocation.
  void NoteUnmapped(const void* addr, size_t len);

 private:
  struct Entry {
    std::shared_ptr<Registration> reg;
    uint64_t last_use = 0;
  };
  static void OnMemoryEvent(ucm_event_type_t type, ucm_event_t* event, void* arg);
  void ApplyUnmapped();  // drops the entries the noted ranges touch

  ucp_context_h context_;
  const size_t capacity_;
  bool watching_ = false;
  std::map<std::pair<uintptr_t, size_t>, Entry> entries_;
  uint64_t clock_ = 0;
  Stats stats_;

  std::mutex noted_mu_;
  std::array<std::pair<uintptr_t, size_t>, 64> noted_{};  // guarded by noted_mu_
  size_t noted_count_ = 0;                                // guarded by noted_mu_
  bool noted_overflow_ = false;                           // guarded by noted_mu_: drop everything
  std::atomic<bool> dirty_{false};
};

}  // namespace byteps::transport::ucx
