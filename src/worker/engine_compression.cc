// The engine's part of gradient compression: the parameters a push_pull asks for (its attrs'
// compression keys, or those declared for its name), checked and put in canonical form before the
// pipeline is chosen, and the learning rate error feedback reads.
#include <fmt/format.h>

#include <algorithm>

#include "compress/codec.h"
#include "protocol/control.h"
#include "worker/engine.h"

namespace byteps::worker {
namespace {

std::string JoinAttrs(const std::vector<std::pair<std::string, std::string>>& attrs) {
  std::string out;
  for (const auto& [k, v] : attrs) {
    if (!out.empty()) out += ';';
    out += k;
    if (!v.empty()) out += "=" + v;
  }
  return out;
}

StatusOr<compress::Params> DeclaredParams(const std::string& name,
                                          const std::vector<std::pair<std::string, std::string>>& kv) {
  std::vector<std::pair<std::string, std::string>> stripped;
  for (const auto& [k, v] : kv) stripped.emplace_back(k.rfind("byteps_", 0) == 0 ? k.substr(7) : k, v);
  return compress::ParseParams(stripped, name);
}

}  // namespace

Status Engine::NormalizeCompression(TensorRequest& r, const compress::Params* declared, size_t min_compress_bytes) {
  r.compression.reset();
  std::vector<std::pair<std::string, std::string>> all = protocol::ParseAttrs(r.attrs);
  std::vector<std::pair<std::string, std::string>> others;
  bool keyed = false;
  for (const auto& kv : all) {
    if (compress::IsParamKey(kv.first)) keyed = true;
    else others.push_back(kv);
  }
  if (!keyed && declared == nullptr) return Status::Ok();  // untouched: today's path
  compress::Params p;
  if (keyed) {
    BYTEPS_ASSIGN_OR_RETURN(p, compress::ParamsFromAttrs(all, r.name));
  } else {
    p = *declared;
  }
  if (p.enabled()) {
    const bool scatter = std::any_of(others.begin(), others.end(),
                                     [](const auto& kv) { return kv.first == protocol::kAttrScatter; });
    if (r.op != ReduceOp::kSum || scatter) {
      return InvalidArgument(fmt::format("compression of tensor '{}': a {} cannot be compressed; only sums "
                                         "(push_pull, allreduce) can",
                                         r.name, scatter ? "reducescatter" : ReduceOpName(r.op)));
    }
    // The codec's own checks (the dtype) with the tensor's name, before anything is submitted.
    BYTEPS_RETURN_IF_ERROR(compress::MakeCodec(p, r.dtype, r.name).status());
  }
  if (!p.enabled() || r.bytes < min_compress_bytes) {
    r.attrs = JoinAttrs(others);
    return Status::Ok();
  }
  std::string attrs = JoinAttrs(others);
  r.attrs = attrs.empty() ? p.ToAttrs() : attrs + ";" + p.ToAttrs();
  r.compression = std::make_shared<const compress::Params>(p);
  return Status::Ok();
}

void Engine::SetLearningRate(double lr) { learning_rate_.store(lr, std::memory_order_relaxed); }

Status Engine::CheckParams(const std::string& name, const std::vector<std::pair<std::string, std::string>>& kv) {
  return DeclaredParams(name, kv).status();
}

Status Engine::DeclareParams(const std::string& name, const std::vector<std::pair<std::string, std::string>>& kv) {
  BYTEPS_ASSIGN_OR_RETURN(compress::Params p, DeclaredParams(name, kv));
  std::lock_guard<std::mutex> lock(declared_mu_);
  declared_params_[name] = p;
  any_declared_params_.store(true, std::memory_order_release);
  return Status::Ok();
}

}  // namespace byteps::worker
