#include "server/compressed_key.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/dtype.h"

namespace byteps::server {

StatusOr<std::unique_ptr<CompressedKey>> CompressedKey::FromInit(const protocol::KeyInit& init, uint64_t key) {
  const auto attrs = protocol::ParseAttrs(init.attrs);
  const std::string where = fmt::format("tensor '{}' (key {})", init.name, key);
  auto params = compress::ParamsFromAttrs(attrs, init.name);
  if (!params.ok()) return params.status().WithContext(fmt::format("compressed key {}", key));
  if (!params->enabled()) return std::unique_ptr<CompressedKey>();
  if (init.op != protocol::kOpSum) {
    return InvalidArgument(fmt::format("compression of {}: a {} cannot be compressed; only sums (push_pull, "
                                       "allreduce) can",
                                       where, init.op));
  }
  for (const auto& [k, v] : attrs) {
    if (k == protocol::kAttrScatter) {
      return InvalidArgument(fmt::format("compression of {}: a reducescatter cannot be compressed; only sums "
                                         "(push_pull, allreduce) can",
                                         where));
    }
  }
  auto dt = DataTypeFromCode(init.dtype);
  if (!dt) return InvalidArgument(fmt::format("compression of {}: unknown dtype code {}", where, init.dtype));
  // The tensor's dtype must be one the workers' codecs take; the server's own codec is float32.
  auto tensor_codec = compress::MakeCodec(*params, *dt, init.name);
  if (!tensor_codec.ok()) return tensor_codec.status().WithContext(fmt::format("compressed key {}", key));
  auto codec = compress::MakeCodec(*params, DataType::kFloat32, init.name);
  if (!codec.ok()) return codec.status().WithContext(fmt::format("compressed key {}", key));
  const size_t n = init.bytes / DataTypeSize(*dt);
  return std::unique_ptr<CompressedKey>(new CompressedKey(*params, std::move(codec.value()), n));
}

CompressedKey::CompressedKey(const compress::Params& params, std::unique_ptr<compress::Codec> codec, size_t n)
    : params_(params), codec_(std::move(codec)), sum_(n, 0.0f), max_payload_(codec_->MaxCompressedBytes(n)) {
  if (params_.error_feedback) ef_.emplace(n);
}

Status CompressedKey::Add(const uint8_t* payload, size_t len) {
  if (!open_) std::fill(sum_.begin(), sum_.end(), 0.0f);
  Status st = codec_->DecompressAdd(payload, len, sum_.size(), sum_.data());
  if (st.ok()) open_ = true;
  return st;
}

StatusOr<std::pair<std::shared_ptr<uint8_t>, size_t>> CompressedKey::Finish(uint64_t key, uint64_t round) {
  if (!open_) std::fill(sum_.begin(), sum_.end(), 0.0f);  // nobody pushed (all joined): a sum of zeros
  open_ = false;
  std::shared_ptr<uint8_t> out(new uint8_t[std::max<size_t>(max_payload_, 1)], std::default_delete<uint8_t[]>());
  StatusOr<size_t> len = ef_ ? ef_->Compress(*codec_, sum_.data(), sum_.size(), key, round, out.get(), max_payload_)
                             : codec_->Compress(sum_.data(), sum_.size(), key, round, out.get(), max_payload_);
  if (!len.ok()) return len.status();
  return std::make_pair(std::move(out), len.value());
}

}  // namespace byteps::server
