// Files a worker keeps for its job on this host, named by a token every process of the job
// computes alike (from the launcher's secret, else the scheduler address, else the parent).
//  - the token itself names the job's local sockets and shared memory (LocalReducer);
//  - a settings record per worker: the partition size and credit it uses, with why, written when
//    the start-up tuning decides them and again when the online tuner settles, removed when the
//    engine goes; `byteps info`, run with the job's environment, prints them.
// Threading: stateless functions; a record is replaced atomically (written aside, then renamed).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"

namespace byteps::worker {

std::string JobToken(const config::Config& c);

struct SettingsRecord {
  int rank = 0;
  long pid = 0;
  bool running = false;  // filled by ReadSettingsRecords: is that process alive
  std::string written;   // local time, for the reader
  size_t partition_bytes = 0;
  size_t credit_bytes = 0;
  std::string report;    // Engine::settings_report()
  std::string placement; // Engine::placement_report(): the servers' shares
  std::string path;
};

std::string SettingsRecordPath(const config::Config& c, int rank);
// The same with "<rank>" in place of the rank, for messages.
std::string SettingsRecordPattern(const config::Config& c);
// Best effort: a record that cannot be written costs only `byteps info` its answer (logged once).
void WriteSettingsRecord(const config::Config& c, const SettingsRecord& record);
void RemoveSettingsRecord(const config::Config& c, int rank);
// This job's records on this host, by rank; unreadable ones are skipped.
std::vector<SettingsRecord> ReadSettingsRecords(const config::Config& c);

}  // namespace byteps::worker
