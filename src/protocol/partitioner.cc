#include "protocol/partitioner.h"

#include <algorithm>

namespace byteps::protocol {

std::vector<PartitionRange> SplitIntoPartitions(size_t tensor_bytes, size_t partition_bytes, size_t elem_size) {
  size_t step = std::max(elem_size, partition_bytes / elem_size * elem_size);
  std::vector<PartitionRange> parts;
  if (tensor_bytes == 0) {
    parts.push_back({0, 0});
    return parts;
  }
  // Equal-sized partitions (the last one takes the remainder in whole elements) keep every server's
  // share even when a tensor is just above a multiple of the partition size.
  size_t n = (tensor_bytes + step - 1) / step;
  size_t elems = tensor_bytes / elem_size;
  size_t per = (elems + n - 1) / n;  // elements per partition
  size_t offset = 0;
  for (size_t i = 0; i < n && offset < tensor_bytes; ++i) {
    size_t len = std::min(per * elem_size, tensor_bytes - offset);
    parts.push_back({offset, len});
    offset += len;
  }
  return parts;
}

}  // namespace byteps::protocol
