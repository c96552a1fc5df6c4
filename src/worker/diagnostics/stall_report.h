// The stall report: what a worker held when a deadline fired (BYTEPS_TIMEOUT) or when asked
// (kill -USR1): every partition in flight with its tensor, stage, round, server and age, and the
// credit. Text for people, written by common/report_file.h.
// Threading: a pure function.
#pragma once

#include <string>

#include "common/status.h"
#include "worker/pipeline/in_flight.h"

namespace byteps::worker::diagnostics {

// The report's text. `who`: "worker 1 (rank 1)"; `reason`: why it was written.
std::string FormatStallReport(const pipeline::InFlight& in_flight, const std::string& who, const std::string& reason);
}  // namespace byteps::worker::diagnostics
