#include "compress/error_feedback.h"

#include <fmt/format.h>

namespace byteps::compress {

void ErrorFeedback::SetLearningRate(double lr) {
  ratio_ = lr_ > 0 && lr > 0 ? lr_ / lr : 1.0;
  lr_ = lr;
}

StatusOr<size_t> ErrorFeedback::Compress(Codec& codec, const float* grad, size_t n, uint64_t key, uint64_t round,
                                         uint8_t* out, size_t cap) {
  if (codec.dtype() != DataType::kFloat32 || n != residual_.size()) {
    return InvalidArgument(fmt::format("error feedback of tensor '{}': {} elements of {}, expected {} of float32",
                                       codec.tensor(), n, DataTypeName(codec.dtype()), residual_.size()));
  }
  corrected_.resize(n);
  const float r = static_cast<float>(ratio_);
  for (size_t i = 0; i < n; ++i) corrected_[i] = grad[i] + r * residual_[i];
  ratio_ = 1;
  BYTEPS_ASSIGN_OR_RETURN(size_t len, codec.Compress(corrected_.data(), n, key, round, out, cap));
  // e = p - D(out): decode into the residual, then subtract from p.
  BYTEPS_RETURN_IF_ERROR(codec.Decompress(out, len, n, residual_.data()));
  for (size_t i = 0; i < n; ++i) residual_[i] = corrected_[i] - residual_[i];
  return len;
}

}  // namespace byteps::compress
