// Vanilla error feedback (Karimireddy et al. 2019, the original's vanilla_ef): what compression
// dropped last round is added to this round's gradient before compressing, so over many rounds
// the sum of what was sent follows the sum of the true gradients.
//
//   p = g + (lr_prev / lr) * e;   out = C(p);   e = p - D(out)
//
// The learning-rate ratio is the original's (it read lr from the file lr.s each step); here the
// owner calls SetLearningRate before the step's Compress. Without it the ratio is 1.
// Threading: one thread at a time. The state belongs to one tensor part (its n elements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "compress/codec.h"

namespace byteps::compress {

class ErrorFeedback {
 public:
  explicit ErrorFeedback(size_t n) : residual_(n, 0.0f) {}

  // The learning rate of the coming step (> 0); the residual is scaled by the previous one / lr
  // in the next Compress (1 for the first).
  void SetLearningRate(double lr);

  // Compresses grad (n float32 values, n = the size given at construction) with the residual
  // added, and keeps the new residual. grad is not modified. Errors: the codec's, and
  // InvalidArgument (naming the tensor) for a codec whose dtype is not float32 or another n.
  StatusOr<size_t> Compress(Codec& codec, const float* grad, size_t n, uint64_t key, uint64_t round, uint8_t* out,
                            size_t cap);

  const std::vector<float>& residual() const { return residual_; }

 private:
  std::vector<float> residual_;
  std::vector<float> corrected_;
  double lr_ = 0;
  double ratio_ = 1;
};

}  // namespace byteps::compress
