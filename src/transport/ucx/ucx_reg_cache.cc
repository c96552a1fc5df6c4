#include "transport/ucx/ucx_reg_cache.h"

#include "common/logging.h"
#include "common/tsan.h"

namespace byteps::transport::ucx {

RegistrationCache::RegistrationCache(ucp_context_h context, size_t capacity)
    : context_(context), capacity_(capacity) {
#ifdef BYTEPS_UNDER_TSAN
  // libucm's hooks (madvise at a thread's exit) run where ThreadSanitizer has no thread state.
  ucs_status_t s = UCS_ERR_UNSUPPORTED;
#else
  ucs_status_t s = ucm_set_event_handler(UCM_EVENT_VM_UNMAPPED, -1, &RegistrationCache::OnMemoryEvent, this);
#endif
  watching_ = s == UCS_OK;
  if (!watching_) {
    BYTEPS_LOG(Info, "UCX memory events are not available ({}): rendezvous sends register their memory each time",
               ucs_status_string(s));
  }
}

RegistrationCache::~RegistrationCache() {
  if (watching_) ucm_unset_event_handler(UCM_EVENT_VM_UNMAPPED, &RegistrationCache::OnMemoryEvent, this);
}

void RegistrationCache::OnMemoryEvent(ucm_event_type_t type, ucm_event_t* event, void* arg) {
  if (type != UCM_EVENT_VM_UNMAPPED) return;
  static_cast<RegistrationCache*>(arg)->NoteUnmapped(event->vm_unmapped.address, event->vm_unmapped.size);
}

void RegistrationCache::NoteUnmapped(const void* addr, size_t len) {
  std::lock_guard<std::mutex> lock(noted_mu_);
  if (noted_count_ < noted_.size()) {
    noted_[noted_count_++] = {reinterpret_cast<uintptr_t>(addr), len};
  } else {
    noted_overflow_ = true;
  }
  dirty_.store(true, std::memory_order_release);
}

void RegistrationCache::ApplyUnmapped() {
  std::array<std::pair<uintptr_t, size_t>, 64> noted;
  size_t count;
  bool overflow;
  {
    std::lock_guard<std::mutex> lock(noted_mu_);
    noted = noted_;
    count = noted_count_;
    overflow = noted_overflow_;
    noted_count_ = 0;
    noted_overflow_ = false;
    dirty_.store(false, std::memory_order_relaxed);
  }
  for (auto it = entries_.begin(); it != entries_.end();) {
    const uintptr_t start = it->first.first, end = start + it->first.second;
    bool hit = overflow;
    for (size_t i = 0; i < count && !hit; ++i) {
      hit = noted[i].first < end && start < noted[i].first + noted[i].second;
    }
    if (hit) {
      ++stats_.invalidated;
      it = entries_.erase(it);  // an operation still using it holds its own reference
    } else {
      ++it;
    }
  }
}

std::shared_ptr<Registration> RegistrationCache::Get(void* addr, size_t len) {
  if (dirty_.load(std::memory_order_acquire)) ApplyUnmapped();
  const auto key = std::make_pair(reinterpret_cast<uintptr_t>(addr), len);
  if (watching_) {
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++stats_.hits;
      it->second.last_use = ++clock_;
      return it->second.reg;
    }
  }
  ++stats_.misses;
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  p.address = addr;
  p.length = len;
  ucp_mem_h memh = nullptr;
  if (ucp_mem_map(context_, &p, &memh) != UCS_OK) return nullptr;
  auto reg = std::make_shared<Registration>(context_, memh);
  if (!watching_) return reg;  // used once: unmapped when its send finishes
  if (entries_.size() >= capacity_) {
    auto lru = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.last_use < lru->second.last_use) lru = it;
    entries_.erase(lru);
    ++stats_.evicted;
  }
  entries_[key] = Entry{reg, ++clock_};
  return reg;
}

}  // namespace byteps::transport::ucx
