// `kill -USR1 <pid>` asks a byteps process for its report (the stall report on a worker, the
// rounds in progress on a server). The signal handler only writes a byte to a self-pipe; a small
// thread ("bps-usr1") reads it and runs every registered callback, outside the handler, so the
// callbacks may lock, allocate and write files. The thread exists only while a callback is
// registered; the last Remove stops it and puts back the handler that was there before.
// A handler installed before the first Add (e.g. Python's signal module) still runs: it is
// called after ours. With none (the default action would end the process), the signal only asks
// for the report.
// Threading: Add and Remove are thread-safe; callbacks run on the "bps-usr1" thread, one at a time.
#pragma once

#include <functional>

namespace byteps::report_signal {

// Registers `on_signal`; returns its id for Remove.
int Add(std::function<void()> on_signal);
// Unregisters (waits for a callback of `id` that is running). Unknown ids are ignored.
void Remove(int id);

}  // namespace byteps::report_signal
