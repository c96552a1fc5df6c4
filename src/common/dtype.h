// Element types byteps can sum. Codes follow BytePS/mshadow order so that
// the C API and the original's plugins agree; bfloat16 is our addition.
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
};

inline constexpr int kNumDataTypes = 8;

// Bytes per element; 0 for an unknown code.
size_t DataTypeSize(DataType t);
// "float32", "float16", ... ; "unknown(<n>)" is never returned: unknown codes give "unknown".
const char* DataTypeName(DataType t);
// Validates a raw code read from the wire or the C API.
std::optional<DataType> DataTypeFromCode(int code);
// Parses names as NumPy/torch print them ("float32", "half", "bfloat16", "int64", ...).
std::optional<DataType> DataTypeFromName(std::string_view name);
bool IsFloating(DataType t);

}  // namespace byteps
