// Nesterov momentum applied to the gradient before compression, as the original's
// nesterov_momentum (worker only; the framework optimizer's own momentum must then be 0):
//
//   m = mu * m + g;   g = g + mu * m
//
// Threading: one thread at a time. The state belongs to one tensor part (its n elements).
#pragma once

#include <cstddef>
#include <vector>

namespace byteps::compress {

class NesterovMomentum {
 public:
  NesterovMomentum(size_t n, double mu) : momentum_(n, 0.0f), mu_(static_cast<float>(mu)) {}

  // Updates the momentum from grad and rewrites grad in place. Precondition: n == size().
  void Apply(float* grad, size_t n);

  size_t size() const { return momentum_.size(); }
  const std::vector<float>& momentum() const { return momentum_; }

 private:
  std::vector<float> momentum_;
  float mu_;
};

}  // namespace byteps::compress
