#include "tests/support/typed_values.h"

#include "common/half.h"

namespace byteps::testing {

void StoreValue(void* data, DataType dt, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(data)[i] = v; break;
    case DataType::kFloat16: static_cast<uint16_t*>(data)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(data)[i] = FloatToBFloat16(static_cast<float>(v)); break;
    case DataType::kInt32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); break;
    case DataType::kInt8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v); break;
    case DataType::kUint8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt16: static_cast<int16_t*>(data)[i] = static_cast<int16_t>(v); break;
    case DataType::kBool: static_cast<uint8_t*>(data)[i] = v != 0 ? 1 : 0; break;
  }
}

double LoadValue(const void* data, DataType dt, size_t i) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(data)[i];
    case DataType::kFloat64: return static_cast<const double*>(data)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kInt32: return static_cast<const int32_t*>(data)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DataType::kInt8: return static_cast<const int8_t*>(data)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(data)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(data)[i];
    case DataType::kBool: return static_cast<const uint8_t*>(data)[i] != 0 ? 1 : 0;
  }
  return 0;
}

std::vector<uint8_t> Encode(DataType dt, const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * DataTypeSize(dt));
  for (size_t i = 0; i < values.size(); ++i) StoreValue(out.data(), dt, i, values[i]);
  return out;
}

}  // namespace byteps::testing
