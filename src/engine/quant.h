// INT8 quantisation: calibration (KL / percentile / min-max), calibration tables and caches,
// the list of quantisable GEMMs of a model, per-GEMM sensitivity, and the int8 weight helpers the
// backends share.
//
// Scheme (symmetric everywhere, no zero points):
//   activations  per tensor: q = clamp(round(x * 127 / amax), -127, 127), s8. `amax` comes from a
//                CalibrationTable (calibrated, cached, or imported from a QDQ model).
//   weights      per output channel n: s_n = max_k |W[k,n]| / 127, q = round(W / s_n).
//   embeddings   word table per row r: s_r = max_h |E[r,h]| / 127; the gather dequantises.
//   GEMM         y = (sum_k qx[k] qw[k,n]) * (amax / 127) * s_n + bias[n], int32 accumulate,
//                then the fp32 epilogue (GELU/tanh), residual and LayerNorm as before.
// LayerNorm, softmax/attention and residual sums stay fp32. The producer of a quantised GEMM
// input (LayerNorm, DenseLayerNorm, a GELU Dense) writes the s8 copy itself with the static scale
// (no dynamic scale computation on the hot path).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"
#include "engine/ir.h"

namespace hotline::engine {

std::string_view CalibMethodName(CalibMethod m);      // "kl", "percentile", "minmax"
CalibMethod ParseCalibMethod(std::string_view name);  // throws hotline::Error on unknown names

// ---- calibrators (pure functions, unit-tested against hand computation) ----

// Histogram of |x| over [0, range) in `bins` equal bins; values >= range land in the last bin.
struct AbsHistogram {
  std::vector<double> counts;
  float range = 0.f;   // upper edge of the last bin
  float max_abs = 0.f; // largest |x| seen
  explicit AbsHistogram(int bins = 2048) : counts(size_t(bins), 0.0) {}
  // Adds values. When a value exceeds the range, the histogram is re-binned to a range that
  // doubles until it fits (counts of merged bins add up), as TensorRT's calibrator does.
  void Add(const float* x, int64_t n);
  double Total() const;
  float BinWidth() const { return range / float(counts.size()); }
};

// amax = max |x|.
float AmaxMinMax(const AbsHistogram& h);
// Upper edge of the first bin at which the cumulative share of |x| values reaches
// percentile / 100 (percentile in (0, 100)); 100 gives max |x| (as minmax).
float AmaxPercentile(const AbsHistogram& h, double percentile);
// TensorRT's entropy calibration: for every threshold bin i in [levels, bins], P = counts[0..i)
// with the outliers (counts[i..]) added to bin i-1, Q = P's bins merged into `levels` groups and
// expanded back over the non-empty bins of P; the threshold minimising KL(P || Q) wins.
// Q and P are smoothed as MXNet's calibrator does (eps 1e-4 moved onto empty bins). Returns
// i * bin_width (the upper edge of the kept bins). `levels` = 128 for s8 (the positive half).
float AmaxKL(const AbsHistogram& h, int levels = 128);
float ComputeAmax(const AbsHistogram& h, CalibMethod method, double percentile);

// ---- calibration tables and caches ----

// Per-tensor activation ranges, keyed by the name of the graph value that feeds a GEMM (the
// ONNX value names: the same names a QDQ model's QuantizeLinear nodes read).
struct CalibrationTable {
  std::map<std::string, float> amax;  // tensor name → |x| that maps to 127
  std::string method;                  // "kl" | "percentile" | "minmax" | "qdq"
  double percentile = 0;               // for "percentile"
  std::string model_fingerprint;       // ModelFingerprint(); "" = not tied to a model
  int64_t samples = 0;                 // calibration utterances seen
  std::string calib_source;            // calibration file and its FNV-1a hash, for the record

  nlohmann::json ToJson() const;
  static CalibrationTable FromJson(const nlohmann::json& j);  // throws on a malformed table
  void Save(const std::string& path) const;
  // Loads a cache. Throws hotline::Error (kFailedPrecondition) when it was made for another
  // model (fingerprints differ, both named) or with another method/percentile than asked for.
  static CalibrationTable Load(const std::string& path, const std::string& model_fingerprint,
                               CalibMethod method, double percentile);
};

// FNV-1a 64 over the model's folded graph (node ops, value names) and every initializer's bytes,
// as 16 hex digits: two imports of the same ONNX agree, any weight change disagrees.
std::string ModelFingerprint(const Graph& imported);

// Reads calibration utterances: one JSON object per line with a "text" string (other fields
// ignored, blank lines skipped), tokenised by `tokenize` ([CLS] ... [SEP] ids). At most
// max_lines lines (0 = all). Throws naming the file and line on malformed input.
std::vector<std::vector<int32_t>> ReadCalibrationJsonl(const std::string& path,
                                                       const CalibTokenizer& tokenize,
                                                       int max_lines = 0);

// ---- quantisable GEMMs and sensitivity ----

struct QuantGemm {
  int index = 0;           // position in ListQuantizableGemms (execution order)
  std::string node;        // fused node name (as in `hotline inspect` / PlanInfo::ops)
  std::string input;       // activation value it reads (CalibrationTable key)
  std::string weight;      // weight initializer
  int layer = -1;          // encoder layer (0-based), -1 for heads/pooler
  std::string role;        // "qkv" | "attn_out" | "ffn_in" | "ffn_out" | "pooler" | "head"
  int K = 0, N = 0;
};
// The GEMMs (Dense / DenseLayerNorm of the fused graph) an INT8 build may quantise.
std::vector<QuantGemm> ListQuantizableGemms(const std::string& onnx_path);

// keep_fp entries (BuildOptions::keep_fp), each one of:
//   a fused node name, "#<i>" (index into ListQuantizableGemms), "layer:<L>" (every GEMM of
//   encoder layer L), "heads" (pooler and output heads), "embeddings" (word table stays fp32).
// Returns, per GEMM index, whether it stays fp32. Throws naming an entry that matches nothing.
std::vector<bool> ResolveKeepFp(const std::vector<QuantGemm>& gemms,
                                const std::vector<std::string>& keep_fp, bool* keep_embeddings);

struct GemmSensitivity {
  QuantGemm gemm;
  double rel_err = 0;          // mean over outputs of ||y_q - y_fp32|| / ||y_fp32||
  double intent_agree = 1;     // share of sequences whose per-sequence argmax agrees with fp32
  double token_agree = 1;      // share of tokens whose per-token argmax agrees with fp32
};
// Quantises one GEMM at a time (all others fp32, embeddings fp32) and compares the plan's outputs
// with the fp32 plan's on `probe` sequences. `options` carries the calibration (table, cache or
// sequences) as for an INT8 build. Result in ListQuantizableGemms order.
std::vector<GemmSensitivity> MeasureSensitivity(const std::string& onnx_path,
                                                const BuildOptions& options,
                                                const std::vector<std::vector<int32_t>>& probe);

// Runs the fp32 plan over the sequences and returns the table (no cache involved).
CalibrationTable Calibrate(const std::string& onnx_path, const BuildOptions& options,
                           const std::vector<std::vector<int32_t>>& sequences);

// ---- int8 weight storage helpers (plans store s8 blobs inside float32 initializers) ----
//
// The IR's HTensor has no 8-bit dtype yet, so an s8 blob of n bytes is stored as a float32
// initializer of shape [ceil(n/4)] whose bytes are the s8 values (bit patterns are never used as
// numbers; every copy of HTensor::f preserves them). The node attributes name the logical shape.
// Backends read blobs only through these two functions.
// With rows > 1 (values.size() / rows a multiple of 4) the blob's shape is [rows, size/rows/4], so
// shape[0] stays meaningful (the runtime reads an embedding table's vocabulary from it).
HTensor PackS8(const std::vector<int8_t>& values, int64_t rows = 1);
const int8_t* S8Data(const HTensor& blob, int64_t expected_count);  // throws when too small

}  // namespace hotline::engine
