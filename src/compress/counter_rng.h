// Counter-based random numbers: draw j of the stream (seed, key, round) is a pure function of the
// four, so every worker draws the same numbers for a tensor part and round without talking, and
// any draw can be computed out of order. SplitMix64's finaliser (Steele, Lea, Flood 2014) mixes.
// Threading: pure functions.
#pragma once

#include <cstdint>

namespace byteps::compress {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The stream's base; draw j is SplitMix64(base + j).
inline uint64_t StreamBase(uint64_t seed, uint64_t key, uint64_t round) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ key) ^ round);
}

// A uniform integer in [0, n) from 64 random bits (multiply-shift; bias below n / 2^64).
inline uint32_t UniformBelow(uint64_t bits, uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

// A uniform float in [0, 1) with 24 random bits.
inline float UniformFloat(uint64_t bits) { return static_cast<float>(bits >> 40) * 0x1.0p-24f; }

}  // namespace byteps::compress
