// The ordered stages a partition passes through, chosen for its tensor from the tensor's device,
// this process's place on its host, whether the job is distributed, and the call's options.
// Stages with nothing to do are not in the list, so they cost nothing: a CPU tensor of a
// one-process host in a distributed job passes through push-pull only.
// Threading: immutable once built.
#pragma once

#include <string>
#include <vector>

#include "worker/pipeline/stage.h"

namespace byteps::worker::pipeline {

class Pipeline {
 public:
  Pipeline() = default;
  explicit Pipeline(std::vector<Stage*> stages) : stages_(std::move(stages)) {}

  size_t size() const { return stages_.size(); }
  bool empty() const { return stages_.empty(); }
  Stage* at(size_t i) const { return stages_[i]; }
  // Every stage's Admit, in order; the first error.
  Status Admit(Operation& op) const;
  // "local-reduce -> push-pull -> local-broadcast", for logs and tests.
  std::string Describe() const;

 private:
  std::vector<Stage*> stages_;
};

}  // namespace byteps::worker::pipeline
