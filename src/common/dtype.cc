#include "common/dtype.h"

namespace byteps {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kUint8: return 1;
    case DataType::kInt32: return 4;
    case DataType::kInt8: return 1;
    case DataType::kInt64: return 8;
    case DataType::kBFloat16: return 2;
    case DataType::kInt16: return 2;
    case DataType::kBool: return 1;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kInt8: return "int8";
    case DataType::kInt64: return "int64";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt16: return "int16";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

std::optional<DataType> DataTypeFromCode(int code) {
  if (code < 0 || code >= kNumDataTypes) return std::nullopt;
  return static_cast<DataType>(code);
}

std::optional<DataType> DataTypeFromName(std::string_view n) {
  if (n == "float32" || n == "float") return DataType::kFloat32;
  if (n == "float64" || n == "double") return DataType::kFloat64;
  if (n == "float16" || n == "half") return DataType::kFloat16;
  if (n == "bfloat16") return DataType::kBFloat16;
  if (n == "uint8") return DataType::kUint8;
  if (n == "int8") return DataType::kInt8;
  if (n == "int32" || n == "int") return DataType::kInt32;
  if (n == "int64" || n == "long") return DataType::kInt64;
  if (n == "int16" || n == "short") return DataType::kInt16;
  if (n == "bool") return DataType::kBool;
  return std::nullopt;
}

bool IsFloating(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

}  // namespace byteps
