#include "compress/momentum.h"

#include "common/logging.h"

namespace byteps::compress {

void NesterovMomentum::Apply(float* grad, size_t n) {
  BYTEPS_CHECK(n == momentum_.size());
  float* m = momentum_.data();
  for (size_t i = 0; i < n; ++i) {
    m[i] = mu_ * m[i] + grad[i];
    grad[i] += mu_ * m[i];
  }
}

}  // namespace byteps::compress
