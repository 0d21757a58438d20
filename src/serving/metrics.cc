#include "serving/metrics.h"

#include <charconv>
#include <cmath>

#include "base/error.h"

namespace hotline::serving {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (size_t i = 1; i < bounds_.size(); ++i) {
    if (!(bounds_[i - 1] < bounds_[i])) {
      throw Error("histogram bucket bounds must be strictly ascending; bound " + std::to_string(i) +
                  " is " + FormatValue(bounds_[i]) + " after " + FormatValue(bounds_[i - 1]));
    }
  }
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  // First bucket whose upper bound is >= v (Prometheus buckets are "less than or equal").
  size_t lo = 0, hi = bounds_.size();
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (bounds_[mid] >= v) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  counts_[lo].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = counts_[i].load(std::memory_order_relaxed);
  return out;
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (uint64_t c : bucket_counts()) n += c;
  return n;
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& values) {
  if (values.size() != labels_.size()) {
    throw Error("metric " + name_ + " has " + std::to_string(labels_.size()) + " labels; got " +
                std::to_string(values.size()) + " values");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(values);
  if (it != children_.end()) return *it->second;
  std::unique_ptr<T> child;
  if constexpr (std::is_same_v<T, Histogram>) {
    child = std::make_unique<Histogram>(buckets_);
  } else {
    child = std::make_unique<T>();
  }
  T& ref = *child;
  children_.emplace(values, std::move(child));
  return ref;
}

template <typename T>
void Family<T>::Remove(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  children_.erase(values);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void MetricsRegistry::CheckName(const std::string& name) {
  auto ok_char = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
  };
  bool valid = !name.empty();
  for (size_t i = 0; valid && i < name.size(); ++i) valid = ok_char(name[i], i == 0);
  if (!valid) throw Error("invalid metric name '" + name + "'");
  for (const auto& n : names_) {
    if (n == name) throw Error("metric " + name + " is registered twice");
  }
  names_.push_back(name);
}

Family<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                             std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckName(name);
  counters_.push_back(std::make_unique<Family<Counter>>(name, help, std::move(labels)));
  order_.push_back({0, counters_.size() - 1});
  return *counters_.back();
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                         std::vector<std::string> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckName(name);
  gauges_.push_back(std::make_unique<Family<Gauge>>(name, help, std::move(labels)));
  order_.push_back({1, gauges_.size() - 1});
  return *gauges_.back();
}

Family<Histogram>& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                 std::vector<std::string> labels,
                                                 std::vector<double> buckets) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckName(name);
  Histogram probe(buckets);  // validates the bounds now, not at first use
  histograms_.push_back(
      std::make_unique<Family<Histogram>>(name, help, std::move(labels), std::move(buckets)));
  order_.push_back({2, histograms_.size() - 1});
  return *histograms_.back();
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

namespace {

std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  if (names.empty() && extra_name.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += ',';
    s += names[i] + "=\"" + EscapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    if (!names.empty()) s += ',';
    s += extra_name + "=\"" + extra_value + "\"";
  }
  return s + "}";
}

std::string EscapeHelp(const std::string& h) {
  std::string out;
  for (char c : h) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

template <typename F>
void Header(std::string* out, const F& f, const char* type) {
  *out += "# HELP " + f.name() + " " + EscapeHelp(f.help()) + "\n";
  *out += "# TYPE " + f.name() + " " + type + "\n";
}

}  // namespace

std::string MetricsRegistry::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (auto [kind, index] : order_) {
    if (kind == 0) {
      const auto& f = *counters_[index];
      Header(&out, f, "counter");
      f.ForEach([&](const std::vector<std::string>& values, const Counter& c) {
        out += f.name() + LabelSet(f.label_names(), values) + " " + FormatValue(c.value()) + "\n";
      });
    } else if (kind == 1) {
      const auto& f = *gauges_[index];
      Header(&out, f, "gauge");
      f.ForEach([&](const std::vector<std::string>& values, const Gauge& g) {
        out += f.name() + LabelSet(f.label_names(), values) + " " + FormatValue(g.value()) + "\n";
      });
    } else {
      const auto& f = *histograms_[index];
      Header(&out, f, "histogram");
      f.ForEach([&](const std::vector<std::string>& values, const Histogram& h) {
        std::vector<uint64_t> counts = h.bucket_counts();
        uint64_t cumulative = 0;
        for (size_t i = 0; i < counts.size(); ++i) {
          cumulative += counts[i];
          std::string le = i < h.upper_bounds().size() ? FormatValue(h.upper_bounds()[i]) : "+Inf";
          out += f.name() + "_bucket" + LabelSet(f.label_names(), values, "le", le) + " " +
                 std::to_string(cumulative) + "\n";
        }
        out += f.name() + "_sum" + LabelSet(f.label_names(), values) + " " + FormatValue(h.sum()) +
               "\n";
        out += f.name() + "_count" + LabelSet(f.label_names(), values) + " " +
               std::to_string(cumulative) + "\n";
      });
    }
  }
  return out;
}

}  // namespace hotline::serving
