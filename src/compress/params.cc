#include "compress/params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>

namespace byteps::compress {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// The original's core kwarg names, mapped to ours.
std::string CanonicalKey(const std::string& key) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"compressor_type", "compressor"},     {"compressor_k", "k"},
      {"compressor_onebit_scaling", "scaling"}, {"ef_type", "ef"},
      {"momentum_type", "momentum"},         {"momentum_mu", "mu"},
      {"dithering_partition", "partition"},  {"dithering_normalize", "normalize"}};
  for (const auto& [from, to] : kAliases) {
    if (key == from) return to;
  }
  return key;
}

Status BadValue(const std::string& tensor, const std::string& key, const std::string& value,
                const char* expected) {
  return InvalidArgument(fmt::format("tensor '{}': compression key '{}'='{}': expected {}", tensor, key,
                                     value, expected));
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end && std::isfinite(*out);
}

bool ParseU64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end;
}

bool ParseBool(const std::string& s, bool* out) {
  if (s == "true" || s == "1") return *out = true, true;
  if (s == "false" || s == "0") return *out = false, true;
  return false;
}

// Which compressors a key applies to; "" = all.
bool Applies(const std::string& key, Compressor c) {
  if (key == "k") return c == Compressor::kTopk || c == Compressor::kRandomk || c == Compressor::kDithering;
  if (key == "scaling") return c == Compressor::kOnebit;
  if (key == "seed") return c == Compressor::kRandomk || c == Compressor::kDithering;
  if (key == "partition" || key == "normalize") return c == Compressor::kDithering;
  // A cast alone, or of topk/randomk's values; onebit and dithering send no plain values.
  if (key == "cast") return c == Compressor::kNone || c == Compressor::kTopk || c == Compressor::kRandomk;
  return true;
}

}  // namespace

const char* CompressorName(Compressor c) {
  switch (c) {
    case Compressor::kNone: return "none";
    case Compressor::kOnebit: return "onebit";
    case Compressor::kTopk: return "topk";
    case Compressor::kRandomk: return "randomk";
    case Compressor::kDithering: return "dithering";
  }
  return "unknown";
}

const char* WireCastName(WireCast c) {
  switch (c) {
    case WireCast::kNone: return "none";
    case WireCast::kFloat16: return "fp16";
    case WireCast::kBFloat16: return "bf16";
  }
  return "unknown";
}

StatusOr<Params> ParseParams(const std::vector<std::pair<std::string, std::string>>& kv,
                             const std::string& tensor) {
  Params p;
  std::set<std::string> seen;
  bool has_k = false, has_mu = false;
  for (const auto& [raw_key, raw_value] : kv) {
    const std::string key = CanonicalKey(Lower(raw_key));
    const std::string v = Lower(raw_value);
    if (!seen.insert(key).second) {
      return InvalidArgument(fmt::format("tensor '{}': compression key '{}' given twice", tensor, key));
    }
    if (key == "compressor") {
      if (v == "onebit") p.compressor = Compressor::kOnebit;
      else if (v == "topk") p.compressor = Compressor::kTopk;
      else if (v == "randomk") p.compressor = Compressor::kRandomk;
      else if (v == "dithering") p.compressor = Compressor::kDithering;
      else if (v == "none" || v.empty()) p.compressor = Compressor::kNone;
      else return BadValue(tensor, key, raw_value, "onebit, topk, randomk, dithering or none");
    } else if (key == "k") {
      if (!ParseDouble(v, &p.k) || p.k <= 0) return BadValue(tensor, key, raw_value, "a number > 0");
      has_k = true;
    } else if (key == "scaling") {
      if (!ParseBool(v, &p.scaling)) return BadValue(tensor, key, raw_value, "true or false");
    } else if (key == "ef") {
      if (v == "vanilla") p.error_feedback = true;
      else if (v == "none" || v.empty()) p.error_feedback = false;
      else return BadValue(tensor, key, raw_value, "vanilla or none");
    } else if (key == "momentum") {
      if (v == "nesterov") p.nesterov = true;
      else if (v == "none" || v.empty()) p.nesterov = false;
      else return BadValue(tensor, key, raw_value, "nesterov or none");
    } else if (key == "mu") {
      if (!ParseDouble(v, &p.mu) || p.mu < 0 || p.mu >= 1) {
        return BadValue(tensor, key, raw_value, "a number in [0, 1)");
      }
      has_mu = true;
    } else if (key == "seed") {
      if (!ParseU64(v, &p.seed)) return BadValue(tensor, key, raw_value, "an unsigned 64-bit integer");
    } else if (key == "partition") {
      if (v == "linear" || v == "0") p.partition = Partition::kLinear;
      else if (v == "natural" || v == "1") p.partition = Partition::kNatural;
      else return BadValue(tensor, key, raw_value, "linear or natural (0 or 1)");
    } else if (key == "normalize") {
      if (v == "max" || v == "0") p.normalize = Normalize::kMax;
      else if (v == "l2" || v == "1") p.normalize = Normalize::kL2;
      else return BadValue(tensor, key, raw_value, "max or l2 (0 or 1)");
    } else if (key == "cast") {
      if (v == "fp16" || v == "float16") p.cast = WireCast::kFloat16;
      else if (v == "bf16" || v == "bfloat16") p.cast = WireCast::kBFloat16;
      else if (v == "none" || v.empty()) p.cast = WireCast::kNone;
      else return BadValue(tensor, key, raw_value, "fp16, bf16 or none");
    } else {
      return InvalidArgument(fmt::format("tensor '{}': unknown compression key '{}'", tensor, raw_key));
    }
  }
  for (const std::string& key : seen) {
    if (!Applies(key, p.compressor)) {
      return InvalidArgument(fmt::format("tensor '{}': compression key '{}' does not apply to compressor '{}'",
                                         tensor, key, CompressorName(p.compressor)));
    }
  }
  auto require = [&](bool has, const char* key) {
    return has ? Status::Ok()
               : InvalidArgument(fmt::format("tensor '{}': compressor '{}' needs compression key '{}'", tensor,
                                             CompressorName(p.compressor), key));
  };
  const std::string k_text = fmt::format("{}", p.k);
  switch (p.compressor) {
    case Compressor::kTopk:
    case Compressor::kRandomk:
      BYTEPS_RETURN_IF_ERROR(require(has_k, "k"));
      if (p.k >= 1 && (p.k != std::floor(p.k) || p.k > 4294967295.0)) {
        return BadValue(tensor, "k", k_text, "a fraction < 1 or an integer count below 2^32");
      }
      break;
    case Compressor::kDithering:
      BYTEPS_RETURN_IF_ERROR(require(has_k, "k"));
      if (p.k != std::floor(p.k) || p.k < 1 || (p.partition == Partition::kLinear && p.k > 32767) ||
          (p.partition == Partition::kNatural && p.k > 31)) {
        return BadValue(tensor, "k", k_text, "an integer number of levels: 1..32767 (linear), 1..31 (natural)");
      }
      break;
    default: break;
  }
  if (p.nesterov) BYTEPS_RETURN_IF_ERROR(require(has_mu, "mu"));
  if (has_mu && !p.nesterov) {
    return InvalidArgument(fmt::format("tensor '{}': compression key 'mu' needs momentum=nesterov", tensor));
  }
  if (!p.enabled() && (p.error_feedback || p.nesterov)) {
    return InvalidArgument(fmt::format("tensor '{}': compression key '{}' needs a compressor or a cast", tensor,
                                       p.error_feedback ? "ef" : "momentum"));
  }
  return p;
}

std::string Params::ToString() const {
  std::string s = fmt::format("compressor={}", CompressorName(compressor));
  switch (compressor) {
    case Compressor::kOnebit: s += fmt::format(",scaling={}", scaling); break;
    case Compressor::kTopk: s += fmt::format(",k={}", k); break;
    case Compressor::kRandomk: s += fmt::format(",k={},seed={}", k, seed); break;
    case Compressor::kDithering:
      s += fmt::format(",k={},seed={},partition={},normalize={}", k, seed,
                       partition == Partition::kLinear ? "linear" : "natural",
                       normalize == Normalize::kMax ? "max" : "l2");
      break;
    case Compressor::kNone: break;
  }
  if (error_feedback) s += ",ef=vanilla";
  if (nesterov) s += fmt::format(",momentum=nesterov,mu={}", mu);
  if (cast != WireCast::kNone) s += fmt::format(",cast={}", WireCastName(cast));
  return s;
}

std::string Params::ToAttrs() const {
  std::string s = ToString();
  std::replace(s.begin(), s.end(), ',', ';');
  return s;
}

bool IsParamKey(const std::string& key) {
  static const char* const kKeys[] = {"compressor", "k",         "scaling",   "ef",  "momentum",
                                      "mu",         "seed",      "partition", "normalize", "cast"};
  const std::string k = CanonicalKey(Lower(key));
  return std::any_of(std::begin(kKeys), std::end(kKeys), [&](const char* x) { return k == x; });
}

StatusOr<Params> ParamsFromAttrs(const std::vector<std::pair<std::string, std::string>>& attrs,
                                 const std::string& tensor) {
  std::vector<std::pair<std::string, std::string>> kv;
  for (const auto& a : attrs)
    if (IsParamKey(a.first)) kv.push_back(a);
  if (kv.empty()) return Params{};
  return ParseParams(kv, tensor);
}

}  // namespace byteps::compress
