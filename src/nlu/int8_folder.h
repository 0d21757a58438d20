// A model folder's own INT8 calibration: `hotline calibrate --model DIR` writes
// DIR/int8_calibration.json, and every INT8 build of the folder (predict, eval, serve, auto) reads
// it, so `--precision int8` needs no further flags.
//
// The file holds the activation ranges (engine::CalibrationTable), the hash of the model.onnx they
// were measured on, and the accuracy gate's result per INT8 weight class: "w8" (8-bit weights,
// CPUs with AVX512-VNNI or AMX) and "w7" (7-bit weights, AVX2 CPUs without VNNI; a VNNI CPU builds
// that plan too, so one run gates both). Each class records whether its gate passed (intent
// agreement with FP32 on a held-out labelled set at least min_intent_agreement, and the intent and
// slot-F1 drops within the limits), its figures, and the GEMMs it keeps in FP32 to pass.
//
//   {"format": "hotline-int8-calibration-1", "model": "default", "onnx_fnv1a": "16 hex",
//    "table": {...engine CalibrationTable...},
//    "gate": {"data": "test.jsonl", "data_fnv1a": "...", "n": 4000, "min_intent_agreement": 99.5,
//             "max_intent_drop_pp": 0.5, "max_slot_f1_drop_pp": 0.5},
//    "classes": {"w8": {"passed": true, "keep_fp": [], "intent_agreement": 0.998,
//                       "fp32_intent_accuracy": ..., "int8_intent_accuracy": ...,
//                       "fp32_slot_f1": ..., "int8_slot_f1": ..., "message": "...",
//                       "steps": [{"keep_fp": [...], "intent_agreement": ..., "passed": ...}]},
//                "w7": {...}},
//    "calibrated_on": {"cpu": "...", "isa": "avx512", "hotline": "0.1.0"}}
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "nlu/pipeline.h"

namespace hotline::nlu {

inline constexpr const char* kInt8CalibrationFile = "int8_calibration.json";
inline constexpr double kDefaultMinIntentAgreement = 99.5;  // percent (PERFORMANCE.md A2)

// "w8" or "w7": the INT8 weight class this CPU runs (engine::cpu::S8WeightQmax).
std::string CpuInt8WeightClass();

struct Int8ClassResult {
  bool passed = false;
  std::vector<std::string> keep_fp;
  double intent_agreement = 0;  // share, 0..1
  double fp32_intent_accuracy = 0, int8_intent_accuracy = 0;
  double fp32_slot_f1 = 0, int8_slot_f1 = 0;
  std::string message;
  nlohmann::json steps = nlohmann::json::array();  // every build the gate evaluated, in order:
                                                   // {keep_fp, intent_agreement, passed}
};

struct FolderInt8 {
  std::string path;  // the file read
  nlohmann::json doc;
  std::shared_ptr<const engine::CalibrationTable> table;
  std::string onnx_fnv1a;
  int gate_n = 0;
  double min_intent_agreement = 0;  // percent
  std::string gate_data;
  // The class's result; nullptr when the file has none for it.
  const Int8ClassResult* Class(const std::string& weight_class) const;
  std::vector<std::pair<std::string, Int8ClassResult>> classes;
};

// FNV-1a 64 over a file's bytes, 16 hex digits. Throws kNotFound when it cannot be read.
std::string FileFnv1a(const std::string& path);

// Reads DIR/int8_calibration.json; nullopt when the folder has none. Throws hotline::Error naming
// the file on a malformed one.
std::optional<FolderInt8> LoadFolderInt8(const ModelConfig& config);

// For an INT8 CPU build of the folder's ONNX: fills options' calib_table and keep_fp from the
// folder's calibration for this CPU's weight class. Does nothing for another precision or
// backend, or when the options already carry calibration. Throws hotline::Error
// (kFailedPrecondition) with the `hotline calibrate` command to run when the folder has no
// calibration, when it was made for another model.onnx, or when it has no result for this CPU's
// class; a class whose gate failed still loads (explicitly asked for), with a warning on stderr.
// A QDQ model (its own scales) needs no calibration file. Returns the file's FNV-1a ("" when
// none was applied), which the plan cache name includes.
std::string ApplyFolderInt8(const ModelConfig& config, engine::BuildOptions* options);

// `precision: auto` on the CPU: whether INT8 is the choice for this folder on this CPU, and why
// (in words, for the log): the folder's gate passed for this CPU's weight class with a
// calibration of this model.onnx, with intent agreement at least kDefaultMinIntentAgreement
// (whatever bar the gate was run with).
bool FolderInt8Usable(const ModelConfig& config, std::string* why);

// `precision: auto` (serve, and predict/eval --precision auto): FP16 on CUDA; on the CPU INT8
// where FolderInt8Usable, else BF16 where the CPU has AMX-BF16, else FP32. `why` (optional) gets
// the reason in words.
engine::Precision ChooseAutoPrecision(const ModelConfig& config, engine::BackendKind backend,
                                      std::string* why = nullptr);

// A command's --precision: "" = model.yaml's, "auto" = ChooseAutoPrecision (the choice and why
// go to stderr), else the named precision (throws on an unknown name).
engine::Precision ResolvePrecision(const std::string& requested, const ModelConfig& config,
                                   engine::BackendKind backend);

// What `hotline calibrate` does.
struct CalibrateOptions {
  std::string model_dir;
  std::string calib;  // calibration text (JSON Lines with "text")
  std::string gate;   // held-out labelled set (JSON Lines: text, intent, slots)
  int calib_lines = 0, gate_lines = 0;  // 0: every line
  engine::CalibMethod method = engine::CalibMethod::kPercentile;
  double percentile = 99.99;
  double min_intent_agreement = kDefaultMinIntentAgreement;
  double max_intent_drop = 0.5, max_slot_f1_drop = 0.5;
  std::vector<std::string> classes;  // empty: every class this CPU can run ("w8" needs VNNI)
  bool tune = true;
  std::string hotline_version;
};
// Calibrates the folder's ONNX, runs the gate per class and writes DIR/int8_calibration.json
// (atomically). Returns the document written. Throws hotline::Error on bad input.
FolderInt8 CalibrateFolder(const CalibrateOptions& options);

}  // namespace hotline::nlu
