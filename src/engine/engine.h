// Public face of the engine (DESIGN.md): ImportOnnx → Build → Plan → Engine::Load → Context::Run.
// This header is the contract that the NLU, serving and CLI layers code against. The engine's
// internals (IR, passes, backends) live in other headers under src/engine/.
//
// Error policy: every function here throws hotline::Error with a specific message on bad input
// (corrupt ONNX, unsupported op, foreign plan, shape outside the profile, ...). Nothing aborts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hotline::engine {

enum class Precision { kFP32, kFP16, kBF16, kINT8, kFP8 };
enum class BackendKind { kCPU, kCUDA };

std::string_view PrecisionName(Precision p);      // "fp32", "fp16", "bf16", "int8", "fp8"
Precision ParsePrecision(std::string_view name);  // throws on unknown names
std::string_view BackendName(BackendKind b);      // "cpu", "cuda"
BackendKind ParseBackend(std::string_view name);

// Optimisation profile: min/opt/max batch × sequence length. Text form "1x1:8x64:64x128".
struct Profile {
  int min_batch = 1, min_seq = 1;
  int opt_batch = 8, opt_seq = 64;
  int max_batch = 64, max_seq = 128;
  static Profile Parse(std::string_view spec);
  std::string ToString() const;
  // Throws hotline::Error naming the offending dimension and the profile's bounds.
  void Check(int batch, int max_seqlen) const;
};

// INT8 calibration (src/engine/quant.h).
enum class CalibMethod { kKL, kPercentile, kMinMax };
struct CalibrationTable;
// Text → token ids ([CLS] ... [SEP]) with the model's vocabulary; the CLI builds one from the
// text layer's tokenizer (the engine does not depend on the text layer).
using CalibTokenizer = std::function<std::vector<int32_t>(std::string_view)>;

struct BuildOptions {
  Precision precision = Precision::kFP32;
  BackendKind backend = BackendKind::kCPU;
  Profile profile;
  bool tune = true;           // time candidate GEMM implementations per shape bucket
  std::string timing_cache;   // optional file: reused and updated by tuning
  int device = 0;             // CUDA device ordinal
  std::vector<int> devices;   // CUDA, BuildFromOnnx: contexts dealt out over these GPUs ({device})
  int threads = 0;            // CPU threads (0 = all cores)

  // ---- INT8 (precision kINT8; see quant.h) ----
  // Where the activation ranges come from, first match wins: calib_table (e.g. imported from a
  // QDQ model), then calib_cache when the file exists (refused when made for another model or
  // method), then calibration over calib_sequences plus the "text" lines of calib_file tokenised
  // by calib_tokenizer. A fresh calibration is written to calib_cache when that is set.
  CalibMethod calib_method = CalibMethod::kPercentile;
  double calib_percentile = 99.99;
  std::string calib_file;                       // JSONL, one {"text": "..."} per line
  CalibTokenizer calib_tokenizer;               // required with calib_file
  int calib_max_lines = 0;                      // 0 = every line of calib_file
  std::vector<std::vector<int32_t>> calib_sequences;  // token ids, used as they are
  std::string calib_cache;                      // calibration cache file (JSON)
  std::shared_ptr<const CalibrationTable> calib_table;
  // GEMMs (and the embedding table) kept in fp32: node names, "#<i>", "layer:<L>", "heads",
  // "embeddings" (quant.h ResolveKeepFp).
  std::vector<std::string> keep_fp;
  // CPU INT8 weight range +-qmax: 0 = this CPU's (127 with AVX512-VNNI or AMX, 63 on AVX2 alone,
  // cpu::S8WeightQmax). 63 builds, on any CPU, the plan an AVX2-only CPU would run (the accuracy
  // gate of `hotline calibrate` checks both); a value above this CPU's is refused at load.
  int int8_weight_qmax = 0;

  // ---- FP8 (precision kFP8, CUDA; encoder.h EncoderOptions) ----
  std::string fp8_weight_scaling;  // "per_tensor" | "per_channel"; "" = the default (per tensor)
  int fp8_fast_accum_max_k = -1;   // GEMMs with K <= this accumulate fast; -1 = the default
};

// A padding-free batch: the sequences' tokens concatenated, with offsets.
// Sequence i occupies tokens [cu_seqlens[i], cu_seqlens[i+1]).
struct PackedBatch {
  std::vector<int32_t> input_ids;       // [total_tokens]
  std::vector<int32_t> token_type_ids;  // [total_tokens]; empty means all zeros
  std::vector<int32_t> cu_seqlens;      // [batch + 1], cu_seqlens[0] == 0, non-decreasing
  int batch() const { return cu_seqlens.empty() ? 0 : int(cu_seqlens.size()) - 1; }
  int total_tokens() const { return cu_seqlens.empty() ? 0 : cu_seqlens.back(); }
  int max_seqlen() const;
};

// A dense host tensor for padded I/O (`hotline infer`) and for outputs.
struct Tensor {
  enum class DType { kF32, kI64, kI32 } dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> f32;    // used when dtype == kF32
  std::vector<int64_t> i64;  // used when dtype == kI64 or kI32
  int64_t numel() const;
};

// One model output after a packed run.
struct Output {
  enum class Kind {
    kPerSequence,  // shape [batch, ...]          e.g. intent_logits [B, n_intents]
    kPerToken,     // shape [total_tokens, ...]   e.g. slot_logits   [T, n_tags]
  };
  std::string name;
  Kind kind = Kind::kPerSequence;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major FP32, whatever the plan's internal precision
};

struct OutputInfo {
  std::string name;
  Output::Kind kind;
  std::vector<int64_t> inner_shape;  // dims after the batch (or token) dim, e.g. {n_intents}
};

// What a plan says about itself (`hotline inspect`).
struct PlanInfo {
  uint32_t format_version = 0;
  std::map<std::string, std::string> fingerprint;  // backend, cpu_isa / gpu, sm, cuda, cublaslt...
  Precision precision = Precision::kFP32;
  BackendKind backend = BackendKind::kCPU;
  Profile profile;
  std::vector<std::string> input_names;
  std::vector<OutputInfo> outputs;
  struct Op {
    std::string name, type, precision;
  };
  std::vector<Op> ops;  // execution order
  uint64_t weight_bytes = 0;
};

class Context;

// Immutable once loaded; shared by all contexts and threads.
class Engine {
 public:
  virtual ~Engine() = default;
  // Loads a plan file. Throws when the file is truncated, foreign, of another format version or
  // built for other hardware (naming both fingerprints).
  static std::shared_ptr<Engine> Load(const std::string& plan_path);
  // CUDA: one replica of the plan per listed GPU; CreateContext deals contexts out over them.
  static std::shared_ptr<Engine> Load(const std::string& path, const std::vector<int>& devices);
  // Imports an ONNX model, builds it with the options, and loads the result without a file.
  static std::shared_ptr<Engine> BuildFromOnnx(const std::string& onnx_path,
                                               const BuildOptions& options);

  virtual const PlanInfo& info() const = 0;
  // A context owns scratch memory sized for the profile's maximum (one per instance/thread).
  virtual std::unique_ptr<Context> CreateContext() const = 0;
};

class Context {
 public:
  virtual ~Context() = default;
  // Runs a packed batch. `outputs` is resized on first use and reused afterwards.
  // Throws hotline::Error when the batch is malformed or outside the profile.
  virtual void Run(const PackedBatch& batch, std::vector<Output>* outputs) = 0;
  // Padded ONNX-style inputs (input_ids, attention_mask, token_type_ids: [batch, seq]) in,
  // outputs in the ONNX model's own shapes out.
  virtual std::map<std::string, Tensor> RunPadded(const std::map<std::string, Tensor>& inputs) = 0;
};

// Builds a plan from an ONNX file and writes it (`hotline build`).
void BuildPlanFile(const std::string& onnx_path, const BuildOptions& options,
                   const std::string& plan_path);
// Reads only a plan's metadata (`hotline inspect`); same checks as Engine::Load except hardware.
PlanInfo InspectPlan(const std::string& plan_path);

}  // namespace hotline::engine
