// The key layout every worker and server shares: a partition's key is its tensor's declared key
// in the high bits and the partition index in the low kPartitionBits, so the partitions of one
// tensor have consecutive keys. A declared key is (generation << kIndexBits) | index: the index is
// the dense number the scheduler's name service gives each (name, incarnation) (name_planner.h),
// the generation the online tuner's partition size. PlaceKey is the one rule that spreads keys over
// n equal places: a server's engine shards, a worker's connections to a server, and the servers
// of a tensor declared without its size.
// Threading: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace byteps::protocol {

inline constexpr int kPartitionBits = 16;
inline constexpr size_t kMaxPartitionsPerTensor = size_t{1} << kPartitionBits;
// Declared keys are 32 bits: 24 of index (one per name and incarnation: a name used at a new size
// takes a new one) and 8 of generation.
inline constexpr int kIndexBits = 24;
inline constexpr size_t kMaxTensors = size_t{1} << kIndexBits;
inline constexpr uint32_t kMaxGenerations = 1u << (32 - kIndexBits);

constexpr uint32_t MakeDeclaredKey(uint32_t generation, uint32_t index) { return (generation << kIndexBits) | index; }
constexpr uint32_t GenerationOf(uint32_t declared_key) { return declared_key >> kIndexBits; }
constexpr uint32_t IndexOf(uint32_t declared_key) { return declared_key & ((1u << kIndexBits) - 1); }

constexpr uint64_t MakeKey(uint32_t declared_key, uint32_t partition) {
  return (static_cast<uint64_t>(declared_key) << kPartitionBits) | partition;
}
constexpr uint32_t DeclaredKeyOf(uint64_t key) { return static_cast<uint32_t>(key >> kPartitionBits); }
constexpr uint32_t PartitionOf(uint64_t key) {
  return static_cast<uint32_t>(key & (kMaxPartitionsPerTensor - 1));
}

// SplitMix64's finalizer: every input bit affects every output bit, so both consecutive
// partitions of one tensor and the first partitions of consecutive tensors spread evenly.
constexpr uint64_t MixKey(uint64_t key) {
  key ^= key >> 30;
  key *= 0xbf58476d1ce4e5b9ull;
  key ^= key >> 27;
  key *= 0x94d049bb133111ebull;
  key ^= key >> 31;
  return key;
}

// Which of `n` places `key` goes to: a tensor's partitions round-robin from a start its hash picks,
// so one large tensor spreads evenly (no two places differ by more than one of its partitions)
// and the first partitions of many small tensors spread too.
constexpr size_t PlaceKey(uint64_t key, size_t n) {
  return n == 0 ? 0 : static_cast<size_t>((MixKey(MakeKey(DeclaredKeyOf(key), 0)) % n + PartitionOf(key)) % n);
}

}  // namespace byteps::protocol
