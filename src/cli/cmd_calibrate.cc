// hotline calibrate --model DIR --calib CALIB.jsonl --gate HELD_OUT.jsonl [--json]
//   [--min-intent-agreement 99.5] [--max-intent-drop 0.5] [--max-slot-f1-drop 0.5]
//   [--calib-method percentile] [--percentile 99.99] [--calib-lines N] [--gate-lines N]
//   [--classes w8,w7] [--no-tune]
// Gives a model folder its INT8 calibration (nlu/int8_folder.h): activation ranges measured on
// the calibration text, then the accuracy gate on the held-out set per INT8 weight class (w8:
// AVX512-VNNI/AMX CPUs; w7: AVX2 CPUs, built here too when this CPU has VNNI), moving the most
// sensitive layers back to FP32 until intent agreement with FP32 and the drops are within the
// limits. Writes DIR/int8_calibration.json, which `--precision int8` and `precision: auto` read.
// Exit status 0 when every class passed, 3 when one failed (the file is written either way, so
// that auto knows; a failed class is never picked by auto).
#ifdef HOTLINE_HAVE_NLU
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "base/error.h"
#include "cli/command.h"
#include "engine/quant.h"
#include "nlu/int8_folder.h"

namespace {

struct Options {
  std::string model, calib, gate, method = "percentile", classes;
  double percentile = 99.99;
  double min_agreement = hotline::nlu::kDefaultMinIntentAgreement;
  double max_intent_drop = 0.5, max_slot_f1_drop = 0.5;
  int calib_lines = 0, gate_lines = 0;
  bool no_tune = false, json = false;
};

hotline::cli::Registrar reg(
    "calibrate", "Give a model folder its INT8 calibration and accuracy gate", [](CLI::App& app) {
      auto o = std::make_shared<Options>();
      app.add_option("--model", o->model, "model folder (joint intent + slot model)")->required();
      app.add_option("--calib", o->calib, "calibration text: JSON Lines with \"text\"")
          ->required();
      app.add_option("--gate", o->gate,
                     "held-out labelled set (JSON Lines: text, intent, slots) for the gate")
          ->required();
      app.add_option("--min-intent-agreement", o->min_agreement,
                     "gate: least intent agreement with FP32, percent (default 99.5)");
      app.add_option("--max-intent-drop", o->max_intent_drop,
                     "gate: largest intent-accuracy drop, percentage points (default 0.5)");
      app.add_option("--max-slot-f1-drop", o->max_slot_f1_drop,
                     "gate: largest slot-F1 drop, percentage points (default 0.5)");
      app.add_option("--calib-method", o->method, "kl | percentile | minmax (default percentile)");
      app.add_option("--percentile", o->percentile, "percentile of |x| kept (default 99.99)");
      app.add_option("--calib-lines", o->calib_lines, "use the first N calibration lines (0: all)")
          ->check(CLI::NonNegativeNumber);
      app.add_option("--gate-lines", o->gate_lines, "use the first N gate lines (0: all)")
          ->check(CLI::NonNegativeNumber);
      app.add_option("--classes", o->classes,
                     "weight classes to gate, comma-separated: w8 (VNNI/AMX), w7 (AVX2); "
                     "default: every class this CPU can run");
      app.add_flag("--no-tune", o->no_tune, "skip timing GEMM tactics in the gate's builds");
      app.add_flag("--json", o->json, "print the file written");
      return [o]() -> int {
        namespace nlu = hotline::nlu;
        nlu::CalibrateOptions c;
        c.model_dir = o->model;
        c.calib = o->calib;
        c.gate = o->gate;
        c.calib_lines = o->calib_lines;
        c.gate_lines = o->gate_lines;
        c.method = hotline::engine::ParseCalibMethod(o->method);
        c.percentile = o->percentile;
        c.min_intent_agreement = o->min_agreement;
        c.max_intent_drop = o->max_intent_drop;
        c.max_slot_f1_drop = o->max_slot_f1_drop;
        c.tune = !o->no_tune;
        c.hotline_version = HOTLINE_VERSION;
        std::stringstream ss(o->classes);
        for (std::string cls; std::getline(ss, cls, ',');)
          if (!cls.empty()) c.classes.push_back(cls);
        const nlu::FolderInt8 f = nlu::CalibrateFolder(c);
        bool all = true;
        for (const auto& [name, r] : f.classes) {
          all = all && r.passed;
          std::fprintf(stderr, "hotline calibrate: %s %s: intent agreement %.2f%% (gate %.2f%%), "
                       "%zu layer(s) kept in fp32\n",
                       name.c_str(), r.passed ? "passed" : "FAILED", 100 * r.intent_agreement,
                       f.min_intent_agreement, r.keep_fp.size());
        }
        std::fprintf(stderr, "hotline calibrate: wrote %s\n", f.path.c_str());
        if (o->json) std::printf("%s\n", f.doc.dump(-1, ' ', false,
                                                   nlohmann::json::error_handler_t::replace)
                                             .c_str());
        return all ? 0 : 3;
      };
    });

}  // namespace
#endif  // HOTLINE_HAVE_NLU
