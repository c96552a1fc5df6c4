// The shared memory of one shared-memory connection (shm_connection.h): a segment both processes
// map, holding one single-producer single-consumer ring of records per direction.
//
//   [SegmentHeader][RingControl 0][data 0 (capacity)][RingControl 1][data 1 (capacity)]
//   direction 0: connector -> acceptor; direction 1: acceptor -> connector
//
// A record is 8-byte aligned and never wraps (a pad record fills the end of the ring first):
//   u32 length (whole record) | u32 kind | frame header (48 bytes) | u32 payload CRC-32C |
//   u32 iovec count | u64 sequence | inline payload, or `count` x {u64 address, u64 length} of the
//   payload in the sender's memory (read with process_vm_readv: one copy, sender to destination)
// The producer publishes a record by advancing `head` (release); the consumer frees it by
// advancing `tail`, and counts remote records read in `acked` (the sender completes those sends).
// Wake-ups: `consumer_sleeping` / `producer_waiting` say which side wants a bell (a frame on the
// connection's Unix socket) when the other side moves.
// Threading: one producer thread at a time (the connection's send lock) and one consumer thread
// (its I/O thread) per ring; the fields are atomics in shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "protocol/frame.h"

namespace byteps::transport::shm {

inline constexpr uint32_t kSegmentMagic = 0x31535042;  // "BPS1"
inline constexpr uint32_t kSegmentVersion = 1;

enum class RecordKind : uint32_t { kInline = 1, kRemote = 2, kPad = 3 };

inline constexpr size_t kRecordHead = 8 + protocol::kHeaderSize + 16;  // length, kind, header, crc, count, seq
inline constexpr size_t kMaxRemoteIovecs = 64;

struct RingControl {
  alignas(64) std::atomic<uint64_t> head{0};
  alignas(64) std::atomic<uint64_t> tail{0};
  alignas(64) std::atomic<uint64_t> acked{0};
  alignas(64) std::atomic<uint32_t> consumer_sleeping{1};
  std::atomic<uint32_t> producer_waiting{0};
  // Set by the producer before it completes its sends with an error (their memory may go): a
  // consumer that read a remote payload and then finds this set drops the frame.
  std::atomic<uint32_t> producer_closed{0};
};

struct SegmentHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t capacity;  // bytes of each direction's data area (a multiple of 64)
  int32_t creator_pid;
  uint32_t reserved;
};

// A mapped segment: created by the connector (Create), opened by the acceptor (Open). When both
// ends are in one process (tests, or a worker and a server started as threads), Open returns the
// creator's own mapping instead of a second one: one memory seen at two addresses would hide the
// rings' synchronisation from tools that track memory by address (ThreadSanitizer).
class Segment {
 public:
  static StatusOr<std::shared_ptr<Segment>> Create(const std::string& name, uint64_t capacity);
  static StatusOr<std::shared_ptr<Segment>> Open(const std::string& name);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const { return name_; }
  uint64_t capacity() const { return capacity_; }
  RingControl* control(int direction) const;
  uint8_t* data(int direction) const;
  // Removes the name (both ends mapped it; the memory lives until both unmap).
  void Unlink();

 private:
  Segment(std::string name, void* base, size_t bytes, uint64_t capacity);
  std::string name_;
  void* base_;
  size_t bytes_;
  uint64_t capacity_;
  bool linked_ = true;
};

// Segments whose creator (its pid is in the name) is dead: removed; how many.
int RemoveStaleSegments();
// A fresh, never reused name for a segment of this process.
std::string NewSegmentName();

// A record being read: its kind, the frame header's bytes, and the body after kRecordHead.
struct RecordView {
  RecordKind kind = RecordKind::kPad;
  const uint8_t* header = nullptr;  // kHeaderSize bytes
  uint32_t crc = 0;
  uint32_t iovecs = 0;
  uint64_t seq = 0;
  const uint8_t* body = nullptr;
  size_t body_bytes = 0;
  size_t length = 0;  // the whole record
};

// Checks one record at `p` with `avail` readable bytes of the ring (the rest of the published
// part, up to the end of the data area): lengths, kind, alignment. The decoder fuzzing covers.
StatusOr<RecordView> ParseRecord(const uint8_t* p, size_t avail);

class Ring {
 public:
  Ring(RingControl* control, uint8_t* data, uint64_t capacity) : c_(control), data_(data), cap_(capacity) {}
  RingControl* control() const { return c_; }

  // Producer: room for a record of `bytes` (8-aligned) at the head, writing a pad record first if
  // the end of the ring is too short; nullptr when the ring has no room now.
  uint8_t* Reserve(size_t bytes);
  void Publish();  // makes the reserved record visible

  // Consumer: the next record (pads skipped), or nullptr when none is published; an error for a
  // malformed one.
  StatusOr<const uint8_t*> Next(size_t* avail);
  void Consume(size_t bytes);  // frees the record just read
  bool Empty() const { return c_->tail.load(std::memory_order_relaxed) == c_->head.load(std::memory_order_acquire); }

  static size_t Align(size_t n) { return (n + 7) & ~size_t{7}; }
  uint64_t capacity() const { return cap_; }

 private:
  RingControl* c_;
  uint8_t* data_;
  uint64_t cap_;
  uint64_t reserved_head_ = 0;  // producer: head after the reserved record (and its pad)
};

}  // namespace byteps::transport::shm
