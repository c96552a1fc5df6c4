// Writes a worker's timeline as chrome-trace / Perfetto JSON (docs/tracing.md has the format):
// {"traceEvents":[...], "displayTimeUnit":"ms", "otherData":{...}}. Plain functions of their
// arguments; the recorder runs them on its writer thread, tests call them directly.
#pragma once

#include <ostream>
#include <string>

#include "common/status.h"
#include "worker/trace/trace_data.h"

namespace byteps::worker::trace {

// The timeline name of a pipeline stage: BytePS's queue name where one corresponds (local-reduce
// REDUCE, local-broadcast BROADCAST, copy-in COPYD2H, copy-out COPYH2D, push-pull PUSH_PULL),
// else the stage's name in upper case with '-' as '_' (group-reduce GROUP_REDUCE).
std::string TimelineStageName(const std::string& stage);

// The whole document to `out`.
void WriteTimeline(const TraceData& data, const TraceMeta& meta, std::ostream& out);

// The document to `path`, through a temporary file renamed into place (a reader never sees half
// a file). An error names the file and the system's reason.
Status WriteTimelineFile(const TraceData& data, const TraceMeta& meta, const std::string& path);

}  // namespace byteps::worker::trace
