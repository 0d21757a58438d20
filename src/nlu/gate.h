// Accuracy through the NLU pipeline, for `hotline eval` and the INT8 accuracy gate of
// `hotline build --gate` (issue 7, PERFORMANCE.md A2).
//
// The gate builds the FP32 plan and the INT8 plan of one model, runs both through the pipeline on
// a labelled set and compares: intent-accuracy drop and slot-F1 drop in percentage points
// (FP32 minus INT8; an INT8 plan that scores better has a negative drop), and optionally intent
// agreement. While a limit is exceeded it moves the GEMMs that quantisation hurts most back to
// FP32 (BuildOptions::keep_fp): GEMMs are ranked once by engine::MeasureSensitivity (each GEMM
// alone in INT8, relative output error against FP32 on the gate set's own token ids), and the
// smallest prefix of that ranking that passes is searched (1, 2, 4, ... then bisection, each step
// a full rebuild and evaluation), with the word-embedding table as the last candidate; with
// GateOptions::prune, layers of that prefix that the gate does not need are then put back. It fails
// when even the allowed maximum of moved layers does not pass, naming the most sensitive ones.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "nlu/gate_eval.h"

namespace hotline::nlu {

struct GateOptions {
  std::string model_dir;  // model folder: model.yaml, vocab, labels, taxonomy
  std::string onnx;       // ONNX to build; empty = the folder's model.onnx
  std::string data;       // labelled gate set (JSON Lines)
  double max_intent_drop = 0.5;     // percentage points
  double max_slot_f1_drop = 0.5;    // percentage points (F1 × 100)
  double min_intent_agreement = 0;  // percent; 0 = not checked
  int max_fallback = -1;            // GEMMs (and the embedding table) moved back; -1 = no limit
  int probe_utterances = 256;       // gate utterances used to rank sensitivity
  int batch = 32;
  std::string work_dir;             // scratch folder for plans; empty = a fresh temp folder
  bool verbose = true;              // progress on stderr
  // After the search: try each layer of the passing list alone back in INT8, least sensitive
  // first, and leave it there when the gate still passes (one more build and evaluation per
  // layer): a list that passes need not be a prefix of the ranking, and every GEMM kept in FP32
  // costs serving time.
  bool prune = false;
};

struct GateStep {
  std::vector<std::string> keep_fp;  // the whole keep_fp list of this build
  double intent_accuracy = 0, slot_f1 = 0, intent_agreement = 0;
  double intent_drop = 0, slot_f1_drop = 0;  // percentage points
  bool passed = false;
};

struct GateReport {
  bool passed = false;
  double fp32_intent_accuracy = 0, fp32_slot_f1 = 0;
  std::vector<GateStep> steps;              // every INT8 build evaluated, in order
  std::vector<std::string> keep_fp;         // the passing build's list (or the last tried)
  std::vector<nlohmann::json> sensitivity;  // ranking: {node, layer, role, rel_err, ...}
  std::string message;                      // one paragraph for people
  nlohmann::json ToJson() const;
};

// Runs the gate for `int8` (precision kINT8, calibration options filled as for a build; its
// keep_fp is the starting list). On success writes the passing plan to `plan_out`. Never throws
// for a gate that fails (report.passed false); throws hotline::Error for bad input.
GateReport RunGate(const GateOptions& options, engine::BuildOptions int8,
                   const std::string& plan_out);

}  // namespace hotline::nlu
