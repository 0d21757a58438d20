// Scoring through the NLU pipeline, shared by `hotline eval` (and --compare-precisions) and the
// INT8 accuracy gate (gate.h). Scores are computed exactly as `hotline eval` reports them: intent
// accuracy over all utterances; slot precision/recall/F1 on exact (type, start, end) code-point
// spans. Intent agreement between two plans is the share of utterances given the same intent.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "nlu/pipeline.h"

namespace hotline::nlu {
// One line of a labelled JSON Lines file (config/taxonomy/README.md's format).
struct LabelledExample {
  std::string text, intent;
  std::set<std::tuple<std::string, int, int>> slots;  // (type, start, end)
  std::chrono::system_clock::time_point reference_time;
};
// Throws hotline::Error naming the file and line on malformed input, and on an empty file.
std::vector<LabelledExample> ReadLabelled(const std::string& path);

struct EvalScores {
  struct IntentStats { int n = 0, correct = 0, predicted = 0; };
  struct SlotStats { int tp = 0, pred = 0, gold = 0; };
  int n = 0, correct = 0, slot_tp = 0, slot_pred = 0, slot_gold = 0;
  double seconds = 0;
  std::vector<std::string> predicted;  // predicted intent per utterance, in input order
  std::map<std::string, IntentStats> per_intent;
  std::map<std::string, SlotStats> per_slot;
  std::map<std::pair<std::string, std::string>, int> confusions;  // (gold, predicted) → count

  double intent_accuracy() const;
  double slot_precision() const;
  double slot_recall() const;
  double slot_f1() const;
};
EvalScores Score(Pipeline& pipeline, const std::vector<LabelledExample>& data, int batch = 32);
// Share of utterances where both runs predicted the same intent. Throws when the sizes differ.
double IntentAgreement(const std::vector<std::string>& a, const std::vector<std::string>& b);

// Text → [CLS] ... [SEP] ids with the model's vocabulary and tokenizer settings (max_length
// capped by `max_seq`), for INT8 calibration (BuildOptions::calib_tokenizer).
engine::CalibTokenizer MakeCalibTokenizer(const ModelConfig& config, int max_seq);

// The pipeline's profile for a model (model.yaml's when given, capped by max_length).
engine::Profile ModelProfile(const ModelConfig& config);

// Makes `folder` open as the model `config` with exactly `plan_file` (built for `precision` on
// `backend`): a model.yaml naming the original vocabulary, labels and taxonomy by absolute path
// and no ONNX, and the plan linked into folder/cache/ where Pipeline::Open looks for it.
void MakePlanFolder(const ModelConfig& config, const std::string& plan_file,
                    engine::Precision precision, engine::BackendKind backend,
                    const std::string& folder);

}  // namespace hotline::nlu
