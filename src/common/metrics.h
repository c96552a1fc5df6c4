// Prometheus metrics of a process (issue 31; docs/metrics.md): counters, gauges and histograms
// updated with relaxed atomics on the hot paths, and the text exposition format (0.0.4) that
// common/metrics_http.h serves when BYTEPS_METRICS_PORT is set. Debian has no C++ Prometheus
// client; this is the small subset byteps needs.
//
// A metric is a family name (byteps_..._total for counters, _seconds / _bytes for units), help
// text, and a label set like `server="1"`; Add* returns the same object for the same name and
// labels, so a component may register at construction and keep the pointer (metrics live as long
// as the registry; the process-wide one, Global(), is never destroyed).
// Threading: Add* and Expose are thread-safe (one mutex); Counter/Gauge/Histogram updates are
// lock-free and may run on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace byteps::metrics {

class Counter {
 public:
  void Add(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// Cumulative buckets with the upper bounds given (seconds or bytes), plus +Inf, a sum and a count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), the last one +Inf; the sum; the count (a consistent-enough view:
  // each is read atomically, not all together).
  std::vector<uint64_t> counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// The largest value offered since the last Take, with what it belongs to (e.g. the slowest
// push_pull of a heartbeat interval and its tensor): not a Prometheus type, it feeds the node
// summary `byteps top` shows (cluster/node_summary.h). Offer costs a relaxed load unless the value
// is a new maximum (then a short lock).
class WindowMax {
 public:
  struct Taken {
    double value = 0;  // 0 and "": nothing offered in the window
    std::string what;
  };
  void Offer(double v, const std::string& what);
  // The window's maximum; starts a new window.
  Taken Take();

 private:
  std::atomic<double> max_{0};
  std::mutex mu_;
  Taken taken_;  // guarded by mu_
};

// Bucket bounds for latencies: 50 µs to about 100 s, doubling.
std::vector<double> LatencyBounds();

class Registry {
 public:
  Counter* AddCounter(const std::string& name, const std::string& help, const std::string& labels = "");
  Gauge* AddGauge(const std::string& name, const std::string& help, const std::string& labels = "");
  Histogram* AddHistogram(const std::string& name, const std::string& help, const std::string& labels,
                          const std::vector<double>& bounds);
  WindowMax* AddWindowMax(const std::string& name);
  // Every family in name order, its HELP and TYPE lines, then its samples in label order.
  std::string Expose() const;

  // The current values of the families whose name starts with `prefix`, for a node's summary.
  struct Reading {
    std::string family;
    std::string labels;      // as registered (`server="1"`), or ""
    double value = 0;        // a counter's or gauge's value; a histogram's sum
    uint64_t count = 0;      // a histogram's count
    bool histogram = false;
  };
  std::vector<Reading> Read(const std::string& prefix) const;
  // Takes (and restarts) the windows whose name starts with `prefix`, by name.
  std::map<std::string, WindowMax::Taken> TakeWindows(const std::string& prefix);

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  // The metric of `name` and `labels` (made by `make` the first time), under mu_.
  template <typename T, typename Make>
  T* AddLocked(const std::string& name, const std::string& help, Type type, const std::string& labels, Make make);
  struct Family {
    Type type;
    std::string help;
    std::map<std::string, void*> by_labels;  // points into the deques below
  };
  Family& FamilyLocked(const std::string& name, const std::string& help, Type type);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<std::unique_ptr<Histogram>> histograms_;
  std::map<std::string, std::unique_ptr<WindowMax>> windows_;
};

// The process's registry (never destroyed: components may update it until the process ends).
Registry& Global();

// `key="value"` with the value escaped for the exposition format (\\, \", \n).
std::string Label(const std::string& key, const std::string& value);

}  // namespace byteps::metrics
