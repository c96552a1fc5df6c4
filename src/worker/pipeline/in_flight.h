// What the pipeline holds at one moment (DispatchLoop::Snapshot), for the stall report: every
// partition that has not left its pipeline, where it is, and the credit.
// Threading: plain data, made on the dispatcher thread and handed over by value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/pipeline/partition_task.h"

namespace byteps::worker::pipeline {

struct TaskState {
  std::string tensor;
  size_t part = 0;
  size_t parts = 0;
  uint64_t key = 0;
  uint32_t round = 0;
  int server = 0;
  size_t bytes = 0;
  std::string stage;  // its current stage's name ("" once past the last)
  PartitionTask::Where where = PartitionTask::Where::kWaitingRound;
  double age_s = 0;  // since its operation was submitted
};

struct InFlight {
  std::vector<TaskState> tasks;  // oldest operation first
  size_t operations = 0;
  size_t credit_in_flight = 0;
  size_t credit_limit = 0;  // 0 = no cap
};

}  // namespace byteps::worker::pipeline
