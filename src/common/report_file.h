// Where a process's on-demand reports go (the stall report of a worker, the open rounds of a
// server): <folder>/byteps-stall-<stem>-<pid>.txt, one file per process, rewritten at each report
// through a temporary file and a rename (a reader never sees half of one). The folder is
// BYTEPS_TRACE_DIR when tracing, else the config's tmp_dir ($TMPDIR, else /tmp: config/load.cc).
// Threading: pure functions.
#pragma once

#include <string>

#include "common/status.h"

namespace byteps::report_file {

std::string Folder(bool trace_on, const std::string& trace_dir, const std::string& tmp_dir);
// Writes `text`; the path, or an error naming it.
StatusOr<std::string> Write(const std::string& folder, const std::string& stem, const std::string& text);

}  // namespace byteps::report_file
