// CRC-32C (Castagnoli), the checksum of frames on links that may corrupt silently
// (BYTEPS_CHECKSUM). Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace byteps {

// Continues a CRC: crc = Crc32c(0, a, n); crc = Crc32c(crc, b, m) equals Crc32c(0, a||b, n+m).
uint32_t Crc32c(uint32_t crc, const void* data, size_t len);

}  // namespace byteps
