#include "transport/shm/shm_ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include <fmt/format.h>

namespace byteps::transport::shm {

namespace {
constexpr const char* kPrefix = "byteps-shmt-";

// This process's own segments, by name (see Segment::Open).
std::mutex g_own_mu;
std::map<std::string, std::weak_ptr<Segment>>& OwnSegments() {
  static auto* m = new std::map<std::string, std::weak_ptr<Segment>>();
  return *m;
}

size_t AreaBytes(uint64_t capacity) { return sizeof(RingControl) + capacity; }
size_t SegmentBytes(uint64_t capacity) { return 64 + 2 * AreaBytes(capacity); }

uint32_t Load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace

Segment::Segment(std::string name, void* base, size_t bytes, uint64_t capacity)
    : name_(std::move(name)), base_(base), bytes_(bytes), capacity_(capacity) {}

Segment::~Segment() {
  if (base_) munmap(base_, bytes_);
}

StatusOr<std::shared_ptr<Segment>> Segment::Create(const std::string& name, uint64_t capacity) {
  capacity = (capacity + 63) / 64 * 64;
  const size_t bytes = SegmentBytes(capacity);
  int fd = shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    shm_unlink(("/" + name).c_str());
    return Unavailable(fmt::format("cannot size shared memory {} to {} bytes: {}", name, bytes, std::strerror(e)));
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(("/" + name).c_str());
    return Unavailable(fmt::format("cannot map shared memory {}: {}", name, std::strerror(errno)));
  }
  auto* h = static_cast<SegmentHeader*>(base);
  h->version = kSegmentVersion;
  h->capacity = capacity;
  h->creator_pid = getpid();
  std::shared_ptr<Segment> s(new Segment(name, base, bytes, capacity));
  for (int d = 0; d < 2; ++d) new (s->control(d)) RingControl();
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kSegmentMagic;
  std::lock_guard<std::mutex> lock(g_own_mu);
  auto& own = OwnSegments();
  for (auto it = own.begin(); it != own.end();) it = it->second.expired() ? own.erase(it) : std::next(it);
  own[name] = s;
  return s;
}

StatusOr<std::shared_ptr<Segment>> Segment::Open(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0 || name.find('/') != std::string::npos) {
    return InvalidArgument(fmt::format("'{}' is not a byteps connection segment", name));
  }
  {
    std::lock_guard<std::mutex> lock(g_own_mu);
    auto it = OwnSegments().find(name);
    if (it != OwnSegments().end()) {
      if (auto mine = it->second.lock()) return mine;
    }
  }
  int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return Unavailable(fmt::format("cannot open shared memory {}: {}", name, std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(64)) {
    ::close(fd);
    return InvalidArgument(fmt::format("shared memory {} is too small for a connection", name));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) return Unavailable(fmt::format("cannot map shared memory {}: {}", name, std::strerror(errno)));
  auto* h = static_cast<SegmentHeader*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion || h->capacity == 0 || h->capacity % 64 != 0 ||
      SegmentBytes(h->capacity) != bytes) {
    munmap(base, bytes);
    return InvalidArgument(fmt::format("shared memory {} is not a byteps v{} connection segment (or is damaged)", name,
                                       kSegmentVersion));
  }
  std::shared_ptr<Segment> s(new Segment(name, base, bytes, h->capacity));
  s->linked_ = false;  // its creator unlinks it
  return s;
}

RingControl* Segment::control(int direction) const {
  return reinterpret_cast<RingControl*>(static_cast<uint8_t*>(base_) + 64 + direction * AreaBytes(capacity_));
}

uint8_t* Segment::data(int direction) const { return reinterpret_cast<uint8_t*>(control(direction)) + sizeof(RingControl); }

void Segment::Unlink() {
  if (linked_) shm_unlink(("/" + name_).c_str());
  linked_ = false;
}

std::string NewSegmentName() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return fmt::format("{}{}-{}-{:08x}", kPrefix, getpid(), ++counter, rd());
}

int RemoveStaleSegments() {
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) != 0) continue;
    const int pid = std::atoi(n.c_str() + std::strlen(kPrefix));
    if (pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (shm_unlink(("/" + n).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

StatusOr<RecordView> ParseRecord(const uint8_t* p, size_t avail) {
  if (avail < 8) return ProtocolError(fmt::format("a shared-memory record is cut short ({} bytes)", avail));
  RecordView v;
  v.length = Load32(p);
  const uint32_t kind = Load32(p + 4);
  if (v.length < 8 || v.length % 8 != 0 || v.length > avail) {
    return ProtocolError(fmt::format("a shared-memory record claims {} bytes ({} readable)", v.length, avail));
  }
  if (kind == static_cast<uint32_t>(RecordKind::kPad)) {
    v.kind = RecordKind::kPad;
    return v;
  }
  if (kind != static_cast<uint32_t>(RecordKind::kInline) && kind != static_cast<uint32_t>(RecordKind::kRemote)) {
    return ProtocolError(fmt::format("a shared-memory record of unknown kind {}", kind));
  }
  if (v.length < kRecordHead) return ProtocolError(fmt::format("a shared-memory record of {} bytes has no room for its header", v.length));
  v.kind = static_cast<RecordKind>(kind);
  v.header = p + 8;
  v.crc = Load32(p + 8 + protocol::kHeaderSize);
  v.iovecs = Load32(p + 12 + protocol::kHeaderSize);
  v.seq = Load64(p + 16 + protocol::kHeaderSize);
  v.body = p + kRecordHead;
  v.body_bytes = v.length - kRecordHead;
  if (v.kind == RecordKind::kRemote && (v.iovecs > kMaxRemoteIovecs || v.iovecs * 16 > v.body_bytes)) {
    return ProtocolError(fmt::format("a shared-memory record lists {} iovecs in {} bytes", v.iovecs, v.body_bytes));
  }
  return v;
}

uint8_t* Ring::Reserve(size_t bytes) {
  const uint64_t head = c_->head.load(std::memory_order_relaxed);
  const uint64_t tail = c_->tail.load(std::memory_order_acquire);
  const uint64_t pos = head % cap_;
  const uint64_t contiguous = cap_ - pos;
  const uint64_t free = cap_ - (head - tail);
  if (bytes > cap_) return nullptr;
  if (bytes <= contiguous) {
    if (free < bytes) return nullptr;
    reserved_head_ = head + bytes;
    return data_ + pos;
  }
  if (free < contiguous + bytes) return nullptr;
  uint32_t pad[2] = {static_cast<uint32_t>(contiguous), static_cast<uint32_t>(RecordKind::kPad)};
  std::memcpy(data_ + pos, pad, sizeof pad);
  reserved_head_ = head + contiguous + bytes;
  return data_;
}

void Ring::Publish() { c_->head.store(reserved_head_, std::memory_order_release); }

StatusOr<const uint8_t*> Ring::Next(size_t* avail) {
  for (;;) {
    const uint64_t tail = c_->tail.load(std::memory_order_relaxed);
    const uint64_t head = c_->head.load(std::memory_order_acquire);
    if (tail == head) return static_cast<const uint8_t*>(nullptr);
    if (head - tail > cap_ || tail % 8 != 0) {
      return ProtocolError(fmt::format("a shared-memory ring's positions are damaged ({} published, {} read)", head, tail));
    }
    const uint64_t pos = tail % cap_;
    const size_t readable = static_cast<size_t>(std::min<uint64_t>(head - tail, cap_ - pos));
    const uint8_t* p = data_ + pos;
    if (readable >= 8 && Load32(p + 4) == static_cast<uint32_t>(RecordKind::kPad)) {
      const uint32_t len = Load32(p);
      if (len < 8 || len % 8 != 0 || len > readable) return ProtocolError("a damaged pad record in a shared-memory ring");
      c_->tail.store(tail + len, std::memory_order_release);
      continue;
    }
    *avail = readable;
    return p;
  }
}

void Ring::Consume(size_t bytes) {
  c_->tail.store(c_->tail.load(std::memory_order_relaxed) + bytes, std::memory_order_release);
}

}  // namespace byteps::transport::shm
