// Per-tensor compression parameters: the original BytePS's keys (compat reference §1.7, §7), parsed
// and validated once, with a canonical string form that workers compare at declaration.
//
// Threading: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace byteps::compress {

enum class Compressor : uint8_t { kNone, kOnebit, kTopk, kRandomk, kDithering };
enum class WireCast : uint8_t { kNone, kFloat16, kBFloat16 };
enum class Partition : uint8_t { kLinear, kNatural };
enum class Normalize : uint8_t { kMax, kL2 };

struct Params {
  Compressor compressor = Compressor::kNone;
  // topk / randomk: < 1 is a fraction of the partition's elements (at least one is kept), >= 1 a
  // count (an integer; clamped to the partition's size). dithering: the number of levels s.
  double k = 0;
  bool scaling = false;          // onebit: scale the signs by mean |x| (else 1)
  bool error_feedback = false;   // ef=vanilla
  bool nesterov = false;         // momentum=nesterov
  double mu = 0;                 // the momentum's coefficient, in [0, 1)
  uint64_t seed = 0;             // randomk's and dithering's random streams
  Partition partition = Partition::kLinear;
  Normalize normalize = Normalize::kMax;
  WireCast cast = WireCast::kNone;  // values on the wire as float16/bfloat16 (alone, or topk/randomk's values)

  // Whether anything is configured (a compressor or a cast).
  bool enabled() const { return compressor != Compressor::kNone || cast != WireCast::kNone; }
  // Canonical form: the keys that apply, in a fixed order, e.g.
  // "compressor=topk,k=0.01,ef=vanilla,cast=fp16". Equal parameters give equal strings.
  std::string ToString() const;
  // The same as declaration attributes (protocol::KeyInit::attrs): ';' between the pairs, e.g.
  // "compressor=topk;k=0.01;ef=vanilla". The workers put it on a compressed tensor's keys; the
  // servers compare it across workers and build their codec from it (ParamsFromAttrs).
  std::string ToAttrs() const;
  bool operator==(const Params&) const = default;
};

// Parses key/value pairs. Keys (the original's user keys, and its core kwarg names in brackets):
//   compressor [compressor_type]: onebit | topk | randomk | dithering | none (or "")
//   k [compressor_k]; scaling [compressor_onebit_scaling]: true | false
//   ef [ef_type]: vanilla | none; momentum [momentum_type]: nesterov | none; mu [momentum_mu]
//   seed: an unsigned integer; partition [dithering_partition]: linear | natural (0 | 1)
//   normalize [dithering_normalize]: max | l2 (0 | 1); cast: fp16 | bf16 | none
// Values are case-insensitive. Errors (InvalidArgument) name the tensor and the key: an unknown
// key or compressor, a key given twice, a bad value, k out of range, a required key missing
// (k for topk/randomk/dithering, mu for nesterov), a key that does not apply to the compressor.
StatusOr<Params> ParseParams(const std::vector<std::pair<std::string, std::string>>& kv,
                             const std::string& tensor);

// Whether `key` (any case) is a compression key: one of ParseParams's keys or the original's aliases.
bool IsParamKey(const std::string& key);
// ParseParams over the compression keys among `attrs` (declaration attributes, the others
// ignored); nothing configured when there are none.
StatusOr<Params> ParamsFromAttrs(const std::vector<std::pair<std::string, std::string>>& attrs,
                                 const std::string& tensor);

const char* CompressorName(Compressor c);
const char* WireCastName(WireCast c);

}  // namespace byteps::compress
