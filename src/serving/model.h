// What the serving core needs from a loaded model version, and how a model folder describes its
// serving settings. The repository and batcher work on this interface so that their policies are
// testable without the engine; what `hotline serve` runs is the NLU pipeline (OpenPipelineModel).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nlu/pipeline.h"
#include "serving/batch_policy.h"

namespace hotline::serving {

// A model folder's serving settings: model.yaml's name and version plus its optional keys
//   business_lines: [id, ...]       business lines this model answers (requests may name one)
//   batching: {max_batch_size, max_batch_tokens, max_queue_delay_ms, max_queue_size,
//              max_queue_wait_ms (0: no bound in time)}
//   instances: N                     execution contexts (threads on CPU)
//   warmup: true|false               run every profile bucket before reporting ready
//   memory_mb: M                     memory estimate used before the model is loaded
// Keys the NLU pipeline reads (max_length, precision, files) are left to nlu::ModelConfig.
struct ModelSpec {
  std::string name;
  std::string version;
  std::string dir;
  std::vector<std::string> business_lines;
  BatchingOptions batching;
  int instances = 1;
  bool warmup = true;
  int64_t memory_bytes_hint = 0;
  // model.yaml's kind ("joint" or "classifier") and a classifier's heads (its outputs' keys, in
  // order), for clients that ask what a model answers (KServe metadata, ListModels).
  std::string kind = "joint";
  std::vector<std::string> heads;
  // Reads DIR/model.yaml. Throws hotline::Error naming the file and the bad key.
  static ModelSpec Load(const std::string& dir);
};

// Compares versions numerically when both are integers ("10" > "9"), otherwise as text.
bool VersionLess(const std::string& a, const std::string& b);

// One (batch, sequence length) shape that warm-up runs.
struct WarmupShape {
  int batch = 1;
  int seq = 1;  // tokens including [CLS] and [SEP]
  bool operator==(const WarmupShape&) const = default;
};
// Every profile bucket: batch sizes {min, opt, max} × sequence lengths {min, opt, max}, with the
// batch capped by max_batch_size and the sequence by max_length; duplicates removed.
std::vector<WarmupShape> WarmupShapes(const engine::Profile& profile, int max_batch_size,
                                      int max_length);

// A loaded model version. Understand() is called concurrently by up to `instances` threads.
class ServableModel {
 public:
  virtual ~ServableModel() = default;
  // Throws hotline::Error on failure (the batcher answers the batch's requests with its code).
  virtual std::vector<nlu::Understanding> Understand(
      const std::vector<std::string>& texts, std::chrono::system_clock::time_point reference) = 0;
  virtual int64_t memory_bytes() const = 0;
  // Token budget per sequence (model max length); longer texts are truncated by the model.
  virtual int max_length() const = 0;
  virtual engine::Profile profile() const = 0;
};

// Creates a loaded model from a spec; throws hotline::Error (the repository keeps the old version).
using ModelLoader = std::function<std::unique_ptr<ServableModel>(const ModelSpec&)>;

// The real loader: nlu::Pipeline::Open(spec.dir) with `instances` contexts.
struct PipelineModelOptions {
  engine::Precision precision = engine::Precision::kFP32;
  // precision chosen per machine when the model loads (AutoPrecision), in place of `precision`.
  bool auto_precision = false;
  engine::BackendKind backend = engine::BackendKind::kCPU;
  int top_k = 3;
};
ModelLoader PipelineModelLoader(const PipelineModelOptions& options);

// The server's `precision: auto`, per model folder: FP16 on CUDA; on the CPU INT8 where the
// folder carries an INT8 calibration whose accuracy gate passed for this CPU's weight class
// (nlu/int8_folder.h: intent agreement with FP32 >= 99.5% on a held-out set; `hotline calibrate`),
// else BF16 where the CPU has AMX-BF16 (the packed_amx_bf16 GEMMs, Sapphire Rapids,
// bench/RESULTS.md 2026-12-02: 2.8x our FP32 plan's 32x32 throughput, 2.1x its serving
// requests/s at 64 callers; intent agreement with FP32 100% on the test set), else FP32 (BF16
// without AMX runs slower than FP32). `why` (optional) gets the reason in words. The loader logs
// the choice ("precision_chosen").
engine::Precision AutoPrecision(engine::BackendKind backend, const std::string& model_dir,
                                std::string* why = nullptr);

// Runs each warm-up shape once with synthetic text of the right token count.
void WarmUp(ServableModel& model, const std::vector<WarmupShape>& shapes);

// Estimated tokens of a text for batching: code points + [CLS] + [SEP], capped at max_length.
// (Chinese text is one token per character; Latin words are fewer tokens than characters, so this
// over-estimates, which only makes batches smaller.)
int EstimateTokens(const std::string& text, int max_length);

}  // namespace hotline::serving
