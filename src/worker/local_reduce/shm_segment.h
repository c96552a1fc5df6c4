// A POSIX shared-memory segment mapped into this process, for the local (same-host) reduce.
// Names are "/byteps-<creator pid>-<job>-<suffix>": job-unique, and the creator's pid lets the
// next start on this host remove what a crashed process left behind (RemoveStale).
// Threading: a segment is immutable after creation; callers synchronise access to its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace byteps::worker::local_reduce {

class ShmSegment {
 public:
  // Creates (replacing any leftover of the same name) and maps `bytes` bytes. The creator unlinks
  // the name when the segment is destroyed.
  static StatusOr<std::unique_ptr<ShmSegment>> Create(const std::string& name, size_t bytes);
  // Maps an existing segment, which must hold at least `bytes` bytes.
  static StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& name, size_t bytes);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

  static std::string Name(int creator_pid, const std::string& job, const std::string& suffix);
  // Whether process `pid` has exited (or is a zombie waiting for its parent).
  static bool ProcessGone(int pid);
  // Unlinks /dev/shm/byteps-<pid>-* segments whose creator no longer runs. Returns how many.
  static int RemoveStale();
  // Unlinks every segment process `creator_pid` created for `job` (it died, e.g. kill -9, and
  // cannot unlink them itself). Mappings that exist stay valid. Returns how many.
  static int RemoveCreatedBy(int creator_pid, const std::string& job);

 private:
  ShmSegment(std::string name, uint8_t* data, size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}
  std::string name_;
  uint8_t* data_;
  size_t size_;
  bool owner_;
};

}  // namespace byteps::worker::local_reduce
