// Element types byteps can reduce. Codes follow BytePS/mshadow order so that
// the C API and the original's plugins agree; bfloat16, int16 and bool are our additions.
// bool is one byte holding 0 or 1 (as numpy and torch store it): it can be gathered, broadcast
// and reduced by min (and), max (or) and product (and), but not summed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace byteps {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kUint8 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kInt64 = 6,
  kBFloat16 = 7,
  kInt16 = 8,
  kBool = 9,
};

inline constexpr int kNumDataTypes = 10;

// Bytes per element; 0 for an unknown code.
size_t DataTypeSize(DataType t);
// "float32", "float16", ... ; "unknown(<n>)" is never returned: unknown codes give "unknown".
const char* DataTypeName(DataType t);
// Validates a raw code read from the wire or the C API.
std::optional<DataType> DataTypeFromCode(int code);
// Parses names as NumPy/torch print them ("float32", "half", "bfloat16", "int64", "int16", "bool", ...).
std::optional<DataType> DataTypeFromName(std::string_view name);
bool IsFloating(DataType t);

}  // namespace byteps
