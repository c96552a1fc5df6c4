// `byteps top`: a live view of a running job, asked of its scheduler (cluster/top_client.h) and
// redrawn every interval; `--json` prints one snapshot as JSON and exits (docs/top.md).
#pragma once

#include <string>

#include "config/config.h"

namespace byteps::cli {

struct TopOptions {
  std::string scheduler;   // "HOST:PORT"; "": DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT
  bool json = false;       // one snapshot as JSON, then exit
  double interval_s = 1;   // between redraws
  int count = 0;           // redraws before exiting; 0: until interrupted or the job ends
  double timeout_s = 5;    // for the scheduler's answer (and the connection)
};

// Exit status: 0 (the job ended while watched counts as 0), 1 when the scheduler cannot be reached
// or answers nothing in time, 2 for a bad --scheduler.
int RunTop(const config::Config& c, const TopOptions& o);

}  // namespace byteps::cli
