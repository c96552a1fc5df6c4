#include "config/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

namespace byteps::config {
namespace {

// Deadlines are turned into integer-nanosecond clocks downstream; int64 nanoseconds overflow after
// ~292 years, so cap far below that (a 31-year timeout is "never" in practice).
constexpr double kMaxSeconds = 1e9;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string IntForm(int64_t min, int64_t max) {
  // int fields without a real upper bound pass INT_MAX; printing it would only add noise.
  if (max >= std::numeric_limits<int>::max()) return fmt::format("an integer >= {}", min);
  return fmt::format("an integer in [{}, {}]", min, max);
}

std::string BytesForm(uint64_t min, uint64_t max) {
  std::string form = min > 0 ? "a positive integer number of bytes" : "an integer number of bytes";
  form += " (optionally with K/M/G suffix)";
  if (max == std::numeric_limits<uint64_t>::max()) {
    if (min > 1) form += " of at least " + FormatBytes(min);
  } else {
    form += fmt::format(" from {} to {}", FormatBytes(min), FormatBytes(max));
  }
  return form;
}

}  // namespace

Parsed<int64_t> ParseInt(std::string_view s, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || end != s.data() + s.size() || v < min || v > max)
    return {std::nullopt, IntForm(min, max)};
  return {v, {}};
}

Parsed<uint64_t> ParseBytes(std::string_view s, uint64_t min, uint64_t max) {
  Parsed<uint64_t> bad{std::nullopt, BytesForm(min, max)};
  int shift = 0;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      default: break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  // from_chars accepts a leading '-' for signed types only, but be explicit: digits only.
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return bad;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || end != s.data() + s.size()) return bad;
  if (v > (std::numeric_limits<uint64_t>::max() >> shift)) return bad;  // the suffix would overflow
  v <<= shift;
  if (v < min || v > max) return bad;
  return {v, {}};
}

Parsed<bool> ParseBool(std::string_view s) {
  const std::string l = Lower(s);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return {true, {}};
  if (l == "0" || l == "false" || l == "no" || l == "off") return {false, {}};
  return {std::nullopt, "a boolean (0/1, true/false, yes/no, on/off)"};
}

Parsed<double> ParseSeconds(std::string_view s, bool allow_zero) {
  std::string form = allow_zero ? "a non-negative number of seconds (0 = off)"
                                : "a positive number of seconds (e.g. 30 or 0.5)";
  form += fmt::format(", at most {}", kMaxSeconds);
  double v = 0;
  // from_chars also reads "inf"/"nan" and hex-free exponents; isfinite and the bounds reject the
  // former, "1e3" is a legitimate decimal number.
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0 ||
      (v == 0 && !allow_zero) || v > kMaxSeconds)
    return {std::nullopt, form};
  return {v, {}};
}

Parsed<log::Level> ParseLogLevel(std::string_view s) {
  if (auto l = log::ParseLevel(s)) return {*l, {}};
  return {std::nullopt, "one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL"};
}

std::string FormatBytes(uint64_t n) {
  if (n != 0) {
    if (n % (1ull << 30) == 0) return fmt::format("{}G", n >> 30);
    if (n % (1ull << 20) == 0) return fmt::format("{}M", n >> 20);
    // Large K multiples (4096000 = 4000K) read better as the plain numbers users wrote.
    if (n % (1ull << 10) == 0 && n < (1ull << 20)) return fmt::format("{}K", n >> 10);
  }
  return fmt::format("{}", n);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  // Two-row dynamic programme; names are short, so this is cheap.
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace byteps::config
