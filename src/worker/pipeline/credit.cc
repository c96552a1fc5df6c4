#include "worker/pipeline/credit.h"

namespace byteps::worker::pipeline {

bool Credit::TryAcquire(size_t bytes) {
  if (limit_ > 0 && in_flight_ > 0 && in_flight_ + bytes > limit_) return false;
  in_flight_ += bytes;
  return true;
}

void Credit::Release(size_t bytes) { in_flight_ -= bytes <= in_flight_ ? bytes : in_flight_; }

}  // namespace byteps::worker::pipeline
