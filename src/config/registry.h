// The settings table (registry.cc): one entry per environment variable byteps reads, with
// its type, help text, parser and printer. Load(), Settings(), Describe() (load.cc) and
// docs/config.md all derive from it, so a setting cannot be parsed in one place and documented (or
// defaulted) differently in another. Defaults live only in Config's member initializers; the table
// prints them from a default-constructed Config. Internal to src/config.
// Threading: immutable data and pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "common/status.h"
#include "config/config.h"

namespace byteps::config {

// What a setter sees: the variable's name (for messages) and its non-empty value.
struct Arg {
  std::string_view name;
  std::string_view value;
};

using Setter = Status (*)(const Arg&, Config&);
using Printer = std::string (*)(const Config&);

// What byteps does with a variable of the original BytePS / ps-lite (or its own):
//  - honoured: the same meaning;
//  - mapped: it means something here (its help says what; a value that cannot be honoured adds a
//    loud warning to Config::warnings naming the fallback, e.g. DMLC_ENABLE_RDMA=ibverbs);
//  - ignored: accepted, no effect; setting it adds one warning with the reason (its help);
//  - build: read by a build (setup.py, scripts/), never by a running process: accepted silently.
enum class Disposition { kHonoured, kMapped, kIgnored, kBuild };
const char* DispositionName(Disposition d);

struct Entry {
  const char* name;
  const char* type;
  const char* help;          // for an ignored name: why it does not apply
  Setter set = nullptr;      // nullptr: an ignored or build-time name
  Printer show = nullptr;    // nullptr: no Config field; Describe shows the env value or fallback
  const char* fallback = "";
  bool secret = false;       // Describe never prints the value
  Disposition disposition = Disposition::kHonoured;  // kIgnored / kBuild when set is nullptr
};

// Every setting, in the order of `byteps info`, Settings() and docs/config.md: byteps' own and
// the honoured / mapped original names (registry.cc), the launchers' own (LauncherEntries,
// registry_launcher.cc), then the ignored and build-time original names (CompatibilityEntries,
// registry_compat.cc).
std::span<const Entry> Registry();
std::span<const Entry> LauncherEntries();
std::span<const Entry> CompatibilityEntries();
// The entry named `name`, or nullptr.
const Entry* FindEntry(std::string_view name);
inline bool IsIgnored(const Entry& e) { return e.set == nullptr; }  // ignored or build-time
// Seconds the way the table prints them (and messages quote them): "15", "0.5".
std::string FormatSeconds(double v);

}  // namespace byteps::config
