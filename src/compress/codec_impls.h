// The codecs behind MakeCodec (one .cc each). Internal to the library.
#pragma once

#include <memory>
#include <string>

#include "compress/codec.h"

namespace byteps::compress {

std::unique_ptr<Codec> NewCastCodec(ValueType type, DataType dtype, std::string tensor);
std::unique_ptr<Codec> NewOnebitCodec(bool scaling, DataType dtype, std::string tensor);
std::unique_ptr<Codec> NewTopkCodec(double k, ValueType type, DataType dtype, std::string tensor);
// unbiased: values scaled by n/k (the estimate's expectation is the input); off with error
// feedback, which corrects the bias itself (as the original, which never scales).
std::unique_ptr<Codec> NewRandomkCodec(double k, uint64_t seed, bool unbiased, ValueType type, DataType dtype,
                                       std::string tensor);
std::unique_ptr<Codec> NewDitheringCodec(uint32_t levels, Partition partition, Normalize normalize, uint64_t seed,
                                         DataType dtype, std::string tensor);

}  // namespace byteps::compress
