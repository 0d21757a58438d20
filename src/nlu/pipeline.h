// Text in, intent + slots + department out. The contract the serving and dialog layers use.
// Pipeline is thread-compatible per Context: Understand() may be called concurrently from several
// threads, each call borrowing one engine context from the pipeline's pool.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hotline::nlu {

struct Slot {
  std::string type;        // taxonomy slot id, e.g. "district"
  int start = 0, end = 0;  // code-point offsets into the original text, end exclusive
  std::string value;       // text[start:end]
  std::string normalized;  // normaliser output ("" when the type has none)
  bool valid = true;       // false when a normaliser rejected it (e.g. bad ID check digit)
};

struct IntentScore {
  std::string intent;
  float probability = 0;
};

struct Understanding {
  std::string intent;         // taxonomy intent id
  float confidence = 0;       // probability of `intent`
  std::vector<IntentScore> top_k;
  std::vector<Slot> slots;
  std::string department;     // taxonomy department id
  std::string business_line;  // taxonomy business line id
  bool truncated = false;     // the text was longer than the model takes
  int num_tokens = 0;
};

// A model folder: model.yaml, vocab.txt, labels.json, model.onnx and/or plans.
struct ModelConfig {
  std::string name, version, dir;
  int max_length = 128;
  std::string precision = "fp32";
  bool normalize_width = true;
  bool lowercase = true;
  static ModelConfig Load(const std::string& dir);  // throws hotline::Error
};

struct PipelineOptions {
  engine::Precision precision = engine::Precision::kFP32;
  engine::BackendKind backend = engine::BackendKind::kCPU;
  int contexts = 1;  // engine contexts (instances) in the pool
  int top_k = 3;
  engine::Profile profile;  // max_seq is capped by the model's max length
};

class Pipeline {
 public:
  // Loads the model folder; builds and caches the plan for (precision, backend) when missing.
  static std::unique_ptr<Pipeline> Open(const std::string& model_dir, const PipelineOptions& opts);
  virtual ~Pipeline() = default;

  // One batch of texts. reference_time resolves relative times ("明早") in slot normalisation.
  // Throws hotline::Error(kInvalidArgument) on invalid UTF-8; empty text gives intent
  // "out_of_scope" with confidence 0 and no slots.
  virtual std::vector<Understanding> Understand(
      const std::vector<std::string>& texts,
      std::chrono::system_clock::time_point reference_time) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual const engine::PlanInfo& plan_info() const = 0;
};

}  // namespace hotline::nlu
