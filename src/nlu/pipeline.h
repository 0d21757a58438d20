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
#include "nlu/taxonomy.h"

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

// A classifier model's answer for one of its heads (model.yaml `outputs`, e.g. department).
struct LabelScore {
  std::string label;
  float score = 0;  // softmax probability at the folder's calibration temperature
};
struct HeadResult {
  std::string head;   // the head's name in model.yaml, e.g. "department"
  std::string label;  // top-1 label from labels.json
  float score = 0;
  std::vector<LabelScore> top_k;  // best first
};

struct Understanding {
  std::string intent;         // taxonomy intent id
  float confidence = 0;       // probability of `intent`
  std::vector<IntentScore> top_k;
  std::vector<Slot> slots;
  std::string department;     // taxonomy department id
  std::string business_line;  // taxonomy business line id
  std::string category;       // taxonomy category id ("" when the taxonomy has no categories)
  std::string category_name;  // its name, e.g. 城市管理
  bool truncated = false;     // the text was longer than the model takes
  int num_tokens = 0;         // including [CLS] and [SEP]
  // Classifier models (kind: classifier): one per head in model.yaml's order; intent and slots
  // stay empty, department is the "department" head's label when the model has that head.
  std::vector<HeadResult> heads;
  // Filled only with PipelineOptions::debug_tokens: per-token ids and slot tags ([CLS]/[SEP] too;
  // tags are empty for a classifier). Ids are those the model saw (after long-text cutting).
  std::vector<int> token_ids;
  std::vector<std::string> token_tags;
};

// A model folder: model.yaml, vocab.txt, labels.json, taxonomy.yaml, model.onnx and/or cached
// plans in <dir>/cache/. model.yaml:
//   name: default
//   version: "1"
//   kind: joint                     # optional: joint (default) or classifier
//   max_length: 128                 # tokens including [CLS] and [SEP]
//   precision: fp32                 # the default precision for plans
//   tokenizer: {vocab: vocab.txt, lowercase: true, normalize_width: true}
//   files: {onnx: model.onnx, labels: labels.json, taxonomy: taxonomy.yaml}
//   outputs: {intent: intent_logits, slots: slot_logits}
//   profile: "1x1:8x64:32x128"      # optional
//   calibration: {temperature: {intent: 1.4}, handoff_threshold: 0.5}   # optional
// labels.json: {"intents": [ids in the taxonomy's order], "slot_tags": ["O", "B-x", "I-x", ...]}.
//
// kind: classifier — one label per head, no taxonomy, no slots:
//   name: haikou
//   kind: classifier
//   max_length: 256
//   long_text: head_tail            # or truncate (default)
//   tokenizer: {vocab: vocab.txt, lowercase: true, normalize_width: true}
//   files: {onnx: model.onnx, labels: labels.json}
//   outputs: {department: department_logits, category: category_logits}   # head: ONNX output
//   calibration: {temperature: {department: 1.3, category: 1.1}}           # optional, default 1
//   top_k: 5                        # optional: labels listed per head (default 5)
//   profile: "1x1:8x128:32x256"
// labels.json: {"department": [labels in output order], "category": [...]}: one list per head,
// as long as that head's output.
//
// Long text: `truncate` keeps the first max_length - 2 tokens; `head_tail` keeps the last
// (max_length - 2) / 2 and the first max_length - 2 - that (256: 127 + 127) between [CLS] and
// [SEP] (KeptTokens), as training/train_classifier.py's head_tail does.
enum class LongText { kTruncate, kHeadTail };

struct ClassifierHead {
  std::string name;    // e.g. "department"
  std::string output;  // ONNX output, e.g. "department_logits"
  float temperature = 1;
};

struct ModelConfig {
  std::string name, version, dir;
  std::string kind = "joint";  // "joint" or "classifier"
  LongText long_text = LongText::kTruncate;
  std::vector<ClassifierHead> heads;  // classifier only, model.yaml's order
  int top_k = 5;                      // classifier: labels per head (PipelineOptions may override)
  float intent_temperature = 1;       // joint: calibration.temperature.intent
  // joint: calibration.handoff_threshold, the confidence below which the dialog hands the call
  // to a person; absent when model.yaml gives none.
  std::optional<float> handoff_threshold;
  int max_length = 128;
  std::string precision = "fp32";
  bool normalize_width = true;
  bool lowercase = true;
  // Paths (already joined with dir).
  std::string vocab_file, onnx_file, labels_file, taxonomy_file;
  std::string intent_output = "intent_logits", slot_output = "slot_logits";
  std::string profile;  // empty when model.yaml gives none
  // Throws hotline::Error naming the file and the field when model.yaml is missing or wrong.
  static ModelConfig Load(const std::string& dir);
};

// labels.json, checked against the taxonomy: every intent and slot type must be in it.
struct Labels {
  std::vector<std::string> intents, slot_tags;
  static Labels Load(const std::string& path, const Taxonomy& taxonomy);
};

// A classifier folder's labels.json, checked against model.yaml's heads: one non-empty list of
// distinct strings per head, and no other keys. Sizes are checked against the model's outputs
// when the pipeline opens.
struct ClassifierLabels {
  std::vector<std::vector<std::string>> heads;  // ModelConfig::heads' order
  static ClassifierLabels Load(const std::string& path, const ModelConfig& config);
};

// Positions (into a [CLS] t1 .. tn [SEP] encoding of n + 2 tokens) of the tokens a model of
// max_length sees: all of them when n + 2 <= max_length, else [CLS], the kept content tokens in
// order, [SEP]. Throws hotline::Error when max_length < 3.
std::vector<int> KeptTokens(int num_tokens, int max_length, LongText mode);

// Where Pipeline::Open caches the plan for these options:
// <dir>/cache/<name>-<precision>-<backend>-<hash of the ONNX bytes and the profile>.plan
std::string PlanCachePath(const ModelConfig& config, const engine::BuildOptions& options);

struct PipelineOptions {
  engine::Precision precision = engine::Precision::kFP32;
  engine::BackendKind backend = engine::BackendKind::kCPU;
  int contexts = 1;  // engine contexts (instances) in the pool
  int top_k = 3;       // joint: intents listed in top_k
  int head_top_k = 0;  // classifier: labels per head; 0: model.yaml's top_k
  // max_seq is capped by the model's max length. Left at its default, model.yaml's profile (when
  // it has one) is used instead.
  engine::Profile profile;
  bool use_plan_cache = true;  // false: always build from the ONNX, in memory
  bool debug_tokens = false;   // fill Understanding::token_ids / token_tags
};

class Pipeline {
 public:
  // Loads the model folder; builds and caches the plan for (precision, backend) when missing.
  static std::unique_ptr<Pipeline> Open(const std::string& model_dir, const PipelineOptions& opts);
  virtual ~Pipeline() = default;

  // One batch of texts. reference_time resolves relative times ("明早") in slot normalisation.
  // Throws hotline::Error(kInvalidArgument) on invalid UTF-8 (naming the text's index); text that
  // gives no tokens (empty, whitespace or control characters only) gives intent "out_of_scope"
  // with confidence 0, no slots and no top_k, without running the engine (a classifier answers
  // each head with label "" and score 0). Text longer than the model takes is cut to max_length
  // tokens as model.yaml's long_text says and flagged truncated.
  virtual std::vector<Understanding> Understand(
      const std::vector<std::string>& texts,
      std::chrono::system_clock::time_point reference_time) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual const engine::PlanInfo& plan_info() const = 0;
  // Joint models; empty for a classifier.
  virtual const Taxonomy& taxonomy() const = 0;
  virtual const Labels& labels() const = 0;
  // Classifier models; empty for a joint model.
  virtual const ClassifierLabels& classifier_labels() const = 0;
  virtual std::string plan_path() const = 0;  // the cached plan used, "" when built in memory
};

}  // namespace hotline::nlu
