// libFuzzer target: the UCX backend's message-header decoder (transport/ucx/ucx_connection.h) on
// arbitrary bytes, as a hostile peer could send them as an active message's header. Beyond "does
// not crash": a header it accepts is exactly kAmHeaderBytes long with known flags, and encoding
// what it decoded decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "transport/ucx/ucx_connection.h"

namespace {

using namespace byteps::transport::ucx;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_ucx_header invariant violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond) \
  if (!(cond)) Fail(#cond)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = ParseAmHeader(data, size);
  if (!h.ok()) return 0;
  FUZZ_CHECK(size == kAmHeaderBytes);
  FUZZ_CHECK((h->flags & ~kAmFlagChecksum) == 0);
  uint8_t again[kAmHeaderBytes];
  EncodeAmHeader(*h, again);
  auto back = ParseAmHeader(again, sizeof again);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(back->conn_id == h->conn_id && back->token == h->token && back->flags == h->flags &&
             back->crc == h->crc);
  FUZZ_CHECK(back->frame.opcode == h->frame.opcode && back->frame.key == h->frame.key &&
             back->frame.payload_len == h->frame.payload_len && back->frame.request_id == h->frame.request_id);
  return 0;
}
