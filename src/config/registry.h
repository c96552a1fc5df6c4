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

struct Entry {
  const char* name;
  const char* type;
  const char* help;
  Setter set = nullptr;      // nullptr: an ignored compatibility name
  Printer show = nullptr;    // nullptr: no Config field; Describe shows the env value or fallback
  const char* fallback = "";
  bool secret = false;       // Describe never prints the value
};

// Every setting, in the order of `byteps info`, Settings() and docs/config.md.
std::span<const Entry> Registry();
// The entry named `name`, or nullptr.
const Entry* FindEntry(std::string_view name);
inline bool IsIgnored(const Entry& e) { return e.set == nullptr; }
// Seconds the way the table prints them (and messages quote them): "15", "0.5".
std::string FormatSeconds(double v);

}  // namespace byteps::config
