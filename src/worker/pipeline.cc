#include "worker/pipeline.h"

namespace byteps::worker {

std::string Pipeline::Describe() const {
  if (stages_.empty()) return "(no stage)";
  std::string s;
  for (const Stage* st : stages_) s += (s.empty() ? "" : " -> ") + st->name();
  return s;
}

}  // namespace byteps::worker
