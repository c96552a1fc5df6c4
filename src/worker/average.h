// Divides a reduced buffer by the number of contributors (the "average" of push_pull), per dtype:
// floating types in their own precision (half types through float32), integers with floor
// division like torch.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace byteps::worker {

void DivideInPlace(void* data, size_t count, DataType dtype, int divisor);

}  // namespace byteps::worker
