// Value parsers for the settings registry (registry.cc). Each parser is strict: the whole string
// must match, because a half-understood value ("4k0", "1O") silently changing a job is worse than
// a refusal. On failure a parser returns the accepted form ("an integer >= 1"), and the registry
// wraps it as "NAME='value': expected <form>", so every message names the variable and the rule.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/logging.h"

namespace byteps::config {

// Either the parsed value or the accepted form, for the error message.
template <typename T>
struct Parsed {
  std::optional<T> value;
  std::string expected;  // set when !value
};

// Decimal integer (optional leading '-') in [min, max].
Parsed<int64_t> ParseInt(std::string_view s, int64_t min, int64_t max);

// Byte count: decimal digits with an optional K/M/G suffix (case-insensitive, powers of 1024),
// in [min, max].
Parsed<uint64_t> ParseBytes(std::string_view s, uint64_t min, uint64_t max);

// 0/1, true/false, yes/no, on/off (case-insensitive).
Parsed<bool> ParseBool(std::string_view s);

// Finite decimal number of seconds; > 0, or >= 0 when allow_zero (0 then means "off").
Parsed<double> ParseSeconds(std::string_view s, bool allow_zero);

// A log level name as accepted by log::ParseLevel.
Parsed<log::Level> ParseLogLevel(std::string_view s);

// Renders a byte count the way ParseBytes reads it back: "4M"/"1G"/"256K" when exact (K only
// below 1M), else plain digits.
std::string FormatBytes(uint64_t n);

// Levenshtein distance, for "did you mean" suggestions on misspelled names.
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace byteps::config
