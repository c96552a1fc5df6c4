// libFuzzer target: every codec's Decompress and DecompressAdd on arbitrary bytes (src/compress).
// Input: a selector byte, then the payload. Selector bits 0-2 pick one of eight codec
// configurations; bit 3 asks for one element fewer than the payload's header says (the count
// check), bit 4 decodes as float16 (the conversion path). Beyond "does not crash", it checks:
//  - a refused payload gives a ProtocolError naming the tensor and leaves the accumulator and the
//    output untouched;
//  - Decompress and DecompressAdd agree on accepting, and on an accepted payload the accumulator
//    (from zero) equals the decoded output.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compress/codec.h"
#include "compress/params.h"

namespace {

using namespace byteps;
using namespace byteps::compress;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fuzz_codec invariant violated: %s\n", what);
  std::abort();
}
#define FUZZ_CHECK(cond)      \
  do {                        \
    if (!(cond)) Fail(#cond); \
  } while (0)

using KV = std::vector<std::pair<std::string, std::string>>;
const KV kConfigs[8] = {
    {{"cast", "fp16"}},
    {{"cast", "bf16"}},
    {{"compressor", "onebit"}, {"scaling", "true"}},
    {{"compressor", "onebit"}},
    {{"compressor", "topk"}, {"k", "0.01"}},
    {{"compressor", "randomk"}, {"k", "0.01"}},
    {{"compressor", "dithering"}, {"k", "4"}},
    {{"compressor", "dithering"}, {"k", "3"}, {"partition", "natural"}, {"normalize", "l2"}},
};

constexpr size_t kMaxCount = size_t{1} << 14;  // larger counts are refused by length alone
constexpr float kSentinel = 12345.0f;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  const uint8_t* payload = data + 1;
  const size_t len = size - 1;
  size_t n = 16;
  if (len >= 8) n = payload[4] | payload[5] << 8 | payload[6] << 16 | size_t{payload[7]} << 24;
  if (n > kMaxCount) n = kMaxCount;
  if ((sel & 8) && n > 0) --n;
  const DataType dtype = (sel & 16) ? DataType::kFloat16 : DataType::kFloat32;

  auto params = ParseParams(kConfigs[sel & 7], "fuzz.t");
  FUZZ_CHECK(params.ok());
  auto made = MakeCodec(params.value(), dtype, "fuzz.t");
  FUZZ_CHECK(made.ok());
  Codec& codec = *made.value();

  std::vector<float> acc(n, kSentinel);
  const Status add = codec.DecompressAdd(payload, len, n, acc.data());
  std::vector<uint8_t> out(n * DataTypeSize(dtype), 0xa5);
  const Status dec = codec.Decompress(payload, len, n, out.data());
  FUZZ_CHECK(add.ok() == dec.ok());
  if (!add.ok()) {
    FUZZ_CHECK(add.code() == StatusCode::kProtocol);
    FUZZ_CHECK(add.message().find("'fuzz.t'") != std::string::npos);
    for (float v : acc) FUZZ_CHECK(v == kSentinel);
    for (uint8_t b : out) FUZZ_CHECK(b == 0xa5);
    return 0;
  }
  if (dtype == DataType::kFloat32) {
    std::vector<float> zero(n, 0.0f);
    FUZZ_CHECK(codec.DecompressAdd(payload, len, n, zero.data()).ok());
    // The same values bit for bit, except what adding onto +0 changes: -0 becomes +0, and a
    // signalling NaN becomes quiet.
    for (size_t i = 0; i < n; ++i) {
      float decoded;
      std::memcpy(&decoded, out.data() + 4 * i, 4);
      FUZZ_CHECK(std::memcmp(&zero[i], &decoded, 4) == 0 || (zero[i] == 0.0f && decoded == 0.0f) ||
                 (std::isnan(zero[i]) && std::isnan(decoded)));
    }
  }
  return 0;
}
