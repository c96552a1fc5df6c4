// cast: every element as float16 or bfloat16 (or float32). Body: count values.
#include "compress/codec_impls.h"
#include "compress/values.h"

namespace byteps::compress {
namespace {

class CastCodec : public Codec {
 public:
  CastCodec(ValueType type, DataType dtype, std::string tensor)
      : Codec(CodecId::kCast, dtype, std::move(tensor)), type_(type) {}

  size_t MaxCompressedBytes(size_t n) const override { return kPayloadHeaderSize + n * ValueTypeSize(type_); }

 protected:
  StatusOr<size_t> CompressBody(const float* in, size_t n, uint64_t, uint64_t, PayloadHeader* h,
                                uint8_t* body) override {
    h->value_type = type_;
    StoreValues(type_, in, n, body);
    return n * ValueTypeSize(type_);
  }

  Status CheckBody(const PayloadHeader& h, const uint8_t*, size_t body_len) const override {
    return CheckFields(h, type_, 0, 0, 0.0f, body_len, size_t{h.count} * ValueTypeSize(type_));
  }

  void AddBody(const PayloadHeader& h, const uint8_t* body, float* acc) const override {
    AddValues(type_, body, h.count, acc);
  }
  void DecodeBody(const PayloadHeader& h, const uint8_t* body, size_t n, float* out) const override {
    LoadValues(type_, body, n, out);
  }

 private:
  ValueType type_;
};

}  // namespace

std::unique_ptr<Codec> NewCastCodec(ValueType type, DataType dtype, std::string tensor) {
  return std::make_unique<CastCodec>(type, dtype, std::move(tensor));
}

}  // namespace byteps::compress
