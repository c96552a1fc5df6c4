// Splits a tensor's bytes into partitions of at most `partition_bytes` (rounded down to whole
// elements), so a big tensor pipelines over several servers and its pushes overlap its pulls.
// Threading: pure function.
#pragma once

#include <cstddef>
#include <vector>

namespace byteps::protocol {

struct PartitionRange {
  size_t offset = 0;  // bytes from the tensor start
  size_t length = 0;  // bytes
};

// A 0-byte tensor has one empty partition (it still takes part in rounds). elem_size >= 1.
std::vector<PartitionRange> SplitIntoPartitions(size_t tensor_bytes, size_t partition_bytes, size_t elem_size);

}  // namespace byteps::protocol
