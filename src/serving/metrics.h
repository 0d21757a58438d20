// A small Prometheus metrics registry: counters, gauges and histograms with labels, rendered in
// the Prometheus text exposition format (version 0.0.4). Names follow Prometheus conventions:
// hotline_* prefix, base units (seconds, bytes), counters end in _total.
//
// Thread safety: families and children are created under the registry's mutex and live as long
// as the registry, so references returned by WithLabels() stay valid; updating a child is
// lock-free (atomics). Render() may run concurrently with updates: each value is read atomically,
// and a histogram's _count is the sum of its buckets so the two always agree.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hotline::serving {

class Counter {
 public:
  void Inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  void Dec(double v = 1) { value_.fetch_sub(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void Observe(double v);
  const std::vector<double>& upper_bounds() const { return bounds_; }
  // Non-cumulative count per bucket (bounds_.size() + 1 entries, the last is +Inf).
  std::vector<uint64_t> bucket_counts() const;
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

// Buckets for latencies in seconds (100 µs .. 10 s) and for sizes (1 .. 4096, powers of two).
std::vector<double> LatencyBuckets();
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// One metric name with a fixed list of label names; children per label-value tuple.
template <typename T>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::vector<double> buckets = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(label_names)),
        buckets_(std::move(buckets)) {}
  // Throws hotline::Error when the number of values differs from the number of label names.
  T& WithLabels(const std::vector<std::string>& values);
  // Drops one child (e.g. a model's series after unload). No-op when absent.
  void Remove(const std::vector<std::string>& values);

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return labels_; }
  // Calls fn(values, child) for each child in label order, under the family's lock.
  template <typename Fn>
  void ForEach(Fn fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [values, child] : children_) fn(values, *child);
  }

 private:
  std::string name_, help_;
  std::vector<std::string> labels_;
  std::vector<double> buckets_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

class MetricsRegistry {
 public:
  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and be unique; throws hotline::Error otherwise.
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> labels = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> labels = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> labels, std::vector<double> buckets);

  // Prometheus text format, families in registration order.
  std::string Render() const;

 private:
  void CheckName(const std::string& name);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family<Counter>>> counters_;
  std::vector<std::unique_ptr<Family<Gauge>>> gauges_;
  std::vector<std::unique_ptr<Family<Histogram>>> histograms_;
  // Registration order: (kind, index) with kind 0 counter, 1 gauge, 2 histogram.
  std::vector<std::pair<int, size_t>> order_;
  std::vector<std::string> names_;
};

// "a\"b" style escaping of a label value for the text format.
std::string EscapeLabelValue(const std::string& v);
// Shortest round-trip decimal form; "+Inf", "-Inf", "NaN" for the special values.
std::string FormatValue(double v);

}  // namespace hotline::serving
