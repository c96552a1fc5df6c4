// The C API's gradient-compression settings of a job: the learning rate error feedback reads
// (byteps_set_learning_rate) and the compression parameters declared per tensor name
// (byteps_declare_tensor_params). Both are kept here, process-wide, and handed to every engine
// this process starts (init, resume, a lazy start): a framework may set them before init.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "byteps/c_api.h"
#include "api/c_api_state.h"

namespace byteps::api {
namespace {

using Pairs = std::vector<std::pair<std::string, std::string>>;

std::mutex g_compress_mu;
double g_learning_rate = 0;                            // guarded by g_compress_mu; 0: none set
std::vector<std::pair<std::string, Pairs>> g_params;  // guarded by g_compress_mu; by name, in order

}  // namespace

void ApplyCompressionSettings(worker::Engine& engine) {
  std::lock_guard<std::mutex> lock(g_compress_mu);
  if (g_learning_rate > 0) engine.SetLearningRate(g_learning_rate);
  for (const auto& [name, kv] : g_params) (void)engine.DeclareParams(name, kv);  // validated when declared
}

}  // namespace byteps::api

extern "C" {

int byteps_set_learning_rate(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    return byteps::api::SetError(byteps::InvalidArgument(
        fmt::format("byteps_set_learning_rate({}): the learning rate must be a finite number > 0", lr)));
  }
  {
    std::lock_guard<std::mutex> lock(byteps::api::g_compress_mu);
    byteps::api::g_learning_rate = lr;
  }
  if (auto engine = byteps::api::CurrentEngine()) engine->SetLearningRate(lr);
  byteps::api::ClearError();
  return 0;
}

int byteps_declare_tensor_params(const char* name, int n, const char** keys, const char** values) {
  if (name == nullptr || n < 0 || (n > 0 && (keys == nullptr || values == nullptr))) {
    return byteps::api::SetError(byteps::InvalidArgument("byteps_declare_tensor_params: a NULL name or arrays"));
  }
  byteps::api::Pairs kv;
  for (int i = 0; i < n; ++i) {
    if (keys[i] == nullptr || values[i] == nullptr) {
      return byteps::api::SetError(byteps::InvalidArgument(
          fmt::format("byteps_declare_tensor_params of tensor '{}': key or value {} is NULL", name, i)));
    }
    kv.emplace_back(keys[i], values[i]);
  }
  // Validated now, on an engine of nobody's: the same check every engine makes.
  if (byteps::Status st = byteps::worker::Engine::CheckParams(name, kv); !st.ok()) return byteps::api::SetError(st);
  {
    std::lock_guard<std::mutex> lock(byteps::api::g_compress_mu);
    auto& all = byteps::api::g_params;
    auto it = std::find_if(all.begin(), all.end(), [&](const auto& p) { return p.first == name; });
    if (it == all.end()) all.emplace_back(name, kv);
    else it->second = kv;
  }
  if (auto engine = byteps::api::CurrentEngine()) {
    if (byteps::Status st = engine->DeclareParams(name, kv); !st.ok()) return byteps::api::SetError(st);
  }
  byteps::api::ClearError();
  return 0;
}

}  // extern "C"
