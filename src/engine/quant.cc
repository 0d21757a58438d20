// Calibrators, calibration tables/caches, keep-fp resolution and the s8 blob helpers (quant.h).
// The parts that run the engine (calibration passes, the INT8 rewrite, sensitivity) are in
// calib.cc.
#include "engine/quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace hotline::engine {

using json = nlohmann::json;

std::string_view CalibMethodName(CalibMethod m) {
  switch (m) {
    case CalibMethod::kKL: return "kl";
    case CalibMethod::kPercentile: return "percentile";
    case CalibMethod::kMinMax: return "minmax";
  }
  return "?";
}

CalibMethod ParseCalibMethod(std::string_view name) {
  if (name == "kl" || name == "entropy") return CalibMethod::kKL;
  if (name == "percentile") return CalibMethod::kPercentile;
  if (name == "minmax" || name == "max") return CalibMethod::kMinMax;
  throw Error("unknown calibration method '" + std::string(name) +
              "' (expected kl, percentile or minmax)");
}

// ---- histogram and calibrators ----

void AbsHistogram::Add(const float* x, int64_t n) {
  const int bins = int(counts.size());
  float m = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a)) throw Error("calibration saw a non-finite activation value");
    m = std::max(m, a);
  }
  max_abs = std::max(max_abs, m);
  if (range <= 0.f) range = m > 0.f ? m : 1.f;
  while (m > range) {  // double the range: bins 2j and 2j+1 merge into bin j
    for (int j = 0; j < bins / 2; ++j) counts[j] = counts[2 * j] + counts[2 * j + 1];
    if (bins % 2) counts[bins / 2] = counts[bins - 1];
    std::fill(counts.begin() + (bins + 1) / 2, counts.end(), 0.0);
    range *= 2.f;
  }
  const float inv = float(bins) / range;
  for (int64_t i = 0; i < n; ++i) {
    const int b = std::min(bins - 1, int(std::fabs(x[i]) * inv));
    counts[b] += 1.0;
  }
}

double AbsHistogram::Total() const {
  double t = 0;
  for (double c : counts) t += c;
  return t;
}

float AmaxMinMax(const AbsHistogram& h) { return h.max_abs; }

float AmaxPercentile(const AbsHistogram& h, double percentile) {
  if (!(percentile > 0 && percentile <= 100)) {
    throw Error("percentile must be in (0, 100], got " + std::to_string(percentile));
  }
  const double total = h.Total();
  if (total <= 0) return 0.f;
  if (percentile == 100) return h.max_abs;
  const double want = percentile / 100.0 * total;
  double cum = 0;
  int last = 0;
  for (int i = 0; i < int(h.counts.size()); ++i) {
    if (h.counts[i] > 0) last = i;
    cum += h.counts[i];
    // A relative slack absorbs the rounding of percentile/100 * total (e.g. 99.99% of 10000).
    if (cum >= want * (1 - 1e-12)) return float(i + 1) * h.BinWidth();
  }
  return float(last + 1) * h.BinWidth();
}

namespace {

// MXNet's _smooth_distribution: moves eps of mass onto the zero bins so that KL stays finite.
std::vector<double> Smooth(const std::vector<double>& p, double eps = 1e-4) {
  size_t zeros = 0;
  for (double v : p) zeros += v == 0;
  const size_t nonzeros = p.size() - zeros;
  std::vector<double> out(p);
  if (nonzeros == 0) return out;
  const double eps1 = eps * double(zeros) / double(nonzeros);
  for (double& v : out) v += v == 0 ? eps : -eps1;
  return out;
}

double KLDivergence(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (double v : p) sp += v;
  for (double v : q) sq += v;
  double kl = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    const double a = p[k] / sp, b = q[k] / sq;
    if (a > 0) kl += a * std::log(a / std::max(b, 1e-300));
  }
  return kl;
}

}  // namespace

float AmaxKL(const AbsHistogram& h, int levels) {
  const int bins = int(h.counts.size());
  if (levels < 2 || levels > bins) {
    throw Error("KL calibration needs 2 <= levels <= bins, got levels=" + std::to_string(levels) +
                " bins=" + std::to_string(bins));
  }
  if (h.Total() <= 0) return 0.f;
  int last_nonzero = 0;
  for (int i = 0; i < bins; ++i) {
    if (h.counts[i] > 0) last_nonzero = i;
  }
  double best = 1e300;
  int best_i = bins;
  // Thresholds past the last non-empty bin clip nothing and only coarsen the grid.
  const int end = std::max(levels, std::min(bins, last_nonzero + 1));
  for (int i = levels; i <= end; ++i) {
    std::vector<double> p(h.counts.begin(), h.counts.begin() + i);
    double outliers = 0;
    for (int k = i; k < bins; ++k) outliers += h.counts[k];
    p[i - 1] += outliers;
    // Q: the first i bins (without the outliers) merged into `levels` groups (the last group
    // takes the remainder), each group's count spread evenly over its bins where p is non-zero.
    const int merged = i / levels;
    std::vector<double> q(size_t(i), 0.0);
    for (int j = 0; j < levels; ++j) {
      const int start = j * merged, stop = j == levels - 1 ? i : start + merged;
      double sum = 0;
      int nonzero = 0;
      for (int k = start; k < stop; ++k) {
        sum += h.counts[k];
        nonzero += p[k] != 0;
      }
      if (nonzero == 0) continue;
      for (int k = start; k < stop; ++k) q[k] = p[k] != 0 ? sum / nonzero : 0.0;
    }
    const double kl = KLDivergence(Smooth(p), Smooth(q));
    if (kl < best) {
      best = kl;
      best_i = i;
    }
  }
  return float(best_i) * h.BinWidth();
}

float ComputeAmax(const AbsHistogram& h, CalibMethod method, double percentile) {
  switch (method) {
    case CalibMethod::kKL: return AmaxKL(h);
    case CalibMethod::kPercentile: return AmaxPercentile(h, percentile);
    case CalibMethod::kMinMax: return AmaxMinMax(h);
  }
  return AmaxMinMax(h);
}

// ---- calibration tables ----

json CalibrationTable::ToJson() const {
  json j;
  j["format"] = "hotline-calibration-1";
  j["method"] = method;
  j["percentile"] = percentile;
  j["model_fingerprint"] = model_fingerprint;
  j["samples"] = samples;
  j["calib_source"] = calib_source;
  j["amax"] = amax;
  return j;
}

CalibrationTable CalibrationTable::FromJson(const json& j) {
  CalibrationTable t;
  try {
    if (j.at("format") != "hotline-calibration-1") {
      throw Error("calibration table has format " + j.at("format").dump() +
                      ", expected \"hotline-calibration-1\"",
                  Code::kInvalidArgument);
    }
    t.method = j.at("method");
    t.percentile = j.value("percentile", 0.0);
    t.model_fingerprint = j.value("model_fingerprint", "");
    t.samples = j.value("samples", int64_t{0});
    t.calib_source = j.value("calib_source", "");
    t.amax = j.at("amax").get<std::map<std::string, float>>();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(std::string("malformed calibration table: ") + e.what(), Code::kInvalidArgument);
  }
  for (const auto& [name, a] : t.amax) {
    if (!(a > 0) || !std::isfinite(a)) {
      throw Error("calibration table: tensor '" + name + "' has amax " + std::to_string(a) +
                      " (expected a positive finite number)",
                  Code::kInvalidArgument);
    }
  }
  return t;
}

void CalibrationTable::Save(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) throw Error("cannot write calibration cache '" + path + "'", Code::kPermissionDenied);
    f << ToJson().dump(1) << "\n";
    if (!f) throw Error("error writing calibration cache '" + path + "'", Code::kDataLoss);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error("cannot move calibration cache into place at '" + path + "'",
                Code::kPermissionDenied);
  }
}

CalibrationTable CalibrationTable::Load(const std::string& path,
                                        const std::string& model_fingerprint, CalibMethod method,
                                        double percentile) {
  std::ifstream f(path);
  if (!f) throw Error("cannot open calibration cache '" + path + "'", Code::kNotFound);
  json j;
  try {
    j = json::parse(f);
  } catch (const std::exception& e) {
    throw Error("calibration cache '" + path + "' is not valid JSON: " + e.what(),
                Code::kInvalidArgument);
  }
  CalibrationTable t;
  try {
    t = FromJson(j);
  } catch (const Error& e) {
    throw Error("calibration cache '" + path + "': " + e.what(), e.code());
  }
  if (t.model_fingerprint != model_fingerprint) {
    throw Error("calibration cache '" + path + "' was made for model " +
                    (t.model_fingerprint.empty() ? "(none)" : t.model_fingerprint) +
                    ", this model is " + model_fingerprint +
                    ": delete the cache or point --calib-cache elsewhere to recalibrate",
                Code::kFailedPrecondition);
  }
  const std::string want(CalibMethodName(method));
  if (t.method != want || (method == CalibMethod::kPercentile && t.percentile != percentile)) {
    throw Error("calibration cache '" + path + "' holds " + t.method +
                    (t.method == "percentile" ? " " + std::to_string(t.percentile) : "") +
                    " ranges, the build asks for " + want +
                    (method == CalibMethod::kPercentile ? " " + std::to_string(percentile) : "") +
                    ": delete the cache or use another --calib-cache file",
                Code::kFailedPrecondition);
  }
  return t;
}

namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void Add(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t k = 0; k < n; ++k) {
      h ^= b[k];
      h *= 1099511628211ull;
    }
  }
  void Add(const std::string& s) {
    Add(s.data(), s.size());
    Add("\0", 1);
  }
  std::string Hex() const {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

}  // namespace

std::string ModelFingerprint(const Graph& g) {
  Fnv f;
  for (const Node& n : g.nodes) {
    f.Add(n.op);
    for (const auto& v : n.inputs) f.Add(v);
    for (const auto& v : n.outputs) f.Add(v);
  }
  for (const auto& [name, t] : g.initializers) {
    f.Add(name);
    f.Add(t.shape.data(), t.shape.size() * sizeof(int64_t));
    if (t.is_float()) f.Add(t.f.data(), t.f.size() * sizeof(float));
    else f.Add(t.i.data(), t.i.size() * sizeof(int64_t));
  }
  return f.Hex();
}

std::vector<std::vector<int32_t>> ReadCalibrationJsonl(const std::string& path,
                                                       const CalibTokenizer& tokenize,
                                                       int max_lines) {
  if (!tokenize) throw Error("reading calibration text needs a tokenizer (none was given)");
  std::ifstream f(path);
  if (!f) throw Error("cannot open calibration file '" + path + "'", Code::kNotFound);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  int lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const std::exception& e) {
      throw Error("calibration file '" + path + "' line " + std::to_string(lineno) +
                  " is not JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      throw Error("calibration file '" + path + "' line " + std::to_string(lineno) +
                  ": expected an object with a \"text\" string");
    }
    auto ids = tokenize(j["text"].get<std::string>());
    if (!ids.empty()) out.push_back(std::move(ids));
    if (max_lines > 0 && int(out.size()) >= max_lines) break;
  }
  if (out.empty()) throw Error("calibration file '" + path + "' holds no text lines");
  return out;
}

// ---- keep-fp ----

std::vector<bool> ResolveKeepFp(const std::vector<QuantGemm>& gemms,
                                const std::vector<std::string>& keep_fp, bool* keep_embeddings) {
  std::vector<bool> keep(gemms.size(), false);
  if (keep_embeddings) *keep_embeddings = false;
  for (const std::string& e : keep_fp) {
    bool hit = false;
    if (e == "embeddings") {
      if (keep_embeddings) *keep_embeddings = true;
      continue;
    }
    if (e.size() > 1 && e[0] == '#') {
      char* end = nullptr;
      const long i = std::strtol(e.c_str() + 1, &end, 10);
      if (*end == '\0' && i >= 0 && i < long(gemms.size())) keep[i] = hit = true;
    } else if (e.rfind("layer:", 0) == 0) {
      char* end = nullptr;
      const long l = std::strtol(e.c_str() + 6, &end, 10);
      if (*end == '\0' && end != e.c_str() + 6) {
        for (const auto& g : gemms) {
          if (g.layer == l) keep[g.index] = hit = true;
        }
      }
    } else if (e == "heads") {
      for (const auto& g : gemms) {
        if (g.layer < 0) keep[g.index] = hit = true;
      }
    } else {
      for (const auto& g : gemms) {
        if (g.node == e) keep[g.index] = hit = true;
      }
    }
    if (!hit) {
      throw Error("keep-fp entry '" + e + "' matches no quantisable GEMM (expected a node name, "
                  "#<index> below " + std::to_string(gemms.size()) +
                  ", layer:<L>, heads or embeddings)");
    }
  }
  return keep;
}

// ---- s8 blobs ----

HTensor PackS8(const std::vector<int8_t>& values, int64_t rows) {
  HTensor t;
  t.dtype = HTensor::DType::kF32;
  const size_t words = (values.size() + 3) / 4;
  t.shape = {int64_t(words)};
  if (rows > 1) {
    if (values.size() % size_t(rows) != 0 || values.size() / size_t(rows) % 4 != 0) {
      throw Error("PackS8: " + std::to_string(values.size()) + " values do not split into " +
                  std::to_string(rows) + " rows of a multiple of 4");
    }
    t.shape = {rows, int64_t(values.size() / size_t(rows) / 4)};
  }
  t.f.assign(words, 0.f);
  if (!values.empty()) std::memcpy(t.f.data(), values.data(), values.size());
  return t;
}

const int8_t* S8Data(const HTensor& blob, int64_t expected_count) {
  if (!blob.is_float() || int64_t(blob.f.size()) * 4 < expected_count) {
    throw Error("int8 weight blob holds " + std::to_string(blob.f.size() * 4) + " bytes, " +
                    std::to_string(expected_count) + " expected",
                Code::kDataLoss);
  }
  return reinterpret_cast<const int8_t*>(blob.f.data());
}

}  // namespace hotline::engine
