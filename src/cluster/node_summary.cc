#include "cluster/node_summary.h"

#include <chrono>

#include <nlohmann/json.hpp>

namespace byteps::cluster {

using nlohmann::json;

std::string LabelValue(const std::string& labels) {
  const size_t open = labels.find('"');
  if (open == std::string::npos) return "";
  std::string v;
  for (size_t i = open + 1; i < labels.size() && labels[i] != '"'; ++i) {
    if (labels[i] == '\\' && i + 1 < labels.size()) {
      ++i;
      v += labels[i] == 'n' ? '\n' : labels[i];
    } else {
      v += labels[i];
    }
  }
  return v;
}

std::string NodeSummary(metrics::Registry& registry, const std::string& role) {
  static const auto start = std::chrono::steady_clock::now();
  const std::string prefix = "byteps_" + role + "_";
  json counters = json::object(), histograms = json::object(), windows = json::object();
  for (const auto& r : registry.Read(prefix)) {
    const std::string family = r.family.substr(prefix.size());
    if (r.histogram) {
      histograms[family][LabelValue(r.labels)] = json::array({r.count, r.value});
    } else {
      counters[family][LabelValue(r.labels)] = r.value;
    }
  }
  for (const auto& [name, taken] : registry.TakeWindows(prefix)) {
    windows[name.substr(prefix.size())] = json::array({taken.value, taken.what});
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return json{{"role", role}, {"t", t}, {"c", counters}, {"h", histograms}, {"w", windows}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace byteps::cluster
