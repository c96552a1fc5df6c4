#include "common/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace byteps::metrics {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double v) {
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  double s = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(s, s + v, std::memory_order_relaxed)) {
  }
}

std::vector<uint64_t> Histogram::counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

std::vector<double> LatencyBounds() {
  std::vector<double> b;
  for (double v = 50e-6; v < 120; v *= 2) b.push_back(v);
  return b;
}

std::string Label(const std::string& key, const std::string& value) {
  std::string v;
  for (char c : value) {
    if (c == '\\' || c == '"') v += '\\', v += c;
    else if (c == '\n') v += "\\n";
    else v += c;
  }
  return fmt::format("{}=\"{}\"", key, v);
}

Registry::Family& Registry::FamilyLocked(const std::string& name, const std::string& help, Type type) {
  auto [it, fresh] = families_.try_emplace(name);
  if (fresh) {
    it->second.type = type;
    it->second.help = help;
  }
  return it->second;
}

template <typename T, typename Make>
T* Registry::AddLocked(const std::string& name, const std::string& help, Type type, const std::string& labels,
                       Make make) {
  Family& f = FamilyLocked(name, help, type);
  auto [it, fresh] = f.by_labels.try_emplace(labels, nullptr);
  if (fresh) it->second = make();
  return static_cast<T*>(it->second);
}

Counter* Registry::AddCounter(const std::string& name, const std::string& help, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddLocked<Counter>(name, help, Type::kCounter, labels, [&] { return &counters_.emplace_back(); });
}

Gauge* Registry::AddGauge(const std::string& name, const std::string& help, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddLocked<Gauge>(name, help, Type::kGauge, labels, [&] { return &gauges_.emplace_back(); });
}

Histogram* Registry::AddHistogram(const std::string& name, const std::string& help, const std::string& labels,
                                  const std::vector<double>& bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  return AddLocked<Histogram>(name, help, Type::kHistogram, labels,
                              [&] { return histograms_.emplace_back(std::make_unique<Histogram>(bounds)).get(); });
}

WindowMax* Registry::AddWindowMax(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& w = windows_[name];
  if (!w) w = std::make_unique<WindowMax>();
  return w.get();
}

std::vector<Registry::Reading> Registry::Read(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Reading> out;
  for (auto it = families_.lower_bound(prefix); it != families_.end() && it->first.starts_with(prefix); ++it) {
    const Family& f = it->second;
    for (const auto& [labels, p] : f.by_labels) {
      Reading r{it->first, labels};
      if (f.type == Type::kCounter) {
        r.value = static_cast<double>(static_cast<const Counter*>(p)->value());
      } else if (f.type == Type::kGauge) {
        r.value = static_cast<const Gauge*>(p)->value();
      } else {
        const auto* h = static_cast<const Histogram*>(p);
        r.histogram = true;
        r.value = h->sum();
        for (uint64_t c : h->counts()) r.count += c;
      }
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::map<std::string, WindowMax::Taken> Registry::TakeWindows(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, WindowMax::Taken> out;
  for (auto it = windows_.lower_bound(prefix); it != windows_.end() && it->first.starts_with(prefix); ++it) {
    out[it->first] = it->second->Take();
  }
  return out;
}

void WindowMax::Offer(double v, const std::string& what) {
  if (v <= max_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (v <= taken_.value) return;
  taken_ = {v, what};
  max_.store(v, std::memory_order_relaxed);
}

WindowMax::Taken WindowMax::Take() {
  std::lock_guard<std::mutex> lock(mu_);
  Taken t = std::move(taken_);
  taken_ = {};
  max_.store(0, std::memory_order_relaxed);
  return t;
}

namespace {

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  return fmt::format("{}", v);
}

std::string Braced(const std::string& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  if (labels.empty()) return "{" + extra + "}";
  if (extra.empty()) return "{" + labels + "}";
  return "{" + labels + "," + extra + "}";
}

}  // namespace

std::string Registry::Expose() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter" : f.type == Type::kGauge ? "gauge" : "histogram";
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, type);
    for (const auto& [labels, p] : f.by_labels) {
      if (f.type == Type::kCounter) {
        out += fmt::format("{}{} {}\n", name, Braced(labels), static_cast<const Counter*>(p)->value());
      } else if (f.type == Type::kGauge) {
        out += fmt::format("{}{} {}\n", name, Braced(labels), Number(static_cast<const Gauge*>(p)->value()));
      } else {
        const auto* h = static_cast<const Histogram*>(p);
        const std::vector<uint64_t> counts = h->counts();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cumulative += counts[i];
          const std::string le = i < h->bounds().size() ? Number(h->bounds()[i]) : "+Inf";
          out += fmt::format("{}_bucket{} {}\n", name, Braced(labels, Label("le", le)), cumulative);
        }
        out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, Braced(labels), Number(h->sum()), name,
                           Braced(labels), cumulative);
      }
    }
  }
  return out;
}

Registry& Global() {
  static Registry* r = new Registry;  // never destroyed: updates may come until the process ends
  return *r;
}

}  // namespace byteps::metrics
