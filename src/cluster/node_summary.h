// What a node's heartbeat tells the scheduler for `byteps top` (docs/top.md): its role's metrics
// from the process's registry (common/metrics.h), as one compact JSON object:
//   {"role": "worker", "t": <seconds since this summary's clock started (steady)>,
//    "c": {<family less "byteps_<role>_">: {<label value or "">: <counter or gauge value>}},
//    "h": {<family>: {<label value or "">: [<count>, <sum>]}},
//    "w": {<window less the prefix>: [<seconds>, <what>]}}
// A window (metrics::WindowMax, e.g. the slowest push_pull and its tensor) covers the time since
// the summary before. Rates are the difference of two summaries over the difference of their "t".
// Threading: NodeSummary is thread-safe (the registry is).
#pragma once

#include <string>

#include "common/metrics.h"

namespace byteps::cluster {

std::string NodeSummary(metrics::Registry& registry, const std::string& role);

// The value of a label set as the registry keeps it (`server="1"` -> "1"); "" for none. Only the
// first label's value (byteps's families have at most one label).
std::string LabelValue(const std::string& labels);

}  // namespace byteps::cluster
