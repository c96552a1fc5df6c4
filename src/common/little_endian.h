// Fixed-width little-endian loads and stores: the byte order of the wire format (frame headers,
// checksum trailers). Byte by byte, so they are right on any host and need no alignment.
// Threading: pure functions.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace byteps {

// Writes the sizeof(T) bytes of v at p, least significant first.
template <std::unsigned_integral T>
constexpr void StoreLe(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Reads sizeof(T) bytes at p, least significant first.
template <std::unsigned_integral T>
constexpr T LoadLe(const uint8_t* p) {
  T v = 0;
  for (size_t i = sizeof(T); i-- > 0;) v = static_cast<T>((v << 8) | p[i]);
  return v;
}

constexpr void StoreLe16(uint8_t* p, uint16_t v) { StoreLe<uint16_t>(p, v); }
constexpr void StoreLe32(uint8_t* p, uint32_t v) { StoreLe<uint32_t>(p, v); }
constexpr void StoreLe64(uint8_t* p, uint64_t v) { StoreLe<uint64_t>(p, v); }
constexpr uint16_t LoadLe16(const uint8_t* p) { return LoadLe<uint16_t>(p); }
constexpr uint32_t LoadLe32(const uint8_t* p) { return LoadLe<uint32_t>(p); }
constexpr uint64_t LoadLe64(const uint8_t* p) { return LoadLe<uint64_t>(p); }

}  // namespace byteps
