#include "worker/pipeline/pipeline.h"

namespace byteps::worker::pipeline {

Status Pipeline::Admit(Operation& op) const {
  for (Stage* st : stages_) BYTEPS_RETURN_IF_ERROR(st->Admit(op));
  return Status::Ok();
}

std::string Pipeline::Describe() const {
  if (stages_.empty()) return "(no stage)";
  std::string s;
  for (const Stage* st : stages_) s += (s.empty() ? "" : " -> ") + st->name();
  return s;
}

}  // namespace byteps::worker::pipeline
