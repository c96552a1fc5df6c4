// libFuzzer target: the shared-memory ring's consumer side (transport/shm/shm_ring.h) on arbitrary
// bytes, as a hostile or broken peer process could leave them in a connection's ring. Input:
// 8 bytes of positions (u32 tail, u32 head offset past it), then the ring's data area. Beyond
// "does not crash", it checks what the receiver relies on:
//  - Next never returns a record that extends past the published bytes or the end of the area;
//  - a record ParseRecord accepts fits in what was readable, is 8-aligned, and a remote record's
//    piece list fits in its body;
//  - consuming accepted records only moves the tail forward, never past the head.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "protocol/frame.h"
#include "transport/shm/shm_ring.h"

namespace {

using namespace byteps;
using namespace byteps::transport::shm;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_shm_ring invariant violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond) \
  if (!(cond)) Fail(#cond)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint32_t tail32, ahead32;
  std::memcpy(&tail32, data, 4);
  std::memcpy(&ahead32, data + 4, 4);
  data += 8;
  size -= 8;
  const uint64_t cap = std::max<uint64_t>(64, (size + 63) / 64 * 64);
  std::vector<uint8_t> area(cap, 0);
  std::memcpy(area.data(), data, size);
  RingControl c;
  const uint64_t tail = tail32 % (4 * cap);
  c.tail = tail;
  c.head = tail + ahead32 % (2 * cap);  // sometimes more than a ring holds: must be refused
  Ring ring(&c, area.data(), cap);
  for (int i = 0; i < 4096; ++i) {
    const uint64_t before = c.tail.load();
    size_t avail = 0;
    auto next = ring.Next(&avail);
    if (!next.ok() || *next == nullptr) break;
    const uint8_t* p = *next;
    FUZZ_CHECK(p >= area.data() && p + avail <= area.data() + cap);
    FUZZ_CHECK(avail <= c.head.load() - c.tail.load());
    auto rec = ParseRecord(p, avail);
    if (!rec.ok()) break;
    FUZZ_CHECK(rec->length <= avail && rec->length % 8 == 0 && rec->length >= 8);
    if (rec->kind != RecordKind::kPad) {
      FUZZ_CHECK(rec->length >= kRecordHead);
      FUZZ_CHECK(rec->body + rec->body_bytes == p + rec->length);
      if (rec->kind == RecordKind::kRemote) FUZZ_CHECK(rec->iovecs * 16 <= rec->body_bytes);
      (void)protocol::DecodeHeader(rec->header, protocol::kHeaderSize, 1u << 20);
    }
    ring.Consume(rec->length);
    FUZZ_CHECK(c.tail.load() > before && c.tail.load() <= c.head.load());
  }
  return 0;
}
