#include "worker/stages/staging_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "common/logging.h"

namespace byteps::worker::stages {

size_t StagingPool::SizeClass(size_t bytes) {
  constexpr size_t kMin = 64;
  if (bytes <= 4 * kMin) return std::max(kMin, (bytes + kMin - 1) / kMin * kMin);
  // 2^k < bytes <= 2^(k+1): steps of 2^(k-2), so a class is less than a quarter above its bytes.
  const int k = static_cast<int>(std::bit_width(bytes - 1)) - 1;
  const size_t step = size_t{1} << (k - 2);
  return (bytes + step - 1) / step * step;
}

size_t StagingPool::Fit(size_t bytes) { return std::max(SizeClass(bytes), bytes + bytes / 4); }

StagingPool::~StagingPool() {
  std::set<const device::Device*> leased;
  for (const auto& [id, l] : leases_) leased.insert(l.buffer.dev);
  FreeAll(leased);
}

void StagingPool::CountLease(size_t bytes) {
  stats_.working_set_bytes += bytes;
  stats_.peak_working_set_bytes = std::max(stats_.peak_working_set_bytes, stats_.working_set_bytes);
  fit_ += Fit(bytes);
  charged_ += Fit(bytes);
  budget_ = std::max(budget_, fit_);
}

std::vector<StagingPool::Buffer> StagingPool::TakeDoomed() {
  std::vector<Buffer> out;
  for (const auto& [gen, b] : doomed_) out.push_back(b);
  doomed_.clear();
  return out;
}

void StagingPool::TrimFor(size_t need, std::vector<Buffer>* out) {
  size_t after = stats_.pinned_bytes;
  for (const Buffer& b : *out) after -= b.size;
  if (after + need <= budget_ || idle_.empty()) return;
  std::vector<IdleMap::iterator> lru;
  lru.reserve(idle_.size());
  for (auto it = idle_.begin(); it != idle_.end(); ++it) lru.push_back(it);
  std::sort(lru.begin(), lru.end(), [](auto a, auto b) { return a->second.returned < b->second.returned; });
  for (IdleMap::iterator it : lru) {
    if (after + need <= budget_) break;
    out->push_back({it->first.first, it->second.ptr, it->first.second});
    after -= it->first.second;
    idle_.erase(it);
  }
}

void StagingPool::Free(const std::vector<Buffer>& buffers) {
  if (buffers.empty()) return;
  for (const Buffer& b : buffers) b.dev->FreeHost(b.ptr);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Buffer& b : buffers) {
    stats_.pinned_bytes -= b.size;
    --stats_.buffers;
    ++stats_.freed;
  }
}

StatusOr<uint8_t*> StagingPool::Acquire(device::Device* dev, uint64_t lease, uint32_t generation, size_t bytes) {
  std::vector<Buffer> victims;
  void* reused = nullptr;
  size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    BYTEPS_CHECK(leases_.count(lease) == 0);
    victims = TakeDoomed();
    CountLease(bytes);
    auto it = idle_.lower_bound({dev, bytes});
    if (it != idle_.end() && it->first.first == dev && it->first.second <= Fit(bytes)) {
      reused = it->second.ptr;
      leases_[lease] = Lease{{dev, reused, it->first.second}, bytes, Fit(bytes), generation, 1};
      idle_.erase(it);
      ++stats_.reused;
    } else {
      size = SizeClass(bytes);
      size_t after = stats_.pinned_bytes;
      for (const Buffer& b : victims) after -= b.size;
      // Allocating would go over the budget: rather than free an idle buffer to allocate, lease the
      // smallest idle one of the partition's generation that holds `bytes` (above Fit(bytes): the
      // hit above took any within it), if charging its whole size keeps the charges within the
      // budget. (Another generation's buffers are what a new partition size replaces.)
      auto big = it;
      if (after + size > budget_) {
        while (big != idle_.end() && big->first.first == dev &&
               (big->second.generation != generation || charged_ - Fit(bytes) + big->first.second > budget_)) {
          ++big;
        }
      }
      if (after + size > budget_ && big != idle_.end() && big->first.first == dev) {
        reused = big->second.ptr;
        charged_ += big->first.second - Fit(bytes);
        leases_[lease] = Lease{{dev, reused, big->first.second}, bytes, big->first.second, generation, 1};
        idle_.erase(big);
        ++stats_.reused;
        ++stats_.oversized;
      } else {
        TrimFor(size, &victims);
        // Nothing idle is left and it still does not fit: only while oversized leases are held
        // (staging_pool.h, the bound). The budget takes the excess.
        after = stats_.pinned_bytes;
        for (const Buffer& b : victims) after -= b.size;
        budget_ = std::max(budget_, after + size);
      }
    }
  }
  Free(victims);  // before the allocation: the pages go back first
  if (reused) return static_cast<uint8_t*>(reused);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.pinned_bytes += size;  // counted from before the pages exist, so the peak never misses them
    stats_.peak_pinned_bytes = std::max(stats_.peak_pinned_bytes, stats_.pinned_bytes);
    ++stats_.buffers;
  }
  auto p = dev->AllocHost(size);
  std::lock_guard<std::mutex> lock(mu_);
  if (!p.ok()) {
    stats_.pinned_bytes -= size;
    --stats_.buffers;
    stats_.working_set_bytes -= bytes;
    fit_ -= Fit(bytes);
    charged_ -= Fit(bytes);
    return p.status().WithContext(fmt::format("{}: a pinned staging buffer of {} bytes", dev->name(), size));
  }
  leases_[lease] = Lease{{dev, *p, size}, bytes, Fit(bytes), generation, 1};
  ++stats_.allocated;
  return static_cast<uint8_t*>(*p);
}

void StagingPool::Hold(uint64_t lease) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = leases_.find(lease); it != leases_.end()) ++it->second.holders;
}

void StagingPool::Release(uint64_t lease) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(lease);
  if (it == leases_.end() || --it->second.holders > 0) return;
  const Lease& l = it->second;
  stats_.working_set_bytes -= l.bytes;
  fit_ -= Fit(l.bytes);
  charged_ -= l.charge;
  if (retired_.count(l.generation)) {
    doomed_.emplace_back(l.generation, l.buffer);
  } else {
    idle_.emplace(std::make_pair(l.buffer.dev, l.buffer.size), Idle{l.buffer.ptr, l.generation, ++returns_});
  }
  leases_.erase(it);
}

void StagingPool::Retire(uint32_t generation) {
  std::vector<Buffer> victims;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_.insert(generation);
    victims = TakeDoomed();
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (it->second.generation != generation) {
        ++it;
        continue;
      }
      victims.push_back({it->first.first, it->second.ptr, it->first.second});
      it = idle_.erase(it);
    }
  }
  Free(victims);
}

StagingStats StagingPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StagingStats s = stats_;
  s.budget_bytes = budget_;
  for (const auto& [size_key, idle] : idle_) {
    s.idle_bytes += size_key.second;
    s.pinned_bytes_by_generation[idle.generation] += size_key.second;
  }
  for (const auto& [gen, b] : doomed_) {
    s.retired_bytes += b.size;
    s.pinned_bytes_by_generation[gen] += b.size;
  }
  for (const auto& [id, l] : leases_) {
    if (retired_.count(l.generation)) s.retired_bytes += l.buffer.size;
    s.pinned_bytes_by_generation[l.generation] += l.buffer.size;
  }
  return s;
}

size_t StagingPool::FreeAll(const std::set<const device::Device*>& busy) {
  std::vector<Buffer> all;
  size_t kept = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all = TakeDoomed();
    for (const auto& [key, idle] : idle_) all.push_back({key.first, idle.ptr, key.second});
    idle_.clear();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (busy.count(it->second.buffer.dev)) {
        kept += it->second.buffer.size;
        ++it;
        continue;
      }
      all.push_back(it->second.buffer);
      it = leases_.erase(it);
    }
  }
  Free(all);
  return kept;
}

}  // namespace byteps::worker::stages
